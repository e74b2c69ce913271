"""What the provider adapters share: the contract's messages taken apart, replies put together.

Each adapter converts the history to its provider's request and the response
back to a reply; the pieces both directions have in common live here, so that
the three formats differ only where their wire formats do.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

import orjson

from agentloop._core._json import json_object
from agentloop._core._retry import mark
from agentloop._errors import IncompleteReply
from agentloop._tools._specs import build_specs

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Generator
    from types import ModuleType

    from agentloop._streams import Delta
    from agentloop._tools._specs import SpecFormat

__all__ = [
    "AsyncModel",
    "AsyncReplyStream",
    "AsyncStreamModel",
    "Message",
    "ReplyStream",
    "StreamModel",
    "SyncModel",
    "arguments_text",
    "assistant_turn",
    "checked_client",
    "checked_params",
    "checked_stream",
    "image_of",
    "make_model",
    "make_stream_model",
    "parsed_arguments",
    "part_text",
    "reply",
    "request_tools",
    "result_parts",
    "result_text",
    "strict_schema",
    "unknown_kind",
    "usage",
]

Message = dict[str, Any]


class SyncModel(Protocol):
    """The model callback for a sync client: the Loop passes its tools' specs.

    And, with ``Loop(output=T)``, ``output`` (``{'name', 'schema'}``); in the
    wrap-up step (``on_exhausted='answer'``), ``tool_choice='none'``.
    """

    def __call__(
        self,
        history: list[Message],
        *,
        tools: list[Message] | None = None,
        tool_choice: str | None = None,
        output: Message | None = None,
    ) -> Message:
        """The reply to ``history``, with ``tools`` (neutral specs) offered."""
        ...


class AsyncModel(Protocol):
    """The model callback for an async client: ``SyncModel``, awaited."""

    def __call__(
        self,
        history: list[Message],
        *,
        tools: list[Message] | None = None,
        tool_choice: str | None = None,
        output: Message | None = None,
    ) -> Coroutine[Any, Any, Message]:
        """The reply to ``history``, with ``tools`` (neutral specs) offered."""
        ...


class StreamModel(Protocol):
    """The streaming model callback for a sync client: deltas, then the whole reply."""

    def __call__(
        self,
        history: list[Message],
        *,
        tools: list[Message] | None = None,
        tool_choice: str | None = None,
        output: Message | None = None,
    ) -> ReplyStream:
        """The stream of the reply to ``history``, with ``tools`` (neutral specs) offered."""
        ...


class AsyncStreamModel(Protocol):
    """The streaming model callback for an async client: ``StreamModel``, awaited."""

    def __call__(
        self,
        history: list[Message],
        *,
        tools: list[Message] | None = None,
        tool_choice: str | None = None,
        output: Message | None = None,
    ) -> Coroutine[Any, Any, AsyncReplyStream]:
        """The stream of the reply to ``history``, with ``tools`` (neutral specs) offered."""
        ...


#: What an adapter adds to a request for ``tool_choice`` and ``output`` (its own keys).
Options = Callable[[bool, str | None, Message | None], dict[str, Any]]


KINDS: Final = ("system", "user", "call", "calls", "tool_result", "final")


def unknown_kind(index: int, kind: object) -> ValueError:
    """The error for a message of a kind no adapter knows, naming where it is."""
    return ValueError(
        f"history[{index}]: expected kind to be one of {', '.join(KINDS)}; got {kind!r}"
    )


def assistant_turn(message: Message) -> tuple[str, list[Message]]:
    """A ``call`` or ``calls`` message as one assistant turn: its text and its calls, in order."""
    if message["kind"] == "call":
        return "", [message]
    return message.get("text", ""), message["calls"]


def arguments_text(arguments: Any) -> str:
    """Arguments as the JSON text OpenAI carries; a ``str`` is the model's raw text, unchanged."""
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


def parsed_arguments(raw: str) -> Any:
    """The provider's argument text as a dict, or the text itself when it is not a JSON object.

    The registry answers a ``str`` with ``invalid_arguments`` and the parse
    error, so the model can correct itself. Empty text is no arguments: some
    OpenAI-compatible servers send ``""`` for a tool without parameters.
    """
    if not raw.strip():
        return {}
    value, _ = json_object(raw)  # an int beyond 64 bits stays text, never a float
    return raw if value is None else value


def result_text(message: Message) -> str:
    """A tool result's content as text (JSON unless a ``str``), its status first unless ``ok``."""
    content = message["content"]
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    return text if message["status"] == "ok" else f"status: {message['status']}\n{text}"


#: The image types both providers take inside a tool result.
IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def result_parts(message: Message) -> list[dict[str, Any]] | None:
    """An ``ok`` result's typed parts, when they hold an image a provider can show; else None.

    The parts are MCP's content (``agentloop.mcp`` keeps them so):
    ``{'type': 'text', 'text'}``, ``{'type': 'image', 'data', 'mimeType'}``
    (base64) and other kinds, which an adapter sends as their JSON text.
    """
    content = message["content"]
    if message["status"] != "ok" or type(content) is not list or not content:
        return None
    if not all(type(part) is dict and type(part.get("type")) is str for part in content):
        return None
    if not any(image_of(part) for part in content):
        return None
    return content


def image_of(part: dict[str, Any]) -> tuple[str, str] | None:
    """A part's (media type, base64 data) if it is an image a provider takes, else None."""
    data, media = part.get("data"), part.get("mimeType")
    if part["type"] == "image" and type(data) is str and media in IMAGE_TYPES:
        return media, data
    return None


def part_text(part: dict[str, Any]) -> str:
    """A part that is not an image, as text: a text part's own, any other's JSON."""
    text = part.get("text")
    if part["type"] == "text" and type(text) is str:
        return text
    return orjson.dumps(part).decode()


def usage(input_tokens: int, output_tokens: int, cached_tokens: int) -> Message:
    """A reply's ``usage``: prompt tokens (cached ones included), output tokens, cached ones."""
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_tokens": cached_tokens,
    }


def reply(text: str, calls: list[Message], used: Message | None) -> Message:
    """The reply for a response's text and tool calls (``{'id', 'name', 'arguments'}`` each).

    One call alone is a ``call``; several, or text beside them, a ``calls``
    batch; text alone a ``final``. Nothing at all is an ``IncompleteReply``,
    never an empty final.
    """
    if len(calls) == 1 and not text:
        out: Message = {"kind": "call", **calls[0]}
    elif calls:
        out = {"kind": "calls", "calls": calls, **({"text": text} if text else {})}
    elif text:
        out = {"kind": "final", "text": text}
    else:
        raise IncompleteReply("the reply was empty: no text and no tool calls", used)
    if used is not None:
        out["usage"] = used
    return out


def checked_client(adapter: str, client: object, model: object, create: str, sdk: str) -> None:
    """Refuse, now, a client without the method the adapter calls, or no model name.

    By the method (``create``, a dotted path), not the class: Azure's, Bedrock's
    and Vertex's clients have it without being the SDK's main class.
    """
    method: object = client
    for name in create.split("."):
        method = getattr(method, name, None)
    if not callable(method):
        raise TypeError(
            f"{adapter}() expected client to be {sdk} client (with client.{create}), "
            f"got {type(client).__name__}"
        )
    if type(model) is not str or not model:
        raise TypeError(
            f"{adapter}() expected model to be the provider's model name (a non-empty str), "
            f"got {model!r:.80}"
        )


def checked_params(
    adapter: str, create: Callable[..., Any], params: dict[str, Any], reserved: dict[str, str]
) -> None:
    """Refuse request parameters that ``create`` lacks or that the adapter sets itself.

    Now, rather than at the first step; ``reserved`` says what to do instead.
    ``tools`` come from the Loop, with each request (``make_model``).
    """
    if "tools" in params:
        raise TypeError(
            f"{adapter}() takes no tools=: the tools come from the Loop, which passes its "
            "registry's specs with every request (Loop(model, tools=registry))"
        )
    for name, instead in reserved.items():
        if name in params:
            raise TypeError(f"{adapter}() sets {name!r} itself; {instead}")
    try:
        inspect.signature(create).bind_partial(**params)
    except TypeError as exc:
        raise TypeError(f"{adapter}(): {exc}") from None


def checked_stream(adapter: str, stream: object) -> None:
    """Refuse a ``stream`` that is not a bool, now."""
    if type(stream) is not bool:
        raise TypeError(f"{adapter}() expected stream to be True or False, got {stream!r:.80}")


def request_tools(specs: list[Message] | None, format: SpecFormat) -> dict[str, Any]:
    """The request's ``tools`` entry: the Loop's specs, in the provider's ``format``.

    ``specs`` are what the Loop passes with each request, in the neutral
    ``'json-schema'`` format (``{'name', 'description', 'parameters'}``),
    converted as the registry converts its own (``build_specs``). No specs,
    no entry: the APIs refuse an empty list.
    """
    if not specs:
        return {}
    entries = []
    for index, spec in enumerate(specs):
        if not (
            isinstance(spec, dict)
            and isinstance(spec.get("name"), str)
            and isinstance(spec.get("parameters"), dict)
        ):
            raise TypeError(
                f"tools[{index}]: expected a spec {{'name', 'description', 'parameters'}} "
                f"(the Loop's registry's specs()), got {spec!r:.80}"
            )
        entries.append((spec["name"], spec.get("description") or "", spec["parameters"]))
    return {"tools": build_specs(entries, format)}


def make_model(
    create: Callable[..., Any],
    request: Callable[[list[Message], dict[str, Any]], dict[str, Any]],
    parse: Callable[[Any], Message],
    format: SpecFormat,
    options: Options | None = None,
    *,
    sdk: ModuleType | None = None,
    name: str | None = None,
) -> SyncModel | AsyncModel:
    """The model callback: ``parse(create(**request(history, tools)))``, awaited if async.

    It takes ``tools``, so the Loop passes its specs with every request
    (``request_tools`` puts them in the provider's ``format``), and
    ``tool_choice`` and ``output``, which ``options`` turns into the
    provider's request entries. The SDKs wrap their async methods in plain
    decorators, hence ``unwrap``. An error the ``sdk`` raises is marked with
    its kind when it may pass (``classify``), for the Loop's retry policy,
    which is on by default for these models (``agentloop_retry``); ``name``
    is what fallback models' events call it.
    """
    entries = _entries(format, options)
    made: Any
    if inspect.iscoroutinefunction(inspect.unwrap(create)):

        async def amodel(
            history: list[Message],
            *,
            tools: list[Message] | None = None,
            tool_choice: str | None = None,
            output: Message | None = None,
        ) -> Message:
            body = request(history, entries(tools, tool_choice, output))
            try:
                response = await create(**body)
            except Exception as exc:
                classify(exc, sdk)
                raise
            return parse(response)

        made = amodel
    else:

        def model(
            history: list[Message],
            *,
            tools: list[Message] | None = None,
            tool_choice: str | None = None,
            output: Message | None = None,
        ) -> Message:
            body = request(history, entries(tools, tool_choice, output))
            try:
                response = create(**body)
            except Exception as exc:
                classify(exc, sdk)
                raise
            return parse(response)

        made = model
    made.agentloop_retry = True
    made.agentloop_name = name or format
    return made  # type: ignore[no-any-return]


def _entries(
    format: SpecFormat, options: Options | None
) -> Callable[[list[Message] | None, str | None, Message | None], dict[str, Any]]:
    """A request's tool entries in ``format``, and what ``options`` adds for the rest."""

    def entries(
        tools: list[Message] | None, tool_choice: str | None, output: Message | None
    ) -> dict[str, Any]:
        offered = request_tools(tools, format)
        if options is None or (tool_choice is None and output is None):
            return offered
        added = options(bool(offered), tool_choice, output)
        if "tools" in added and "tools" in offered:  # an adapter's own tool, beside the Loop's
            added["tools"] = [*offered["tools"], *added["tools"]]
        return {**offered, **added}

    return entries


def strict_schema(schema: Any) -> bool:
    """Whether OpenAI's strict mode takes ``schema``: every object closed, every key required.

    Strict mode refuses any other schema, so one with an optional field (a
    default) is sent with ``strict: false``: still asked for, not enforced.
    """
    if isinstance(schema, list):
        return all(strict_schema(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if sorted(schema.get("required", [])) != sorted(properties):
            return False
    return all(
        strict_schema(value)
        for key, value in schema.items()
        if key not in ("enum", "const", "default", "required")
    )


def classify(exc: Exception, sdk: ModuleType | None) -> None:
    """Mark an SDK's error by its own exception types, when it may pass.

    A rate limit, a 5xx, a timeout, a lost connection; the server's
    ``Retry-After`` (``retry-after-ms`` first) goes with it. OpenAI's and
    Anthropic's SDKs share these type names. Anything else stays unmarked.
    """
    if sdk is None:
        return
    if isinstance(exc, sdk.APITimeoutError):  # a subclass of APIConnectionError: first
        mark(exc, "timeout")
    elif isinstance(exc, sdk.APIConnectionError):
        mark(exc, "connection")
    elif isinstance(exc, sdk.RateLimitError):
        mark(exc, "rate_limit", retry_after(exc.response.headers))
    elif isinstance(exc, sdk.APIStatusError) and exc.status_code >= 500:  # 529: overloaded too
        mark(exc, "server", retry_after(exc.response.headers))


def retry_after(headers: Any) -> float | None:
    """The wait a response asks for, in seconds.

    ``retry-after-ms``, or ``retry-after`` in seconds (an HTTP date, which
    needs a clock, is left to the policy's backoff).
    """
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if 0 <= seconds < math.inf:
            return seconds
    return None


class ReplyStream:
    """A reply streaming from an SDK's stream: deltas, then the whole reply.

    ``close()`` ends the HTTP response at once.
    Iterating it is iterating ``convert(source)`` itself (``__iter__`` hands out
    that generator): no call of ours between the SDK's event and its delta.
    """

    __slots__ = ("_items", "_source")

    def __init__(
        self, source: Any, convert: Callable[[Any], Generator[Delta | Message, None, None]]
    ) -> None:
        self._source = source
        self._items = convert(source)

    def __iter__(self) -> Generator[Delta | Message, None, None]:
        return self._items

    def __next__(self) -> Delta | Message:
        return next(self._items)

    def close(self) -> None:
        """Stop reading and close the SDK's stream (its HTTP response)."""
        try:
            self._items.close()
        finally:
            self._source.close()


class AsyncReplyStream:
    """``ReplyStream`` for an async client; ``aclose()`` ends the HTTP response at once."""

    __slots__ = ("_items", "_source")

    def __init__(
        self, source: Any, convert: Callable[[Any], AsyncGenerator[Delta | Message, None]]
    ) -> None:
        self._source = source
        self._items = convert(source)

    def __aiter__(self) -> AsyncIterator[Delta | Message]:
        return self._items

    async def __anext__(self) -> Delta | Message:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        """Stop reading and close the SDK's stream (its HTTP response)."""
        try:
            await self._items.aclose()
        finally:
            await self._source.close()


def make_stream_model(
    create: Callable[..., Any],
    request: Callable[[list[Message], dict[str, Any]], dict[str, Any]],
    convert: Callable[[Any], Generator[Delta | Message, None, None]],
    aconvert: Callable[[Any], AsyncGenerator[Delta | Message, None]],
    format: SpecFormat,
    streaming: dict[str, Any],
    options: Options | None = None,
    *,
    sdk: ModuleType | None = None,
    name: str | None = None,
) -> StreamModel | AsyncStreamModel:
    """The streaming model callback: ``create(**request(...), **streaming)``'s stream, converted.

    The request is made as ``make_model`` makes it, and sent (an HTTP error
    raised, and marked for the retry policy) by the call itself; the stream
    it answers with yields the deltas ``convert`` makes of the SDK's events,
    then the whole reply.
    """
    entries = _entries(format, options)
    made: Any
    if inspect.iscoroutinefunction(inspect.unwrap(create)):

        async def amodel(
            history: list[Message],
            *,
            tools: list[Message] | None = None,
            tool_choice: str | None = None,
            output: Message | None = None,
        ) -> AsyncReplyStream:
            body = request(history, entries(tools, tool_choice, output))
            try:
                source = await create(**body, **streaming)
            except Exception as exc:
                classify(exc, sdk)
                raise
            return AsyncReplyStream(source, aconvert)

        made = amodel
    else:

        def model(
            history: list[Message],
            *,
            tools: list[Message] | None = None,
            tool_choice: str | None = None,
            output: Message | None = None,
        ) -> ReplyStream:
            body = request(history, entries(tools, tool_choice, output))
            try:
                source = create(**body, **streaming)
            except Exception as exc:
                classify(exc, sdk)
                raise
            return ReplyStream(source, convert)

        made = model
    made.agentloop_retry = True
    made.agentloop_name = name or format
    return made  # type: ignore[no-any-return]
