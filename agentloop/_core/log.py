"""The run's record, held once: its events as columns, with references into the history.

The transcript is the run's ``History``: one JSON buffer and where each
message ends. The newest events are kept as the engine made them (a list
append a transition: the engine's step pays nothing for its record); once
twice ``KEEP`` are, the oldest ``KEEP`` are compacted into columns that hold
only what each event adds. Its row (source, dest, trigger, guard), its
counters, how many messages the history held after it, its result status,
its tool and whether it started its own call, as C ints (4 bytes each); its
times as floats; its call's id. The calls it started, when they are not
just its own, are kept. What came from outside with it (``input_json``)
becomes a reference into the transcript wherever a message holds those
bytes, whole or as a tool result's content; else the bytes are kept. The
fields few events set (reason, error, usage, decisions...) are kept for
those events only.

``Transition``s of compacted events are made on demand (``Events``): equal,
field by field, times included, to the ones the engine handed out.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any, Final, Protocol, overload

from agentloop._core.events import Events
from agentloop._core.messages import RESULT_STATUSES
from agentloop._core.table import Guard, State, Trigger
from agentloop._core.values import Transition

__all__ = ["KEEP", "Log", "Moved"]

#: How many events are compacted at a time; between ``KEEP`` and twice as many newest
#: ones are kept as made.
KEEP: Final = 32
_new: Final = tuple.__new__  # a NamedTuple made positionally: five times cheaper
_NONE: Final = math.nan  # a time that is None, in a column of floats
# Numbers an event: row, steps, calls, mark, where, length, status, tool, started.
_WIDTH: Final = 9
_LARGEST: Final = 2**31 - 1  # what a column holds (a C int)
_WHOLE: Final = -1  # an input's length: the whole message
_NOWHERE: Final = -1  # an input's message: none (or its bytes are kept)
_NO_CALLS, _ITS_CALL, _CALLS = 0, 1, 2  # the calls it started: none, the one it names, kept
# The fields few events set: kept, as one tuple, only for an event that sets one.
_RARE: Final = (9, 10, 11, 13, 16, 17, 20, 21, 22, 23, 24)
_rare_of: Final = itemgetter(*_RARE)
_RARE_NAMES: Final = tuple(Transition._fields[i] for i in _RARE)
_USUAL: Final = tuple(Transition._field_defaults[Transition._fields[i]] for i in _RARE)
_REPLIED: Final = Trigger.MODEL_REPLIED
_NO_COLUMNS: Final = array("i")  # never extended: a log's until its first compaction
_NO_TIMES: Final = array("d")  # likewise
_NO_NAMES: Final[list[Any]] = []  # never appended to, likewise
_NO_ENTRIES: Final[dict[int, Any]] = {}  # never written to, likewise


class Moved(Protocol):
    """What a reader of the record's rows reads: a ``Transition``'s, or the table's ``Row``'s."""

    @property
    def source(self) -> State: ...

    @property
    def dest(self) -> State | None: ...

    @property
    def trigger(self) -> Trigger: ...

    @property
    def guard(self) -> Guard | None: ...


class Log(list[Transition | None]):
    """One run's events: the newest as made, the rest as columns over the history.

    A list of every event as made, compacted ones ``None`` (one object for
    the collector to walk while the run is short). Append-only: ``add`` is
    the commit. A compaction writes the columns first and drops the
    transitions it compacted after: an interruption between its steps
    leaves the log as it was.
    """

    __slots__ = ("columns", "exact", "given", "held", "named", "rare", "started", "times", "tools")

    def __init__(self, given: int) -> None:
        super().__init__()
        self.given = given  # the input's messages
        # _WIDTH numbers a compacted event: its row's code, steps, calls, mark (messages
        # after it), its input's message and length, its status's code, its tool's code
        # and which calls it started. C ints, 4 bytes: a run of 2**31 events or messages
        # would hold tens of GB first, and an input longer than that is kept as bytes.
        # These and the lists, dicts and times below are the shared empty ones until the
        # first compaction.
        self.columns = _NO_COLUMNS
        self.times = _NO_TIMES  # two floats each: at and took (NaN: None)
        self.named: list[str | None] = _NO_NAMES  # the call_id of each
        self.tools: list[str | None] = _NO_NAMES  # the tools, by code (0: None)
        # By compacted event, where there are any:
        self.started: dict[int, tuple[str, ...]] = _NO_ENTRIES  # calls, but its own, started
        self.rare: dict[int, tuple[Any, ...]] = _NO_ENTRIES  # the rare fields it set
        self.held: dict[int, bytes] = _NO_ENTRIES  # its input, where no message holds it
        self.exact: dict[int, tuple[Any, Any]] = _NO_ENTRIES  # its times, if not floats

    @property
    def compacted(self) -> int:
        """How many of the first events the columns hold."""
        return len(self.columns) // _WIDTH

    def add(self, event: Transition) -> None:
        """Record ``event``, whose messages the history already holds."""
        self.append(event)  # the commit
        if len(self) - len(self.columns) // _WIDTH >= 2 * KEEP:
            self._compact()

    @property
    def last(self) -> Transition:
        """The newest event (always kept as made)."""
        last = self[-1]
        assert last is not None, "the newest events are kept as made"
        return last

    def _compact(self) -> None:
        """Compact the oldest ``KEEP`` events kept as made into the columns."""
        made, first = self, len(self.columns) // _WIDTH
        if not first:
            self.columns, self.times = array("i"), array("d")
            self.named, self.tools = [], [None]
            self.started, self.rare, self.held, self.exact = {}, {}, {}, {}
        del self.times[2 * first :], self.named[first:]  # what an interrupted compaction left
        mark = self.mark(first - 1)
        numbers: list[int] = []
        times: list[float] = []
        for index in range(first, first + KEEP):
            event = made[index]
            assert event is not None, "kept as made until compacted"
            mark += len(event.appended_json)
            where, length = _NOWHERE, _WHOLE
            given = event.input_json
            if given is not None:
                found = self._find(given, index, mark - len(event.appended_json))
                if found is None or found[1] > _LARGEST:
                    self.held[index] = given
                else:
                    where, length = found
            at, took = event.at, event.took
            if type(at) is not float or (took is not None and type(took) is not float):
                self.exact[index] = (at, took)
                at, took = _NONE, None
            rare = _rare_of(event)
            if rare != _USUAL:
                self.rare[index] = rare
            call_id, started = event.call_id, event.started
            if not started:
                begun = _NO_CALLS
            elif len(started) == 1 and started[0] == call_id:
                begun = _ITS_CALL
            else:
                begun, self.started[index] = _CALLS, started
            self.named.append(call_id)
            numbers += (
                _row_code(event),
                event.steps,
                event.calls,
                mark,
                where,
                length,
                _status_code(event.result_status),
                self._tool_code(event.tool),
                begun,
            )
            times += (at, _NONE if took is None else took)
        self.times.fromlist(times)
        self.columns.fromlist(numbers)  # the compaction's commit
        made[first : first + KEEP] = [None] * KEEP

    def _tool_code(self, tool: str | None) -> int:
        """``tool``'s code: its place among the run's tools, added if new."""
        tools = self.tools
        if tool is None:
            return 0
        try:
            return tools.index(tool)  # a run calls a few tools
        except ValueError:
            tools.append(tool)
            return len(tools) - 1

    def _find(self, data: bytes, index: int, at: int) -> tuple[int, int] | None:
        """Where a message from ``at`` on holds ``data``: its index, and the length in it.

        Looked for in the messages of event ``index`` and of the events after
        it, up to the next reply's: a reply and its batch's outcomes are
        appended by then.
        """
        made = self
        for later in range(index, len(made)):
            event = made[later]
            assert event is not None, "the events after one being compacted are as made"
            if later > index and event.trigger is _REPLIED:
                return None
            for message in event.appended_json:
                if message is data or message == data:
                    return at, _WHOLE
                if message.endswith(data, 0, len(message) - 1) and message[-1] == 0x7D:
                    return at, len(data)  # a tool result's content: its last field
                at += 1
        return None

    def mark(self, index: int) -> int:
        """How many messages the history holds after event ``index`` (-1: before the first)."""
        if index < 0:
            return self.given
        first = len(self.columns) // _WIDTH
        if index < first:
            return self.columns[index * _WIDTH + 3]
        mark = self.mark(first - 1)
        for event in self[first : index + 1]:
            assert event is not None, "kept as made"
            mark += len(event.appended_json)
        return mark

    def counts(self, index: int) -> tuple[int, int]:
        """The steps and calls after event ``index``."""
        if index >= len(self.columns) // _WIDTH:
            event = self[index]
            assert event is not None, "kept as made"
            return event.steps, event.calls
        at = index * _WIDTH
        return self.columns[at + 1], self.columns[at + 2]

    def named_call(self, index: int) -> str | None:
        """The id of the call event ``index`` names, if any."""
        event = self[index]
        return self.named[index] if event is None else event.call_id

    def started_calls(self, index: int) -> tuple[str, ...]:
        """The ids of the calls event ``index`` records as started."""
        event = self[index]
        return self._started(index) if event is None else event.started

    def _started(self, index: int) -> tuple[str, ...]:
        """The calls compacted event ``index`` started."""
        begun = self.columns[index * _WIDTH + 8]
        if begun == _ITS_CALL:
            return (self.named[index],)  # type: ignore[return-value]  # a call's id: a str
        return () if begun == _NO_CALLS else self.started[index]

    def field(self, index: int, name: str) -> Any:
        """One of the fields few events set (``reason``, ``usage``...) of event ``index``."""
        event = self[index]
        if event is not None:
            return getattr(event, name)
        return self.rare.get(index, _USUAL)[_RARE_NAMES.index(name)]

    def usages(self) -> list[Any]:
        """The usage every event that reported one reported, in order."""
        first = len(self.columns) // _WIDTH
        compacted = [rare[3] for index, rare in self.rare.items() if index < first]
        recent = [event.usage for event in self[first:] if event is not None]
        return [usage for usage in (*compacted, *recent) if usage is not None]

    @property
    def rows(self) -> Sequence[Moved]:
        """The row each event took (its source, dest, trigger and guard), in order."""
        return _Rows(self)

    def moved(self, index: int) -> Moved:
        """Event ``index``'s row (or the event itself, as made)."""
        event = self[index]
        if event is not None:
            return event
        return _ROWS[self.columns[index * _WIDTH]]

    def view(
        self, count: int, buffer: bytes | bytearray, ends: Sequence[int], *, final: bool = False
    ) -> Events:
        """The first ``count`` events, their messages read from ``buffer`` at ``ends``.

        ``final``: the log grows no more (the run is over), so the view reads the
        events as made from it; else it keeps its own list of them.
        """
        first = min(count, len(self.columns) // _WIDTH)
        if final and first:
            return Events(self, count, buffer, ends, self, 0)
        made = tuple(self[first:count])
        if not first:  # nothing compacted: the events are all it needs
            return Events(None, count, b"", (), made, 0)
        return Events(self, count, buffer, ends, made, first)

    def event(self, index: int, buffer: bytes | bytearray, ends: Sequence[int]) -> Transition:
        """Compacted event ``index`` as a ``Transition``, its messages read from ``buffer``."""
        at = index * _WIDTH
        code, steps, calls, mark, where, length, status, tool = self.columns[at : at + _WIDTH - 1]
        row = _ROWS[code]
        appended = tuple(_message(buffer, ends, k) for k in range(self.mark(index - 1), mark))
        given = self.held.get(index)
        if given is None and where >= 0:
            given = _message(buffer, ends, where)
            if length != _WHOLE:
                given = given[len(given) - 1 - length : len(given) - 1]
        time, took = self.times[2 * index : 2 * index + 2]
        times = self.exact.get(index) or (time, None if math.isnan(took) else took)
        rare = self.rare.get(index, _USUAL)
        return _new(  # the fields, in Transition's order
            Transition,
            (
                row.source,
                row.dest,
                row.trigger,
                row.guard,
                steps,
                calls,
                self.named[index],
                self.tools[tool],
                _STATUSES[status],  # result_status
                *rare[:3],  # reason, error, exception
                appended,
                rare[3],  # usage
                *times,
                *rare[4:6],  # pending, decisions
                self._started(index),
                given,
                *rare[6:],  # context, wait, model, partial_text, agent
            ),
        )


# Every row an event took, by code (the row a transition's source, trigger and guard
# name: one per key, as the whole table has them), and every result status.
_ROWS: Final[list[Moved]] = []
_ROW_CODES: Final[dict[tuple[State, Trigger, Guard | None], int]] = {}
_STATUSES: Final[list[str | None]] = [None, *sorted(RESULT_STATUSES)]
_CODES: Final[dict[str | None, int]] = {status: i for i, status in enumerate(_STATUSES)}
_REGISTER: Final = threading.Lock()


class _Moved(tuple[State, State, Trigger, "Guard | None"]):
    """A row's source, dest, trigger and guard, as a compacted event keeps them."""

    __slots__ = ()

    source = property(itemgetter(0))
    dest = property(itemgetter(1))
    trigger = property(itemgetter(2))
    guard = property(itemgetter(3))


def _row_code(event: Transition) -> int:
    key = (event.source, event.trigger, event.guard)
    code = _ROW_CODES.get(key)
    if code is None or _ROWS[code].dest is not event.dest:
        with _REGISTER:
            moved = _Moved((event.source, event.dest, event.trigger, event.guard))
            code = next((i for i, row in enumerate(_ROWS) if row == moved), None)
            if code is None:
                code = len(_ROWS)
                _ROWS.append(moved)
            _ROW_CODES.setdefault(key, code)
    return code


def _status_code(status: str | None) -> int:
    code = _CODES.get(status)
    if code is None:
        with _REGISTER:
            code = _CODES.get(status)
            if code is None:
                code = _CODES[status] = len(_STATUSES)
                _STATUSES.append(status)
    return code


class _Rows(Sequence[Moved]):
    """The rows a log's events took, in order."""

    __slots__ = ("_log",)

    def __init__(self, log: Log) -> None:
        self._log = log

    def __len__(self) -> int:
        return len(self._log)

    @overload
    def __getitem__(self, index: int) -> Moved: ...

    @overload
    def __getitem__(self, index: slice) -> list[Moved]: ...

    def __getitem__(self, index: int | slice) -> Moved | list[Moved]:
        count = len(self._log)
        if isinstance(index, slice):
            return [self._log.moved(i) for i in range(*index.indices(count))]
        if not -count <= index < count:
            raise IndexError("row index out of range")
        return self._log.moved(index % count)

    def __iter__(self) -> Iterator[Moved]:
        moved = self._log.moved
        for index in range(len(self._log)):
            yield moved(index)

    def __reversed__(self) -> Iterator[Moved]:
        moved = self._log.moved
        for index in reversed(range(len(self._log))):
            yield moved(index)


def _message(buffer: bytes | bytearray, ends: Sequence[int], index: int) -> bytes:
    start = ends[index - 1] + 1 if index else 1
    return bytes(buffer[start : ends[index]])
