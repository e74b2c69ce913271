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
model is told about it. The drivers give each call's context
(``agentloop._drivers.run_context``) a reporter that tells its progress on.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import TYPE_CHECKING, Any

import attrs

from agentloop._drivers.transition import LOG

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

__all__ = ["Reporter", "ToolProgress", "checked_report", "hear", "logged"]


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


class Reporter:
    """Where one call's progress goes: ``tell(item)``, on ``loop``'s thread when one is given.

    A handler may report from another thread (a worker thread under
    ``to_thread``): the report is then handed to the loop, whose listeners
    may be ``async``. ``last``: the progress last reported.
    """

    __slots__ = ("call_id", "home", "last", "loop", "tell")

    def __init__(
        self,
        call_id: str,
        tell: Callable[[Any], None],
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.call_id, self.tell, self.loop = call_id, tell, loop
        self.home = None if loop is None else threading.get_ident()
        self.last: float | None = None

    def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """Tell a report as it came (checked by ``checked_report``, or an MCP server's)."""
        self.hand_on(
            ToolProgress(call_id=self.call_id, progress=progress, total=total, message=message)
        )

    def hand_on(self, item: Any) -> None:
        """Tell ``item`` (a progress report, or a child run's ``Nested`` item) to the listeners."""
        if self.loop is None or threading.get_ident() == self.home:
            self.tell(item)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is listening
                self.loop.call_soon_threadsafe(self.tell, item)


def checked_report(
    reporter: Reporter | None, progress: float, total: float | None, message: str | None
) -> None:
    """A report checked (``TypeError``, ``ValueError``), then told to ``reporter``, if any."""
    _check_number("progress", progress)
    if total is not None:
        _check_number("total", total)
    if message is not None and not isinstance(message, str):
        raise TypeError(f"expected message to be a str or None, got {type(message).__name__}")
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


def hear(listener: Callable[[Any], object], item: Any) -> object:
    """``listener(item)``; if it raises, logged and None (see the module: progress is advice).

    ``item``: a ``ToolProgress``, or a child run's ``Nested`` item, which is advice too.
    """
    try:
        return listener(item)
    except Exception:  # noqa: BLE001 - a listener's fault never changes the call
        call_id = item.call_id if isinstance(item, ToolProgress) else item.path[0]
        LOG.exception("a listener raised on hearing the progress of call %r", call_id)
        return None


def logged(task: asyncio.Future[object]) -> None:
    """A done callback: an async listener's exception on hearing progress, logged."""
    if not task.cancelled() and task.exception() is not None:
        LOG.error("a listener raised on hearing progress", exc_info=task.exception())
