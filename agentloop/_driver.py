"""``Loop`` (configuration) and ``Run``, the synchronous driver.

A driver is the only place that calls the model and the tools. Each
``Run.step()`` reports to the engine what happened at one checkpoint and
returns the single transition that followed. ``Loop.astart``/``arun`` hand
the same engine to the asyncio driver in ``_async_driver.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from agentloop._async_driver import AsyncRun
from agentloop._engine import Engine, Listener
from agentloop._machine import State
from agentloop._messages import input_messages
from agentloop._run import RunView
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
    ``start`` (``arun``/``astart`` under asyncio) is an independent run with
    its own counters, reserved ids and history. ``model_timeout``,
    ``tool_timeout`` (seconds) and ``to_thread`` (run plain callables in a
    worker thread) apply to the asyncio driver.
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: object = None,
        max_steps: int = 8,
        max_calls: int = 4,
        listeners: tuple[Listener, ...] = (),
        model_timeout: float | None = None,
        tool_timeout: float | None = None,
        to_thread: bool = False,
    ) -> None:
        if not callable(model):
            raise TypeError(
                f"expected model to be a callable taking the history, got {type(model).__name__}"
            )
        self.model = model
        self.dispatcher: Dispatcher = as_dispatcher(tools)
        self.budget = Budget(max_steps=max_steps, max_calls=max_calls)
        self.listeners = tuple(listeners)
        self.model_timeout = _timeout("model_timeout", model_timeout)
        self.tool_timeout = _timeout("tool_timeout", tool_timeout)
        self.to_thread = bool(to_thread)

    def __repr__(self) -> str:
        return (
            f"Loop({self.model!r}, tools={self.dispatcher!r}, "
            f"max_steps={self.budget.max_steps}, max_calls={self.budget.max_calls})"
        )

    def start(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> Run:
        """Begin a run driven by ``step()``; bad input raises here, before any model call."""
        run = Run(self._engine(messages, cancel), self.model, self.dispatcher)
        for listener in self.listeners:
            run.subscribe(listener)
        return run

    def run(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> RunResult:
        """Run to a terminal state and return the result."""
        run = self.start(messages, cancel=cancel)
        for _ in run:
            pass
        return run.result()

    def astart(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> AsyncRun:
        """Begin a run driven by ``await run.astep()`` (or ``async for``) under asyncio."""
        run = AsyncRun(
            self._engine(messages, cancel),
            self.model,
            self.dispatcher,
            model_timeout=self.model_timeout,
            tool_timeout=self.tool_timeout,
            to_thread=self.to_thread,
        )
        for listener in self.listeners:
            run.subscribe(listener)
        return run

    async def arun(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> RunResult:
        """Run to a terminal state under asyncio and return the result."""
        run = self.astart(messages, cancel=cancel)
        async for _ in run:
            pass
        return run.result()

    def _engine(self, messages: object, cancel: CancelToken | None) -> Engine:
        if cancel is not None and not isinstance(cancel, CancelToken):
            raise TypeError(
                f"expected cancel to be a CancelToken or None, got {type(cancel).__name__}"
            )
        return Engine.start(input_messages(messages), self.budget, cancel)


def _timeout(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return float(value)


class Run(RunView):
    """One run, driven one transition at a time by ``step()``."""

    def __init__(self, engine: Engine, model: Model, dispatcher: Dispatcher) -> None:
        super().__init__(engine)
        self._model = model
        self._dispatcher = dispatcher

    def subscribe(self, listener: Callable[[Transition], object]) -> None:
        """Call ``listener(transition)`` after every state change from now on."""
        self._subscribe_sync(listener)

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
            except BaseException as exc:
                # KeyboardInterrupt and the like: the run ends cancelled first.
                engine.model_interrupted(exc)
                raise
            return engine.model_replied(reply)
        if state is _VALIDATING:
            return engine.validate()
        if state is _DISPATCHING:
            stopped = engine.start_tool()
            if stopped is not None:
                return stopped
            try:
                outcome = self._dispatcher.dispatch(engine.pending_call())
            except Exception as exc:  # noqa: BLE001 - a failing dispatcher is an outcome
                return engine.tool_raised(exc)
            except BaseException as exc:
                # The call is paired with a cancelled result before this propagates.
                engine.tool_interrupted(exc)
                raise
            return engine.tool_returned(outcome)
        raise self._over()
