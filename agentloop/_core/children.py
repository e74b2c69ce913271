"""``Children``: a run's child runs (its agent tools', ``Loop.as_tool``), by call id, read-only."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Children"]


class Children(Mapping[str, Any]):
    """A read-only mapping of call ids to the child runs' results that answered them.

    It can be pickled (a DBOS workflow returns results so), unlike a ``MappingProxyType``.
    """

    __slots__ = ("_results",)

    def __init__(self, results: Mapping[str, Any] = {}) -> None:
        self._results = dict(results)

    def __getitem__(self, call_id: str) -> Any:
        return self._results[call_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._results)

    def __len__(self) -> int:
        return len(self._results)

    def __repr__(self) -> str:
        return f"Children({self._results!r})"

    def __reduce__(self) -> tuple[type[Children], tuple[dict[str, Any]]]:
        return Children, (self._results,)
