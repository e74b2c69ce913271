"""The synchronous driver: ``Loop`` (configuration) and ``Run`` (one run).

The driver is the only place that calls the model and the tools. Each
``Run.step()`` reports to the engine what happened at one checkpoint and
returns the single transition that followed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from agentloop._engine import Engine, InvalidStateError, Listener
from agentloop._machine import State
from agentloop._messages import input_messages
from agentloop._tools import Dispatcher, as_dispatcher
from agentloop._values import Budget, CancelToken, RunResult, Transition

__all__ = ["Loop", "Model", "Run"]

_AWAITING_MODEL, _VALIDATING, _DISPATCHING = (
    State.AWAITING_MODEL,
    State.VALIDATING,
    State.DISPATCHING,
)

#: A model: given a copy of the history, return a call or a final answer.
Model = Callable[[list[dict[str, Any]]], object]


class Loop:
    """Configuration for runs: a model, its tools and its budgets. Reusable.

    ``tools`` is a mapping of name to handler, or any object with
    ``dispatch(call) -> {'status': ..., 'content': ...}``. Every ``run`` or
    ``start`` is an independent run with its own counters, reserved ids and
    history.
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: object = None,
        max_steps: int = 8,
        max_calls: int = 4,
        listeners: tuple[Listener, ...] = (),
    ) -> None:
        if not callable(model):
            raise TypeError(
                f"expected model to be a callable taking the history, got {type(model).__name__}"
            )
        self.model = model
        self.dispatcher: Dispatcher = as_dispatcher(tools)
        self.budget = Budget(max_steps=max_steps, max_calls=max_calls)
        self.listeners = tuple(listeners)

    def __repr__(self) -> str:
        return (
            f"Loop({self.model!r}, tools={self.dispatcher!r}, "
            f"max_steps={self.budget.max_steps}, max_calls={self.budget.max_calls})"
        )

    def start(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> Run:
        """Begin a run driven by ``step()``; bad input raises here, before any model call."""
        if cancel is not None and not isinstance(cancel, CancelToken):
            raise TypeError(
                f"expected cancel to be a CancelToken or None, got {type(cancel).__name__}"
            )
        engine = Engine.start(input_messages(messages), self.budget, cancel)
        for listener in self.listeners:
            engine.subscribe(listener)
        return Run(engine, self.model, self.dispatcher)

    def run(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> RunResult:
        """Run to a terminal state and return the result."""
        run = self.start(messages, cancel=cancel)
        for _ in run:
            pass
        return run.result()


class Run:
    """One run, driven one transition at a time."""

    def __init__(self, engine: Engine, model: Model, dispatcher: Dispatcher) -> None:
        self._engine = engine
        self._model = model
        self._dispatcher = dispatcher

    def __repr__(self) -> str:
        return f"<Run state={self.state.value!r} steps={self.steps} calls={self.calls}>"

    @property
    def state(self) -> State:
        """The current state (a ``str`` enum)."""
        return self._engine.state

    @property
    def done(self) -> bool:
        """Whether the run has reached a terminal state."""
        return self._engine.done

    @property
    def steps(self) -> int:
        """Model callback invocations so far."""
        return self._engine.steps

    @property
    def calls(self) -> int:
        """Accepted tool attempts so far."""
        return self._engine.calls

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The history so far (a fresh copy on each access)."""
        return self._engine.history()

    @property
    def events(self) -> tuple[Transition, ...]:
        """Every transition so far, in order."""
        return self._engine.events()

    def subscribe(self, listener: Callable[[Transition], object]) -> None:
        """Call ``listener(transition)`` after every state change from now on."""
        self._engine.subscribe(listener)

    def result(self) -> RunResult:
        """The result; raises ``InvalidStateError`` until the run is done."""
        return self._engine.result()

    def __iter__(self) -> Iterator[Transition]:
        """Step until done, yielding each transition."""
        while not self.done:
            yield self.step()

    def step(self) -> Transition:
        """Perform exactly one transition and return it."""
        engine = self._engine
        state = engine.state
        if state is _AWAITING_MODEL:
            stopped = engine.ask_model()
            if stopped is not None:
                return stopped
            try:
                reply = self._model(engine.history())
            except Exception as exc:  # noqa: BLE001 - a failing model is a state
                return engine.model_raised(exc)
            return engine.model_replied(reply)
        if state is _VALIDATING:
            return engine.validate()
        if state is _DISPATCHING:
            stopped = engine.start_tool()
            if stopped is not None:
                return stopped
            try:
                outcome = self._dispatcher.dispatch(engine.pending_call())
            except BaseException as exc:
                # Record the call with an error result before anything
                # propagates, so it is paired and never run again.
                transition = engine.tool_raised(exc)
                if not isinstance(exc, Exception):
                    raise
                return transition
            return engine.tool_returned(outcome)
        raise InvalidStateError(
            f"step() needs a run that is not over, but it ended in state "
            f"{engine.state.value!r}; read run.result()",
            state=engine.state,
        )
