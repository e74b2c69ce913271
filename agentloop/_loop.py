"""``Loop``: a run's configuration (a model, its tools, budgets), and where runs start.

``start``/``run`` hand a fresh engine to the synchronous driver,
``astart``/``arun`` to the asyncio one. A ``Loop`` is reusable: every run has
its own counters, reserved ids and history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop._async import AsyncRun, async_dispatch
from agentloop._callbacks import is_async
from agentloop._core._engine import Engine
from agentloop._core._values import Budget, CancelToken, RunResult
from agentloop._sync import Run
from agentloop._tools._dispatcher import as_dispatcher

if TYPE_CHECKING:
    from collections.abc import Iterable

    from agentloop._callbacks import Dispatcher, Listener, Model

__all__ = ["Loop"]


class Loop:
    """Configuration for runs: a model, its tools and its budgets. Reusable.

    ``max_total_tokens`` (optional) ends a run ``exhausted`` before a model call
    once the tokens its replies reported (``usage``) reach it.
    ``tools`` is a mapping of name to handler (it becomes a ``ToolRegistry``),
    a ``ToolRegistry``, or any object with ``dispatch(call) -> {'status': ...,
    'content': ...}``. ``listeners`` are called with each transition of every
    run. ``model_timeout``, ``tool_timeout`` (seconds), ``to_thread`` (run
    plain callables in a worker thread) and ``max_concurrency`` (run up to that
    many calls of a batch at once; 1 runs them one at a time) need the asyncio
    driver: a synchronous run can neither interrupt a plain function nor run
    two at once, so ``start``/``run`` refuse them.
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: object = None,
        max_steps: int = 8,
        max_calls: int = 4,
        max_total_tokens: int | None = None,
        listeners: Iterable[Listener] = (),
        model_timeout: float | None = None,
        tool_timeout: float | None = None,
        to_thread: bool = False,
        max_concurrency: int = 1,
    ) -> None:
        if not callable(model):
            raise TypeError(
                f"expected model to be a callable taking the history, got {type(model).__name__}"
            )
        self.model = model
        self.dispatcher: Dispatcher = as_dispatcher(tools)
        self.budget = Budget(
            max_steps=max_steps, max_calls=max_calls, max_total_tokens=max_total_tokens
        )
        if callable(listeners) or isinstance(listeners, str | bytes):
            raise TypeError(
                "expected listeners to be an iterable of callables (say [listener]), "
                f"got {type(listeners).__name__}"
            )
        self.listeners = tuple(listeners)
        for index, listener in enumerate(self.listeners):
            if not callable(listener):
                raise TypeError(
                    f"expected listeners[{index}] to be callable, got {type(listener).__name__}"
                )
        self.model_timeout = _timeout("model_timeout", model_timeout)
        self.tool_timeout = _timeout("tool_timeout", tool_timeout)
        if type(to_thread) is not bool:
            raise TypeError(f"expected to_thread to be a bool, got {type(to_thread).__name__}")
        self.to_thread = to_thread
        if type(max_concurrency) is not int:
            raise TypeError(
                f"expected max_concurrency to be an int of 1 or more, got "
                f"{type(max_concurrency).__name__}"
            )
        if max_concurrency < 1:
            raise ValueError(
                f"expected max_concurrency to be an int of 1 or more, got {max_concurrency}"
            )
        self.max_concurrency = max_concurrency
        self._asyncio_only = [
            name
            for name, value in (
                ("an async model", is_async(model) or None),
                ("model_timeout", self.model_timeout),
                ("tool_timeout", self.tool_timeout),
                ("to_thread", self.to_thread or None),
                ("max_concurrency > 1", max_concurrency if max_concurrency > 1 else None),
            )
            if value is not None
        ]
        self._adispatch = async_dispatch(
            self.dispatcher, to_thread=to_thread, tool_timeout=self.tool_timeout
        )

    def __repr__(self) -> str:
        return (
            f"Loop({self.model!r}, tools={self.dispatcher!r}, "
            f"max_steps={self.budget.max_steps}, max_calls={self.budget.max_calls})"
        )

    def start(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> Run:
        """Begin a run driven by ``step()``; bad input raises here, before any model call."""
        if self._asyncio_only:
            needs = "needs" if len(self._asyncio_only) == 1 else "need"
            raise ValueError(
                f"{' and '.join(self._asyncio_only)} {needs} the asyncio driver (loop.arun or "
                "loop.astart): a synchronous run can neither await a model nor interrupt a "
                "plain function nor run two calls at once, and would silently ignore them"
            )
        engine = Engine(messages, budget=self.budget, cancel=cancel)
        return Run(engine, self.model, self.dispatcher.dispatch, self.listeners)

    def run(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> RunResult:
        """Run to a terminal state and return the result."""
        return self.start(messages, cancel=cancel).finish()

    def astart(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> AsyncRun:
        """Begin a run driven by ``await run.astep()`` (or ``async for``) under asyncio."""
        return AsyncRun(
            Engine(messages, budget=self.budget, cancel=cancel),
            self.model,
            self._adispatch,
            cancel=cancel,
            model_timeout=self.model_timeout,
            to_thread=self.to_thread,
            max_concurrency=self.max_concurrency,
            listeners=self.listeners,
        )

    async def arun(
        self, messages: str | list[dict[str, Any]], *, cancel: CancelToken | None = None
    ) -> RunResult:
        """Run to a terminal state under asyncio and return the result."""
        return await self.astart(messages, cancel=cancel).afinish()


def _timeout(name: str, value: object) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float):
        raise TypeError(
            f"{name} must be a positive number of seconds or None, got {type(value).__name__}"
        )
    if not 0 < value < float("inf"):  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r:.40}")
    return float(value)  # type: ignore[arg-type]
