"""The tool_result answering each call of a run's events, found once per batch.

The report and ``agentloop show`` name each call's result beside its event:
``Answers`` finds them all in time linear in the events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentloop._core.values import Transition

__all__ = ["Answers", "result_of"]


class Answers:
    """The tool_result answering each call of one run's events, each looked up once.

    A batch's results are appended together, after its message, by the event
    that closes it: the call's own event or the first later one that appends
    anything (a call's own event appends nothing while calls of its batch
    remain). Each event is scanned once to find its closing event, and each
    closing event's results are decoded once, so answering every call of a
    run is linear in its events, however large its batches.
    """

    __slots__ = ("_closers", "_events", "_results")

    def __init__(self, events: Sequence[Transition]) -> None:
        self._events = events
        #: The closing event of each event scanned so far (``None``: none follows).
        self._closers: dict[int, int | None] = {}
        #: A closing event's tool_results by call id (the first of an id counts).
        self._results: dict[int, dict[str | None, bytes]] = {}

    def closer(self, index: int) -> int | None:
        """The first event from ``index`` on that appends anything, or ``None``."""
        events, closers = self._events, self._closers
        index = range(len(events))[index]  # IndexError as for events[index]
        if index not in closers:
            at = index
            while at < len(events) and at not in closers and not events[at].appended_json:
                at += 1
            found = None if at == len(events) else closers.get(at, at)
            for scanned in range(index, at + 1 if found == at else at):
                closers[scanned] = found  # each event is scanned once
        return closers[index]

    def __call__(self, index: int) -> dict[str, Any] | None:
        """The tool_result answering the call ``events[index]`` names (fresh), or ``None``."""
        closer = self.closer(index)
        if closer is None:
            return None
        results = self._results.get(closer)
        if results is None:
            results = self._results[closer] = {}
            for data in self._events[closer].appended_json[1:]:
                found = orjson.loads(data)
                if type(found) is not dict:
                    continue
                key = found.get("id")
                # A call id is a str or None: no id of another type equals one.
                if key is None or type(key) is str:
                    results.setdefault(key, data)
        data = results.get(self._events[index].call_id, b"")
        return orjson.loads(data) if data else None


def result_of(events: Sequence[Transition], index: int) -> dict[str, Any] | None:
    """The tool_result answering the call ``events[index]`` names, or ``None``.

    For one event; ``Answers`` answers every event of a run in linear time.
    """
    return Answers(events)(index)
