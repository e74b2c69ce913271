"""Public names shown where they are imported from: ``agentloop.X``, not a private module."""

from __future__ import annotations

import inspect
import typing
from typing import Any

__all__ = ["publish"]


def publish(module: str, namespace: dict[str, Any], names: list[str]) -> None:
    """Name each class and function of ``names`` (in ``namespace``) as ``module``'s own.

    A traceback then reads ``agentloop.ConfigurationMismatchError``, not a private path.
    A class's own annotations are evaluated first, where they were written: once renamed,
    ``typing.get_type_hints`` would look its names up in ``module``, which has not got them.
    (A function's are looked up in its ``__globals__``, which renaming leaves alone.)
    """
    for name in names:
        value = namespace[name]
        if isinstance(value, type):
            _evaluate_annotations(value)
            value.__module__ = module
        elif inspect.isfunction(value):
            value.__module__ = module


def _evaluate_annotations(cls: type) -> None:
    own = vars(cls).get("__annotations__")
    if own:
        hints = typing.get_type_hints(cls, include_extras=True)
        cls.__annotations__ = {field: hints[field] for field in own}
