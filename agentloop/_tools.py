"""Dispatching tool calls: the dispatcher protocol and the mapping form.

A dispatcher turns one accepted call into an outcome
``{'status': ..., 'content': ...}``. The engine copies that outcome in and
checks it; a dispatcher that raises or answers with something else gives the
call an ``error`` result, so the loop goes on and the call stays paired.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["Dispatcher", "ToolMap", "as_dispatcher"]


@runtime_checkable
class Dispatcher(Protocol):
    """Anything that can run a call: ``dispatch(call) -> {'status', 'content'}``.

    The outcome may also carry ``'exception'``, the exception behind an
    ``error``: it is kept on the transition event for the caller and never
    enters the history.
    """

    def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
        """Run ``call`` (a fresh copy) and return its outcome."""
        ...


# Annotations the mapping form checks; anything else is passed through unchecked.
_PLAIN: dict[Any, tuple[type, ...]] = {
    int: (int,),
    float: (int, float),
    str: (str,),
    bool: (bool,),
    list: (list,),
    dict: (dict,),
    type(None): (type(None),),
}


def _accepted_types(annotation: object) -> tuple[type, ...] | None:
    """The runtime types a plain annotation admits, or None if it is not plain."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        accepted: tuple[type, ...] = ()
        for member in typing.get_args(annotation):
            member_types = _accepted_types(member)
            if member_types is None:
                return None
            accepted += member_types
        return accepted
    if annotation is None:
        return (type(None),)
    return _PLAIN.get(origin or annotation)


def _type_name(types_: tuple[type, ...]) -> str:
    names = dict.fromkeys("null" if t is type(None) else t.__name__ for t in types_)
    return " or ".join(names)


class _Tool:
    """One handler, with its signature and checked parameters worked out once."""

    __slots__ = ("checks", "handler", "signature")

    def __init__(self, name: str, handler: Callable[..., Any]) -> None:
        if not callable(handler):
            raise TypeError(
                f"tool {name!r}: expected a callable handler, got {type(handler).__name__}"
            )
        self.handler = handler
        self.signature = inspect.signature(handler)
        try:
            # A callable object is annotated on its __call__, not its class.
            annotated = handler if inspect.isroutine(handler) else type(handler).__call__
            hints = typing.get_type_hints(annotated)
        except Exception as exc:
            raise TypeError(
                f"tool {name!r}: cannot resolve the handler's annotations: {exc}"
            ) from exc
        self.checks = {
            param: accepted
            for param in self.signature.parameters
            if param in hints and (accepted := _accepted_types(hints[param])) is not None
        }

    def problems(self, arguments: dict[str, Any]) -> list[dict[str, str]]:
        """Every reason the arguments do not fit the handler, as path/message pairs."""
        try:
            self.signature.bind(**arguments)
        except TypeError as exc:
            return [{"path": "", "message": str(exc)}]
        return [
            {
                "path": param,
                "message": f"expected {_type_name(accepted)}, got {type(value).__name__}",
            }
            for param, value in arguments.items()
            if (accepted := self.checks.get(param)) is not None
            # bool is an int in Python, but not a JSON number
            and (
                not isinstance(value, accepted)
                or (isinstance(value, bool) and bool not in accepted)
            )
        ]


class ToolMap:
    """The dispatcher for a mapping of tool name to handler.

    An unknown name gives ``unknown_tool``; arguments that do not bind to the
    handler's signature, or that miss a plain annotation (``int``, ``float``,
    ``str``, ``bool``, ``list``, ``dict`` and optionals of these), give
    ``invalid_arguments`` with every problem listed; a handler that raises
    gives ``error`` with the exception's type and message.
    """

    def __init__(self, tools: Mapping[str, Callable[..., Any]]) -> None:
        for name in tools:
            if not isinstance(name, str) or not name:
                raise TypeError(f"expected tool names to be non-empty str, got {name!r}")
        self._tools = {name: _Tool(name, handler) for name, handler in tools.items()}

    def __repr__(self) -> str:
        return f"ToolMap({sorted(self._tools)})"

    def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
        """Run ``call`` and return its outcome; never raises for an ``Exception``."""
        tool = self._tools.get(call["name"])
        if tool is None:
            available = ", ".join(sorted(self._tools)) or "none"
            return {
                "status": "unknown_tool",
                "content": f"no tool named {call['name']!r}; available: {available}",
            }
        problems = tool.problems(call["arguments"])
        if problems:
            return {"status": "invalid_arguments", "content": problems}
        try:
            value = tool.handler(**call["arguments"])
        except Exception as exc:  # noqa: BLE001 - a failing tool is an outcome
            return {
                "status": "error",
                "content": {"type": type(exc).__name__, "message": str(exc)},
                "exception": exc,  # kept on the transition event, never sent to the model
            }
        return {"status": "ok", "content": value}


def as_dispatcher(tools: object) -> Dispatcher:
    """Accept a mapping of handlers, a dispatcher, or None (no tools)."""
    if tools is None:
        return ToolMap({})
    if isinstance(tools, Mapping):
        return ToolMap(tools)
    if callable(getattr(tools, "dispatch", None)):
        return typing.cast("Dispatcher", tools)
    raise TypeError(
        "expected tools to be a mapping of name -> callable or an object with "
        f"dispatch(call) -> dict, got {type(tools).__name__}"
    )
