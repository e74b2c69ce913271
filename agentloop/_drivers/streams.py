"""Streaming models: the deltas a stream yields, and how the drivers consume a stream.

A model may answer with a *stream* instead of a reply: an iterator (or an
async iterator) that yields deltas as they arrive and then the whole reply, a
``dict``, last. The engine sees only that whole reply, exactly as if the model
had returned it; the deltas go to whoever listens (``run.stream()``, a delta
listener) and never into the history. A stream that ends, or breaks, before
its whole reply is a failed model call, never half a reply.

Each item is checked as it enters (``_checked``): a delta whose fields are
not what its type says (a ``TextDelta`` whose text is ``None``, or holds a
lone surrogate the record could not encode) fails the model call there,
naming the field, before any listener hears it or any text is kept.

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

import attrs
import orjson

from agentloop._core.json import describe, intake
from agentloop._core.values import MAX_BUDGET
from agentloop._drivers.callbacks import TokenCancelled, unless_cancelled
from agentloop._errors import IncompleteReply

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Callable, Generator, Iterator

    Message = dict[str, Any]

    from agentloop._core.values import CancelToken

__all__ = [
    "DELTAS",
    "ArgumentsDelta",
    "Delta",
    "Discard",
    "ListenerFailed",
    "Partial",
    "TextDelta",
    "ToolCallStart",
    "UsageDelta",
    "apull",
    "between_chunks",
    "chunked",
    "in_time",
    "is_stream",
    "pull",
    "whole_reply",
]

_T = TypeVar("_T")
#: What ``next`` answers at a synchronous stream's end.
_END: Final = object()
_CANCELLED: Final = "cancelled by the run's CancelToken while the reply streamed"


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


@attrs.frozen(kw_only=True)
class Discard:
    """The deltas handed on since the last transition are void: their stream failed.

    The drivers' own item, never a stream's: a streamed model call that fails
    after it delivered deltas is followed by one ``Discard``, then by its
    ``model_raised`` transition. The reply those deltas began never enters
    the history; a retry (or the next fallback model) streams its reply
    afresh, so a consumer drops the text it had shown.
    """

    #: What failed, as the event's ``error`` names it (``Type: message``).
    error: str


#: What a run hands on beside its transitions: a stream's deltas, and a ``Discard``.
Delta = TextDelta | ToolCallStart | ArgumentsDelta | UsageDelta | Discard

#: The types a stream may yield before its whole reply, for an exact ``type(item) in DELTAS``.
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
    """``item`` if it is a delta or the whole reply, its fields as its type says; else a raise.

    What a stream yields enters the run here: a delta's text goes through the
    record's own codec (a ``TextDelta`` the run keeps as ``partial_text``),
    its counts within the record's limits, before any listener hears it.
    """
    kind = type(item)
    if kind is TextDelta:
        text = item.text  # type: ignore[attr-defined]
        if type(text) is not str or not text.isascii():
            _text("TextDelta", "text", text)
        partial.parts.append(text)
    elif kind is dict:
        pass
    elif kind is ArgumentsDelta:
        _index("ArgumentsDelta", item.index)  # type: ignore[attr-defined]
        _text("ArgumentsDelta", "text", item.text)  # type: ignore[attr-defined]
    elif kind is ToolCallStart:
        _index("ToolCallStart", item.index)  # type: ignore[attr-defined]
        _text("ToolCallStart", "id", item.id)  # type: ignore[attr-defined]
        _text("ToolCallStart", "name", item.name)  # type: ignore[attr-defined]
    elif kind is UsageDelta:
        _usage(item)  # type: ignore[arg-type]
    else:
        raise TypeError(
            "expected a stream to yield deltas (agentloop.streaming) and then the whole "
            f"reply (a dict), got {kind.__name__}"
        )
    return item


def _text(kind: str, field: str, value: object) -> None:
    """Refuse a delta's text that is not a str the record can encode."""
    if type(value) is not str:
        raise TypeError(f"expected a stream's {kind}.{field} to be a str, got {describe(value)}")
    intake(value, f"a stream's {kind}.{field}")  # a lone surrogate: a JSONError saying where


def _index(kind: str, value: object) -> None:
    if type(value) is not int or not 0 <= value <= MAX_BUDGET:
        raise TypeError(
            f"expected a stream's {kind}.index to be an int of 0 or more, got {describe(value)}"
        )


def _usage(delta: UsageDelta) -> None:
    """Refuse counts the record could not keep (as a reply's ``usage`` is checked)."""
    counts = (delta.input_tokens, delta.output_tokens, delta.cached_tokens)
    for name, value in zip(("input_tokens", "output_tokens", "cached_tokens"), counts, strict=True):
        if type(value) is not int or not 0 <= value <= MAX_BUDGET:
            raise TypeError(
                f"expected a stream's UsageDelta.{name} to be an int from 0 to 2**63 - 1, "
                f"got {describe(value)}"
            )
    if delta.cached_tokens > delta.input_tokens:
        raise ValueError(
            "expected a stream's UsageDelta.cached_tokens to be at most its input_tokens "
            f"(cached tokens are input tokens), got {delta.cached_tokens} of "
            f"{delta.input_tokens}"
        )


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
            yield _checked(item, partial)
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
                yield _checked(item, partial)
                if type(item) is dict:
                    return
                if check is not None and check():  # a stream is not resumed once it is seen
                    raise TokenCancelled(_CANCELLED)
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
                yield _checked(item, partial)
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
