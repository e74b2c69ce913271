"""What ``Loop(tools=...)`` accepts: a mapping of handlers, a registry, or a dispatcher."""

from __future__ import annotations

import typing
from collections.abc import Mapping

from agentloop._tools._registry import ToolRegistry

if typing.TYPE_CHECKING:
    from agentloop._callbacks import Dispatcher

__all__ = ["as_dispatcher"]


def as_dispatcher(tools: object) -> Dispatcher:
    """Accept a mapping of handlers (made a ``ToolRegistry``), a dispatcher, or None."""
    if tools is None:
        return ToolRegistry()
    if isinstance(tools, Mapping):
        return ToolRegistry(tools)
    try:
        dispatch = getattr(tools, "dispatch", None)
    except Exception:  # noqa: BLE001 - a broken attribute is no dispatch method
        dispatch = None
    if callable(dispatch):
        return typing.cast("Dispatcher", tools)
    raise TypeError(
        "expected tools to be a mapping of name -> callable or an object with "
        f"dispatch(call) -> dict, got {type(tools).__name__}"
    )
