"""Streaming models: the deltas a stream yields, and how the drivers consume a stream.

A model may answer with a *stream* instead of a reply: an iterator (or an
async iterator) that yields deltas as they arrive and then the whole reply, a
``dict``, last. The engine sees only that whole reply, exactly as if the model
had returned it; the deltas go to whoever listens (``run.stream()``, a delta
listener) and never into the history. A stream that ends, or breaks, before
its whole reply is a failed model call, never half a reply.

The drivers call ``pull`` (the synchronous driver) or ``apull`` (asyncio) at
the one place they ask the model. Both close the stream as soon as they stop
reading it: after its reply, on an error, a cancel, a timeout, an interrupt.
Under the synchronous driver the run's ``CancelToken`` is read between chunks
(a chunk cannot be interrupted mid-read there); under asyncio the awaited
chunk itself is interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any, Final

import attrs
import orjson

from agentloop._callbacks import TokenCancelled, unless_cancelled, within
from agentloop._errors import IncompleteReply

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable, Generator, Iterator

    Message = dict[str, Any]

    from agentloop._core._values import CancelToken

__all__ = [
    "DELTAS",
    "ArgumentsDelta",
    "Delta",
    "ListenerFailed",
    "Partial",
    "TextDelta",
    "ToolCallStart",
    "UsageDelta",
    "apull",
    "chunked",
    "is_stream",
    "pull",
    "whole_reply",
]


@attrs.frozen(kw_only=True)
class TextDelta:
    """A piece of the reply's text, in order. Don't subclass these."""

    #: The text that arrived (never empty from the adapters).
    text: str


@attrs.frozen(kw_only=True)
class ToolCallStart:
    """A tool call began: its ``index`` among the reply's calls, its id and tool name."""

    #: The call's place in the reply (0, 1, ...): its argument fragments name it.
    index: int
    id: str
    name: str


@attrs.frozen(kw_only=True)
class ArgumentsDelta:
    """A fragment of the arguments' JSON text of the call at ``index`` (not valid JSON alone)."""

    index: int
    text: str


@attrs.frozen(kw_only=True)
class UsageDelta:
    """The tokens the reply cost so far, as the provider reported them (not summed here)."""

    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0


#: What a stream yields before its whole reply.
Delta = TextDelta | ToolCallStart | ArgumentsDelta | UsageDelta

#: The delta types, for an exact ``type(item) in DELTAS`` check.
DELTAS: Final = frozenset({TextDelta, ToolCallStart, ArgumentsDelta, UsageDelta})


class ListenerFailed(Exception):
    """A delta listener raised: the model call it heard fails, named as the listener's doing."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(f"a delta listener raised {type(exc).__name__}: {exc}")


def is_stream(answer: object) -> bool:
    """Whether a model's answer is a stream (an iterator or async iterator), not a reply."""
    kind = type(answer)
    return hasattr(kind, "__next__") or hasattr(kind, "__anext__")


def chunked(reply: Message, size: int = 4) -> Iterator[Delta | Message]:
    """``reply`` as a stream: its deltas, then the reply itself.

    Its text and each call's arguments come in pieces of ``size`` characters,
    then its usage.
    ``ScriptedModel``-style models stream with it: ``return chunked(final("Hello"))``.
    """
    if type(size) is not int or size < 1:
        raise ValueError(f"expected size to be a positive int, got {size!r}")
    if not isinstance(reply, dict):
        raise TypeError(f"expected a reply (a dict), got {type(reply).__name__}")
    return _pieces(reply, size)


def _pieces(reply: Message, size: int) -> Iterator[Delta | Message]:
    text = reply.get("text")
    if isinstance(text, str):
        for at in range(0, len(text), size):
            yield TextDelta(text=text[at : at + size])
    calls = [reply] if reply.get("kind") == "call" else reply.get("calls") or []
    for index, call in enumerate(calls):
        if not isinstance(call, dict):
            continue
        yield ToolCallStart(index=index, id=str(call.get("id")), name=str(call.get("name")))
        arguments = call.get("arguments")
        raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        for at in range(0, len(raw), size):
            yield ArgumentsDelta(index=index, text=raw[at : at + size])
    used = reply.get("usage")
    if isinstance(used, dict):
        yield UsageDelta(
            input_tokens=used.get("input_tokens", 0),
            output_tokens=used.get("output_tokens", 0),
            cached_tokens=used.get("cached_tokens", 0),
        )
    yield reply


class Partial:
    """The text a stream has delivered so far: kept for the record if the run is cut off."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[str] = []

    @property
    def text(self) -> str | None:
        """The text so far; ``None`` when none arrived."""
        return "".join(self.parts) if self.parts else None


def _checked(item: object, partial: Partial) -> object:
    """``item`` if it is a delta or the whole reply; what a stream yields is checked here."""
    kind = type(item)
    if kind is TextDelta:
        partial.parts.append(item.text)  # type: ignore[attr-defined]
    elif kind is not dict and kind not in DELTAS:
        raise TypeError(
            "expected a stream to yield deltas (agentloop.streaming) and then the whole "
            f"reply (a dict), got {kind.__name__}"
        )
    return item


def _between(
    item: object,
    partial: Partial,
    cancelled: Callable[[], bool] | None,
    deadline: float | None,
    expired: str,
) -> object:
    """``item``, checked, once the token and the deadline, read between chunks, allow it."""
    if cancelled is not None and cancelled():
        raise TokenCancelled("cancelled by the run's CancelToken while the reply streamed")
    if deadline is not None and time.monotonic() > deadline:
        raise TimeoutError(expired)
    return _checked(item, partial)


def _ended(partial: Partial) -> IncompleteReply:
    said = f" ({len(partial.text or '')} characters of text had arrived)"
    return IncompleteReply(f"the stream ended before the whole reply arrived{said}")


def pull(
    stream: Any,
    partial: Partial,
    *,
    cancel: CancelToken | None = None,
    seconds: float | None = None,
    awaiter: Callable[..., Any] | None = None,
) -> Generator[object, None, None]:
    """Yield ``stream``'s deltas, then its whole reply; close it once stopped, whatever stopped it.

    For the synchronous driver. The token is read after each chunk
    (``TokenCancelled``); ``seconds`` bounds the whole stream, read between
    chunks too. An async iterator is read a chunk at a time on the run's
    event loop (``awaiter``), where the token and the deadline interrupt the
    awaited chunk itself.
    """
    cancelled = None if cancel is None else cancel.check()
    deadline = None if seconds is None else time.monotonic() + seconds
    expired = f"no whole reply within model_timeout={seconds} s"
    try:
        source: Iterator[object] = (
            _chunks(stream, awaiter, deadline, expired)
            if hasattr(type(stream), "__anext__")
            else stream
        )
        for item in source:
            yield _between(item, partial, cancelled, deadline, expired)
            if type(item) is dict:
                return
        raise _ended(partial)
    finally:
        _close(stream, awaiter)


def whole_reply(stream: Any) -> object:
    """The whole reply at the end of a synchronous ``stream``, its deltas read and dropped.

    For a host that records replies alone (a DBOS step); the stream is closed after.
    """
    items = pull(stream, Partial())
    try:
        for item in items:
            if type(item) is dict:
                return item
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
    to_thread: bool = False,
) -> AsyncGenerator[object, None]:
    """``pull`` under asyncio: yield the deltas, then the whole reply; close the stream after.

    A cancelled task, the token (``cancel``, when given: each awaited chunk
    is interrupted by it) or the deadline stop it. A synchronous stream is
    read in place, or a chunk at a time in a worker thread (``to_thread``).
    """
    deadline = None if seconds is None else time.monotonic() + seconds
    expired = f"no whole reply within model_timeout={seconds} s"
    wrapped = cancel is not None or deadline is not None
    # ``cancel`` interrupts an awaited chunk; the caller that awaits the whole stream
    # under its own token (``AsyncRun``'s step) passes ``check`` alone, read between chunks.
    try:
        if hasattr(type(stream), "__anext__") and not wrapped:
            async for item in stream:  # the common case: nothing to wrap each chunk in
                kind = type(item)
                if kind is TextDelta:
                    partial.parts.append(item.text)
                elif kind not in DELTAS:
                    yield _checked(item, partial)
                    if kind is dict:
                        return
                    continue
                yield item
        elif hasattr(type(stream), "__anext__"):
            step = _anext_of(stream)
            while True:
                try:
                    item = await _chunk(step(), cancel, deadline, expired)
                except StopAsyncIteration:
                    break
                yield _checked(item, partial)
                if type(item) is dict:
                    return
        else:
            cancelled = check or (None if cancel is None else cancel.check())
            while True:
                if to_thread:
                    item = await _chunk(
                        asyncio.to_thread(next, stream, _END), cancel, deadline, expired
                    )
                else:
                    item = next(stream, _END)  # in place: it blocks the loop, as a plain model does
                if item is _END:
                    break
                yield _between(item, partial, cancelled, deadline, expired)
                if type(item) is dict:
                    return
        raise _ended(partial)
    finally:
        await _aclose(stream, to_thread)


_END: Final = object()


async def _chunk(
    awaitable: Any, cancel: CancelToken | None, deadline: float | None, expired: str
) -> object:
    """One awaited chunk, within what is left of the deadline, unless the token cancels it."""
    left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
    return await unless_cancelled(cancel, within(left, expired, awaitable))


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
