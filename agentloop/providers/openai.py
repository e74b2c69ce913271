"""OpenAI adapters: ``openai_chat`` (Chat Completions) and ``openai_responses`` (Responses API).

``Loop(openai_chat(client, "gpt-4.1"), tools=registry)``: the Loop passes
its registry's specs with every request, which go out as the API's ``tools``.
With ``openai.OpenAI`` the model callback is a plain function, with
``openai.AsyncOpenAI`` an ``async def`` one (for ``arun``/``astart``). Any
OpenAI-compatible server works through the client's ``base_url``.

History to request (both APIs keep every message in place):

- ``system`` and ``user``: a message with that role (``system`` rather than
  ``developer``: every chat model and compatible server takes it, and OpenAI
  treats it as ``developer`` for the models that have that role);
- ``call``/``calls``: one assistant turn with its text and every tool call
  (Responses: an assistant message for the text, then a ``function_call``
  item per call); arguments as JSON text, or the model's raw text unchanged;
- ``tool_result``: a ``tool`` message per ``tool_call_id`` (Responses: a
  ``function_call_output`` per ``call_id``), content as text (JSON unless a
  ``str``), led by ``status: <status>`` on its own line unless ``ok``;
- ``final``: an assistant message.

Needs the ``openai`` extra; importing this module without it raises an
``ImportError`` that says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

try:
    import openai  # noqa: TC002 - at run time, so that a missing SDK fails here
except ImportError as exc:
    raise ImportError(
        "agentloop.providers.openai needs the OpenAI SDK: pip install 'agentloop-fsm[openai]'"
    ) from exc

from agentloop._errors import IncompleteReply
from agentloop.providers._convert import (
    AsyncModel,
    Message,
    SyncModel,
    arguments_text,
    assistant_turn,
    checked_client,
    checked_params,
    make_model,
    parsed_arguments,
    reply,
    result_text,
    strict_schema,
    unknown_kind,
    usage,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response

__all__ = ["openai_chat", "openai_responses"]

# Why a Responses API reply is incomplete, said as Chat Completions' are.
_INCOMPLETE = {
    "max_output_tokens": "the reply was cut off at max_output_tokens",
    "content_filter": "the reply was withheld by the content filter",
}


@overload
def openai_chat(client: openai.OpenAI, model: str, **params: Any) -> SyncModel: ...
@overload
def openai_chat(client: openai.AsyncOpenAI, model: str, **params: Any) -> AsyncModel: ...
def openai_chat(
    client: openai.OpenAI | openai.AsyncOpenAI,
    model: str,
    **params: Any,
) -> SyncModel | AsyncModel:
    """A model callback over Chat Completions (``client.chat.completions.create``).

    The request's ``tools`` are the specs the Loop passes with each request
    (``model(history, tools=specs)``), as ``specs('openai')`` gives them; none,
    no ``tools``. ``params`` go into every request as they are
    (``temperature=0``, ``max_completion_tokens=...``,
    ``parallel_tool_calls=False``, ...); ``model``, ``messages``, ``stream``
    and ``tools`` are the adapter's own (a ``TypeError`` if given). The reply
    carries ``usage`` when the response does. A reply cut off
    (``finish_reason`` ``length``), filtered, refused or empty raises
    ``IncompleteReply``; SDK errors that outlast its retries propagate.
    """
    checked_client("openai_chat", client, model, "chat.completions.create", "an OpenAI")
    checked_params(
        "openai_chat",
        client.chat.completions.create,
        params,
        {
            "messages": "it is the history",
            "stream": "the adapter needs the whole reply",
        },
    )

    def request(history: list[Message], tools: dict[str, Any]) -> dict[str, Any]:
        return {"model": model, "messages": _chat_messages(history), **tools, **params}

    return make_model(client.chat.completions.create, request, _chat_reply, "openai", _chat_options)


@overload
def openai_responses(client: openai.OpenAI, model: str, **params: Any) -> SyncModel: ...
@overload
def openai_responses(client: openai.AsyncOpenAI, model: str, **params: Any) -> AsyncModel: ...
def openai_responses(
    client: openai.OpenAI | openai.AsyncOpenAI,
    model: str,
    **params: Any,
) -> SyncModel | AsyncModel:
    """A model callback over the Responses API (``client.responses.create``), stateless.

    The whole history is sent as ``input`` on every request (no
    ``previous_response_id``); ``tools`` are the Loop's specs, as
    ``specs('openai-responses')`` gives them. ``params`` pass through as for
    ``openai_chat`` (``max_output_tokens=...``, ``reasoning=...``); ``model``,
    ``input``, ``stream`` and ``tools`` are the adapter's own. A response that
    is ``incomplete`` (``max_output_tokens``, content filter) or not
    ``completed``, a refusal or an empty reply raises ``IncompleteReply``.
    """
    checked_client("openai_responses", client, model, "responses.create", "an OpenAI")
    checked_params(
        "openai_responses",
        client.responses.create,
        params,
        {
            "input": "it is the history",
            "stream": "the adapter needs the whole reply",
            "instructions": "put them in the history as {'kind': 'system', 'text': ...}, "
            "where the run records them",
            "previous_response_id": "the adapter sends the whole history every time "
            "(the run is the record), so the server would see it twice",
            "conversation": "the adapter sends the whole history every time "
            "(the run is the record), so the server would see it twice",
        },
    )

    def request(history: list[Message], tools: dict[str, Any]) -> dict[str, Any]:
        return {"model": model, "input": _responses_input(history), **tools, **params}

    return make_model(
        client.responses.create, request, _responses_reply, "openai-responses", _responses_options
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


def _chat_messages(history: list[Message]) -> list[dict[str, Any]]:
    """The history as Chat Completions ``messages``."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(history):  # the commonest kinds first
        kind = message.get("kind")
        if kind == "tool_result":
            out.append(
                {"role": "tool", "tool_call_id": message["id"], "content": result_text(message)}
            )
        elif kind == "call" or kind == "calls":
            text, calls = assistant_turn(message)
            turn: dict[str, Any] = {"role": "assistant"}
            if text:
                turn["content"] = text
            turn["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": arguments_text(call["arguments"]),
                    },
                }
                for call in calls
            ]
            out.append(turn)
        elif kind == "user" or kind == "system":
            out.append({"role": kind, "content": message["text"]})
        elif kind == "final":
            out.append({"role": "assistant", "content": message["text"]})
        else:
            raise unknown_kind(index, kind)
    return out


def _chat_reply(completion: ChatCompletion) -> Message:
    """The reply for a chat completion (its first choice), with its usage."""
    used = completion.usage
    details = used.prompt_tokens_details if used else None
    cached = (details.cached_tokens if details else None) or 0
    tokens = None if used is None else usage(used.prompt_tokens, used.completion_tokens, cached)
    if not completion.choices:
        raise IncompleteReply("the reply was empty: the response has no choices", tokens)
    choice = completion.choices[0]
    message = choice.message
    if message.refusal:
        raise IncompleteReply(f"the model refused: {message.refusal}", tokens)
    if choice.finish_reason == "length":
        raise IncompleteReply(
            "the reply was cut off at the output limit (finish_reason 'length')", tokens
        )
    if choice.finish_reason == "content_filter":
        raise IncompleteReply("the reply was withheld by the content filter", tokens)
    calls = []
    for call in message.tool_calls or ():
        if call.type != "function":
            raise IncompleteReply(
                f"the model made a {call.type!r} tool call, which agentloop lacks", tokens
            )
        function = call.function
        calls.append(
            {
                "id": call.id,
                "name": function.name,
                "arguments": parsed_arguments(function.arguments),
            }
        )
    return reply(message.content or "", calls, tokens)


def _responses_input(history: list[Message]) -> list[dict[str, Any]]:
    """The history as Responses API ``input`` items."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(history):  # the commonest kinds first
        kind = message.get("kind")
        if kind == "tool_result":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message["id"],
                    "output": result_text(message),
                }
            )
        elif kind == "call" or kind == "calls":
            text, calls = assistant_turn(message)
            if text:
                out.append({"role": "assistant", "content": text})
            for call in calls:
                out.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["name"],
                        "arguments": arguments_text(call["arguments"]),
                    }
                )
        elif kind == "user" or kind == "system":
            out.append({"role": kind, "content": message["text"]})
        elif kind == "final":
            out.append({"role": "assistant", "content": message["text"]})
        else:
            raise unknown_kind(index, kind)
    return out


def _responses_reply(response: Response) -> Message:
    """The reply for a Responses API response: its messages' text and its function calls."""
    used = response.usage
    tokens = (
        None
        if used is None
        else usage(used.input_tokens, used.output_tokens, used.input_tokens_details.cached_tokens)
    )
    if response.status == "incomplete":
        reason = response.incomplete_details and response.incomplete_details.reason
        why = _INCOMPLETE.get(reason or "", f"the reply is incomplete ({reason})")
        raise IncompleteReply(why, tokens)
    if response.status not in (None, "completed"):
        error = response.error
        said = f": {error.code}: {error.message}" if error else ""
        raise IncompleteReply(f"the response is {response.status}{said}", tokens)
    texts, calls = [], []
    for item in response.output:
        if item.type == "message":
            for part in item.content:
                if part.type == "refusal":
                    raise IncompleteReply(f"the model refused: {part.refusal}", tokens)
                texts.append(part.text)
        elif item.type == "function_call":
            calls.append(
                {
                    "id": item.call_id,
                    "name": item.name,
                    "arguments": parsed_arguments(item.arguments),
                }
            )
        # Reasoning and the built-in tools' items have no message in the contract.
    return reply("".join(texts), calls, tokens)
