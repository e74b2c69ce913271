"""``Nested``: what a child run (an agent tool's, ``Loop.as_tool``) says, as its parent hears it.

A child run's deltas, progress and transitions reach the parent's delta
listeners tagged with the path of calls they came through: the parent's call
id first. Each level prepends its own, so a grandchild's delta reaches the top
run as ``Nested(("c1", "k2"), TextDelta(...))``, flat, never nested twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs

from agentloop._core.values import Transition
from agentloop._drivers.deltas import Delta
from agentloop._drivers.progress import ToolProgress

__all__ = ["HeardNested", "Nested", "listening"]


@attrs.frozen
class Nested:
    """An ``item`` of the child run reached through ``path``: call ids, the outermost first."""

    path: tuple[str, ...]
    item: Delta | ToolProgress | Transition

    def under(self, call_id: str) -> Nested:
        """The same item, one level further out: reached through ``call_id`` first."""
        return Nested((call_id, *self.path), self.item)


class HeardNested:
    """A delta listener that keeps the ``Nested`` items it hears, for a stream to yield.

    A child runs inside its call, where no stream of its parent can yield:
    ``stream()`` yields what was heard once the step that ran the call is made.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[Nested] = []

    def __call__(self, item: object) -> None:
        if type(item) is Nested:
            self._items.append(item)

    def taken(self) -> list[Nested]:
        """The items heard since last taken, in the order heard."""
        items, self._items = self._items, []
        return items


@contextlib.contextmanager
def listening(listeners: list[Any], listener: object) -> Iterator[None]:
    """``listener`` among a run's delta ``listeners`` while the block runs."""
    listeners.append(listener)
    try:
        yield
    finally:
        listeners.remove(listener)
