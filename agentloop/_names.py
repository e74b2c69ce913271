"""Public names shown where they are imported from: ``agentloop.X``, not a private module."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["publish"]


def publish(module: str, namespace: dict[str, Any], names: list[str]) -> None:
    """Name each class and function of ``names`` (in ``namespace``) as ``module``'s own.

    A traceback then reads ``agentloop.ConfigurationMismatchError``, not a private path.
    """
    for name in names:
        value = namespace[name]
        if isinstance(value, type) or inspect.isfunction(value):
            value.__module__ = module
