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
        """Step until done and return the result."""
        step, engine = self.step, self._engine
        if not engine.done:
            while step().dest not in TERMINAL:
                pass
        return engine.result()

    def step(self) -> Transition:
        """Perform exactly one transition and return it."""
        engine = self._engine
        refused = False
        try:
            # Taken inside the try: an interrupt right after it still reaches the finally.
            if not self._busy.acquire(False):
                refused = True
                raise self._refused()
            need = engine.next()
            # Call the model or run the tool, then report: the engine says what it meant.
            do: Callable[[Any], object] | None
            argument: Any
            report: Callable[[object], Transition]
            transition: Transition
            if type(need) is AskModel:
                do, argument, report = self._model, need.history, engine.replied
            elif type(need) is RunTool:
                do, argument, report = self._dispatch, need.call, engine.returned
            else:  # the engine made a transition by itself
                do = None
                transition = need  # type: ignore[assignment]  # neither request: a transition
            if do is not None:
                try:
                    answer = do(argument)
                except Exception as exc:  # noqa: BLE001 - the engine says what it means
                    transition = engine.raised(exc)
                else:
                    transition = report(answer)
            if LOG.isEnabledFor(DEBUG):
                log(transition)
            if self._listeners:
                for listener in self._listeners:
                    listener(transition)
            return transition
        except BaseException as exc:
            if not (refused or isinstance(exc, Exception)):
                self._notify_interrupted(engine.interrupted(exc))  # a KeyboardInterrupt ends it
            raise
        finally:
            if not refused:
                # Inline, no call: an interrupt cannot land before the release itself.
                try:  # noqa: SIM105 - suppress() is a call, where an interrupt could land
                    self._busy.release()
                except RuntimeError:  # pragma: no cover - never taken: interrupted at once
                    pass
