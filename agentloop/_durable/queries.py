"""The SQL a ``SQLiteLedger`` reads with, and reading what may be damaged.

A record's row id is its place: its run's row id * ``RUN`` + its place in the
run (``files.py``), so a run's records are one range of the records' B-tree.
A run's id is read as bytes with its SQLite type (``read_run_id`` makes it text),
so that text that is not UTF-8 in one run's id is that run's damage, not every
listing's; a commit time is read only where it is a number (anything else is
damage: no time).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Final

from agentloop._durable.protocol import LedgerRecord
from agentloop._errors import LedgerError

__all__ = [
    "CHANGED",
    "ENDED",
    "KEYS",
    "KINDS",
    "KIND_OF",
    "RECORDS",
    "RUN",
    "RUN_IDS",
    "commit_time",
    "read_run_id",
    "records_read",
]

#: Each record kind's number in the ``kind`` column (a number: a few bytes less a record).
KINDS: Final = {
    "reply": 1,
    "tool_started": 2,
    "tool_finished": 3,
    "approval_asked": 4,
    "call_waits": 5,
    "decision": 6,
    "handoff": 7,
    "output_checked": 8,
    "end": 9,
}
#: Each number's kind.
KIND_OF: Final = {number: kind for kind, number in KINDS.items()}
#: How many places a run has: its records' row ids are its own row id * ``RUN`` + a place.
RUN: Final = 2**32

#: A run's records, in order, between its first place and its last (two parameters).
RECORDS: Final = "SELECT kind, key, body FROM records WHERE place BETWEEN ? AND ? ORDER BY place"
#: A run's records' kinds and keys, between its first place and its last.
KEYS: Final = "SELECT kind, key FROM records WHERE place BETWEEN ? AND ?"
#: Whether a run (``runs.id``) ended: the ``ends`` index answers it.
ENDED: Final = (
    "EXISTS (SELECT 1 FROM records WHERE kind = 9 "
    "AND place BETWEEN runs.id * 4294967296 AND runs.id * 4294967296 + 4294967295)"
)
#: Each run's id.
RUN_IDS: Final = "SELECT CAST(run_id AS BLOB), typeof(run_id) FROM runs"
#: Each run's id and its last record's commit time, else its start's: the last record is
#: found at the end of the run's range, without reading the others.
CHANGED: Final = (
    "SELECT CAST(run_id AS BLOB), typeof(run_id), COALESCE("
    "(SELECT CASE WHEN typeof(at) IN ('integer', 'real') THEN at END FROM records "
    "WHERE place BETWEEN runs.id * 4294967296 AND runs.id * 4294967296 + 4294967295 "
    "ORDER BY place DESC LIMIT 1), "
    "CASE WHEN typeof(at) IN ('integer', 'real') THEN at END) FROM runs ORDER BY id"
)


def read_run_id(raw: bytes, kind: str) -> str:
    """A run's id as read: its text, or the bytes stored when they are not text."""
    if kind == "text":
        with contextlib.suppress(UnicodeDecodeError):
            return raw.decode()
    return raw  # type: ignore[return-value]  # damaged: no run id, as readers see


def records_read(run: str, rows: list[tuple[Any, Any, Any]]) -> list[LedgerRecord]:
    """The records ``rows`` (``RECORDS``) hold; ``LedgerError`` naming ``run`` if one is damaged."""
    records: list[LedgerRecord] = []
    for number, key, body in rows:
        kind = KIND_OF.get(number)
        if kind is None or type(key) is not str or type(body) is not bytes:
            raise LedgerError(
                f"{run}: record {len(records)} is damaged"
                + ("" if kind else f": no kind numbered {number!r} (a newer agentloop's?)")
            )
        records.append(LedgerRecord(kind, key, body))
    return records


def commit_time(at: float | None) -> float | None:
    """A commit's time, or None where the file holds none (or no time a clock shows)."""
    return None if at is None or not math.isfinite(at) else float(at)
