"""``ConcurrentBatch``: the asyncio driver's step that runs a batch's calls at once.

With ``max_concurrency`` > 1, ``AsyncRun`` steps a batch of more than one
call with the ``ConcurrentBatch`` it holds: calls start in emission order,
each in its own task (each passing the cancel checkpoint), and each
completion is one step, in completion order; the engine still records the
batch in emission order. Whatever ends the run early (the token, a
cancelled task) cancels every running call's task, and waits for them to
end: the token's end is recorded once they have, with what the child runs
of agent calls among them spent (``ended_by_token``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from agentloop._core.values import ReviewCalls, RunTool
from agentloop._drivers.callbacks import (
    CapturedInterrupt,
    TokenCancelled,
    capture_interrupt,
    cut_usage,
    ended_by_token,
    unless_cancelled,
)
from agentloop._drivers.child_waits import Waiting

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from agentloop._core.engine import Engine
    from agentloop._core.values import CancelToken, RunResult, Transition
    from agentloop._drivers.transition import Around

__all__ = ["ConcurrentBatch"]


class ConcurrentBatch:
    """The calls of one run's batches, up to ``limit`` at once, each in a task of its own.

    ``tasks``: the running calls, by id, in start order. It holds nothing of
    the run that holds it (a dropped run is freed at once): each ``step`` is
    handed the run's ``reviewed`` (how a batch's review is awaited) and
    ``tool`` (the dispatch of a call).
    """

    __slots__ = ("_cancel", "_children", "_engine", "_limit", "tasks")

    def __init__(
        self,
        engine: Engine,
        cancel: CancelToken | None,
        limit: int,
        children: Mapping[str, RunResult[Any]] | None = None,
    ) -> None:
        self._engine, self._cancel, self._limit = engine, cancel, limit
        self._children = children  # the run's agent calls' child runs, kept as each ends
        self.tasks: dict[str, asyncio.Task[object | CapturedInterrupt]] = {}

    async def step(
        self,
        reviewed: Callable[[ReviewCalls], Awaitable[dict[str, object]]],
        tool: Callable[[RunTool], Callable[[Any], Awaitable[object]]],
        around: Around | None = None,
    ) -> Transition:
        """Start calls up to ``max_concurrency``, then report the first to complete.

        Each call starts right after its cancel checkpoint: its task runs up to
        its first await (a plain tool, to its end) before the next call's
        checkpoint, so a call that cancels the token stops every call after it.
        Once the token is cancelled, the calls that finished are reported
        before the checkpoint that sees it: it cuts only the calls still out.
        ``around(need)`` (a tracing listener's) is entered around the review,
        and around each call inside its own task, where it is current.
        """
        engine, tasks, cancel = self._engine, self.tasks, self._cancel
        while engine.unstarted and len(tasks) < self._limit:
            if any(_interrupted(task) for task in tasks.values()):
                break  # no call starts after an interruption: it is raised below
            if cancel is not None and cancel.cancelled and tasks:
                if any(task.done() for task in tasks.values()):
                    break  # reported first, each its own step; the checkpoint after them cuts
                running = list(tasks)
                await self._dropped(self.drop())  # each child run ends first, kept by call id
                if set(running) & set(self._children or ()):  # and what it spent counts
                    return ended_by_token(engine, TokenCancelled(_CANCELLED), self._children)
            need = engine.next()  # the cancel checkpoint before each call
            if type(need) is ReviewCalls:  # before the batch's first call, as the pump reviews it
                if around is None:
                    answers = await reviewed(need)
                else:
                    with around(need):
                        answers = await reviewed(need)
                asked = engine.reviewed(answers)
                if asked is not None:
                    return asked
                continue
            if type(need) is not RunTool:
                # Cancelled: the running calls were answered cancelled; their tasks end first.
                await self._dropped(self.drop())
                return need  # type: ignore[return-value]  # neither request: a transition
            task = asyncio.ensure_future(capture_interrupt(self._started(need, tool, around)))
            task.add_done_callback(_observed)
            tasks[need.call["id"]] = task
            await asyncio.sleep(0)  # the call starts now, before the next one's checkpoint
        waiting = asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
        try:
            if self._cancel is None:
                await waiting
            else:
                await unless_cancelled(self._cancel, waiting)
        except TokenCancelled as exc:
            # A call that finished before the token woke us is reported, not cut off:
            # the next checkpoint sees the token and answers the rest.
            if not any(task.done() and not task.cancelled() for task in tasks.values()):
                return await self._cut(exc)
        done = [call_id for call_id, task in tasks.items() if task.done()]
        for call_id in done:  # an interruption in a call's task ends the run, raised here
            task = tasks[call_id]
            if not task.cancelled() and task.exception() is None:
                result = task.result()
                if type(result) is CapturedInterrupt:
                    del tasks[call_id]
                    raise result.exc
        # Of the calls done by now, the first in emission order is reported first.
        call_id = done[0]
        task = tasks[call_id]
        if _unstarted(task):
            # Its task found the token cancelled before the call began: so will every later
            # one. The run ends; the calls still out are answered cancelled, and told they
            # never began when none of them had.
            began = not all(_unstarted(other) for other in tasks.values())
            said = _CANCELLED if began else _CANCELLED_FIRST
            return await self._cut(TokenCancelled(said))
        cut = None if task.cancelled() or task.exception() else task.result()
        if type(cut) is _Cut:  # the token cut the call inside (an agent tool's child, cancelled)
            return await self._cut(cut.exc)
        del tasks[call_id]
        if task.cancelled():  # the tool cancelled itself: an interruption, as when awaited
            raise asyncio.CancelledError(f"the tool of call {call_id!r} was cancelled")
        error = task.exception()
        if error is None:
            outcome = task.result()
            if type(outcome) is Waiting:  # an agent tool's child run waits for a person
                return engine.call_waits(outcome.pending, call_id)
            return engine.returned(outcome, call_id)
        if isinstance(error, Exception):
            return engine.raised(error, call_id)
        raise error  # KeyboardInterrupt and the like end the run

    async def _started(
        self,
        need: RunTool,
        tool: Callable[[RunTool], Callable[[Any], Awaitable[object]]],
        around: Around | None,
    ) -> object:
        """A call of the batch, in its task: not begun once the token is cancelled.

        The token is read here, right before the dispatch (and so the handler)
        starts, for a call handed out while an earlier one was still running.
        ``around(need)`` is entered here, in the call's own task.
        """
        cancel = self._cancel
        if cancel is not None and cancel.cancelled:
            return _UNSTARTED
        try:
            if around is None:
                return await tool(need)(need.call)
            with around(need):
                return await tool(need)(need.call)
        except TokenCancelled as exc:
            # A CancelledError: raised out of the task, it would read as the task cancelled.
            return _Cut(exc)

    async def _cut(self, exc: TokenCancelled) -> Transition:
        """The token ends the run: the running calls' tasks end first, then the run.

        Each agent call's child run ends with its task (kept by call id), so its end is
        committed before its parent's, and what it spent counts in the parent's usage.
        """
        await self._dropped(self.drop())
        return ended_by_token(self._engine, exc, self._children)

    async def interrupted(self, exc: BaseException) -> None:
        """The run's task was cancelled (``exc``) while calls ran: their tasks end first.

        As a task group's do, each agent call's child run with its own (``cut_usage``).
        Ctrl-C and the like wait for none: the process is going down.
        """
        if isinstance(exc, asyncio.CancelledError) and self.tasks:
            await asyncio.wait(self.drop())  # what raised in them is dropped: exc goes on
            cut_usage(self._engine, exc, self._children)

    def drop(self) -> list[asyncio.Task[object]]:
        """Cancel every running call's task: the engine has answered them ``cancelled``."""
        dropped = list(self.tasks.values())
        for task in dropped:
            task.cancel()
        self.tasks.clear()
        return dropped

    @staticmethod
    async def _dropped(tasks: list[asyncio.Task[object]]) -> None:
        """Wait for cancelled calls to end, as a task group does: no tool outlives its run.

        An interruption in one (a ``BaseException`` of its own) is raised here, as a
        reported call's is: the run does not end as if nothing had come.
        """
        if tasks:
            await asyncio.wait(tasks)
        for task in tasks:
            error = None if task.cancelled() else task.exception()
            if _interrupted(task):
                raise task.result().exc  # type: ignore[attr-defined]  # a CapturedInterrupt
            if error is not None and not isinstance(error, (Exception, asyncio.CancelledError)):
                raise error


class _Cut:
    """What a call's task answers when the token cut its call (``TokenCancelled`` inside)."""

    __slots__ = ("exc",)

    def __init__(self, exc: TokenCancelled) -> None:
        self.exc = exc


#: What a call's task answers when it found the token cancelled before its call began.
_UNSTARTED: Final = object()
_CANCELLED: Final = "cancelled by the run's CancelToken"
_CANCELLED_FIRST: Final = f"{_CANCELLED} before the call began"


def _unstarted(task: asyncio.Task[Any]) -> bool:
    """Whether ``task`` ended with its call not begun (the token was cancelled first)."""
    return (
        task.done()
        and not task.cancelled()
        and task.exception() is None
        and task.result() is _UNSTARTED
    )


def _observed(task: asyncio.Task[Any]) -> None:
    """Retrieve a dropped task's exception, so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _interrupted(task: asyncio.Task[object | CapturedInterrupt]) -> bool:
    """Whether ``task`` ended with an interruption (a ``BaseException`` it captured)."""
    return (
        task.done()
        and not task.cancelled()
        and task.exception() is None
        and type(task.result()) is CapturedInterrupt
    )
