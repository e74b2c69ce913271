"""The asyncio driver: the same engine, with async (or plain) models and tools.

``AsyncRun.astep()`` is ``Run.step()`` with awaits: it reports the same
checkpoints to the same engine, so every rule of the contract holds word for
word. What only asyncio has:

* A plain (non-``async``) model or tool is called directly on the event loop:
  it blocks the loop while it runs. ``Loop(..., to_thread=True)`` runs plain
  callables in a worker thread instead (``asyncio.to_thread``).
* Cancelling the task that awaits ``astep()`` ends the run ``cancelled`` and
  lets ``CancelledError`` propagate. While the model is awaited, the step
  counts and nothing is appended; while a tool is awaited, the tool's
  coroutine is cancelled too and the call is recorded with a ``cancelled``
  result, so no call is left unpaired. (A plain tool in a worker thread
  cannot be stopped: its thread finishes, and its result is discarded.)
* Timeouts: a model that does not answer within ``model_timeout`` seconds is a
  failed step; a tool that does not finish within ``tool_timeout`` gets an
  ``error`` result and the loop goes on. They can only interrupt an await, so
  they bite on async callables and on ``to_thread`` ones.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any, TypeVar

from agentloop._machine import State
from agentloop._run import RunView, is_async

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

    from agentloop._engine import Engine
    from agentloop._tools import Dispatcher
    from agentloop._values import Transition

__all__ = ["AsyncRun"]

_T = TypeVar("_T")

_AWAITING_MODEL, _VALIDATING, _DISPATCHING = (
    State.AWAITING_MODEL,
    State.VALIDATING,
    State.DISPATCHING,
)


async def _within(seconds: float | None, expired: str, awaitable: Awaitable[_T]) -> _T:
    """Await, within ``seconds`` if set; our own deadline raises ``TimeoutError(expired)``.

    A ``TimeoutError`` the awaited code raises itself passes through unchanged.
    No ``Timeout`` object is made when none is set: it is most of the driver's own cost.
    """
    if seconds is None:
        return await awaitable
    deadline = asyncio.timeout(seconds)
    try:
        async with deadline:
            return await awaitable
    except TimeoutError:
        if deadline.expired():
            raise TimeoutError(expired) from None
        raise


class AsyncRun(RunView):
    """One run under asyncio, driven one transition at a time by ``astep()``."""

    def __init__(
        self,
        engine: Engine,
        model: Callable[[list[dict[str, Any]]], object],
        dispatcher: Dispatcher,
        *,
        model_timeout: float | None,
        tool_timeout: float | None,
        to_thread: bool,
    ) -> None:
        super().__init__(engine)
        self._model = model
        self._dispatcher = dispatcher
        self._model_timeout = model_timeout
        self._tool_timeout = tool_timeout
        self._to_thread = to_thread
        self._async_listeners: list[Callable[[Transition], Awaitable[object]]] = []

    def subscribe(self, listener: Callable[[Transition], object]) -> None:
        """Call ``listener(transition)`` after every state change; it may be ``async``."""
        if is_async(listener):
            self._async_listeners.append(listener)  # type: ignore[arg-type]
        else:
            self._engine.subscribe(listener)

    async def __aiter__(self) -> AsyncIterator[Transition]:
        """Step until done, yielding each transition."""
        while not self.done:
            yield await self.astep()

    async def astep(self) -> Transition:
        """Perform exactly one transition and return it."""
        engine = self._engine
        state = engine.state
        if state is _AWAITING_MODEL:
            transition = engine.ask_model() or await self._ask_model()
        elif state is _VALIDATING:
            transition = engine.validate()
        elif state is _DISPATCHING:
            transition = engine.start_tool() or await self._run_tool()
        else:
            raise self._over()
        for listener in self._async_listeners:
            await listener(transition)
        return transition

    async def _ask_model(self) -> Transition:
        engine = self._engine
        try:
            reply = await _within(
                self._model_timeout,
                f"no reply within model_timeout={self._model_timeout} s",
                self._call(self._model, engine.history()),
            )
        except Exception as exc:  # noqa: BLE001 - a failing model is a state
            return engine.model_raised(exc)
        except BaseException as exc:
            # The task was cancelled (or interrupted): the run ends cancelled first.
            engine.model_interrupted(exc)
            raise
        return engine.model_replied(reply)

    async def _run_tool(self) -> Transition:
        engine = self._engine
        call = engine.pending_call()
        adispatch = getattr(self._dispatcher, "adispatch", None)
        try:
            outcome = await _within(
                self._tool_timeout,
                f"the tool did not finish within tool_timeout={self._tool_timeout} s",
                adispatch(call, to_thread=self._to_thread)
                if adispatch is not None
                else self._call(self._dispatcher.dispatch, call),
            )
        except Exception as exc:  # noqa: BLE001 - a failing dispatcher is an outcome
            return engine.tool_raised(exc)
        except BaseException as exc:
            # The call is paired with a cancelled result before this propagates.
            engine.tool_interrupted(exc)
            raise
        return engine.tool_returned(outcome)

    async def _call(self, fn: Callable[[Any], object], argument: object) -> object:
        """Call a model or dispatcher, plain or async, the way the loop was configured."""
        if self._to_thread and not is_async(fn):
            return await asyncio.to_thread(fn, argument)
        value = fn(argument)
        return await value if inspect.isawaitable(value) else value
