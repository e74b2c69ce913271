"""``Run``, the synchronous driver: a short loop over the engine's protocol.

It is one of the places that call the model and the tools. Each ``step()``
asks the engine what it needs, does it, reports what happened, and returns
the one transition that followed. A ``BaseException`` that is not an
``Exception`` (``KeyboardInterrupt``) anywhere in a step ends the run
``cancelled`` before it propagates. With a ``review`` (the tools' policies),
each batch is reviewed before its first call starts, and a run whose policy
asks stops in ``awaiting_approval`` until ``decide``.

An awaitable that a model, a tool or a policy returns (``async def`` ones)
is run to completion on the run's own event loop (``Awaiter``, in
``agentloop._drivers.awaiter``), in the calling thread: ``model_timeout``/``tool_timeout``
bite there, and the run's ``CancelToken`` interrupts it, as under asyncio.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from logging import DEBUG
from typing import Any

from agentloop._core.approval import Decisions
from agentloop._core.context_policy import FilterHistory, Summarise
from agentloop._core.engine import Engine
from agentloop._core.json import exception_said
from agentloop._core.requests import CheckOutput
from agentloop._core.table import TERMINAL, State
from agentloop._core.values import AskModel, OutputT, RunResult, RunTool, Transition, Wait
from agentloop._drivers.awaiter import Awaiter
from agentloop._drivers.callbacks import Listener, Model, TokenCancelled, given_history, is_async
from agentloop._drivers.child_waits import end_waiting
from agentloop._drivers.delegation import HeardNested, Nested, listening
from agentloop._drivers.deltas import Delta, Discard, ListenerFailed, Partial
from agentloop._drivers.progress import ToolProgress
from agentloop._drivers.run_context import CallScope, in_context
from agentloop._drivers.streams import in_time, is_stream, pull
from agentloop._drivers.transition import LOG, Request, RunView, Streaming, drain, log, pump
from agentloop._drivers.waits import wait

__all__ = ["Run"]


class Run(RunView[OutputT]):
    """One run, driven one transition at a time by ``step()``."""

    def __init__(
        self,
        engine: Engine,
        model: Model,
        dispatch: Callable[..., object],
        listeners: tuple[Listener, ...] = (),
        review: Callable[[dict[str, Any]], object] | None = None,
        *,
        awaiter: Awaiter | None = None,
        model_timeout: float | None = None,
        scope: CallScope | None = None,
    ) -> None:
        RunView.__init__(self, engine)  # its one base: super() would make an object per run
        self._model = model
        # An async model's reply, or tool's outcome, is awaited here; see Awaiter.
        self._awaiter = Awaiter() if awaiter is None else awaiter
        self._model_timeout = model_timeout
        # ``review(call)`` asks the policies; ``dispatch(call, review=..., decision=...)``
        # takes their answer (handed back by the engine with the call).
        self._review = review
        if review is not None:
            engine.reviews = True
        self._listeners: list[Listener] = []
        for listener in listeners:
            self.subscribe(listener)
        # -- streaming: who hears each delta, and the text of the reply streaming now
        self._delta_listeners: list[Callable[[Delta | ToolProgress], object]] = []
        self._partial: Partial | None = None
        # When the model was last asked (with a model_timeout): its reply's deadline runs from it.
        self._asked_at: float | None = None
        # Each call runs in its context (scope: its deps and ids), its progress heard.
        scope = scope or CallScope(engine, None, None, self._awaiter.cancel)
        # Its agent tools' child runs' results, and the children that wait, by call id.
        self.children, self._waiting = scope.children, scope.waiting
        self._dispatch = in_context(dispatch, self._delta_listeners, scope)

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(transition)`` after every transition from now on.

        One that raises does so from ``step()``/``finish()`` after the transition
        was made (the listeners after it miss that one); the run stays
        consistent, and ``step()``/``finish()`` again goes on.
        """
        if not callable(listener) or is_async(listener):
            got = "an async function" if callable(listener) else type(listener).__name__
            raise TypeError(
                f"expected a plain function as a listener of a synchronous run, got {got}; "
                "async listeners need loop.astart() or loop.arun()"
            )
        self._listeners.append(self._following(listener))

    def _plain_listeners(self) -> list[Listener]:
        return self._listeners

    def __iter__(self) -> Iterator[Transition]:
        """Step until done (or awaiting approval), yielding each transition."""
        while not self.done and self.state is not State.AWAITING_APPROVAL:
            yield self.step()

    def finish(self) -> RunResult[OutputT]:
        """Step until done (or awaiting approval) and return the result.

        One step after another, as ``step()`` makes them (listeners and the
        DEBUG log see each), while holding the run for the whole loop. A run
        that waits for a person returns its result with status
        ``awaiting_approval``; ``decide`` and ``finish`` again to go on.
        """
        engine = self._engine
        if not engine.done:
            drain(self._held(self._transitions(until_done=True)))
        return self.result()

    def step(self) -> Transition:
        """Perform exactly one transition and return it."""
        made = drain(self._held(self._transitions()))
        if made is None:
            raise self._awaiting()
        return made

    def decide(self, decisions: Decisions) -> Transition:
        """Decide every pending call: ``{call_id: approve() | deny(reason)}``; see ``pending``.

        A missing or extra id, a decision bound to another call's fingerprint,
        or anything that is not a decision raises and changes nothing. Then
        ``step()`` or ``finish()`` runs the batch.
        """
        return drain(self._held(self._transitions(decisions)))  # type: ignore[return-value]

    def _transitions(
        self,
        decisions: Decisions | None = None,
        *,
        until_done: bool = False,
        hand_on: bool = False,
    ) -> Generator[Delta, None, Transition | None]:
        """One transition (or, with ``decisions``, the decision), or each until the run is done.

        Each pumped (with ``hand_on``, a stream's deltas yielded as they
        arrive; ``pump``), logged, and told to the listeners. ``None``: the
        run waits for a person's decisions, and nothing happened.
        """
        engine, listeners, perform = self._engine, self._listeners, self._perform
        debug = LOG.isEnabledFor(DEBUG)  # once a loop: logging is not reconfigured mid-run
        while True:
            made: Transition | None
            if decisions is not None:
                made, decisions = engine.decided(decisions), None
            else:
                need = engine.next()
                if type(need) is Transition:  # made by the engine itself: nothing to perform
                    made = need
                else:
                    around, children = self._around, self.children
                    made = yield from pump(
                        engine, perform, need, hand_on=hand_on, around=around, children=children
                    )
                    if made is None:
                        return None
            if debug:
                log(made)
            for listener in listeners:
                listener(made)
            if not until_done or made.dest in TERMINAL:
                return made

    def _held(
        self, steps: Generator[Delta, None, Transition | None]
    ) -> Generator[Delta, None, Transition | None]:
        """``steps``, run as the only step under way; an interruption ends the run.

        Every way into the run goes through here (``step``, ``finish``,
        ``decide``, ``stream``): a step started while another is under way is
        refused, and a ``KeyboardInterrupt`` (or the caller leaving
        ``stream()`` mid-reply) ends the run ``cancelled``, then propagates.
        """
        refused = False
        try:
            # Taken inside the try: an interrupt right after it still reaches the finally.
            if not self._busy.acquire(False):
                refused = True
                raise self._refused()
            return (yield from steps)
        except BaseException as exc:
            if not (refused or isinstance(exc, Exception)):
                self._notify_interrupted(self._interrupted(exc))
            raise
        finally:
            if not refused:
                # Inline, no call: an interrupt cannot land before the release itself.
                try:  # noqa: SIM105 - suppress() is a call, where an interrupt could land
                    self._busy.release()
                except RuntimeError:  # pragma: no cover - never taken: interrupted at once
                    pass
                self._close_unclosed()  # interrupted between a reply and its taking
                if self._waiting and self._engine.done:  # ended while a child waited
                    end_waiting(self.children, self._waiting)
                if self._awaiter.open and self._engine.done:
                    self._awaiter.close()  # the run is over: so is its event loop

    def _perform(self, need: Request) -> object:
        """Do what the engine asked: call the model, run a tool, wait, or ask the policies.

        A model's stream is answered unread, as ``Streaming``: ``pump`` reads it.
        """
        kind = type(need)
        if kind is AskModel or kind is Summarise or kind is FilterHistory:
            reply = self._asked(need)  # type: ignore[arg-type]  # a model request
            # A dict (any reply that is JSON) is never a stream: no check for it.
            if type(reply) is dict or not is_stream(reply):
                return reply
            # Read by the pump, each delta told to the delta listeners and yielded.
            return Streaming(self._delivered(reply), self._close_unclosed)
        if kind is RunTool:
            call, review, decision = need  # type: ignore[misc]  # a RunTool
            if review is None and decision is None:
                return self._dispatch(call)
            return self._dispatch(call, review=review, decision=decision)
        if kind is Wait:  # retry=: cut short by the token (the table then ends the run)
            wait(need, self._awaiter.cancel)  # type: ignore[arg-type]  # a Wait
            return None
        if kind is CheckOutput:  # the output validators (their check awaits any async one)
            return need.check(need.value)  # type: ignore[union-attr]  # a CheckOutput
        review = self._review
        assert review is not None, "only a driver that reviews is asked to"
        return {call["id"]: review(call) for call in need.calls}  # type: ignore[union-attr]

    def _asked(self, need: AskModel | Summarise) -> object:
        """The model's answer (a summary is asked of the context policy's own model callback).

        Within ``model_timeout``: an awaitable is interrupted at it; a reply
        is read against it when it comes (``in_time``); a
        stream is read within what is left of it.
        """
        if self._model_timeout is not None:
            self._asked_at = time.monotonic()
        if isinstance(need, Summarise):
            reply = need.model(need.history)
        elif need.tools_disabled:  # the wrap-up step: tool_choice='none'
            reply = self._model(given_history(self._model, need), **need.options)
        else:
            reply = self._model(given_history(self._model, need))
        # A dict (any reply that is JSON) is never awaitable: no check for it.
        if type(reply) is not dict and inspect.isawaitable(reply):
            return self._await_reply(reply)
        if self._model_timeout is not None:
            return in_time(reply, self._model_timeout, self._asked_at)
        return reply

    def _await_reply(self, reply: Awaitable[object]) -> object:
        """An async model's reply, awaited on the run's event loop within ``model_timeout``."""
        seconds = self._model_timeout
        answer = self._awaiter(reply, seconds, f"no reply within model_timeout={seconds} s")
        # Read again once it came: a model that never suspended gave the timer no turn.
        return in_time(answer, seconds, self._asked_at)

    # -- streaming (agentloop.streaming): deltas beside the transitions, never in the history

    def subscribe_deltas(self, listener: Callable[[Delta | ToolProgress], object]) -> None:
        """Call ``listener(delta)`` with each delta of a streaming model's reply, as it arrives.

        It hears each ``ToolProgress`` a running call reports too, in the
        thread that reports it (the run's own, for a tool that runs there and
        for an MCP tool).
        """
        if not callable(listener) or is_async(listener):
            got = "an async function" if callable(listener) else type(listener).__name__
            raise TypeError(
                f"expected a plain function as a delta listener of a synchronous run, got {got}"
            )
        self._delta_listeners.append(listener)

    def stream(self) -> Generator[Delta | Nested | Transition, None, None]:
        """Step until done (or awaiting approval), yielding each delta and each transition.

        In the order they happen: a streaming model's deltas, then the
        transition its whole reply made. An agent tool's child run is heard
        as ``Nested`` items, yielded when its call returns, before the call's
        transition (its delta listeners hear each as it happens). Leaving the
        loop while a reply streams (``break``, an exception) closes the stream
        and ends the run ``cancelled``, as an interrupt does.
        """
        engine, heard = self._engine, HeardNested()
        with listening(self._delta_listeners, heard):
            while not engine.done and engine.state is not State.AWAITING_APPROVAL:
                made = yield from self._held(self._transitions(hand_on=True))
                yield from heard.taken()
                if made is None:
                    return
                yield made

    def _close_unclosed(self) -> None:
        """Close the stream whose reply was handed to the engine, if it is still open."""
        items, self._unclosed = self._unclosed, None
        if items is not None:
            items.close()

    def _delivered(self, stream: object) -> Generator[Delta, None, object]:
        """``stream``'s deltas, each told to the delta listeners; then its whole reply, returned.

        Read under the run's token (between chunks) and ``model_timeout``, and
        closed at once however the reading ends, but for its reply: then once
        the engine has taken it (``Streaming.taken``). The text delivered so
        far is kept while it streams: a cut by the token, or an interruption,
        records it on its event. A stream that fails after deltas were handed
        on is followed by a ``Discard``.
        """
        awaiter = self._awaiter
        self._partial = partial = Partial()
        items = pull(
            stream,
            partial,
            cancel=awaiter.cancel,
            seconds=self._model_timeout,
            since=self._asked_at,
            awaiter=awaiter,
        )
        listeners = self._delta_listeners
        told = False
        try:
            for item in items:
                if type(item) is dict:
                    self._partial = None
                    self._unclosed = items  # closed once the engine has taken the reply
                    return item
                told = True
                for listener in listeners:
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
            items.close()  # the stream itself, at once
            if told:
                discard = Discard(error=exception_said(exc))
                for listener in listeners:
                    try:
                        listener(discard)
                    except Exception as failed:
                        raise ListenerFailed(failed) from failed
                yield discard
            raise
        finally:
            if self._unclosed is not items:
                items.close()  # the stream itself, at once
        raise AssertionError("unreachable: pull ends with the reply or raises")
