"""``AsyncRun``, the asyncio driver: the same protocol over the same engine, with awaits.

``astep()`` is ``Run.step()`` with awaits, so every rule of the contract
holds word for word. What only asyncio has:

* A plain (non-``async``) model or tool is called directly on the event loop:
  it blocks the loop while it runs. ``Loop(..., to_thread=True)`` runs plain
  callables in a worker thread instead (``asyncio.to_thread``).
* Cancelling the task that awaits ``astep()`` ends the run ``cancelled`` and
  lets ``CancelledError`` propagate; ``token.cancel()`` interrupts an awaited
  model or tool the same way, without cancelling the task. While the model is
  awaited, the step counts and nothing is appended; while a tool is awaited,
  its coroutine is cancelled too and the call is recorded with a
  ``cancelled`` result, so no call is left unpaired. (A plain tool in a
  worker thread cannot be stopped: its thread finishes, and its result is
  discarded.)
* Timeouts: a model that does not answer within ``model_timeout`` seconds is a
  failed step; a tool that does not finish within ``tool_timeout`` gets an
  ``error`` result and the loop goes on. They can only interrupt an await, so
  they bite on async callables and on ``to_thread`` ones.
* ``max_concurrency`` > 1 runs up to that many calls of a batch at once, each
  in its own task. Calls start in emission order (each passing the cancel
  checkpoint), each completion is one ``astep()``, in completion order, and
  the engine still records the batch in emission order. Whatever ends the run
  early (the token, a cancelled task) cancels every running call's task.
* Policies may be ``async def``: each batch is reviewed (awaited) before its
  first call starts, and a run whose policy asks stops in
  ``awaiting_approval`` until ``adecide``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from logging import DEBUG
from typing import TYPE_CHECKING, Any, Final

from agentloop._callbacks import (
    TokenCancelled,
    ended_by_token,
    is_async,
    unless_cancelled,
    within,
)
from agentloop._core._table import TERMINAL, State
from agentloop._core._values import AskModel, AwaitApproval, RunTool
from agentloop._run import LOG, Carried, Outcome, RunView, Verdicts, carried, log

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from agentloop._callbacks import Listener, Model
    from agentloop._core._approval import Decision
    from agentloop._core._engine import Engine
    from agentloop._core._values import CancelToken, RunResult, Transition

__all__ = ["AsyncRun"]

# A run whose tools have no policies reviews nothing (and makes no Verdicts of its own).
_NO_REVIEW: Final = Verdicts()


class AsyncRun(RunView):
    """One run under asyncio, driven one transition at a time by ``astep()``."""

    def __init__(
        self,
        engine: Engine,
        model: Model,
        dispatch: Callable[..., Awaitable[object]],
        *,
        cancel: CancelToken | None,
        model_timeout: float | None,
        to_thread: bool,
        max_concurrency: int = 1,
        listeners: tuple[Listener, ...] = (),
        review: Callable[[dict[str, Any]], Awaitable[Decision | Outcome | None]] | None = None,
    ) -> None:
        super().__init__(engine)
        self._model = model
        self._dispatch = dispatch
        # ``review(call)`` asks the policies; ``dispatch(call, decision=...)`` takes the answer.
        self._review = review
        self._verdicts = Verdicts() if review is not None else _NO_REVIEW
        self._cancel = cancel
        self._model_timeout = model_timeout
        self._to_thread = to_thread
        self._max_concurrency = max_concurrency
        # The running calls of a batch (max_concurrency > 1), by id, in start order.
        self._tasks: dict[str, asyncio.Task[object | Carried]] = {}
        self._listeners: list[tuple[Listener, bool]] = []
        for listener in listeners:
            self.subscribe(listener)

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(transition)`` after every transition; it may be ``async``."""
        if not callable(listener):
            raise TypeError(f"expected a callable listener, got {type(listener).__name__}")
        self._listeners.append((listener, is_async(listener)))

    def _plain_listeners(self) -> list[Listener]:
        # An interrupted task cannot be relied on to await anything more.
        return [listener for listener, awaited in self._listeners if not awaited]

    async def __aiter__(self) -> AsyncIterator[Transition]:
        """Step until done (or awaiting approval), yielding each transition."""
        while not self.done:
            transition = await self._astep()
            if transition is None:
                return
            yield transition

    async def afinish(self) -> RunResult:
        """``finish()`` under asyncio: step until done (or awaiting approval), return the result."""
        engine = self._engine
        if not engine.done:
            # Each step says where it went: no property reads per step to learn it.
            while True:
                transition = await self._astep()
                if transition is None or transition.dest in TERMINAL:
                    break
        return engine.result()

    async def astep(self) -> Transition:
        """Perform exactly one transition and return it."""
        transition = await self._astep()
        if transition is None:
            raise self._awaiting()
        return transition

    async def adecide(self, decisions: dict[str, Decision]) -> Transition:
        """``Run.decide`` under asyncio: decide every pending call, then ``afinish()`` goes on."""
        transition = await self._astep(decisions)
        assert transition is not None, "a decision is a transition"
        return transition

    async def _astep(self, decisions: dict[str, Decision] | None = None) -> Transition | None:
        """One transition (or, with ``decisions``, the decision); ``None`` while awaiting one."""
        engine = self._engine
        refused = False
        try:
            # Taken inside the try: an interrupt right after it still reaches the finally.
            if not self._busy.acquire(False):
                refused = True
                raise self._refused()
            do: Callable[[Any], Awaitable[object]] | None
            argument: Any
            report: Callable[[object], Transition]
            transition: Transition
            need: AskModel | RunTool | AwaitApproval | Transition | None = None
            if decisions is not None:
                need = engine.decided(decisions)
            elif self._review is not None and self._verdicts.due(engine):
                need = await self._verdicts.areview(engine, self._review)
            if need is not None:
                pass  # a decision, or the batch now waits for one
            elif (
                self._max_concurrency > 1
                and engine.state is State.DISPATCHING
                and (self._tasks or engine.unstarted > 1)
            ):  # calls to run at once; a lone call is awaited in place, as with 1
                need = await self._batch_step()
            else:
                need = engine.next()
            # Await the model or the tool, then report: the engine says what it meant.
            if type(need) is AskModel:
                do, argument, report = self._ask, need.history, engine.replied
                if need.tools_disabled:  # the wrap-up step: tool_choice='none'
                    do = functools.partial(self._ask, **need.options)
            elif type(need) is RunTool:
                do, argument, report = self._tool(need.call), need.call, engine.returned
            elif type(need) is AwaitApproval:
                return None
            else:  # the engine made a transition by itself
                do = None
                transition = need  # type: ignore[assignment]  # neither request: a transition
            if do is not None:
                try:
                    pending = do(argument)
                    answer = await (
                        pending if self._cancel is None else unless_cancelled(self._cancel, pending)
                    )
                except TokenCancelled as exc:
                    transition = ended_by_token(engine, exc)
                except Exception as exc:  # noqa: BLE001 - the engine says what it means
                    transition = engine.raised(exc)
                else:
                    transition = report(answer)
            if LOG.isEnabledFor(DEBUG):
                log(transition)
            for listener, awaited in self._listeners:
                if awaited:
                    await listener(transition)  # type: ignore[misc]  # is_async said so
                else:
                    listener(transition)
            return transition
        except BaseException as exc:
            if not (refused or isinstance(exc, Exception)):
                # A cancelled task, KeyboardInterrupt: the run ends.
                self._notify_interrupted(engine.interrupted(exc))
                self._drop_tasks()
            raise
        finally:
            if not refused:
                # Inline, no call: an interrupt cannot land before the release itself.
                try:  # noqa: SIM105 - suppress() is a call, where an interrupt could land
                    self._busy.release()
                except RuntimeError:  # pragma: no cover - never taken: interrupted at once
                    pass

    async def _batch_step(self) -> Transition:
        """Start calls up to ``max_concurrency``, then report the first to complete."""
        engine, tasks = self._engine, self._tasks
        while engine.unstarted and len(tasks) < self._max_concurrency:
            need = engine.next()  # the cancel checkpoint before each call
            if type(need) is not RunTool:
                # Cancelled: the running calls were answered cancelled; their tasks end first.
                await self._dropped(self._drop_tasks())
                return need  # type: ignore[return-value]  # neither request: a transition
            task = asyncio.ensure_future(carried(self._tool(need.call)(need.call)))
            task.add_done_callback(_observed)
            tasks[need.call["id"]] = task
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
                dropped = self._drop_tasks()
                transition = ended_by_token(engine, exc)  # recorded before the tasks end
                await self._dropped(dropped)
                return transition
        done = [call_id for call_id, task in tasks.items() if task.done()]
        for call_id in done:  # an interruption in a call's task ends the run, raised here
            task = tasks[call_id]
            if not task.cancelled() and task.exception() is None:
                result = task.result()
                if type(result) is Carried:
                    del tasks[call_id]
                    raise result.exc
        # Of the calls done by now, the first in emission order is reported first.
        call_id = done[0]
        task = tasks.pop(call_id)
        if task.cancelled():  # the tool cancelled itself: an interruption, as when awaited
            raise asyncio.CancelledError(f"the tool of call {call_id!r} was cancelled")
        error = task.exception()
        if error is None:
            return engine.returned(task.result(), call_id)
        if isinstance(error, Exception):
            return engine.raised(error, call_id)
        raise error  # KeyboardInterrupt and the like end the run

    def _tool(self, call: dict[str, Any]) -> Callable[[Any], Awaitable[object]]:
        """The dispatch for ``call``: with the policies' (or a person's) answer, when reviewed."""
        if self._review is None:
            return self._dispatch
        verdict = self._verdicts.of(self._engine, call["id"])
        if isinstance(verdict, dict):  # a policy that failed: the call fails closed, unrun
            return functools.partial(_ready, verdict)
        return functools.partial(self._dispatch, decision=verdict)

    def _drop_tasks(self) -> list[asyncio.Task[object]]:
        """Cancel every running call's task: the engine has answered them ``cancelled``."""
        dropped = list(self._tasks.values())
        for task in dropped:
            task.cancel()
        self._tasks.clear()
        return dropped

    @staticmethod
    async def _dropped(tasks: list[asyncio.Task[object]]) -> None:
        """Wait for cancelled calls to end, as a task group does: no tool outlives its run."""
        if tasks:
            await asyncio.wait(tasks)

    async def _ask(self, history: list[dict[str, Any]], **options: Any) -> object:
        """Call the model, plain or async, the way the loop was configured.

        ``options`` are the request's: ``tool_choice='none'`` in the wrap-up step.
        """
        model: Callable[..., object] = self._model
        call: Awaitable[object]
        if self._to_thread and not is_async(model):
            call = asyncio.to_thread(model, history, **options)
        else:
            reply = model(history, **options)
            # A dict (any reply that is JSON) is never awaitable: no protocol check for it.
            if type(reply) is dict or not inspect.isawaitable(reply):
                return reply
            call = reply
        if self._model_timeout is None:
            return await call
        return await within(
            self._model_timeout, f"no reply within model_timeout={self._model_timeout} s", call
        )


async def _ready(outcome: object, call: object) -> object:
    """An outcome known before the call would run, awaited as a dispatch is."""
    return outcome


def _observed(task: asyncio.Task[Any]) -> None:
    """Retrieve a dropped task's exception, so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def async_dispatch(
    dispatcher: object, *, to_thread: bool, tool_timeout: float | None
) -> Callable[..., Awaitable[object]]:
    """The dispatcher as the asyncio driver calls it: ``adispatch`` if it has one.

    Looked up once, here: a dispatcher whose ``adispatch`` cannot even be read
    is refused when the loop is built, not in the middle of a run.
    """
    try:
        adispatch = getattr(dispatcher, "adispatch", None)
        dispatch = dispatcher.dispatch  # type: ignore[attr-defined]
    except Exception as exc:
        raise TypeError(
            f"expected tools to offer dispatch (and optionally adispatch), but reading them "
            f"raised {type(exc).__name__}"
        ) from exc
    expired = f"the tool did not finish within tool_timeout={tool_timeout} s"
    if adispatch is not None and tool_timeout is None:
        # Awaited as it is: no wrapper coroutine on the common path.
        return functools.partial(adispatch, to_thread=to_thread)

    async def run(call: dict[str, Any], **decision: object) -> object:
        if adispatch is not None:
            pending = adispatch(call, to_thread=to_thread, **decision)
        elif to_thread:
            pending = asyncio.to_thread(dispatch, call)
        else:
            pending = dispatch(call)
            if type(pending) is dict or not inspect.isawaitable(pending):
                return pending
        if tool_timeout is None:
            return await pending
        return await within(tool_timeout, expired, pending)

    return run
