"""What ``Loop(tools=...)`` accepts: handlers, ``Tool`` objects, a registry, a dispatcher."""

from __future__ import annotations

import typing
from collections.abc import Mapping

from agentloop._tools.registry import ToolRegistry
from agentloop._tools.tool import Tool

if typing.TYPE_CHECKING:
    from agentloop._drivers.callbacks import Dispatcher

__all__ = ["as_dispatcher"]


def as_dispatcher(tools: object) -> Dispatcher:
    """A ``ToolRegistry`` of handlers by name, or of a list of ``Tool`` objects and handlers.

    A dispatcher is taken as it is; ``None`` is no tools.
    """
    if tools is None:
        return ToolRegistry()
    if isinstance(tools, Mapping):
        return ToolRegistry(tools)
    if isinstance(tools, type):  # a class has dispatch too, unbound: say what to do
        raise TypeError(
            f"expected tools to be a list of Tools (or handlers), a mapping, or a dispatcher, "
            f"got the class {tools.__name__}: make one (say {tools.__name__}([...]))"
        )
    try:
        dispatch = getattr(tools, "dispatch", None)
    except Exception:  # noqa: BLE001 - a broken attribute is no dispatch method
        dispatch = None
    if callable(dispatch):
        return typing.cast("Dispatcher", tools)
    if isinstance(tools, list | tuple):
        for index, tool in enumerate(tools):
            if not (isinstance(tool, Tool) or callable(tool)):
                raise TypeError(
                    f"expected tools[{index}] to be a Tool or a callable handler, "
                    f"got {type(tool).__name__}"
                )
        return ToolRegistry(tools)
    raise TypeError(
        "expected tools to be a list of Tools (or handlers), a mapping of name -> handler, "
        f"a ToolRegistry, or an object with dispatch(call) -> dict, got {type(tools).__name__}"
    )
