"""``Run``, the synchronous driver: a short loop over the engine's protocol.

It is one of the places that call the model and the tools. Each ``step()``
asks the engine what it needs, does it, reports what happened, and returns
the one transition that followed. A ``BaseException`` that is not an
``Exception`` (``KeyboardInterrupt``) anywhere in a step ends the run
``cancelled`` before it propagates. With a ``review`` (the tools' policies),
each batch is reviewed before its first call starts, and a run whose policy
asks stops in ``awaiting_approval`` until ``decide``.
"""

from __future__ import annotations

from logging import DEBUG
from typing import TYPE_CHECKING, Final

from agentloop._callbacks import is_async
from agentloop._core._table import TERMINAL, State
from agentloop._core._values import AskModel, AwaitApproval, RunTool
from agentloop._run import LOG, Outcome, RunView, Verdicts, log

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from agentloop._callbacks import Listener, Model
    from agentloop._core._approval import Decision
    from agentloop._core._engine import Engine
    from agentloop._core._values import RunResult, Transition

__all__ = ["Run"]

# A run whose tools have no policies reviews nothing (and makes no Verdicts of its own).
_NO_REVIEW: Final = Verdicts()


class Run(RunView):
    """One run, driven one transition at a time by ``step()``."""

    def __init__(
        self,
        engine: Engine,
        model: Model,
        dispatch: Callable[..., object],
        listeners: tuple[Listener, ...] = (),
        review: Callable[[dict[str, Any]], Decision | Outcome | None] | None = None,
    ) -> None:
        RunView.__init__(self, engine)  # not super(): one object fewer for every run
        self._model = model
        self._dispatch = dispatch
        # ``review(call)`` asks the policies; ``dispatch(call, decision=...)`` takes the answer.
        self._review = review
        self._verdicts = Verdicts() if review is not None else _NO_REVIEW
        self._listeners: list[Listener] = []
        for listener in listeners:
            self.subscribe(listener)

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(transition)`` after every transition from now on."""
        if not callable(listener) or is_async(listener):
            got = "an async function" if callable(listener) else type(listener).__name__
            raise TypeError(
                f"expected a plain function as a listener of a synchronous run, got {got}; "
                "async listeners need loop.astart() or loop.arun()"
            )
        self._listeners.append(listener)

    def _plain_listeners(self) -> list[Listener]:
        return self._listeners

    def __iter__(self) -> Iterator[Transition]:
        """Step until done (or awaiting approval), yielding each transition."""
        while not self.done and self.state is not State.AWAITING_APPROVAL:
            yield self.step()

    def finish(self) -> RunResult:
        """Step until done (or awaiting approval) and return the result.

        One step after another, as ``step()`` makes them (listeners and the
        DEBUG log see each), while holding the run for the whole loop. A run
        that waits for a person returns its result with status
        ``awaiting_approval``; ``decide`` and ``finish`` again to go on.
        """
        engine = self._engine
        if not engine.done:
            self._hold(self._steps)
        return engine.result()

    def step(self) -> Transition:
        """Perform exactly one transition and return it."""
        return self._hold(self._one_step)  # type: ignore[return-value]  # never None

    def decide(self, decisions: dict[str, Decision]) -> Transition:
        """Decide every pending call: ``{call_id: approve() | deny(reason)}``; see ``pending``.

        A missing or extra id, a decision bound to another call's fingerprint,
        or anything that is not a decision raises and changes nothing. Then
        ``step()`` or ``finish()`` runs the batch.
        """
        return self._hold(lambda: self._told(self._engine.decided(decisions)))  # type: ignore[return-value]

    def _one_step(self) -> Transition:
        transition = self._steps(until_done=False)
        if transition is None:
            raise self._awaiting()
        return transition

    def _steps(self, until_done: bool = True) -> Transition | None:
        """Transitions until the run is done, or one: each asks, reports, logs, tells listeners.

        One loop with no call of its own per transition: at a few tool calls a
        run, calls are most of what a driver costs. ``None``: the run waits for
        a person's decisions, and nothing happened.
        """
        engine, model, dispatch, review = self._engine, self._model, self._dispatch, self._review
        listeners, verdicts = self._listeners, self._verdicts
        debug = LOG.isEnabledFor(DEBUG)  # once a loop: logging is not reconfigured mid-run
        while True:
            # Before a batch's first call, its policies are asked (once): an ask stops it.
            asked = verdicts.review(engine, review) if review and verdicts.due(engine) else None
            if asked is not None:
                transition = asked
            else:
                need = engine.next()
                # The engine says what the answer, or the exception, means.
                if type(need) is AskModel:
                    try:
                        reply = model(need.history)
                    except Exception as exc:  # noqa: BLE001 - the engine says what it means
                        transition = engine.raised(exc)
                    else:
                        transition = engine.replied(reply)
                elif type(need) is RunTool:
                    try:
                        if review is None:
                            outcome = dispatch(need.call)
                        else:
                            verdict = verdicts.of(engine, need.call["id"])
                            outcome = (  # a policy that failed: the call fails closed, unrun
                                verdict
                                if isinstance(verdict, dict)
                                else dispatch(need.call, decision=verdict)
                            )
                    except Exception as exc:  # noqa: BLE001 - the engine says what it means
                        transition = engine.raised(exc)
                    else:
                        transition = engine.returned(outcome)
                elif type(need) is AwaitApproval:
                    return None
                else:
                    transition = need  # type: ignore[assignment]  # neither request: the engine's
            if debug:
                log(transition)
            for listener in listeners:
                listener(transition)
            if not until_done or transition.dest in TERMINAL:
                return transition

    def _told(self, transition: Transition) -> Transition:
        """Log ``transition`` and tell the listeners (a report made outside ``_steps``)."""
        if LOG.isEnabledFor(DEBUG):
            log(transition)
        for listener in self._listeners:
            listener(transition)
        return transition

    def _hold(self, steps: Callable[[], Transition | None]) -> Transition | None:
        """Run ``steps`` as the only step under way; an interruption ends the run."""
        refused = False
        try:
            # Taken inside the try: an interrupt right after it still reaches the finally.
            if not self._busy.acquire(False):
                refused = True
                raise self._refused()
            return steps()
        except BaseException as exc:
            if not (refused or isinstance(exc, Exception)):
                # A KeyboardInterrupt ends the run, then propagates.
                self._notify_interrupted(self._engine.interrupted(exc))
            raise
        finally:
            if not refused:
                # Inline, no call: an interrupt cannot land before the release itself.
                try:  # noqa: SIM105 - suppress() is a call, where an interrupt could land
                    self._busy.release()
                except RuntimeError:  # pragma: no cover - never taken: interrupted at once
                    pass
