"""Streaming model callbacks: the request sent with ``stream=True``, its SDK stream converted.

``make_stream_model`` makes the callback, whose answer is a ``ReplyStream``
(``AsyncReplyStream`` for an async client): the deltas an adapter's fold makes
of the SDK's events, then the whole reply.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Protocol

from agentloop.providers._convert import make_model

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Generator
    from types import ModuleType

    from agentloop._streams import Delta
    from agentloop._tools._specs import NameRule, SpecFormat
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

    def change_reply(self, change: Callable[[Message], Message]) -> None:
        """Make the whole reply (the last item) ``change(reply)``; the deltas pass as they are."""
        self._items = _changed(self._items, change)


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

    def change_reply(self, change: Callable[[Message], Message]) -> None:
        """Make the whole reply (the last item) ``change(reply)``; the deltas pass as they are."""
        self._items = _achanged(self._items, change)


def _changed(
    items: Generator[Delta | Message, None, None], change: Callable[[Message], Message]
) -> Generator[Delta | Message, None, None]:
    try:
        for item in items:
            yield change(item) if type(item) is dict else item
    finally:
        items.close()  # closing this stream closes the SDK's events' conversion


async def _achanged(
    items: AsyncGenerator[Delta | Message, None], change: Callable[[Message], Message]
) -> AsyncGenerator[Delta | Message, None]:
    try:
        async for item in items:
            yield change(item) if type(item) is dict else item
    finally:
        await items.aclose()


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
    names: NameRule | None = None,
    retries_off: Callable[[], Callable[..., Any]] | None = None,
    errors: Callable[[Exception], Exception | None] | None = None,
) -> StreamModel | AsyncStreamModel:
    """The streaming model callback: ``create(**request(...), **streaming)``'s stream, converted.

    ``make_model``'s callback (``names`` and ``retries_off`` as there),
    whose request carries ``streaming`` and whose answer is opened as a stream
    (an HTTP error is raised, and marked for the retry policy, by the call
    itself): it yields the deltas ``convert`` makes of the SDK's events, then
    the whole reply.
    """
    if inspect.iscoroutinefunction(inspect.unwrap(create)):

        def aopen(source: Any) -> AsyncReplyStream:
            return AsyncReplyStream(source, aconvert)

        opened: Callable[[Any], Any] = aopen
    else:

        def open_(source: Any) -> ReplyStream:
            return ReplyStream(source, convert)

        opened = open_
    made: StreamModel | AsyncStreamModel = make_model(  # type: ignore[assignment]
        create,
        request,
        opened,
        format,
        options,
        sdk=sdk,
        name=name,
        sent=streaming,
        names=names,
        retries_off=retries_off,
        errors=errors,
    )  # its parse opens the stream its create answers
    return made
