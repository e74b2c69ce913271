"""Streaming models: how the drivers read a stream (its items are in ``deltas.py``).

A model may answer with a *stream* instead of a reply: an iterator (or an
async iterator) that yields deltas as they arrive and then the whole reply, a
``dict``, last. The engine sees only that whole reply, exactly as if the model
had returned it. A stream that ends, or breaks, before its whole reply is a
failed model call, never half a reply.

The drivers call ``pull`` (the synchronous driver) or ``apull`` (asyncio) at
the one place they ask the model. Both close the stream as soon as they stop
reading it: once the engine has taken its reply (so that nothing the stream
runs at its close can change the reply), on an error, a cancel, a timeout,
an interrupt. Under the synchronous driver the run's ``CancelToken`` and
``model_timeout`` are read between chunks (a chunk cannot be interrupted
mid-read there); an adapter's stream reads them between the provider's
events too (``between_chunks``), those that carry no delta included. Under
asyncio the awaited chunk itself is interrupted.

A stream that fails after its deltas were handed on is followed by a
``Discard`` (the drivers', never a stream's): what those deltas began never
enters the history, and a retry streams its reply afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agentloop._drivers.callbacks import TokenCancelled, unless_cancelled
from agentloop._drivers.deltas import Partial, check_item
from agentloop._errors import IncompleteReply

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable, Generator, Iterator
    from contextlib import AbstractContextManager

    from agentloop._core.values import CancelToken
    from agentloop._drivers.deltas import Delta

__all__ = [
    "apull",
    "between_chunks",
    "current_while_aread",
    "current_while_read",
    "in_time",
    "is_stream",
    "pull",
    "whole_reply",
]

_T = TypeVar("_T")
#: What ``next`` answers at a synchronous stream's end.
_END: Final = object()
_CANCELLED: Final = "cancelled by the run's CancelToken while the reply streamed"


def is_stream(answer: object) -> bool:
    """Whether a model's answer is a stream (an iterator or async iterator), not a reply."""
    kind = type(answer)
    return hasattr(kind, "__next__") or hasattr(kind, "__anext__")


#: What ``between_chunks`` reads: set by ``pull``/``apull`` while a synchronous stream's
#: own code runs (its ``next``), so that a stream reading many events per delta reads it too.
_BETWEEN: ContextVar[Callable[[], None] | None] = ContextVar("agentloop_between", default=None)


def between_chunks() -> None:
    """Read the run's token and ``model_timeout``, as the driver does between chunks.

    For a stream that reads several events of its own per delta (a provider
    adapter's, whose reasoning and lifecycle events carry none): called for
    each, it raises ``TokenCancelled`` (or ``TimeoutError``) there, so that a
    cancel is seen at the next event rather than at the next delta. Outside
    a run's read of a stream it does nothing.
    """
    check = _BETWEEN.get()
    if check is not None:
        check()


def _watch(
    cancelled: Callable[[], bool] | None, deadline: float | None, expired: str
) -> Callable[[], None] | None:
    """What is read between chunks: the token, then the deadline (``None``: neither is set)."""
    if cancelled is None and deadline is None:
        return None

    def watch() -> None:
        if cancelled is not None and cancelled():
            raise TokenCancelled(_CANCELLED)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(expired)

    return watch


def _next(stream: Any, watch: Callable[[], None] | None) -> object:
    """The next item of a synchronous ``stream`` (``_END`` at its end), read under ``watch``.

    ``between_chunks`` reads ``watch`` while the stream's own code runs.
    """
    if watch is None:
        return next(stream, _END)
    reset = _BETWEEN.set(watch)
    try:
        return next(stream, _END)
    finally:
        _BETWEEN.reset(reset)


def _ended(partial: Partial) -> IncompleteReply:
    said = f" ({len(partial.text or '')} characters of text had arrived)"
    return IncompleteReply(f"the stream ended before the whole reply arrived{said}")


def pull(
    stream: Any,
    partial: Partial,
    *,
    cancel: CancelToken | None = None,
    seconds: float | None = None,
    since: float | None = None,
    awaiter: Callable[..., Any] | None = None,
) -> Generator[object, None, None]:
    """Yield ``stream``'s deltas, then its whole reply; close it once stopped, whatever stopped it.

    For the synchronous driver. The token is read before and after each
    chunk (``TokenCancelled``), and by the stream's own code between its
    events (``between_chunks``); ``seconds`` bounds the whole reply, from
    ``since`` (when the model was asked, by ``time.monotonic()``; now if not
    given), read there too. An async iterator is read a chunk at a time on
    the run's event loop (``awaiter``), where the token and the deadline
    interrupt the awaited chunk itself.
    """
    deadline = _deadline(seconds, since)
    expired = f"no whole reply within model_timeout={seconds} s"
    watch = _watch(None if cancel is None else cancel.check(), deadline, expired)
    try:
        source: Iterator[object] = (
            _chunks(stream, awaiter, deadline, expired)
            if hasattr(type(stream), "__anext__")
            else stream
        )
        while True:
            if watch is not None:
                watch()  # before each read: a stream is not resumed once the token is seen
            item = next(source, _END) if watch is None else _next(source, watch)
            if item is _END:
                raise _ended(partial)
            if watch is not None:
                watch()  # and after it: a chunk read after the cancel is not handed on
            yield check_item(item, partial)
            if type(item) is dict:
                return
    finally:
        _close(stream, awaiter)


def _deadline(seconds: float | None, since: float | None) -> float | None:
    """When a reply asked for at ``since`` (now, if not given) is past ``seconds``."""
    if seconds is None:
        return None
    return (time.monotonic() if since is None else since) + seconds


def in_time(reply: object, seconds: float | None, since: float | None) -> object:
    """``reply``, answered in place by a model asked at ``since``, if within ``seconds``.

    A plain model's call cannot be interrupted: its deadline is read when it
    answers, as a stream's is read between chunks. A reply past it raises
    ``TimeoutError``, carrying the ``usage`` the reply reported (a late
    reply's cost is still recorded); a stream is handed on, and its first
    read finds the deadline passed.
    """
    if seconds is None or since is None or time.monotonic() <= since + seconds:
        return reply
    if type(reply) is not dict and is_stream(reply):
        return reply
    late = TimeoutError(f"no reply within model_timeout={seconds} s")
    if type(reply) is dict:
        late.usage = reply.get("usage")  # type: ignore[attr-defined]  # read as IncompleteReply's
    raise late


def whole_reply(stream: Any, take: Callable[[object], _T]) -> _T:
    """``take(reply)`` of the whole reply at the end of a synchronous ``stream``, deltas dropped.

    For a host that records replies alone (a DBOS step). The reply is taken
    (copied, as the record keeps it) before the stream is closed: nothing
    the stream runs at its close can change what is recorded.
    """
    items = pull(stream, Partial())
    try:
        for item in items:
            if type(item) is dict:
                return take(item)
    finally:
        items.close()
    raise AssertionError("unreachable: pull ends with the reply or raises")


def _chunks(
    stream: Any, awaiter: Callable[..., Any] | None, deadline: float | None, expired: str
) -> Iterator[object]:
    """An async iterator's items, each awaited on the run's event loop."""
    if awaiter is None:
        raise TypeError("expected a synchronous stream here, got an async iterator")
    step = _anext_of(stream)
    while True:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            yield awaiter(step(), left, expired)
        except StopAsyncIteration:
            return


def _anext_of(stream: Any) -> Callable[[], Any]:
    """The ``__anext__`` of what ``async for`` would iterate (``__aiter__``'s answer)."""
    aiter = getattr(stream, "__aiter__", None)
    return (stream if aiter is None else aiter()).__anext__  # type: ignore[no-any-return]


def _close(stream: Any, awaiter: Callable[..., Any] | None) -> None:
    """Close ``stream`` now (its HTTP response with it); a failure to close masks nothing."""
    with contextlib.suppress(Exception):
        aclose = getattr(stream, "aclose", None)
        if aclose is not None and awaiter is not None:
            awaiter(aclose(), cancellable=False)
        else:
            close = getattr(stream, "close", None)
            if close is not None:
                close()


async def apull(
    stream: Any,
    partial: Partial,
    *,
    cancel: CancelToken | None = None,
    check: Callable[[], bool] | None = None,
    seconds: float | None = None,
    since: float | None = None,
    to_thread: bool = False,
) -> AsyncGenerator[object, None]:
    """``pull`` under asyncio: yield the deltas, then the whole reply; close the stream after.

    A cancelled task, the token (``cancel``, when given: each awaited chunk
    is interrupted by it) or the deadline stop it. A synchronous stream is
    read in place, or a chunk at a time in a worker thread (``to_thread``).
    """
    deadline = _deadline(seconds, since)
    expired = f"no whole reply within model_timeout={seconds} s"
    wrapped = cancel is not None or deadline is not None
    # ``cancel`` interrupts an awaited chunk; the caller that awaits the whole stream
    # under its own token (``AsyncRun``'s step) passes ``check`` alone, read between chunks.
    try:
        if hasattr(type(stream), "__anext__") and not wrapped:
            async for item in stream:  # the common case: nothing to wrap each chunk in
                yield check_item(item, partial)
                if type(item) is dict:
                    return
                if check is not None and check():  # a stream is not resumed once it is seen
                    raise TokenCancelled(_CANCELLED)
        elif hasattr(type(stream), "__anext__"):
            step = _anext_of(stream)
            while True:
                # Read here too: a chunk that comes without the stream suspending gives the
                # event loop's timer no turn, so the awaited deadline alone would never fire.
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(expired)
                try:
                    item = await _chunk(step(), cancel, deadline, expired)
                except StopAsyncIteration:
                    break
                yield check_item(item, partial)
                if type(item) is dict:
                    return
        else:
            watch = _watch(check or (None if cancel is None else cancel.check()), deadline, expired)
            while True:
                if watch is not None:
                    watch()
                if to_thread:  # the worker thread runs in a copy of this context: watched too
                    item = await _chunk(
                        asyncio.to_thread(_next, stream, watch), cancel, deadline, expired
                    )
                else:
                    # In place: it blocks the loop, as a plain model does.
                    item = next(stream, _END) if watch is None else _next(stream, watch)
                if item is _END:
                    break
                if watch is not None:
                    watch()
                yield check_item(item, partial)
                if type(item) is dict:
                    return
        raise _ended(partial)
    finally:
        await _aclose(stream, to_thread)


async def _chunk(
    awaitable: Any, cancel: CancelToken | None, deadline: float | None, expired: str
) -> object:
    """One awaited chunk, within what is left of the deadline, unless the token cancels it."""
    left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    return await unless_cancelled(cancel, awaitable, left, expired)


async def _aclose(stream: Any, to_thread: bool) -> None:
    """Close ``stream`` now; a failure to close masks nothing."""
    with contextlib.suppress(Exception):
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
            return
        close = getattr(stream, "close", None)
        if close is not None:
            if to_thread:
                await asyncio.to_thread(close)
            else:
                close()


def current_while_read(
    reading: Generator[Delta, None, _T], scope: AbstractContextManager[object]
) -> Generator[Delta, None, _T]:
    """``yield from reading``, with ``scope`` entered around each pull and left at each yield.

    A stream's reading runs inside the request's scope (its span is current
    while the model's stream is read), and the caller's code between two
    deltas runs outside it: a context entered across a ``yield`` would be
    current in the caller's frame. What is thrown in at a yield is thrown
    into ``reading``, inside the scope, as ``yield from`` would.
    """
    thrown: BaseException | None = None
    while True:
        with scope:
            try:
                delta = next(reading) if thrown is None else reading.throw(thrown)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
        thrown = None
        try:
            yield delta
        except GeneratorExit:
            with scope:
                reading.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - thrown into the reading, as yield from does
            thrown = exc


async def current_while_aread(
    reading: AsyncGenerator[Delta, None], scope: AbstractContextManager[object]
) -> AsyncGenerator[Delta, None]:
    """``reading``, with ``scope`` entered around each pull and left before each yield.

    ``current_while_read`` under asyncio: the model's span is
    current while its stream is read, never in the caller's code between
    two deltas.
    """
    while True:
        with scope:
            try:
                delta = await reading.__anext__()
            except StopAsyncIteration:
                return
        yield delta
