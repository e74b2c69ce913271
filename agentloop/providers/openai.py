"""OpenAI adapters: ``openai_chat`` (Chat Completions) and ``openai_responses`` (Responses API).

``Loop(openai_chat(client, "gpt-4.1"), tools=registry)``: the Loop passes
its registry's specs with every request, which go out as the API's ``tools``.
With ``openai.OpenAI`` the model callback is a plain function, with
``openai.AsyncOpenAI`` an ``async def`` one (for ``arun``/``astart``). Any
OpenAI-compatible server works through the client's ``base_url``; what such
servers do differently is repaired by ``openai_chat``, or switched with
``compat=Compat(...)`` where a repair cannot be sure.

History to request (both APIs keep every message in place):

- ``system`` and ``user``: a message with that role (``system`` rather than
  ``developer``: every chat model and compatible server takes it, and OpenAI
  treats it as ``developer`` for the models that have that role);
- ``call``/``calls``: one assistant turn with its text and every tool call
  (Responses: an assistant message for the text, then a ``function_call``
  item per call); arguments as JSON text, or the model's raw text unchanged;
- ``tool_result``: a ``tool`` message per ``tool_call_id`` (Responses: a
  ``function_call_output`` per ``call_id``), content as text (JSON unless a
  ``str``), led by ``status: <status>`` on its own line unless ``ok``. A
  result of typed parts with an image among them (an MCP tool's) goes to the
  Responses API as ``input_image`` and ``input_text`` items (a Chat
  Completions ``tool`` message takes text only: it gets the JSON);
- ``final``: an assistant message.

Needs the ``openai`` extra; importing this module without it raises an
``ImportError`` that says so.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Literal, overload

try:
    import openai  # at run time, so that a missing SDK fails here
except ModuleNotFoundError as exc:  # missing; a script named like it fails on its own
    raise ImportError(
        "agentloop.providers.openai needs the OpenAI SDK: pip install 'agentloop-fsm[openai]'"
    ) from exc

from agentloop.providers._compat import DEFAULT, Compat
from agentloop.providers._model import (
    AsyncModel,
    SyncModel,
    checked_client,
    checked_params,
    make_model,
    strict_schema,
    without_retries,
)
from agentloop.providers._openai_reply import chat_reply, responses_reply
from agentloop.providers._openai_request import _chat_messages, _responses_input
from agentloop.providers._openai_stream import (
    achat_stream,
    aresponses_stream,
    chat_stream,
    responses_stream,
)
from agentloop.providers._streaming import (
    AsyncStreamModel,
    StreamModel,
    checked_stream,
    make_stream_model,
)

if TYPE_CHECKING:
    from agentloop._core.requests import Messages
    from agentloop.providers._convert import Message

__all__ = ["Compat", "openai_chat", "openai_responses"]


@overload
def openai_chat(
    client: openai.OpenAI,
    model: str,
    *,
    stream: Literal[False] = False,
    compat: Compat = ...,
    **params: Any,
) -> SyncModel: ...
@overload
def openai_chat(
    client: openai.AsyncOpenAI,
    model: str,
    *,
    stream: Literal[False] = False,
    compat: Compat = ...,
    **params: Any,
) -> AsyncModel: ...
@overload
def openai_chat(
    client: openai.OpenAI,
    model: str,
    *,
    stream: Literal[True],
    compat: Compat = ...,
    **params: Any,
) -> StreamModel: ...
@overload
def openai_chat(
    client: openai.AsyncOpenAI,
    model: str,
    *,
    stream: Literal[True],
    compat: Compat = ...,
    **params: Any,
) -> AsyncStreamModel: ...
def openai_chat(
    client: openai.OpenAI | openai.AsyncOpenAI,
    model: str,
    *,
    stream: bool = False,
    compat: Compat = DEFAULT,
    **params: Any,
) -> SyncModel | AsyncModel | StreamModel | AsyncStreamModel:
    """A model callback over Chat Completions (``client.chat.completions.create``).

    The request's ``tools`` are the specs the Loop passes with each request
    (``model(history, tools=specs)``), as ``specs('openai')`` gives them; none,
    no ``tools``. ``params`` go into every request as they are
    (``temperature=0``, ``max_completion_tokens=...``,
    ``parallel_tool_calls=False``, ...); ``model``, ``messages`` and ``tools``
    are the adapter's own (a ``TypeError`` if given). The reply carries
    ``usage`` when the response does. A reply cut off (``finish_reason``
    ``length``), filtered, refused or empty raises ``IncompleteReply``; SDK
    errors propagate, marked for the Loop's retry policy. A Loop that retries
    sends the requests through a copy of ``client`` with its own retries off
    (``agentloop_single_attempt``), so that the two never multiply.

    ``stream=True``: the callback answers with a stream (``agentloop.streaming``)
    over ``stream=True`` chunks, with ``stream_options={'include_usage': True}``;
    its whole reply is the one the same response unstreamed gives. A chunk
    that carries an ``error`` raises ``IncompleteReply`` naming it (marked
    passing for a ``server_error`` or a rate limit, which the Loop's retry
    policy retries), and so does a stream that ends before its
    ``finish_reason`` (a lost connection); a connection lost mid-stream
    raises the SDK's error, marked as it would be before the stream began.

    ``compat``: an OpenAI-compatible server's departures that need a switch
    (``Compat``); those that need none are repaired whatever it says: a call
    without an id gets one, arguments sent as an object are taken as they
    are, streamed calls without indexes are told apart, and usage and finish
    reasons are read in the forms the known servers send.
    """
    checked_client("openai_chat", client, model, "chat.completions.create", "an OpenAI")
    checked_stream("openai_chat", stream)
    if type(compat) is not Compat:
        raise TypeError(
            f"openai_chat() expected compat to be a Compat (agentloop.providers.openai.Compat), "
            f"got {compat!r:.80}"
        )
    checked_params(
        "openai_chat",
        client.chat.completions.create,
        params,
        {"messages": "it is the history"},
    )

    def request(history: list[Message] | Messages, tools: dict[str, Any]) -> dict[str, Any]:
        messages = _chat_messages(history, compat, request)  # the record's kept under request
        return {"model": model, "messages": messages, **tools, **params}

    retries_off = without_retries("openai_chat", client, "chat.completions.create", openai)
    fresh = compat.fresh_ids
    if stream:
        streaming: dict[str, Any] = {"stream": True}
        if compat.stream_usage:
            options = {**(params.pop("stream_options", None) or {}), "include_usage": True}
            streaming["stream_options"] = options
        return make_stream_model(
            client.chat.completions.create,
            request,
            partial(chat_stream, fresh=fresh) if fresh else chat_stream,
            partial(achat_stream, fresh=fresh) if fresh else achat_stream,
            "openai",
            streaming,
            _chat_options,
            sdk=openai,
            name=model,
            retries_off=retries_off,
        )
    return make_model(
        client.chat.completions.create,
        request,
        partial(chat_reply, fresh=fresh) if fresh else chat_reply,
        "openai",
        _chat_options,
        sdk=openai,
        name=model,
        retries_off=retries_off,
    )


@overload
def openai_responses(
    client: openai.OpenAI, model: str, *, stream: Literal[False] = False, **params: Any
) -> SyncModel: ...
@overload
def openai_responses(
    client: openai.AsyncOpenAI, model: str, *, stream: Literal[False] = False, **params: Any
) -> AsyncModel: ...
@overload
def openai_responses(
    client: openai.OpenAI, model: str, *, stream: Literal[True], **params: Any
) -> StreamModel: ...
@overload
def openai_responses(
    client: openai.AsyncOpenAI, model: str, *, stream: Literal[True], **params: Any
) -> AsyncStreamModel: ...
def openai_responses(
    client: openai.OpenAI | openai.AsyncOpenAI,
    model: str,
    *,
    stream: bool = False,
    **params: Any,
) -> SyncModel | AsyncModel | StreamModel | AsyncStreamModel:
    """A model callback over the Responses API (``client.responses.create``), stateless.

    The whole history is sent as ``input`` on every request (no
    ``previous_response_id``); ``tools`` are the Loop's specs, as
    ``specs('openai-responses')`` gives them. ``params`` pass through as for
    ``openai_chat`` (``max_output_tokens=...``, ``reasoning=...``); ``model``,
    ``input`` and ``tools`` are the adapter's own. A response that is
    ``incomplete`` (``max_output_tokens``, content filter) or not
    ``completed``, a refusal or an empty reply raises ``IncompleteReply``.

    ``stream=True``: the callback answers with a stream (``agentloop.streaming``)
    over the API's stream events; its whole reply is made from the response
    the last event carries, as unstreamed. An ``error`` event (flat, as the
    API reference gives it, or nested under ``error``, which the SDK raises
    as its own ``APIError``) raises ``IncompleteReply`` naming its code and
    message, marked passing for a ``server_error`` or a rate limit; so does
    a stream that ends before its last event (a lost connection). A
    connection lost mid-stream raises the SDK's error, marked as it would
    be before the stream began.
    """
    checked_client("openai_responses", client, model, "responses.create", "an OpenAI")
    checked_stream("openai_responses", stream)
    checked_params(
        "openai_responses",
        client.responses.create,
        params,
        {
            "input": "it is the history",
            "instructions": "put them in the history as {'kind': 'system', 'text': ...}, "
            "where the run records them",
            "previous_response_id": "the adapter sends the whole history every time "
            "(the run is the record), so the server would see it twice",
            "conversation": "the adapter sends the whole history every time "
            "(the run is the record), so the server would see it twice",
        },
    )

    def request(history: list[Message] | Messages, tools: dict[str, Any]) -> dict[str, Any]:
        return {"model": model, "input": _responses_input(history, request), **tools, **params}

    retries_off = without_retries("openai_responses", client, "responses.create", openai)

    if stream:
        return make_stream_model(
            client.responses.create,
            request,
            responses_stream,
            aresponses_stream,
            "openai-responses",
            {"stream": True},
            _responses_options,
            sdk=openai,
            name=model,
            retries_off=retries_off,
        )
    return make_model(
        client.responses.create,
        request,
        responses_reply,
        "openai-responses",
        _responses_options,
        sdk=openai,
        name=model,
        retries_off=retries_off,
    )


def _chat_options(tools: bool, tool_choice: str | None, output: Message | None) -> dict[str, Any]:
    """Chat Completions' ``tool_choice`` (the wrap-up step) and ``response_format`` (typed)."""
    out: dict[str, Any] = {}
    if tool_choice is not None and tools:  # without tools there is nothing to choose
        out["tool_choice"] = tool_choice
    if output is not None:
        out["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": output["name"],
                "schema": output["schema"],
                "strict": strict_schema(output["schema"]),
            },
        }
    return out


def _responses_options(
    tools: bool, tool_choice: str | None, output: Message | None
) -> dict[str, Any]:
    """The Responses API's ``tool_choice`` (the wrap-up step) and ``text.format`` (typed)."""
    out: dict[str, Any] = {}
    if tool_choice is not None and tools:
        out["tool_choice"] = tool_choice
    if output is not None:
        out["text"] = {
            "format": {
                "type": "json_schema",
                "name": output["name"],
                "schema": output["schema"],
                "strict": strict_schema(output["schema"]),
            }
        }
    return out
