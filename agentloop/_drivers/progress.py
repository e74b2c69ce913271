"""``report_progress``: a running tool's progress, told to whoever follows its call.

A long tool call says nothing until it ends. A handler that can tell how far
it has come calls ``agentloop.report_progress(progress, total, message)``:

* in a run, each delta listener (``run.subscribe_deltas``) hears a
  ``ToolProgress`` naming the call, beside the run's transitions;
* in a handler that ``agentloop.mcp.serve`` runs, the MCP client that asked
  for progress gets ``notifications/progress``;
* anywhere else it does nothing.

Progress is advice, never an outcome: nothing of it enters the history or
the record, and a listener that raises on hearing it is logged and skipped,
so that a broken progress bar never changes what a call did or what the
model is told about it. The drivers set the reporter around each call
(``reporting``), as the durable driver sets the idempotency key.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, cast

import attrs

from agentloop._drivers.transition import LOG

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentloop._core.engine import Engine
    from agentloop._core.values import CancelToken, RunResult

__all__ = [
    "REPORTER",
    "Parent",
    "Reporter",
    "ToolProgress",
    "areporting",
    "report_progress",
    "reporting",
]


@attrs.frozen(kw_only=True)
class ToolProgress:
    """How far the tool call ``call_id`` has come, as its handler (or MCP server) reported it.

    ``progress`` increases with each report; ``total`` is what it counts
    towards, when known; ``message`` says what is happening. Heard by delta
    listeners beside the transitions; never in the history.
    """

    call_id: str
    progress: float
    total: float | None = None
    message: str | None = None


class Parent:
    """What an agent tool's child run (``Loop.as_tool``) takes of the run whose call it answers.

    Its token, its engine (budget and usage so far) and the dict its
    children's results go in (the run's own, which its result reads); never
    the run itself, so that a run dropped is collected at once.
    """

    __slots__ = ("cancel", "children", "engine")

    def __init__(
        self, cancel: CancelToken | None, engine: Engine, children: dict[str, RunResult[Any]]
    ) -> None:
        self.cancel, self.engine, self.children = cancel, engine, children


class Reporter:
    """Where one call's progress goes: ``tell(item)``, on ``loop``'s thread when one is given.

    A handler may report from another thread (a worker thread under
    ``to_thread``): the report is then handed to the loop, whose listeners
    may be ``async``. ``last``: the progress last reported. ``parent``: what
    an agent tool's child run takes of the run (``Parent``).
    """

    __slots__ = ("call_id", "home", "last", "loop", "parent", "tell")

    def __init__(
        self,
        call_id: str,
        tell: Callable[[Any], None],
        loop: asyncio.AbstractEventLoop | None = None,
        parent: Parent | None = None,
    ) -> None:
        self.call_id, self.tell, self.loop, self.parent = call_id, tell, loop, parent
        self.home = None if loop is None else threading.get_ident()
        self.last: float | None = None

    def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """Tell a report as it came (checked by ``report_progress``, or an MCP server's)."""
        self.hand_on(
            ToolProgress(call_id=self.call_id, progress=progress, total=total, message=message)
        )

    def hand_on(self, item: object) -> None:
        """Tell ``item`` (a progress report, or a child run's ``Nested`` item) to the listeners."""
        if self.loop is None or threading.get_ident() == self.home:
            self.tell(item)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                self.loop.call_soon_threadsafe(self.tell, item)


#: The reporter of the call whose handler runs in this context (a task or thread gets a copy).
REPORTER: Final[ContextVar[Reporter | None]] = ContextVar("agentloop_progress", default=None)


def report_progress(
    progress: float, total: float | None = None, message: str | None = None
) -> None:
    """Report how far the running tool call has come: see the module.

    ``progress`` must increase with each report of a call (MCP requires it);
    ``total``, when given, is what it counts towards; ``message`` says what is
    happening. Numbers are finite ints or floats. Outside a tool handler of a
    run or of ``agentloop.mcp.serve`` it does nothing. It never raises for a
    listener's fault (logged instead); it raises ``TypeError`` or
    ``ValueError`` for a report that is wrong.
    """
    _check_number("progress", progress)
    if total is not None:
        _check_number("total", total)
    if message is not None and not isinstance(message, str):
        raise TypeError(f"expected message to be a str or None, got {type(message).__name__}")
    reporter = REPORTER.get()
    if reporter is None:
        return
    if reporter.last is not None and not progress > reporter.last:
        raise ValueError(
            f"expected progress to increase with each report, got {progress!r} after "
            f"{reporter.last!r}"
        )
    reporter.last = progress
    reporter(progress, total, message)


def _check_number(what: str, value: object) -> None:
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise TypeError(f"expected {what} to be a finite int or float, got {value!r:.40}")


def reporting(
    dispatch: Callable[..., Any],
    listeners: list[Callable[[Any], object]],
    parent: Parent | None = None,
) -> Callable[..., Any]:
    """``dispatch`` with each call's reporter set around it: its progress goes to ``listeners``.

    It holds the run's list of listeners (and ``parent``, handed to each
    reporter), not the run: a run dropped is collected at once.
    """

    def tell(item: Any) -> None:
        for listener in listeners:
            _hear(listener, item)

    def dispatch_reporting(call: dict[str, Any], **options: object) -> Any:
        # Set inside the try, and put back by value: a Ctrl-C landing as set() returns
        # would leave no token to reset, and the reporter would outlive its call.
        previous = REPORTER.get()
        try:
            REPORTER.set(Reporter(call["id"], tell, None, parent))
            return dispatch(call, **options)
        finally:
            REPORTER.set(previous)

    return dispatch_reporting


def areporting(
    dispatch: Callable[..., Any],
    listeners: list[tuple[Callable[[Any], object], bool]],
    parent: Parent | None = None,
) -> Callable[..., Any]:
    """``reporting`` for an async ``dispatch``, whose ``listeners`` say if they are ``async``.

    The reporter is set in the call's own task, and told on the run's loop: an
    async listener hears in a task of its own, and the call's outcome is
    handed on once those tasks are done, so that no report is heard after it.
    """
    hearing: set[asyncio.Future[object]] = set()

    def tell(item: Any) -> None:
        for listener, awaited in listeners:
            heard = _hear(listener, item)
            if awaited and heard is not None:
                task = asyncio.ensure_future(cast("Awaitable[object]", heard))
                hearing.add(task)
                task.add_done_callback(hearing.discard)
                task.add_done_callback(_logged)

    async def dispatch_reporting(call: dict[str, Any], **options: object) -> Any:
        previous = REPORTER.get()  # put back by value, as in ``reporting``
        try:
            REPORTER.set(Reporter(call["id"], tell, asyncio.get_running_loop(), parent))
            outcome = await dispatch(call, **options)
        finally:
            REPORTER.set(previous)
        if hearing:
            await asyncio.wait(set(hearing))
        return outcome

    return dispatch_reporting


def _hear(listener: Callable[[Any], object], item: Any) -> object:
    """``listener(item)``; if it raises, logged and None (see the module: progress is advice).

    ``item``: a ``ToolProgress``, or a child run's ``Nested`` item, which is advice too.
    """
    try:
        return listener(item)
    except Exception:  # noqa: BLE001 - a listener's fault never changes the call
        call_id = item.call_id if isinstance(item, ToolProgress) else item.path[0]
        LOG.exception("a listener raised on hearing the progress of call %r", call_id)
        return None


def _logged(task: asyncio.Future[object]) -> None:
    """A done callback: an async listener's exception on hearing progress, logged."""
    if not task.cancelled() and task.exception() is not None:
        LOG.error("a listener raised on hearing progress", exc_info=task.exception())
