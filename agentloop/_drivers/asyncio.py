"""``AsyncRun``, the asyncio driver: the same protocol over the same engine, with awaits.

``astep()`` is ``Run.step()`` with awaits: every rule of the contract holds. Only asyncio has:

* A plain (non-``async``) model or tool is called directly on the event loop: it blocks the
  loop while it runs. ``Loop(..., to_thread=True)`` runs plain callables in a worker thread
  instead (``asyncio.to_thread``).
* Cancelling the task that awaits ``astep()`` ends the run ``cancelled`` and lets
  ``CancelledError`` propagate; ``token.cancel()`` interrupts an awaited model or tool the same
  way, without cancelling the task. While the model is awaited, the step counts and nothing is
  appended; while a tool is awaited, its coroutine is cancelled too and the call is recorded
  with a ``cancelled`` result, so no call is left unpaired. (A plain tool in a worker thread
  cannot be stopped: its thread finishes, and its result is discarded.)
* Timeouts: a model that does not answer within ``model_timeout`` seconds is a failed step; a
  tool that does not finish within ``tool_timeout`` gets an ``error`` result and the loop goes
  on. They can only interrupt an await, so they bite on async callables and ``to_thread`` ones.
* ``max_concurrency`` > 1 runs up to that many calls of a batch at once, each in its own task.
  Calls start in emission order (each passing the cancel checkpoint), each completion is one
  ``astep()``, in completion order, and the engine still records the batch in emission order.
  Whatever ends the run early (the token, a cancelled task) cancels every running call's task.
* Policies may be ``async def``: each batch is reviewed (awaited) before its first call
  starts, and a run whose policy asks stops in ``awaiting_approval`` until ``adecide``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from logging import DEBUG
from typing import Any

from agentloop._core.approval import Decisions
from agentloop._core.context_policy import Summarise
from agentloop._core.engine import Engine
from agentloop._core.json import exception_said
from agentloop._core.requests import CheckOutput
from agentloop._core.table import TERMINAL, State
from agentloop._core.values import (
    AskModel,
    CancelToken,
    OutputT,
    ReviewCalls,
    RunResult,
    RunTool,
    Transition,
    Wait,
)
from agentloop._drivers.callbacks import (
    CapturedInterrupt,
    Listener,
    Model,
    TokenCancelled,
    capture_interrupt,
    given_history,
    is_async,
    unless_cancelled,
    within,
)
from agentloop._drivers.child_waits import end_waiting
from agentloop._drivers.concurrent import ConcurrentBatch
from agentloop._drivers.delegation import HeardNested, Nested, listening
from agentloop._drivers.deltas import Delta, Discard, ListenerFailed, Partial
from agentloop._drivers.progress import ToolProgress
from agentloop._drivers.run_context import CallScope, ain_context
from agentloop._drivers.streams import apull, current_while_aread, in_time, is_stream
from agentloop._drivers.transition import LOG, Request, RunView, Streaming, log, one_transition
from agentloop._drivers.waits import await_wait

__all__ = ["AsyncRun"]


class AsyncRun(RunView[OutputT]):
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
        review: Callable[[dict[str, Any]], Awaitable[object]] | None = None,
        scope: CallScope | None = None,
    ) -> None:
        RunView.__init__(self, engine)
        self._model = model
        # ``review(call)`` asks the policies; ``dispatch(call, review=..., decision=...)``
        # takes their answer (handed back by the engine with the call).
        self._review = review
        if review is not None:
            engine.reviews = True
        self._cancel, self._model_timeout, self._to_thread = cancel, model_timeout, to_thread
        scope = scope or CallScope(engine, None, None, cancel)  # each call's: its deps, ids
        limit = max_concurrency  # above 1: the running calls of a batch, by id, in start order
        self._batch = ConcurrentBatch(engine, cancel, limit, scope.children) if limit > 1 else None
        # A tuple, () unless subscribed: no list of its own for each run in flight to hold.
        self._listeners: tuple[tuple[Listener, bool], ...] = ()
        for listener in listeners:
            self.subscribe(listener)
        # -- streaming: who hears each delta (awaited if async); the reply astream() read
        self._delta_listeners: list[tuple[Callable[[Delta | ToolProgress], object], bool]] = []
        self._streamed_reply: object = None
        # When the model was last asked (with a model_timeout): its reply's deadline runs from it.
        self._asked_at: float | None = None
        # Its agent tools' child runs' results, and the children that wait, by call id.
        self.children, self._waiting = scope.children, scope.waiting
        self._dispatch = ain_context(dispatch, self._delta_listeners, scope)

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(transition)`` after every transition; it may be ``async``.

        One that raises does so as ``Run.subscribe`` says: ``afinish()`` again goes on.
        """
        if not callable(listener):
            raise TypeError(f"expected a callable listener, got {type(listener).__name__}")
        followed = self._following(listener)
        self._listeners += ((followed, is_async(followed)),)

    def _plain_listeners(self) -> list[Listener]:
        # An interrupted task cannot be relied on to await anything more.
        return [listener for listener, awaited in self._listeners if not awaited]

    async def __aiter__(self) -> AsyncIterator[Transition]:
        """Step until done (or awaiting approval), yielding each transition."""
        while not self.done and (transition := await self._step()) is not None:
            yield transition

    async def afinish(self) -> RunResult[OutputT]:
        """``finish()`` under asyncio: step until done (or awaiting approval), return the result.

        As ``finish()``, it holds the run for the whole loop: no other task
        could step it between two steps anyway, as nothing is awaited there.
        """
        if not self._engine.done:
            await self._step(until_done=True)
        return self.result()

    async def astep(self) -> Transition:
        """Perform exactly one transition and return it."""
        transition = await self._step()
        if transition is None:
            raise self._awaiting()
        return transition

    async def adecide(self, decisions: Decisions) -> Transition:
        """``Run.decide`` under asyncio: decide every pending call, then ``afinish()`` goes on."""
        return await self._step(decisions)  # type: ignore[return-value]  # a decision is one

    async def _step(
        self, decisions: Decisions | None = None, *, until_done: bool = False
    ) -> Transition | None:
        """``_transitions``, its deltas dropped where they are read; the last transition."""
        made: list[Transition] = []
        async for _ in self._transitions(made, decisions, until_done=until_done):
            pass  # nothing comes: the deltas are not handed on
        return made[-1] if made else None

    async def _transitions(
        self,
        made: list[Transition],
        decisions: Decisions | None = None,
        *,
        until_done: bool = False,
        hand_on: bool = False,
    ) -> AsyncGenerator[Delta, None]:
        """One transition (or, with ``decisions``, the decision), or each until the run is done.

        ``hand_on``: each delta is yielded as it arrives (``astream()``); else
        the step reads them to the end, their listeners hearing each, and
        yields none (a delta yielded through one more async generator costs
        about as much again). Each transition is told to the listeners and
        left in ``made``, the newest only (an async generator returns nothing);
        none while the run awaits a person. Every way into the run goes through here: a
        step started while another is under way is refused, and a cancelled
        task, a ``KeyboardInterrupt`` or the caller leaving ``astream()``
        mid-reply ends the run ``cancelled``. The hold and the pump are one
        function: an async generator cannot delegate to another (no ``yield
        from``), and a layer between them would pass each delta on once more.
        """
        engine, batch = self._engine, self._batch
        refused = False
        try:
            # Taken inside the try: an interrupt right after it still reaches the finally.
            if not self._busy.acquire(False):
                refused = True
                raise self._refused()
            while True:
                transition: Transition | None
                if decisions is not None:
                    transition, decisions = engine.decided(decisions), None
                elif (
                    batch is not None
                    and engine.state is State.DISPATCHING
                    and (batch.tasks or engine.unstarted > 1)
                ):  # calls to run at once; a lone call is awaited in place, as with 1
                    transition = await batch.step(self._reviewed, self._tool, self._around)
                else:  # the one transition, each request awaited (transition.pump, with awaits)
                    around = self._around
                    steps = one_transition(engine, None, self.children)
                    try:
                        need = steps.send(None)
                        while True:
                            try:
                                scope = None if around is None else around(need)
                                if scope is None:
                                    answer = await self._perform(need)
                                else:  # a tracing listener's span, current while it runs
                                    with scope:
                                        answer = await self._perform(need)
                                if type(answer) is Streaming:
                                    reading: AsyncGenerator[Delta, None] = answer.deltas  # type: ignore[assignment]
                                    pulled = (
                                        reading
                                        if scope is None
                                        else current_while_aread(reading, scope)
                                    )
                                    try:
                                        if hand_on:
                                            async for delta in pulled:
                                                yield delta
                                        else:  # drained here: the delta listeners heard each
                                            async for _ in pulled:
                                                pass
                                    finally:
                                        await reading.aclose()
                                    answer = self._streamed_reply
                            except (Exception, TokenCancelled) as exc:  # noqa: BLE001 - thrown in: the engine says
                                need = steps.throw(exc)
                            else:
                                need = steps.send(answer)  # a streamed reply's stream: closed below
                    except StopIteration as stop:
                        transition = stop.value
                if transition is None:
                    return
                await self._tell(transition)
                made[:1] = (transition,)  # the newest only: the record keeps the rest
                if self._unclosed is not None:  # a streamed reply, taken and told: it closes
                    await self._close_unclosed()
                if not until_done or transition.dest in TERMINAL:
                    return
        except BaseException as exc:
            if not (refused or isinstance(exc, Exception)):
                # A cancelled task, Ctrl-C, or the caller left the loop mid-reply: the run ends.
                if batch is not None:
                    await batch.interrupted(exc)
                self._notify_interrupted(self._interrupted(exc))
                if batch is not None:
                    batch.drop()
            raise
        finally:
            if not refused:
                # Inline, no call: an interrupt cannot land before the release itself.
                try:  # noqa: SIM105 - suppress() is a call, where an interrupt could land
                    self._busy.release()
                except RuntimeError:  # pragma: no cover - never taken: interrupted at once
                    pass
                if self._unclosed is not None:  # interrupted before its reply was told
                    await self._close_unclosed()
                if self._waiting and engine.done:  # ended while a child waited
                    end_waiting(self.children, self._waiting)

    async def _perform(self, need: Request) -> object:
        """Await the model, a tool (unless cancelled), the policies or the output's check."""
        if type(need) is ReviewCalls:
            return await self._reviewed(need)
        if type(need) is Wait:  # retry=: cut short by the token (the table then ends the run)
            await await_wait(need, self._cancel)
            return None
        if type(need) is CheckOutput:  # the output validators: awaited to their end
            return await need.check(need.value)  # type: ignore[misc]  # an async check
        cancel = self._cancel  # awaited in place: no coroutine of its own for a run to hold
        if type(need) is RunTool:
            running = self._tool(need)(need.call)
            return await (running if cancel is None else unless_cancelled(cancel, running))
        asked = self._answer(need)  # type: ignore[arg-type]
        answer = await (asked if cancel is None else unless_cancelled(cancel, asked))
        if type(answer) is not dict and is_stream(answer):  # unread: the pump reads it
            return Streaming(self._delivered(answer))
        return answer

    async def _reviewed(self, need: ReviewCalls) -> dict[str, object]:
        """The policies' answers about the batch's calls, awaited together (not cancellable)."""
        review = self._review
        assert review is not None, "only a driver that reviews is asked to"
        answers = await asyncio.gather(*(capture_interrupt(review(call)) for call in need.calls))
        for answer in answers:
            if type(answer) is CapturedInterrupt:
                raise answer.exc  # here, in the task that drives the run: the run ends
        return {call["id"]: answer for call, answer in zip(need.calls, answers, strict=True)}

    def _tool(self, need: RunTool) -> Callable[[Any], Awaitable[object]]:
        """The dispatch for ``need``'s call: with its review's and a person's answers, if any."""
        if need.review is None and need.decision is None:
            return self._dispatch
        return functools.partial(self._dispatch, review=need.review, decision=need.decision)

    async def _answer(self, need: AskModel | Summarise) -> object:
        """Call the model, plain or async, as configured, for a model request.

        A summary is asked of the context policy's own model callback; the
        wrap-up step's request has its options (``tool_choice='none'``). Its
        answer, within ``model_timeout``: a reply, or a stream left unread.
        """
        model: Callable[..., object]
        if isinstance(need, Summarise):
            model, options, history = need.model, {}, need.history
        else:
            model, options, history = self._model, need.options, given_history(self._model, need)
        seconds = self._model_timeout
        if seconds is not None:
            self._asked_at = time.monotonic()
        call: Awaitable[object]
        if self._to_thread and not is_async(model):
            call = asyncio.to_thread(functools.partial(model, history, **options))
        else:
            reply = model(history, **options)
            # A dict (any reply that is JSON) is never awaitable: no protocol check for it.
            if type(reply) is dict or not inspect.isawaitable(reply):
                # Answered in place: read against the deadline now that it has come.
                return reply if seconds is None else in_time(reply, seconds, self._asked_at)
            call = reply
        if seconds is None:
            return await call
        reply = await within(seconds, f"no reply within model_timeout={seconds} s", call)
        return in_time(reply, seconds, self._asked_at)  # one that never suspended: read now

    # -- streaming (agentloop.streaming): deltas beside the transitions, never in the history

    def subscribe_deltas(self, listener: Callable[[Delta | ToolProgress], object]) -> None:
        """Call ``listener(delta)`` with each delta of a streaming reply; it may be ``async``.

        It hears each ``ToolProgress`` a running call reports too, on the
        run's event loop (an ``async`` one in a task of its own, done before
        the call's outcome is reported).
        """
        if not callable(listener):
            raise TypeError(f"expected a callable delta listener, got {type(listener).__name__}")
        self._delta_listeners.append((listener, is_async(listener)))

    async def astream(self) -> AsyncGenerator[Delta | Nested | Transition, None]:
        """Step until done (or awaiting approval), yielding each delta and each transition.

        ``Run.stream()`` under asyncio (a child run's ``Nested`` items too).
        Leaving the loop while a reply streams closes the stream and ends the
        run ``cancelled``, as a cancelled task does. A transition is told to
        the listeners, and the run let go, before the caller sees it.
        """
        engine, heard = self._engine, HeardNested()
        with listening(self._delta_listeners, (heard, False)):
            while not engine.done:
                made: list[Transition] = []
                step = self._transitions(made, hand_on=True)
                try:
                    async for delta in step:
                        yield delta
                finally:
                    await step.aclose()
                for item in heard.taken():
                    yield item
                if not made:
                    return  # the run waits for a person
                yield made[0]

    async def _delivered(self, stream: object) -> AsyncGenerator[Delta, None]:
        """``stream``'s deltas, each told to the delta listeners and yielded; then its reply.

        The reply is left in ``_streamed_reply`` (an async generator returns
        nothing). Read under the run's token (each awaited chunk) and
        ``model_timeout``, and closed at once however the reading ends, but its
        reply's: once the engine has taken it, at the end of the step. The text
        delivered so far is kept while it streams: a cut by the token, or an
        interruption, records it on its event. A stream that fails after deltas
        were told is followed by a ``Discard``.
        """
        self._partial = partial = Partial()
        items = apull(
            stream,
            partial,
            cancel=self._cancel,
            seconds=self._model_timeout,
            since=self._asked_at,
            to_thread=self._to_thread,
        )
        plain = [listener for listener, awaited in self._delta_listeners if not awaited]
        tell = self._tell_delta if len(plain) < len(self._delta_listeners) else None
        heard = False
        try:
            async for item in items:
                if type(item) is dict:
                    self._partial = None
                    self._streamed_reply, self._unclosed = item, items  # closed once taken
                    return
                heard = True
                if tell is not None:
                    await tell(item)  # type: ignore[arg-type]  # a delta
                else:  # plain listeners alone: no coroutine per delta
                    for listener in plain:
                        try:
                            listener(item)  # type: ignore[arg-type]  # a delta
                        except Exception as exc:
                            raise ListenerFailed(exc) from exc
                yield item  # type: ignore[misc]  # a delta
        except TokenCancelled as exc:
            self._partial = None
            exc.partial_text = partial.text  # the event keeps what had streamed
            raise
        except Exception as exc:
            self._partial = None  # a failed call: only an interruption keeps its partial text
            await items.aclose()  # the stream itself, at once
            if heard:
                discard = Discard(error=exception_said(exc))
                await self._tell_delta(discard)
                yield discard
            raise
        finally:
            if self._unclosed is not items:
                await items.aclose()  # the stream itself, at once

    async def _close_unclosed(self) -> None:
        """Close the stream whose reply was handed to the engine, if it is still open."""
        items, self._unclosed = self._unclosed, None
        if items is not None:
            await items.aclose()

    async def _tell_delta(self, delta: Delta) -> None:
        for listener, awaited in self._delta_listeners:
            try:
                if awaited:
                    await listener(delta)  # type: ignore[misc]  # is_async said so
                else:
                    listener(delta)
            except Exception as exc:
                raise ListenerFailed(exc) from exc

    async def _tell(self, transition: Transition) -> None:
        """Log ``transition`` and tell the listeners, as ``_astep`` does."""
        if LOG.isEnabledFor(DEBUG):
            log(transition)
        for listener, awaited in self._listeners:
            if awaited:
                await listener(transition)  # type: ignore[misc]  # is_async said so
            else:
                listener(transition)
