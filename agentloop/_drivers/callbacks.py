"""What drivers call: the model, the dispatcher and listeners, as types, and how they await.

A model is given a fresh copy of the history and answers with a reply; a
model that takes a keyword parameter ``tools`` is also given the tool specs
of the ``Loop``'s registry, fresh with each request (``bind_model``). A
dispatcher turns one accepted call into an outcome
``{'status': ..., 'content': ...}`` (optionally ``'exception'``, the exception
behind an ``error``, kept on the transition event and never in the history);
it may also offer ``async adispatch(call, *, to_thread)``, which the asyncio
driver prefers. A listener is called with each transition as it happens.

Both drivers await an async model or tool the same way: within its timeout
(``within``) and unless the run's token cancels it (``unless_cancelled``).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, runtime_checkable

from agentloop._core.values import Transition, Usage

if TYPE_CHECKING:
    from agentloop._core.engine import Engine
    from agentloop._core.requests import AskModel
    from agentloop._core.values import CancelToken, RunResult

__all__ = [
    "CapturedInterrupt",
    "Dispatcher",
    "Listener",
    "Model",
    "TokenCancelled",
    "bind_model",
    "capture_interrupt",
    "cut_usage",
    "ended_by_token",
    "given_history",
    "is_async",
    "takes_keyword",
    "takes_tools",
    "unless_cancelled",
    "within",
]

#: A model: given a copy of the history, return (or, ``async``, await) a reply.
Model = Callable[[list[dict[str, Any]]], object]

#: A listener: called (or, under asyncio, possibly awaited) with each transition.
Listener = Callable[[Transition], object | Awaitable[object]]

_T = TypeVar("_T")

# The kinds of parameter ``tools=`` can be passed to by keyword.
_BY_KEYWORD: Final = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@runtime_checkable
class Dispatcher(Protocol):
    """Anything that can run a call: ``dispatch(call) -> {'status', 'content'}``.

    ``status`` is one of ``ok``, ``error``, ``denied``, ``invalid_arguments``,
    ``unknown_tool``; ``content`` is JSON. Anything else (or a raise) gives
    the call an ``error`` result, and the loop goes on. An optional
    ``async adispatch(call, *, to_thread: bool)`` is preferred by the asyncio
    driver; ``to_thread`` passes on ``Loop(to_thread=...)``. An optional
    ``specs()`` lists its tools as ``{'name', 'description', 'parameters'}``
    for a model that takes ``tools``.
    """

    def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
        """Run ``call`` (a fresh copy) and return its outcome."""
        ...


def is_async(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine (an ``async def`` function or ``__call__``)."""
    if inspect.iscoroutinefunction(fn):
        return True
    try:
        call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object's own __call__
    except Exception:  # noqa: BLE001 - a broken __getattr__ is not async
        return False
    return inspect.iscoroutinefunction(call)


def takes_tools(model: object) -> bool:
    """Whether ``model`` has a parameter ``tools`` that a keyword argument reaches.

    By name only: a ``**kwargs`` model is called with the history alone, as before.
    """
    try:
        parameter = inspect.signature(model).parameters.get("tools")  # type: ignore[arg-type]
    except (TypeError, ValueError):  # no signature to read (some builtins)
        return False
    return parameter is not None and parameter.kind in _BY_KEYWORD


#: A model that reads the record (``AskModel.messages``): the built-in adapters, which never
#: change what they read, so they need no fresh copy of the history each step.
READS_RECORD: Final = "agentloop_reads_record"


def reads_record(model: object) -> bool:
    """Whether ``model`` is given the record itself (``agentloop_reads_record``), not a copy."""
    return getattr(model, READS_RECORD, False) is True


def given_history(model: object, need: AskModel) -> Any:  # the Model type names a list
    """What ``model`` is given for ``need``: the record, read only, or a fresh copy of it."""
    return need.messages if reads_record(model) else need.history


def bind_model(
    model: Model,
    specs: Callable[[], list[dict[str, Any]]],
    output: dict[str, Any] | None = None,
    *,
    wraps_up: bool = False,
) -> Model:
    """The model as the drivers call it: with the history alone, or with a request's options.

    A model that takes ``tools`` (``takes_tools``, asked once, here) is called
    ``model(history, tools=specs())``: the specs made afresh for every
    request, so a tool added to the registry later is offered too. One that
    takes ``output`` is given ``output`` (``{'name', 'schema'}``: the JSON
    Schema its final answer's text must match, ``Loop(output=T)``). With
    ``wraps_up`` (``on_exhausted='answer'``) the drivers may call it
    ``bound(history, tool_choice='none')`` in the wrap-up step: passed on to a
    model that takes ``tool_choice``, dropped for one that does not. Any other
    model is returned as it is. An ``async def`` model stays one, so that
    ``to_thread`` still tells the two apart, and a model that reads the record
    (``reads_record``) still does.
    """
    bound = _bound(model, specs, output, wraps_up=wraps_up)
    if bound is not model and reads_record(model):
        setattr(bound, READS_RECORD, True)
    return bound


def _bound(
    model: Model,
    specs: Callable[[], list[dict[str, Any]]],
    output: dict[str, Any] | None,
    *,
    wraps_up: bool,
) -> Model:
    fixed: dict[str, Any] = {}
    if output is not None and takes_keyword(model, "output"):
        fixed["output"] = output
    tools, choice = takes_tools(model), takes_keyword(model, "tool_choice")
    if not (tools or fixed or wraps_up):
        return model
    call: Callable[..., Any] = model
    if not (fixed or wraps_up):  # the tools alone, the common case: no dicts to merge
        if is_async(model):

            async def atools(history: list[dict[str, Any]]) -> object:
                return await call(history, tools=specs())

            return atools

        def with_tools(history: list[dict[str, Any]]) -> object:
            return call(history, tools=specs())

        return with_tools

    def keywords(options: dict[str, Any]) -> dict[str, Any]:
        given = {**fixed, **options} if choice else fixed
        return {"tools": specs(), **given} if tools else given

    if is_async(model):

        async def abound(history: list[dict[str, Any]], **options: Any) -> object:
            return await call(history, **keywords(options))

        return abound

    def bound(history: list[dict[str, Any]], **options: Any) -> object:
        return call(history, **keywords(options))

    return bound


def takes_keyword(model: object, name: str) -> bool:
    """Whether ``model`` has a parameter ``name`` that a keyword argument reaches (by name)."""
    try:
        parameter = inspect.signature(model).parameters.get(name)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # no signature to read (some builtins)
        return False
    return parameter is not None and parameter.kind in _BY_KEYWORD


async def within(seconds: float | None, expired: str, awaitable: Awaitable[_T]) -> _T:
    """Await, within ``seconds`` if set; our own deadline raises ``TimeoutError(expired)``.

    A ``TimeoutError`` the awaited code raises itself passes through unchanged.
    No ``Timeout`` object is made when none is set: it is most of the driver's own cost.
    """
    if seconds is None:
        return await awaitable
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            return await awaitable
    except TimeoutError:
        if deadline.expired():
            raise TimeoutError(expired) from None
        raise


class TokenCancelled(asyncio.CancelledError):
    """The run's ``CancelToken`` interrupted an awaited model or tool (the task goes on)."""

    #: What a streaming reply had delivered when the token cut it off (the driver sets it).
    partial_text: str | None = None
    #: What the child runs of the calls it cut spent (``cut_usage`` sets it).
    usage: dict[str, int] | None = None


async def unless_cancelled(
    token: CancelToken | None,
    awaitable: Awaitable[_T],
    seconds: float | None = None,
    expired: str = "",
) -> _T:
    """Await, but raise ``TokenCancelled`` as soon as ``token`` is cancelled, from any thread.

    Within ``seconds``, when given (``within``). A token cancelled already is
    read before ``awaitable`` starts: a model or tool whose turn comes after
    the cancel never begins (a coroutine is closed unstarted).
    """
    if token is not None and token.cancelled:
        getattr(awaitable, "close", lambda: None)()  # never awaited: say so, without a warning
        raise TokenCancelled("cancelled by the run's CancelToken")
    if seconds is not None:
        awaitable = within(seconds, expired, awaitable)
    if token is None:
        return await awaitable
    task = asyncio.current_task()
    assert task is not None, "awaited in a task"
    loop = asyncio.get_running_loop()
    awaiting, hit = True, False

    def cancel_if_awaiting() -> None:  # runs in the loop's thread
        nonlocal hit
        if awaiting and not hit:
            hit = True
            task.cancel()

    undo = token.on_cancel(lambda: loop.call_soon_threadsafe(cancel_if_awaiting))
    try:
        return await awaitable
    except asyncio.CancelledError:
        # Ours only if nobody else cancelled the task too: then the task goes on.
        if hit and task.uncancel() == 0:
            raise TokenCancelled("cancelled by the run's CancelToken") from None
        raise
    finally:
        awaiting = False
        undo()


def ended_by_token(
    engine: Engine, exc: TokenCancelled, children: Mapping[str, RunResult[Any]] | None = None
) -> Transition:
    """The run, interrupted by its token while a request was out, ends cancelled.

    What a streaming reply had delivered (``exc.partial_text``) is kept on the event, and
    what the child runs of the calls it cuts spent on its usage (``cut_usage``).
    """
    cut_usage(engine, exc, children)
    transition = engine.interrupted(exc, partial_text=exc.partial_text)
    assert transition is not None, "a request was outstanding, so the run was not over"
    return transition


def cut_usage(
    engine: Engine, exc: BaseException, children: Mapping[str, RunResult[Any]] | None
) -> None:
    """Put on ``exc`` what the child runs of the running calls it cuts spent, if anything.

    ``children``: the run's agent calls' child runs by call id, each ended by now. The
    engine reads ``exc.usage`` as the interruption's (a failed model call's is read so):
    it rolls into the run's usage, as an answered child's does.
    """
    spent = [children[c].usage for c in engine.running if c in children] if children else ()
    total = Usage(*map(sum, zip(*spent, strict=True))) if spent else Usage()
    if total != Usage():
        exc.usage = total._asdict()  # type: ignore[attr-defined]  # read from its own dict


class CapturedInterrupt:
    """A ``KeyboardInterrupt`` or ``SystemExit`` raised in a task the driver made.

    asyncio raises those out of the event loop itself, past the task that
    drives the run, which then never ends it (``run_until_complete``) or sees
    only its own ``CancelledError`` (``asyncio.run``). ``capture_interrupt`` catches it
    in the task and returns it as this value, for the driving task to raise.
    """

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def capture_interrupt(awaitable: Awaitable[_T]) -> _T | CapturedInterrupt:
    """Await ``awaitable`` in a task of its own; an interruption comes back as a value."""
    try:
        return await awaitable
    except (KeyboardInterrupt, SystemExit) as exc:
        return CapturedInterrupt(exc)
