"""A run's transitions as a read-only sequence, made on demand from its record (``log.py``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

from agentloop._core.values import Transition

if TYPE_CHECKING:
    from agentloop._core.log import Log

__all__ = ["Events"]


class Events(Sequence[Transition]):
    """A run's transitions, the first ``count`` of its ``Log``, made on demand.

    A read-only sequence: ``len``, an index (a ``Transition``), a slice (a
    tuple of them), iteration, and ``==`` against a tuple or list of
    transitions (the same transitions are equal). The log only grows, and a
    view keeps the newest events as they were made when it was taken: it
    keeps saying what it said.
    """

    __slots__ = ("_buffer", "_count", "_ends", "_first", "_log", "_made")

    def __init__(
        self,
        log: Log | None,
        count: int,
        buffer: bytes | bytearray,
        ends: Sequence[int],
        made: Sequence[Transition | None],
        first: int,
    ) -> None:
        """The first ``count`` events of ``log``: from ``first`` on, as ``made`` holds them.

        Those ``made`` holds as None (compacted) are read from ``buffer`` at ``ends``.
        """
        self._log, self._count, self._buffer, self._ends = log, count, buffer, ends
        self._made, self._first = made, first

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Transition: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Transition, ...]: ...

    def __getitem__(self, index: int | slice) -> Transition | tuple[Transition, ...]:
        if isinstance(index, slice):
            return tuple(self._at(i) for i in range(*index.indices(self._count)))
        count = self._count
        if not -count <= index < count:
            raise IndexError("event index out of range")
        return self._at(index + count if index < 0 else index)

    def _at(self, index: int) -> Transition:
        if index >= self._first:
            event = self._made[index - self._first]
            if event is not None:
                return event
        assert self._log is not None, "an event not kept as made is in the log's columns"
        return self._log.event(index, self._buffer, self._ends)

    def __iter__(self) -> Iterator[Transition]:
        for index in range(self._count):
            yield self._at(index)

    def __reversed__(self) -> Iterator[Transition]:
        for index in reversed(range(self._count)):
            yield self._at(index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Events | tuple | list):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled and deep-copied as the transitions themselves: equal, and detached.
        return tuple, (tuple(self),)
