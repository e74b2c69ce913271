"""``SQLiteLedger``: the ledger in one SQLite file, through the standard library.

Two tables: ``runs`` (a row per run: its id and header) and ``records`` (a
row per record, keyed by its place: the run's row id * 2**32 + its place in
the run, so a run's records are one range of one B-tree and a place is taken
once), each row with the time it was committed (``at``). A run's writer keeps
its ``(kind, key)``s, read when it claims the run, and refuses a second.
Every append is one ``INSERT`` in autocommit mode, so it is committed when it
returns. The file is in WAL mode: a commit appends to the ``-wal`` file,
readers never block the writer, and a commit torn by a crash is discarded
whole when the file is next opened (each WAL frame carries a checksum).
``synchronous=FULL`` (the default) syncs the WAL on every commit, so a record
survives a power cut; ``NORMAL`` syncs only at checkpoints: a record survives
a killed process but not a power cut.

One writer per run: a claim is a POSIX lock on one byte of ``<path>-lock``
(``lockfile.py``), which the kernel drops when its process dies, so a
crashed run can be resumed at once, and never while its process lives. The
lock file is named from the file's real path, and a file with two names
(hard links) is refused: SQLite would keep two logs, so two writers.

A lost log is never taken for a new file. Until a checkpoint, what a run
recorded lives only in the WAL, so a ledger keeps two witnesses outside it:
the lock file says "this ledger has been written" from the moment its tables
are made (a file that says so and has no tables lost them), and SQLite's
WAL index (``-shm``), checked by the first process to open the ledger,
says how many pages the WAL holds beyond what was copied into the file. A
WAL that is missing, shorter, from another generation, or whose header or a
frame fails its checksum, while records committed in it are not yet in the
file, is a ``LedgerError``: opening would silently drop them. (A WAL removed
together with its index, once the tables are in the file, looks like a ledger
closed cleanly, where SQLite removes both: what it held is lost unseen.)

The files are never opened behind SQLite's back: closing any descriptor of a
file drops every POSIX lock the process holds on it, SQLite's included, and
another process closing its connection would then take the live WAL for an
unused one, copy it in and remove it while this one still commits to it. So
the file is looked at with ``os.stat`` only (what it holds, SQLite itself
reads: a file that is not a database, or cut short, is refused as SQLite
finds it), and the WAL and its index only while no connection holds them.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Final, Literal

from agentloop._durable.connection import _Using
from agentloop._durable.files import (
    _SCHEMA,
    _TABLES,
    _check_file,
    _check_log,
    _tables_of,
    _wal_mode,
)
from agentloop._durable.lockfile import _close, _lock_file
from agentloop._durable.protocol import LedgerRecord
from agentloop._durable.queries import (
    CHANGED,
    ENDED,
    KEYS,
    KINDS,
    RECORDS,
    RUN,
    RUN_IDS,
    commit_time,
    read_run_id,
    records_read,
)
from agentloop._errors import LedgerError, RunExistsError, RunNotFoundError

__all__ = ["APPLICATION_ID", "VERSION", "SQLiteLedger"]

#: ``PRAGMA application_id`` of an agentloop ledger ("AGLL").
APPLICATION_ID: Final = 0x41474C4C
#: ``PRAGMA user_version``: the layout of the tables (each run's header versions its records).
VERSION: Final = 2


class SQLiteLedger:
    """A ledger in one SQLite file (stdlib ``sqlite3``, WAL mode): ``Loop(..., ledger=...)``.

    ``SQLiteLedger("runs.db")`` creates the file, or opens one it made before;
    ``":memory:"`` is refused (``ValueError``): a ledger must outlive its process.
    With ``make=False`` only a ledger that exists is opened: a missing file, or
    one that holds no ledger, is a ``LedgerError`` (what the command line uses).
    A file that is not a ledger, is cut short, has lost records its
    write-ahead log held (the log removed or damaged), has another name (a
    hard link), or was written by a newer agentloop is refused right here
    with a ``LedgerError`` saying which.
    ``synchronous`` is ``"FULL"`` (every record synced to disk before the run
    acts on it: it survives a power cut) or ``"NORMAL"`` (synced at
    checkpoints: it survives a killed process, not a power cut; faster).
    Many processes may share one file; each run has one writer at a time.
    One object serves any number of threads; make a new one after ``fork()``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        timeout: float = 30.0,
        make: bool = True,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(
                f"expected synchronous to be 'FULL' or 'NORMAL', got {synchronous!r}: "
                "with less, a committed record could be lost and a call run twice"
            )
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"expected path to be a str or a Path, got {type(path).__name__}")
        if type(make) is not bool:
            raise TypeError(f"expected make to be a bool, got {type(make).__name__}")
        if os.fspath(path) in (":memory:", ""):
            raise ValueError(
                f"expected the path of a ledger file, got {os.fspath(path)!r}: a ledger "
                "outside a file survives no crash and cannot be shared between processes "
                "(for tests, use a file in a temporary directory)"
            )
        self.path = Path(path)
        self.synchronous = synchronous
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._closed = False
        # The file itself, under whatever name it was given: its WAL, its lock file and
        # its marker are named from this one path.
        real = Path(os.path.realpath(self.path))
        _check_file(real, self.path, make=make)
        self._locks = _lock_file(real, self.path)
        written = self._locks.enter(lambda: _check_log(real), timeout)
        try:
            try:
                self._db = sqlite3.connect(
                    real, timeout=timeout, isolation_level=None, check_same_thread=False
                )
            except sqlite3.Error as exc:
                raise LedgerError(f"{self.path}: cannot open the ledger: {exc}") from None
            try:
                with self._using("open"):
                    self._setup(timeout, written=written, make=make)
                if not written:
                    self._locks.mark_written()
            except BaseException:
                self._db.close()
                raise
        except BaseException:
            self._locks.leave()
            raise
        # Closed, or dropped unclosed: the connection is closed, then the lock file told.
        self._release = weakref.finalize(self, _close, self._db, self._locks)

    def __repr__(self) -> str:
        return f"SQLiteLedger({str(self.path)!r}, synchronous={self.synchronous!r})"

    def __enter__(self) -> SQLiteLedger:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; runs still claimed through this object can no longer record."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._release()

    # -- the protocol ---------------------------------------------------------------

    def create(self, run_id: str, header: bytes) -> _Writer:
        """Record a new run's header and claim it; ``RunExistsError`` if the id is taken."""
        with self._using(f"run {run_id!r}"):
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                try:
                    row = db.execute(
                        "INSERT INTO runs (run_id, header, at) VALUES (?, ?, ?)",
                        (run_id, header, time.time()),
                    ).lastrowid
                except sqlite3.IntegrityError:
                    raise RunExistsError(
                        f"{self.path}: run {run_id!r} is already recorded; continue it with "
                        "loop.resume(run_id), or start a new run under another id"
                    ) from None
                assert row is not None, "an INSERT has a row id"
                # Claimed before anyone else can see the run: nobody can resume it first.
                self._locks.acquire(row, run_id, self.path)
                try:
                    db.execute("COMMIT")
                except BaseException:
                    self._locks.release(row)
                    raise
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return _Writer(self, row, run_id, [])

    def claim(self, run_id: str) -> _Writer:
        """Claim a recorded run; ``RunBusyError`` if held, ``RunNotFoundError`` if unknown."""
        with self._using(f"run {run_id!r}"):
            row = self._row(run_id)
            self._locks.acquire(row, run_id, self.path)
            try:
                held = self._db.execute(KEYS, (row * RUN, row * RUN + RUN - 1)).fetchall()
            except BaseException:
                self._locks.release(row)
                raise
        return _Writer(self, row, run_id, held)

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        """The run's header and its records, in the order they were appended."""
        with self._using(f"run {run_id!r}"):
            db = self._db
            db.execute("BEGIN")  # one snapshot for both reads
            try:
                row = self._row(run_id)
                header = db.execute("SELECT header FROM runs WHERE id = ?", (row,)).fetchone()
                places = (row * RUN, row * RUN + RUN - 1)
                rows = db.execute(RECORDS, places).fetchall()
            finally:
                db.execute("COMMIT")
        if header is None or type(header[0]) is not bytes:  # None: an index names no row
            raise LedgerError(f"{self.path}: run {run_id!r}: its header is damaged")
        return header[0], records_read(f"{self.path}: run {run_id!r}", rows)

    # -- beyond the protocol -----------------------------------------------------------

    def run_ids(self, *, finished: bool | None = None, prefix: str | None = None) -> list[str]:
        """Every run id recorded, oldest first (one held damaged, not as text: its bytes).

        ``finished=False`` lists those not yet ended: after a restart, ``for run_id in
        ledger.run_ids(finished=False): loop.resume(run_id)`` continues every run the
        crash interrupted. ``prefix`` lists those that start with it (``'user-42::'``).
        """
        if finished is not None and type(finished) is not bool:
            raise TypeError(
                f"expected finished to be a bool or None, got {type(finished).__name__}"
            )
        if prefix is not None and (type(prefix) is not str or not prefix):
            raise TypeError(f"expected prefix to be a non-empty str or None, got {prefix!r:.60}")
        where: list[str] = []
        arguments: list[object] = []
        if finished is not None:
            where.append(f"{'' if finished else 'NOT '}{ENDED}")
        if prefix is not None:  # from the prefix on in the ids' index, while they start with it
            where.append("run_id >= ? AND substr(run_id, 1, ?) = ?")
            arguments += (prefix, len(prefix), prefix)
        query = RUN_IDS + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id"
        with self._using("listing runs"):
            return [read_run_id(*row) for row in self._db.execute(query, arguments).fetchall()]

    def changed(self) -> dict[str, float | None]:
        """When each run last changed: its last record's commit (or its start), as ``time.time()``.

        ``None`` for a run whose time the file holds damaged (no time a clock shows).
        """
        query = CHANGED
        with self._using("listing runs"):
            rows = self._db.execute(query).fetchall()
        return {read_run_id(raw, kind): commit_time(at) for raw, kind, at in rows}

    def check(self) -> None:
        """Read the whole file (``PRAGMA quick_check``); ``LedgerError`` listing what is damaged."""
        with self._using("check"):
            problems = [row[0] for row in self._db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise LedgerError(f"{self.path}: the file is damaged: {'; '.join(problems[:5])}")

    # -- inside -----------------------------------------------------------------------

    def _setup(self, timeout: float, *, written: bool, make: bool) -> None:
        """WAL mode, the sync level, and the tables (made once; checked every time).

        ``written``: the lock file says the tables were made (read before SQLite
        was asked, so tables made since are seen). ``make``: tables may be made.
        The file is read before it is switched to WAL mode: another database is
        refused unchanged.
        """
        db = self._db
        db.execute("BEGIN")  # one snapshot: another process may be making the tables
        try:
            application_id, version = self._version()  # SQLite reads the file's header here
            if application_id not in (0, APPLICATION_ID):
                raise LedgerError(
                    f"{self.path}: not an agentloop ledger: an SQLite database with "
                    f"application_id {application_id:#x}"
                )
            if (application_id, version) == (0, 0):
                self._no_ledger(written=written, make=make)
        finally:
            if db.in_transaction:
                db.execute("COMMIT")
        mode = _wal_mode(db, timeout)
        if mode != "wal":
            raise LedgerError(
                f"{self.path}: SQLite would not use WAL mode here (it said {mode!r}): "
                "a ledger needs a file on a local disk"
            )
        db.execute(f"PRAGMA synchronous = {self.synchronous}")
        if self._version() == (0, 0):
            db.execute(
                "BEGIN IMMEDIATE"
            )  # one process makes the tables; others wait, then see them
            try:
                if self._version() == (0, 0):
                    self._no_ledger(written=written, make=make)
                    for statement in _SCHEMA:
                        db.execute(statement)
                    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    db.execute(f"PRAGMA user_version = {VERSION}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        application_id, version = self._version()
        if application_id != APPLICATION_ID:
            raise LedgerError(
                f"{self.path}: not an agentloop ledger: an SQLite database with "
                f"application_id {application_id:#x}"
            )
        if version != VERSION:
            newer = "a newer agentloop; upgrade to read it" if version > VERSION else "unknown"
            raise LedgerError(
                f"{self.path}: ledger format version {version}, but this agentloop reads "
                f"version {VERSION} ({newer})"
            )
        tables = self._tables()
        if tables != _TABLES:
            found = ", ".join(sorted(tables)) or "no tables"
            same_names = "defined otherwise, " if tables.keys() == _TABLES.keys() else ""
            raise LedgerError(
                f"{self.path}: the ledger's tables are missing or not its own: expected "
                f"{', '.join(sorted(_TABLES))} as agentloop makes them, got {same_names}{found}"
            )

    def _no_ledger(self, *, written: bool, make: bool) -> None:
        """Refuse a file that holds no ledger yet, unless it is to be made one here."""
        tables = self._tables()
        if tables:
            raise LedgerError(
                f"{self.path}: not an agentloop ledger: an SQLite database of "
                f"other tables ({', '.join(sorted(tables)[:5])})"
            )
        if written:
            raise LedgerError(
                f"{self.path}: the ledger was written, but its tables are missing: the "
                f"write-ahead log that held them ({self.path.name}-wal) is lost or damaged. "
                "Nothing recorded since the ledger was made can be read; restore the file "
                "and its -wal from a backup, or remove the ledger's files to start a new one"
            )
        if not make:
            raise LedgerError(
                f"{self.path}: not a ledger: expected a ledger that agentloop.ledger.SQLiteLedger "
                "made, got a file that holds none (make=False makes none)"
            )

    def _tables(self) -> dict[str, str]:
        """Each table SQLite knows in this file (its own ``sqlite_`` ones aside), and its SQL."""
        return _tables_of(self._db)

    def _version(self) -> tuple[int, int]:
        (application_id,) = self._db.execute("PRAGMA application_id").fetchone()
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        return application_id, version

    def _row(self, run_id: str) -> int:
        if type(run_id) is not str:
            raise TypeError(f"expected run_id to be a str, got {type(run_id).__name__}")
        found = self._db.execute("SELECT id FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if found is None:
            raise RunNotFoundError(f"{self.path}: no run {run_id!r} is recorded here")
        return found[0]  # type: ignore[no-any-return]

    def _using(self, what: str) -> _Using:
        if os.getpid() != self._pid:
            raise LedgerError(
                f"{self.path}: this SQLiteLedger was opened in process {self._pid}; "
                "an SQLite connection cannot cross fork(): open a new SQLiteLedger here"
            )
        return _Using(self, what)


class _Writer:
    """The claim on one run of an ``SQLiteLedger``, and the one way to append to it."""

    __slots__ = ("_held", "_ledger", "_place", "_released", "_row", "run_id")

    def __init__(
        self, ledger: SQLiteLedger, row: int, run_id: str, held: list[tuple[int, str]]
    ) -> None:
        self._ledger, self._row, self.run_id = ledger, row, run_id
        self._released = False
        self._held = set(held)  # the run's (kind number, key)s: none is recorded twice
        self._place = row * RUN + len(held)  # where the next record goes

    def __repr__(self) -> str:
        return f"<SQLiteLedger writer of run {self.run_id!r}>"

    def append(self, record: LedgerRecord) -> None:
        """Commit ``record``; it is on disk (per ``synchronous``) when this returns."""
        ledger = self._ledger
        if self._released:
            raise LedgerError(
                f"{ledger.path}: run {self.run_id!r}: this writer released its claim; "
                "nothing more can be recorded through it"
            )
        kind, key = record.kind, record.key
        number = KINDS.get(kind)
        if number is None:
            raise LedgerError(
                f"{ledger.path}: run {self.run_id!r}: expected a record of one of the kinds "
                f"{', '.join(KINDS)}, got one of kind {kind!r}"
            )
        if (number, key) in self._held:
            raise LedgerError(
                f"{ledger.path}: run {self.run_id!r} already holds a {kind} record "
                f"for {key!r}; nothing is recorded twice"
            )
        with ledger._using(f"run {self.run_id!r}"):
            try:
                ledger._db.execute(
                    "INSERT INTO records (place, kind, key, body, at) VALUES (?, ?, ?, ?, ?)",
                    (self._place, number, key, record.body, time.time()),
                )
            except sqlite3.IntegrityError:  # its place is taken: another wrote since the claim
                raise LedgerError(
                    f"{ledger.path}: run {self.run_id!r} was recorded by another writer since "
                    "this one claimed it; nothing more is recorded through this one"
                ) from None
        self._held.add((number, key))
        self._place += 1

    def release(self) -> None:
        """Give up the claim (idempotent)."""
        if not self._released:
            self._released = True
            self._ledger._locks.release(self._row)
