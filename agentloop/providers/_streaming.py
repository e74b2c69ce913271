"""Streaming model callbacks: the request sent with ``stream=True``, its SDK stream converted.

``make_stream_model`` makes the callback, whose answer is a ``ReplyStream``
(``AsyncReplyStream`` for an async client): the deltas an adapter's fold makes
of the SDK's events, then the whole reply. ``folded`` (``afolded``) is how
every adapter reads the SDK's events into its fold: the run's token and
deadline read at each event, a failure marked for the retry policy as one
before the stream began is (by the adapter's own ``errors`` for an SDK whose
errors are named otherwise, as in ``make_model``), OpenAI's error events made
an ``IncompleteReply``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from agentloop._core.retry_policy import mark
from agentloop._drivers.streams import between_chunks
from agentloop._errors import IncompleteReply
from agentloop.providers._errors import aunstreamed, classify, stream_error_kind, unstreamed
from agentloop.providers._model import GivenHistory, ModelCallback, make_model

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator
    from types import ModuleType

    from agentloop._drivers.deltas import Delta
    from agentloop._tools.specs import NameRule, SpecFormat
    from agentloop.providers._convert import Message
    from agentloop.providers._model import Options

    # An adapter's own marking of its SDK's errors (``make_model``'s ``errors``): it marks
    # the error and may give one to raise in its place.
    Errors = Callable[[Exception], Exception | None]

__all__ = [
    "AsyncReplyStream",
    "AsyncStreamModel",
    "Fold",
    "ReplyStream",
    "StreamModel",
    "afolded",
    "checked_stream",
    "ended_early",
    "error_event",
    "folded",
    "make_stream_model",
]


class Fold(Protocol):
    """An adapter's fold of its provider's stream events: deltas from each, the reply at the end."""

    @property
    def done(self) -> bool:
        """Whether the event that ends the reply has come (no need to read on)."""
        ...

    def feed(self, event: Any) -> tuple[Delta, ...] | list[Delta]:
        """The deltas ``event`` carries (none for most lifecycle events)."""
        ...

    def missing(self) -> str | None:
        """The event that ends the reply, if the stream ended without it."""
        ...

    def reply(self) -> Message:
        """The whole reply, once its last event is in (``IncompleteReply`` if it is unusable)."""
        ...


def folded(
    events: Any, fold: Fold, sdk: ModuleType | None = None, *, errors: Errors | None = None
) -> Generator[Delta | Message, None, None]:
    """The deltas ``fold`` makes of each of the SDK's ``events``, then its reply.

    The run's token and ``model_timeout`` are read at each event
    (``between_chunks``), whether it carries a delta or not, so that a
    cancel is seen at the next event. ``events`` is closed as soon as the
    reply is in (or the reading broke); a failure is ``broke_off``'s (or, for
    an SDK whose errors are named otherwise, marked by ``errors``, which may
    give an error to raise in its place), and a stream that ended before its
    last event is ``ended_early``'s. A response that is no stream at all (an
    HTML page in its place) is ``unstreamed``'s ``UnreadableResponse``,
    unmarked: it would only come again.
    """
    began = False
    try:
        page = unstreamed(events)
        if page is not None:
            raise page
        for event in events:
            began = True
            between_chunks()
            yield from fold.feed(event)
            if fold.done:
                break
    except Exception as exc:
        error = _broke(exc, sdk, errors)
        if error is exc:
            raise
        raise error from exc
    finally:
        events.close()  # the HTTP response, at once: the reply is in (or broke)
    yield _whole(fold, began)


async def afolded(
    events: Any, fold: Fold, sdk: ModuleType | None = None, *, errors: Errors | None = None
) -> AsyncGenerator[Delta | Message, None]:
    """``folded`` over an async SDK stream: the same body, but where it awaits."""
    began = False
    try:
        page = await aunstreamed(events)
        if page is not None:
            raise page
        async for event in events:
            began = True
            between_chunks()
            for delta in fold.feed(event):
                yield delta
            if fold.done:
                break
    except Exception as exc:
        error = _broke(exc, sdk, errors)
        if error is exc:
            raise
        raise error from exc
    finally:
        await events.close()
    yield _whole(fold, began)


def _whole(fold: Fold, began: bool) -> Message:
    """The reply ``fold`` made of a stream that ended: ``ended_early``'s error if it is not in."""
    last = fold.missing()
    if last is not None:
        raise ended_early(last, began)
    return fold.reply()


def _broke(exc: Exception, sdk: ModuleType | None, errors: Errors | None) -> Exception:
    """What a broken stream raises: ``errors``' mark and error, if given, else ``broke_off``'s."""
    if errors is None:
        assert sdk is not None, "an adapter's fold reads its SDK's errors, or marks them itself"
        return broke_off(exc, sdk)
    return errors(exc) or exc


def broke_off(exc: Exception, sdk: ModuleType) -> Exception:
    """What a stream that broke mid-reply raises: ``exc``, marked as it would be at the call.

    A lost connection or a timeout is marked passing, as before the stream
    began, so that the Loop's retry policy asks again; so is an error event
    of a passing type, which Anthropic's SDK raises as an ``APIStatusError``
    (``classify``). OpenAI's SDK raises an error event as a bare ``APIError``
    of its own: that becomes ``error_event``'s ``IncompleteReply``, as the
    Responses API's own ``error`` events do.
    """
    if type(exc) is sdk.APIError:
        body = getattr(exc, "body", None)
        error = body.get("error", body) if isinstance(body, dict) else None
        if isinstance(error, dict):
            return error_event(error.get("code") or error.get("type"), error.get("message"))
        return error_event(getattr(exc, "code", None), getattr(exc, "message", str(exc)))
    classify(exc, sdk)
    return exc


def error_event(kind: object, message: object) -> IncompleteReply:
    """The ``IncompleteReply`` of an error event mid-stream, marked when its type may pass."""
    said = f"{kind}: {message}" if kind else f"{message}"
    error = IncompleteReply(f"the stream broke off with an error event: {said}")
    passing = stream_error_kind(kind)
    if passing is not None:
        mark(error, passing)
    return error


def ended_early(last: str, began: bool) -> IncompleteReply:
    """The stream ended before the event that ends the reply (``last``).

    One that ``began`` (some event came) and ended early lost its connection:
    marked so, for the retry policy, which asks for the whole reply again.
    One that brought no event at all was never a stream of the reply: not
    marked, as it would only come again.
    """
    error = IncompleteReply(f"the stream ended before the reply did (no {last})")
    if began:
        mark(error, "connection")
    return error


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
    request: Callable[[GivenHistory, dict[str, Any]], dict[str, Any]],
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
    open_stream: Callable[[Any], Any] = (  # make_model's parse: here, the stream opened
        functools.partial(AsyncReplyStream, convert=aconvert)
        if inspect.iscoroutinefunction(inspect.unwrap(create))
        else functools.partial(ReplyStream, convert=convert)
    )
    made: StreamModel | AsyncStreamModel = make_model(  # type: ignore[assignment]
        create,
        request,
        open_stream,
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


#: The streaming model callback for a sync client: deltas, then the whole reply.
StreamModel = ModelCallback[ReplyStream]
#: The streaming model callback for an async client: ``StreamModel``, awaited.
AsyncStreamModel = ModelCallback[Coroutine[Any, Any, AsyncReplyStream]]
