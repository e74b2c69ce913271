"""Dispatching tool calls: the dispatcher protocol, and what ``Loop(tools=...)`` accepts.

A dispatcher turns one accepted call into an outcome
``{'status': ..., 'content': ...}``. The engine copies that outcome in and
checks it; a dispatcher that raises or answers with something else gives the
call an ``error`` result, so the loop goes on and the call stays paired. A
mapping of name to handler becomes a ``ToolRegistry`` (see ``_registry.py``).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from agentloop._registry import ToolRegistry

__all__ = ["Dispatcher", "as_dispatcher"]


@runtime_checkable
class Dispatcher(Protocol):
    """Anything that can run a call: ``dispatch(call) -> {'status', 'content'}``.

    The outcome may also carry ``'exception'``, the exception behind an
    ``error``: it is kept on the transition event for the caller and never
    enters the history. A dispatcher may also offer
    ``async adispatch(call, *, to_thread: bool)``, which the asyncio driver
    prefers; ``to_thread`` passes on ``Loop(to_thread=...)``: whether plain
    (non-async) handlers should run in a worker thread.
    """

    def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
        """Run ``call`` (a fresh copy) and return its outcome."""
        ...


def as_dispatcher(tools: object) -> Dispatcher:
    """Accept a mapping of handlers (made a ``ToolRegistry``), a dispatcher, or None."""
    if tools is None:
        return ToolRegistry()
    if isinstance(tools, Mapping):
        return ToolRegistry(tools)
    if callable(getattr(tools, "dispatch", None)):
        return typing.cast("Dispatcher", tools)
    raise TypeError(
        "expected tools to be a mapping of name -> callable or an object with "
        f"dispatch(call) -> dict, got {type(tools).__name__}"
    )
