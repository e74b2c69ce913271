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
  ``str``), led by ``status: <status>`` on its own line unless ``ok``. A
  result of typed parts with an image among them (an MCP tool's) goes to the
  Responses API as ``input_image`` and ``input_text`` items (a Chat
  Completions ``tool`` message takes text only: it gets the JSON);
- ``final``: an assistant message.

Needs the ``openai`` extra; importing this module without it raises an
``ImportError`` that says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, overload

try:
    import openai  # at run time, so that a missing SDK fails here
except ImportError as exc:
    raise ImportError(
        "agentloop.providers.openai needs the OpenAI SDK: pip install 'agentloop-fsm[openai]'"
    ) from exc

from agentloop._errors import IncompleteReply
from agentloop._streams import ArgumentsDelta, TextDelta, ToolCallStart, UsageDelta
from agentloop.providers._convert import (
    AsyncModel,
    Message,
    SyncModel,
    arguments_text,
    assistant_turn,
    checked_client,
    checked_params,
    image_of,
    make_model,
    parsed_arguments,
    part_text,
    reply,
    result_parts,
    result_text,
    strict_schema,
    unknown_kind,
    usage,
)
from agentloop.providers._streaming import (
    AsyncStreamModel,
    StreamModel,
    checked_stream,
    make_stream_model,
)

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator, Iterable

    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.completion_usage import CompletionUsage
    from openai.types.responses import Response, ResponseStreamEvent

    from agentloop._streams import Delta

__all__ = ["openai_chat", "openai_responses"]

# Why a Responses API reply is incomplete, said as Chat Completions' are.
_INCOMPLETE = {
    "max_output_tokens": "the reply was cut off at max_output_tokens",
    "content_filter": "the reply was withheld by the content filter",
}


@overload
def openai_chat(
    client: openai.OpenAI, model: str, *, stream: Literal[False] = False, **params: Any
) -> SyncModel: ...
@overload
def openai_chat(
    client: openai.AsyncOpenAI, model: str, *, stream: Literal[False] = False, **params: Any
) -> AsyncModel: ...
@overload
def openai_chat(
    client: openai.OpenAI, model: str, *, stream: Literal[True], **params: Any
) -> StreamModel: ...
@overload
def openai_chat(
    client: openai.AsyncOpenAI, model: str, *, stream: Literal[True], **params: Any
) -> AsyncStreamModel: ...
def openai_chat(
    client: openai.OpenAI | openai.AsyncOpenAI,
    model: str,
    *,
    stream: bool = False,
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
    errors that outlast its retries propagate.

    ``stream=True``: the callback answers with a stream (``agentloop.streaming``)
    over ``stream=True`` chunks, with ``stream_options={'include_usage': True}``;
    its whole reply is the one the same response unstreamed gives. A stream
    that ends before its ``finish_reason`` raises ``IncompleteReply``.
    """
    checked_client("openai_chat", client, model, "chat.completions.create", "an OpenAI")
    checked_stream("openai_chat", stream)
    checked_params(
        "openai_chat",
        client.chat.completions.create,
        params,
        {"messages": "it is the history"},
    )

    def request(history: list[Message], tools: dict[str, Any]) -> dict[str, Any]:
        return {"model": model, "messages": _chat_messages(history), **tools, **params}

    if stream:
        options = {**(params.pop("stream_options", None) or {}), "include_usage": True}
        return make_stream_model(
            client.chat.completions.create,
            request,
            _chat_stream,
            _achat_stream,
            "openai",
            {"stream": True, "stream_options": options},
            _chat_options,
            sdk=openai,
            name=model,
        )
    return make_model(
        client.chat.completions.create,
        request,
        _chat_reply,
        "openai",
        _chat_options,
        sdk=openai,
        name=model,
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
    the last event carries, as unstreamed. An ``error`` event, or a stream
    that ends before its last event, raises ``IncompleteReply``.
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

    def request(history: list[Message], tools: dict[str, Any]) -> dict[str, Any]:
        return {"model": model, "input": _responses_input(history), **tools, **params}

    if stream:
        return make_stream_model(
            client.responses.create,
            request,
            _responses_stream,
            _aresponses_stream,
            "openai-responses",
            {"stream": True},
            _responses_options,
            sdk=openai,
            name=model,
        )
    return make_model(
        client.responses.create,
        request,
        _responses_reply,
        "openai-responses",
        _responses_options,
        sdk=openai,
        name=model,
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
    if not completion.choices:
        return _chat_outcome(used, None, None, None, None, ())
    choice = completion.choices[0]
    message = choice.message
    calls = [
        (c.type, c.id, c.function.name, c.function.arguments)
        if c.type == "function"
        else (c.type, c.id, "", "")
        for c in message.tool_calls or ()
    ]
    return _chat_outcome(used, choice.finish_reason, message.content, message.refusal, "", calls)


def _chat_outcome(
    used: CompletionUsage | None,
    finish: str | None,
    content: str | None,
    refusal: str | None,
    choice: str | None,
    calls: Iterable[tuple[str, str, str, str]],
) -> Message:
    """The reply for a first choice's parts, whole or streamed (``choice`` None: no choice).

    ``calls`` are ``(type, id, name, arguments)``, in order.
    """
    details = used.prompt_tokens_details if used else None
    cached = (details.cached_tokens if details else None) or 0
    tokens = None if used is None else usage(used.prompt_tokens, used.completion_tokens, cached)
    if choice is None:
        raise IncompleteReply("the reply was empty: the response has no choices", tokens)
    if refusal:
        raise IncompleteReply(f"the model refused: {refusal}", tokens)
    if finish == "length":
        raise IncompleteReply(
            "the reply was cut off at the output limit (finish_reason 'length')", tokens
        )
    if finish == "content_filter":
        raise IncompleteReply("the reply was withheld by the content filter", tokens)
    parsed = []
    for kind, call_id, name, arguments in calls:
        if kind != "function":
            raise IncompleteReply(
                f"the model made a {kind!r} tool call, which agentloop lacks", tokens
            )
        parsed.append({"id": call_id, "name": name, "arguments": parsed_arguments(arguments)})
    return reply(content or "", parsed, tokens)


class _ChatFold:
    """Chat Completions chunks folded as they arrive: the deltas of each, the reply at the end."""

    __slots__ = ("calls", "choice", "finish", "refusal", "text", "used")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, list[Any]] = {}  # index: [type, id, name, [argument texts]]
        self.finish: str | None = None
        self.used: CompletionUsage | None = None
        self.choice: str | None = None  # "" once a chunk had a choice

    def feed(self, chunk: ChatCompletionChunk) -> list[Delta] | tuple[Delta, ...]:
        choices = chunk.choices
        if chunk.usage is None and len(choices) == 1:  # the common chunk: a piece of text
            choice = choices[0]
            delta = choice.delta
            if (
                choice.index == 0
                and choice.finish_reason is None
                and delta.tool_calls is None
                and not delta.refusal
            ):
                self.choice = ""
                content = delta.content
                if content:
                    self.text.append(content)
                    return (TextDelta(text=content),)
                return ()
        out: list[Delta] = []
        if chunk.usage is not None:  # the last chunk (include_usage), with no choices
            self.used = used = chunk.usage
            details = used.prompt_tokens_details
            out.append(
                UsageDelta(
                    input_tokens=used.prompt_tokens,
                    output_tokens=used.completion_tokens,
                    cached_tokens=(details.cached_tokens if details else None) or 0,
                )
            )
        for choice in chunk.choices:
            if choice.index != 0:
                continue  # the first choice is the reply, as unstreamed
            self.choice = ""
            if choice.finish_reason is not None:
                self.finish = choice.finish_reason
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                out.append(TextDelta(text=delta.content))
            if delta.refusal:
                self.refusal.append(delta.refusal)
            for call in delta.tool_calls or ():
                entry = self.calls.get(call.index)
                function = call.function
                if entry is None:
                    name = (function.name if function else None) or ""
                    entry = self.calls[call.index] = [call.type or "function", call.id, name, []]
                    out.append(ToolCallStart(index=call.index, id=call.id or "", name=name))
                if function is not None and function.arguments:
                    entry[3].append(function.arguments)
                    out.append(ArgumentsDelta(index=call.index, text=function.arguments))
        return out

    def reply(self) -> Message:
        if self.choice is not None and self.finish is None:
            raise IncompleteReply("the stream ended before the reply did (no finish_reason)")
        calls = [
            (kind, call_id, name, "".join(parts))
            for kind, call_id, name, parts in (self.calls[i] for i in sorted(self.calls))
        ]
        return _chat_outcome(
            self.used,
            self.finish,
            "".join(self.text) or None,
            "".join(self.refusal) or None,
            self.choice,
            calls,
        )


def _chat_stream(
    chunks: openai.Stream[ChatCompletionChunk],
) -> Generator[Delta | Message, None, None]:
    """The deltas of a chat completion's chunks, then its reply."""
    fold = _ChatFold()
    try:
        for chunk in chunks:
            yield from fold.feed(chunk)
    finally:
        chunks.close()  # the HTTP response, at once: the reply is in (or broke)
    yield fold.reply()


async def _achat_stream(chunks: Any) -> AsyncGenerator[Delta | Message, None]:
    """``_chat_stream`` over an async SDK stream."""
    fold = _ChatFold()
    try:
        async for chunk in chunks:
            for delta in fold.feed(chunk):
                yield delta
    finally:
        await chunks.close()
    yield fold.reply()


def _output(message: Message) -> str | list[dict[str, Any]]:
    """A ``function_call_output``'s output: text, or input items when the result holds an image."""
    parts = result_parts(message)
    if parts is None:
        return result_text(message)
    items: list[dict[str, Any]] = []
    for part in parts:
        image = image_of(part)
        if image is None:
            items.append({"type": "input_text", "text": part_text(part)})
        else:
            media, data = image
            items.append({"type": "input_image", "image_url": f"data:{media};base64,{data}"})
    return items


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
                    "output": _output(message),
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


class _ResponsesFold:
    """Responses API stream events folded: the deltas of each, the reply from the last."""

    __slots__ = ("calls", "final")

    def __init__(self) -> None:
        self.calls: dict[int, int] = {}  # output_index: the call's index among the calls
        self.final: Response | None = None

    def feed(self, event: Any) -> tuple[Delta, ...]:  # a ResponseStreamEvent, by its type
        kind = event.type
        if kind == "response.output_text.delta":
            return (TextDelta(text=event.delta),) if event.delta else ()
        if kind == "response.function_call_arguments.delta":
            index = self.calls.get(event.output_index)
            if index is None or not event.delta:
                return ()
            return (ArgumentsDelta(index=index, text=event.delta),)
        if kind == "response.output_item.added":
            item = event.item
            if item.type != "function_call":
                return ()
            index = self.calls[event.output_index] = len(self.calls)
            start = ToolCallStart(index=index, id=item.call_id, name=item.name)
            if item.arguments:
                return (start, ArgumentsDelta(index=index, text=item.arguments))
            return (start,)
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = response = event.response
            used = response.usage
            if used is not None:
                return (
                    UsageDelta(
                        input_tokens=used.input_tokens,
                        output_tokens=used.output_tokens,
                        cached_tokens=used.input_tokens_details.cached_tokens,
                    ),
                )
            return ()
        if kind == "error":
            raise IncompleteReply(
                f"the stream broke off with an error: {event.code}: {event.message}"
            )
        return ()

    def reply(self) -> Message:
        if self.final is None:
            raise IncompleteReply("the stream ended before the reply did (no response.completed)")
        return _responses_reply(self.final)


def _responses_stream(
    events: openai.Stream[ResponseStreamEvent],
) -> Generator[Delta | Message, None, None]:
    """The deltas of a Responses API stream, then its reply."""
    fold = _ResponsesFold()
    try:
        for event in events:
            yield from fold.feed(event)
            if fold.final is not None:
                break
    finally:
        events.close()  # the HTTP response, at once: the reply is in (or broke)
    yield fold.reply()


async def _aresponses_stream(events: Any) -> AsyncGenerator[Delta | Message, None]:
    """``_responses_stream`` over an async SDK stream."""
    fold = _ResponsesFold()
    try:
        async for event in events:
            for delta in fold.feed(event):
                yield delta
            if fold.final is not None:
                break
    finally:
        await events.close()
    yield fold.reply()
