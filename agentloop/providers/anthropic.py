"""Anthropic adapter: ``anthropic_messages`` (the Messages API).

``Loop(anthropic_messages(client, "claude-sonnet-4-5"), tools=registry)``: the
Loop passes its registry's specs with every request, which go out as ``tools``.
With ``anthropic.Anthropic`` the model callback is a plain function, with
``anthropic.AsyncAnthropic`` an ``async def`` one (for ``arun``/``astart``).
The SDK's clients for Claude on Amazon Bedrock and Google Vertex AI
(``AnthropicBedrock``, ``AnthropicVertex`` and their async twins) are taken
the same way, with the platform's model name (``bedrock`` and ``vertex``
extras).

History to request:

- ``system``: the top-level ``system``, several joined by blank lines (the
  Messages API has no system turn, so their place in the history is lost);
- ``user``: a text block in a user turn;
- ``call``/``calls``: one assistant turn, a text block for its text and a
  ``tool_use`` block per call. ``input`` must be an object, so arguments that
  arrived as text (another provider's invalid JSON) are sent as ``{}``; the
  ``invalid_arguments`` result that answered them quotes the text;
- ``tool_result``: a ``tool_result`` block in a user turn, content as text
  (JSON unless a ``str``); unless ``ok``, ``is_error: true`` and the content
  led by ``status: <status>`` on its own line. A result of typed parts with
  an image among them (an MCP tool's) goes as blocks: ``image`` blocks for
  the images, ``text`` blocks for the rest;
- ``final``: a text block in an assistant turn.

Adjacent messages of one role share a turn (the API wants the roles to
alternate): a parallel call's results are one user turn, and a user message
right after them joins it. Within a user turn the ``tool_result`` blocks come
first, as the API requires. Empty text is left out (the API refuses empty
text blocks).

Needs the ``anthropic`` extra; importing this module without it raises an
``ImportError`` that says so.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Literal, overload

try:
    import anthropic  # at run time, so that a missing SDK fails here
except ModuleNotFoundError as exc:  # missing; a script named like it fails on its own
    raise ImportError(
        "agentloop.providers.anthropic needs the Anthropic SDK: "
        "pip install 'agentloop-fsm[anthropic]'"
    ) from exc

from agentloop.providers._anthropic_reply import FINAL_ANSWER, messages_reply
from agentloop.providers._anthropic_stream import amessages_stream, messages_stream
from agentloop.providers._convert import Message, assistant_turn, result_content, unknown_kind
from agentloop.providers._fold import Turns, folded
from agentloop.providers._model import (
    AsyncModel,
    SyncModel,
    checked_client,
    checked_params,
    make_model,
    without_retries,
)
from agentloop.providers._streaming import (
    AsyncStreamModel,
    StreamModel,
    checked_stream,
    make_stream_model,
)

if TYPE_CHECKING:
    from agentloop._core.requests import Messages

__all__ = ["DEFAULT_MAX_TOKENS", "anthropic_messages"]

#: The output limit when none is given: one that every Claude model accepts.
DEFAULT_MAX_TOKENS = 4096


@overload
def anthropic_messages(
    client: anthropic.Anthropic,
    model: str,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    stream: Literal[False] = False,
    **params: Any,
) -> SyncModel: ...
@overload
def anthropic_messages(
    client: anthropic.AsyncAnthropic,
    model: str,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    stream: Literal[False] = False,
    **params: Any,
) -> AsyncModel: ...
@overload
def anthropic_messages(
    client: anthropic.Anthropic,
    model: str,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    stream: Literal[True],
    **params: Any,
) -> StreamModel: ...
@overload
def anthropic_messages(
    client: anthropic.AsyncAnthropic,
    model: str,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    stream: Literal[True],
    **params: Any,
) -> AsyncStreamModel: ...
def anthropic_messages(
    client: anthropic.Anthropic | anthropic.AsyncAnthropic,
    model: str,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    stream: bool = False,
    **params: Any,
) -> SyncModel | AsyncModel | StreamModel | AsyncStreamModel:
    """A model callback over the Messages API (``client.messages.create``).

    The request's ``tools`` are the specs the Loop passes with each request
    (``model(history, tools=specs)``), as ``specs('anthropic')`` gives them;
    none, no ``tools``. ``max_tokens``, which the
    API requires, caps each reply (4096 unless given). ``params`` go into
    every request as they are (``tool_choice=...``, ``stop_sequences=...``);
    ``messages``, ``system`` and ``tools`` are the adapter's own
    (a ``TypeError`` if given). The reply carries ``usage``. A reply cut off
    (``max_tokens``), refused or empty raises ``IncompleteReply``; SDK errors
    propagate, marked for the Loop's retry policy. A Loop that retries sends
    the requests through a copy of ``client`` with its own retries off
    (``agentloop_single_attempt``), so that the two never multiply.

    ``stream=True``: the callback answers with a stream (``agentloop.streaming``)
    over the API's stream events; its whole reply is the one the same message
    unstreamed gives. An ``error`` event raises the SDK's error (an
    ``APIStatusError``), marked passing by its type (``overloaded_error``,
    ``api_error``, ``rate_limit_error``) for the Loop's retry policy; a
    connection lost mid-stream raises the SDK's error, marked as it would be
    before the stream began; a stream that ends before ``message_stop``
    raises ``IncompleteReply``, marked as a lost connection.
    """
    checked_client("anthropic_messages", client, model, "messages.create", "an Anthropic")
    checked_params(
        "anthropic_messages",
        client.messages.create,
        params,
        {
            "messages": "it is the history",
            "system": "put it in the history as {'kind': 'system', 'text': ...}, "
            "where the run records it",
        },
    )
    checked_stream("anthropic_messages", stream)

    def request(history: list[Message] | Messages, tools: dict[str, Any]) -> dict[str, Any]:
        converted = _messages_request(history, request)  # the record's kept under request
        body = {"model": model, "max_tokens": max_tokens, **converted}
        return {**body, **tools, **params}

    native = "output_config" in inspect.signature(client.messages.create).parameters
    options = _messages_options if native else _tool_options
    retries_off = without_retries("anthropic_messages", client, "messages.create", anthropic)
    if stream:
        return make_stream_model(
            client.messages.create,
            request,
            messages_stream,
            amessages_stream,
            "anthropic",
            {"stream": True},
            options,
            sdk=anthropic,
            name=model,
            retries_off=retries_off,
        )
    return make_model(
        client.messages.create,
        request,
        messages_reply,
        "anthropic",
        options,
        sdk=anthropic,
        name=model,
        retries_off=retries_off,
    )


def _result_content(message: Message) -> str | list[dict[str, Any]]:
    """A ``tool_result`` block's content: text, or blocks when the result holds an image."""
    return result_content(
        message,
        lambda text: {"type": "text", "text": text},
        lambda media, data: {
            "type": "image",
            "source": {"type": "base64", "media_type": media, "data": data},
        },
    )


def _messages_options(
    tools: bool, tool_choice: str | None, output: Message | None
) -> dict[str, Any]:
    """``tool_choice`` none (the wrap-up step) and native structured output (``output_config``)."""
    out: dict[str, Any] = {}
    if tool_choice is not None and tools:
        out["tool_choice"] = {"type": tool_choice}
    if output is not None:
        out["output_config"] = {"format": {"type": "json_schema", "schema": output["schema"]}}
    return out


def _tool_options(tools: bool, tool_choice: str | None, output: Message | None) -> dict[str, Any]:
    """For an SDK without structured output: the output asked for as a final-answer tool.

    The model answers by calling ``final_answer`` with the output as its
    input; ``messages_reply`` makes that call the final, its text the JSON.
    """
    out = _messages_options(tools, tool_choice, None)
    if output is not None:
        out["tools"] = [
            {
                "name": FINAL_ANSWER,
                "description": "Give the final answer, as the output schema says.",
                "input_schema": output["schema"],
            },
        ]
    return out


def _messages_request(history: list[Message] | Messages, key: object = None) -> dict[str, Any]:
    """The history as the Messages API's ``messages``, and ``system`` if there is one.

    The record's messages are converted once each, kept under ``key`` (``folded``).
    """
    turns, system = folded(history, key, _MessagesFold)
    out: dict[str, Any] = {"messages": turns}
    if system:
        out["system"] = "\n\n".join(system)
    return out


class _MessagesFold(Turns):
    """The Messages API's turns and system texts, a history message at a time."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("content")

    def add(self, index: int, message: Message) -> None:  # the commonest kinds first
        kind = message.get("kind")
        if kind == "tool_result":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message["id"],
                "content": _result_content(message),
            }
            if message["status"] != "ok":
                block["is_error"] = True
            content = self.turn("user")
            if content and content[-1]["type"] != "tool_result":
                # Before the text already in the turn, after its other results.
                at = next(i for i, b in enumerate(content) if b["type"] != "tool_result")
                content.insert(at, block)
            else:
                content.append(block)
        elif kind == "call" or kind == "calls":
            text, calls = assistant_turn(message)
            content = self.turn("assistant")
            if text:
                content.append({"type": "text", "text": text})
            for call in calls:
                arguments = call["arguments"]
                content.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": arguments if isinstance(arguments, dict) else {},
                    }
                )
        elif kind == "system":
            self.system.append(message["text"])
        elif kind == "user" or kind == "final":
            if message["text"]:
                self.turn("user" if kind == "user" else "assistant").append(
                    {"type": "text", "text": message["text"]}
                )
        else:
            raise unknown_kind(index, kind)
