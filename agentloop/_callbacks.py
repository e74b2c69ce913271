"""What drivers call: the model, the dispatcher and listeners, as types.

A model is given a fresh copy of the history and answers with a reply. A
dispatcher turns one accepted call into an outcome
``{'status': ..., 'content': ...}`` (optionally ``'exception'``, the exception
behind an ``error``, kept on the transition event and never in the history);
it may also offer ``async adispatch(call, *, to_thread)``, which the asyncio
driver prefers. A listener is called with each transition as it happens.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from agentloop._core._values import Transition

__all__ = ["Dispatcher", "Listener", "Model", "is_async"]

#: A model: given a copy of the history, return (or, ``async``, await) a reply.
Model = Callable[[list[dict[str, Any]]], object]

#: A listener: called (or, under asyncio, possibly awaited) with each transition.
Listener = Callable[[Transition], object | Awaitable[object]]


@runtime_checkable
class Dispatcher(Protocol):
    """Anything that can run a call: ``dispatch(call) -> {'status', 'content'}``.

    ``status`` is one of ``ok``, ``error``, ``denied``, ``invalid_arguments``,
    ``unknown_tool``; ``content`` is JSON. Anything else (or a raise) gives
    the call an ``error`` result, and the loop goes on. An optional
    ``async adispatch(call, *, to_thread: bool)`` is preferred by the asyncio
    driver; ``to_thread`` passes on ``Loop(to_thread=...)``.
    """

    def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
        """Run ``call`` (a fresh copy) and return its outcome."""
        ...


def is_async(fn: object) -> bool:
    """Whether calling ``fn`` gives a coroutine (an ``async def`` function or ``__call__``)."""
    if inspect.iscoroutinefunction(fn):
        return True
    try:
        call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object's own __call__
    except Exception:  # noqa: BLE001 - a broken __getattr__ is not async
        return False
    return inspect.iscoroutinefunction(call)
