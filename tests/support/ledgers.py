"""Ledgers for the tests: one in memory (the protocol, implemented again), and one that crashes.

``MemoryLedger`` is a second implementation of the ``Ledger`` protocol, so
the durable driver is tested against the protocol and not against SQLite's
quirks. ``CrashingLedger`` simulates a process dying at one append, in
process: it raises ``Crash`` (a ``BaseException``, as a signal would stop
everything) around that append, and refuses every later one, so nothing the
"dead" process does afterwards reaches the ledger.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from typing import TYPE_CHECKING, Any, Literal

import orjson

import agentloop
from agentloop._durable.queries import KIND_OF

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from agentloop.ledger import LedgerRecord


class Crash(BaseException):
    """The simulated death of the process."""


def stored(path: str | Path) -> list[tuple[str, str, str]]:
    """Every record an ``SQLiteLedger`` file holds, in commit order: (run id, kind, key).

    Read with SQL, as the file holds them (a record's place: its run's row id * 2**32 + its
    place in the run; its kind, a number); across runs, in the order of their commit times.
    """
    with contextlib.closing(sqlite3.connect(path)) as raw:
        rows = raw.execute(
            "SELECT runs.run_id, records.kind, records.key FROM records "
            "JOIN runs ON runs.id = records.place >> 32 ORDER BY records.at, records.place"
        ).fetchall()
    return [(run_id, KIND_OF[kind], key) for run_id, kind, key in rows]


def unsound(records: list[tuple[str, str, str]]) -> tuple[list[object], list[object]]:
    """What no ledger may hold: a (run, kind, key) twice, and an outcome of a call not started."""
    twice = [record for record in set(records) if records.count(record) > 1]
    started = {(run_id, key) for run_id, kind, key in records if kind == "tool_started"}
    unstarted = [
        (run_id, key)
        for run_id, kind, key in records
        if kind == "tool_finished" and (run_id, key) not in started
    ]
    return list(twice), list(unstarted)


def replies_recorded(records: list[LedgerRecord]) -> int:
    """How many model replies ``records`` hold (each goes with what first acts on it)."""
    return sum(
        event["on"] == "model_replied" for record in records for event in orjson.loads(record.body)
    )


class MemoryLedger:
    """The ``Ledger`` protocol over dicts: one writer per run, unique ``(kind, key)``."""

    def __init__(self) -> None:
        self.headers: dict[str, bytes] = {}
        self.records: dict[str, list[LedgerRecord]] = {}
        self.claimed: set[str] = set()
        self.appends = 0
        self._lock = threading.RLock()  # the garbage collector may release a claim anywhere

    def create(self, run_id: str, header: bytes) -> MemoryWriter:
        with self._lock:
            if run_id in self.headers:
                raise agentloop.ledger.RunExistsError(f"run {run_id!r} exists")
            self.headers[run_id], self.records[run_id] = header, []
            self.claimed.add(run_id)
        return MemoryWriter(self, run_id)

    def claim(self, run_id: str) -> MemoryWriter:
        with self._lock:
            if run_id not in self.headers:
                raise agentloop.ledger.RunNotFoundError(f"no run {run_id!r}")
            if run_id in self.claimed:
                raise agentloop.ledger.RunBusyError(f"run {run_id!r} is claimed")
            self.claimed.add(run_id)
        return MemoryWriter(self, run_id)

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        with self._lock:
            if run_id not in self.headers:
                raise agentloop.ledger.RunNotFoundError(f"no run {run_id!r}")
            return self.headers[run_id], list(self.records[run_id])


class MemoryWriter:
    """The claim on one run of a ``MemoryLedger``."""

    def __init__(self, ledger: MemoryLedger, run_id: str) -> None:
        self.ledger, self.run_id, self.released = ledger, run_id, False

    def append(self, record: LedgerRecord) -> None:
        ledger = self.ledger
        with ledger._lock:
            if self.released:
                raise agentloop.ledger.LedgerError("released")
            records = ledger.records[self.run_id]
            if any((r.kind, r.key) == (record.kind, record.key) for r in records):
                raise agentloop.ledger.LedgerError(f"{record.kind} {record.key!r} twice")
            records.append(record)
            ledger.appends += 1

    def release(self) -> None:
        with self.ledger._lock:
            if not self.released:
                self.released = True
                self.ledger.claimed.discard(self.run_id)


class CrashingLedger:
    """Wraps a ledger; at its ``at``-th append (counted from 1) the process "dies"."""

    def __init__(
        self, inner: agentloop.ledger.Ledger, at: int, when: Literal["before", "after"] = "before"
    ) -> None:
        self.inner, self.at, self.when = inner, at, when
        self.appends = 0
        self.dead = False

    def die(self) -> None:
        """Die now (a tool calls this right after its effect)."""
        self.dead = True
        raise Crash("the process died")

    def create(self, run_id: str, header: bytes) -> CrashingWriter:
        return CrashingWriter(self, self.inner.create(run_id, header))

    def claim(self, run_id: str) -> CrashingWriter:
        return CrashingWriter(self, self.inner.claim(run_id))

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        return self.inner.read(run_id)


class InterruptingLedger(CrashingLedger):
    """A ``CrashingLedger`` whose chosen append is interrupted (``KeyboardInterrupt``) before
    or after its commit, once: the process lives on, and later appends go through."""

    def die(self) -> None:
        raise KeyboardInterrupt("interrupted as a record was written")


class CrashingWriter:
    """A writer that crashes at its ledger's chosen append, then records nothing more."""

    def __init__(self, ledger: CrashingLedger, inner: agentloop.ledger.LedgerWriter) -> None:
        self.ledger, self.inner = ledger, inner

    def append(self, record: LedgerRecord) -> None:
        ledger = self.ledger
        if ledger.dead:
            raise agentloop.ledger.LedgerError("the process is dead")
        ledger.appends += 1
        if ledger.appends == ledger.at and ledger.when == "before":
            ledger.die()
        self.inner.append(record)
        if ledger.appends == ledger.at and ledger.when == "after":
            ledger.die()

    def release(self) -> None:
        # A dead process's claim goes with it (the OS drops its locks).
        self.inner.release()


def unknown_ids(
    transcript: list[dict[str, object]], baseline: list[dict[str, object]], idempotent: set[str]
) -> set[str]:
    """Check ``transcript`` equals ``baseline`` but for outcome-unknown results; their ids.

    A result may differ only by being the documented ``error`` with content
    type ``OutcomeUnknown``, and only for a tool that is not idempotent.
    """
    assert len(transcript) == len(baseline), (transcript, baseline)
    unknown = set()
    for got, want in zip(transcript, baseline, strict=True):
        if got == want:
            continue
        content = got.get("content")
        assert got["kind"] == want["kind"] == "tool_result", (got, want)
        assert (got["id"], got["name"]) == (want["id"], want["name"]), (got, want)
        assert got["status"] == "error", got
        assert isinstance(content, dict), got
        assert content["type"] == "OutcomeUnknown", got
        assert got["name"] not in idempotent, f"an idempotent call got an unknown outcome: {got}"
        unknown.add(str(got["id"]))
    return unknown


def check_effects(
    transcript: list[dict[str, Any]],
    unknown: set[str],
    ran: Callable[[dict[str, Any]], int],
    run: str = "",
) -> None:
    """Each answered call took effect ``ran(result)`` times: at least once for the
    idempotent tool, at most once for any other, and once if its outcome is known."""
    where = f"{run}: " if run else ""
    for message in transcript:
        if message["kind"] != "tool_result":
            continue
        times = ran(message)
        if message["name"] == "idem":
            assert times >= 1, f"{where}idempotent call {message['id']} never took effect"
        else:
            assert times <= 1, f"{where}call {message['id']} took effect {times} times"
            if message["id"] not in unknown:
                assert times == 1, f"{where}call {message['id']} has a result, never ran"


def decisions_of(body: bytes) -> dict[str, dict[str, Any]]:
    """A ``decision`` record's decisions, by call id, as its last event encodes them."""
    event = orjson.loads(body)[-1]
    assert event["on"] == "approval_decided", event
    decided: dict[str, dict[str, Any]] = event["decided"]
    return decided
