"""``Run``, the synchronous driver: a short loop over the engine's protocol.

It is one of the places that call the model and the tools. Each ``step()``
asks the engine what it needs, does it, reports what happened, and returns
the one transition that followed. A ``BaseException`` that is not an
``Exception`` (``KeyboardInterrupt``) anywhere in a step ends the run
``cancelled`` before it propagates.
"""

from __future__ import annotations

from logging import DEBUG
from typing import TYPE_CHECKING

from agentloop._callbacks import is_async
from agentloop._core._table import TERMINAL
from agentloop._core._values import AskModel, RunTool
from agentloop._run import LOG, RunView, log

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from agentloop._callbacks import Listener, Model
    from agentloop._core._engine import Engine
    from agentloop._core._values import RunResult, Transition

__all__ = ["Run"]


class Run(RunView):
    """One run, driven one transition at a time by ``step()``."""

    def __init__(
        self,
        engine: Engine,
        model: Model,
        dispatch: Callable[[dict[str, Any]], object],
        listeners: tuple[Listener, ...] = (),
    ) -> None:
        super().__init__(engine)
        self._model = model
        self._dispatch = dispatch
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
        """Step until done, yielding each transition."""
        while not self.done:
            yield self.step()

    def finish(self) -> RunResult:
        """Step until done and return the result.

        One step after another, as ``step()`` makes them (listeners and the
        DEBUG log see each), while holding the run for the whole loop.
        """
        engine = self._engine
        if not engine.done:
            self._hold(self._steps)
        return engine.result()

    def step(self) -> Transition:
        """Perform exactly one transition and return it."""
        return self._hold(self._one_step)

    def _one_step(self) -> Transition:
        return self._steps(until_done=False)

    def _steps(self, until_done: bool = True) -> Transition:
        """Transitions until the run is done, or one: each asks, reports, logs, tells listeners.

        One loop with no call of its own per transition: at a few tool calls a
        run, calls are most of what a driver costs.
        """
        engine, model, dispatch = self._engine, self._model, self._dispatch
        listeners = self._listeners
        debug = LOG.isEnabledFor(DEBUG)  # once a loop: logging is not reconfigured mid-run
        while True:
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
                    outcome = dispatch(need.call)
                except Exception as exc:  # noqa: BLE001 - the engine says what it means
                    transition = engine.raised(exc)
                else:
                    transition = engine.returned(outcome)
            else:
                transition = need  # type: ignore[assignment]  # neither request: the engine's
            if debug:
                log(transition)
            for listener in listeners:
                listener(transition)
            if not until_done or transition.dest in TERMINAL:
                return transition

    def _hold(self, steps: Callable[[], Transition]) -> Transition:
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
