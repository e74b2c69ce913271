"""Streaming model callbacks: the request sent with ``stream=True``, its SDK stream converted.

``make_stream_model`` makes the callback, whose answer is a ``ReplyStream``
(``AsyncReplyStream`` for an async client): the deltas an adapter's fold makes
of the SDK's events, then the whole reply.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Protocol

from agentloop.providers._convert import request_entries
from agentloop.providers._errors import classify

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Generator
    from types import ModuleType

    from agentloop._streams import Delta
    from agentloop._tools._specs import SpecFormat
    from agentloop.providers._convert import Message, Options

__all__ = [
    "AsyncReplyStream",
    "AsyncStreamModel",
    "ReplyStream",
    "StreamModel",
    "checked_stream",
    "make_stream_model",
]


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


def checked_stream(adapter: str, stream: object) -> None:
    """Refuse a ``stream`` that is not a bool, now."""
    if type(stream) is not bool:
        raise TypeError(f"{adapter}() expected stream to be True or False, got {stream!r:.80}")


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
    entries = request_entries(format, options)
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
