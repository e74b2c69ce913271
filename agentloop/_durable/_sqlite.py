"""``SQLiteLedger``: the ledger in one SQLite file, through the standard library.

Two tables: ``runs`` (a row per run: its id and header) and ``records`` (a
row per record, in append order, unique by ``(run, kind, key)``), each row
with the time it was committed (``at``; ``NULL`` in a file an agentloop that
kept no times wrote, which gets the column when next opened). Every
append is one ``INSERT`` in autocommit mode, so it is committed when it
returns. The file is in WAL mode: a commit appends to the ``-wal`` file,
readers never block the writer, and a commit torn by a crash is discarded
whole when the file is next opened (each WAL frame carries a checksum).
``synchronous=FULL`` (the default) syncs the WAL on every commit, so a
record survives a power cut; ``NORMAL`` syncs only at checkpoints: a
record survives a killed process but not a power cut.

One writer per run: a claim is a POSIX lock (``fcntl.lockf``) on one byte
of a sidecar file (``<path>-lock``), at the run's row number. The kernel
drops it when its process dies, however it dies, so a crashed run can be
resumed at once, and never while its process lives. Within one process,
claims are also kept in a table (POSIX locks do not exclude their own process).
The lock file is named from the file's real path (symlinks resolved), and a
file with more than one name (hard links) is refused: SQLite names its WAL
after the name it is given, so two names would be two logs and two writers.

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
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from agentloop._durable._ledger import END, LedgerRecord
from agentloop._errors import LedgerError, RunBusyError, RunExistsError, RunNotFoundError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["APPLICATION_ID", "VERSION", "SQLiteLedger"]

#: ``PRAGMA application_id`` of an agentloop ledger ("AGLL").
APPLICATION_ID: Final = 0x41474C4C
#: ``PRAGMA user_version``: the layout of the tables, and of the records' bodies.
VERSION: Final = 1
_MAGIC: Final = b"SQLite format 3\x00"
#: What the lock file holds once the ledger's tables are made.
_WRITTEN: Final = b"agentloop ledger: written\n"
_WAL_MAGIC: Final = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
_WAL_VERSION: Final = 3007000
_SCHEMA: Final = (
    "CREATE TABLE runs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " run_id TEXT NOT NULL UNIQUE,"
    " header BLOB NOT NULL,"
    " at REAL)",
    "CREATE TABLE records ("
    " seq INTEGER PRIMARY KEY,"
    " run INTEGER NOT NULL REFERENCES runs (id),"
    " kind TEXT NOT NULL,"
    " key TEXT NOT NULL,"
    " body BLOB NOT NULL,"
    " at REAL,"
    " UNIQUE (run, kind, key))",
)

#: The tables as ledgers made before rows kept their time hold them.
_UNTIMED_SCHEMA: Final = (
    "CREATE TABLE runs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " run_id TEXT NOT NULL UNIQUE,"
    " header BLOB NOT NULL)",
    "CREATE TABLE records ("
    " seq INTEGER PRIMARY KEY,"
    " run INTEGER NOT NULL REFERENCES runs (id),"
    " kind TEXT NOT NULL,"
    " key TEXT NOT NULL,"
    " body BLOB NOT NULL,"
    " UNIQUE (run, kind, key))",
)

#: The tables a ledger holds, as ``sqlite_master`` keeps their SQL.
_TABLES: Final = {statement.split()[2]: statement for statement in _SCHEMA}


def _tables_of(db: sqlite3.Connection) -> dict[str, str]:
    """Each table SQLite knows in ``db`` (its own ``sqlite_`` ones aside), and its SQL."""
    rows = db.execute(
        "SELECT name, sql FROM sqlite_master "
        "WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    )
    return dict(rows)


def _made_before_times() -> tuple[dict[str, str], dict[str, str]]:
    """A ledger's tables as made before rows kept their time, and once ``at`` is added.

    Asked of SQLite itself, in memory: it keeps a table's SQL as it rewrites it.
    """
    db = sqlite3.connect(":memory:")
    try:
        for statement in _UNTIMED_SCHEMA:
            db.execute(statement)
        untimed = _tables_of(db)
        db.execute("ALTER TABLE runs ADD COLUMN at REAL")
        db.execute("ALTER TABLE records ADD COLUMN at REAL")
        return untimed, _tables_of(db)
    finally:
        db.close()


_UNTIMED, _TIMED_SINCE = _made_before_times()
#: Every form of the tables a ledger this agentloop reads can have.
_KNOWN_TABLES: Final = (_TABLES, _UNTIMED, _TIMED_SINCE)


class SQLiteLedger:
    """A ledger in one SQLite file (stdlib ``sqlite3``, WAL mode): ``Loop(..., ledger=...)``.

    ``SQLiteLedger("runs.db")`` creates the file, or opens one it made before;
    ``":memory:"`` is refused (``ValueError``): a ledger must outlive its process.
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
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(
                f"expected synchronous to be 'FULL' or 'NORMAL', got {synchronous!r}: "
                "with less, a committed record could be lost and a call run twice"
            )
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"expected path to be a str or a Path, got {type(path).__name__}")
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
        _check_file(real, self.path)
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
                    self._setup(timeout, written=written)
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
        return _Writer(self, row, run_id)

    def claim(self, run_id: str) -> _Writer:
        """Claim a recorded run; ``RunBusyError`` if held, ``RunNotFoundError`` if unknown."""
        with self._using(f"run {run_id!r}"):
            row = self._row(run_id)
            self._locks.acquire(row, run_id, self.path)
        return _Writer(self, row, run_id)

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        """The run's header and its records, in the order they were appended."""
        with self._using(f"run {run_id!r}"):
            db = self._db
            db.execute("BEGIN")  # one snapshot for both reads
            try:
                row = self._row(run_id)
                (header,) = db.execute("SELECT header FROM runs WHERE id = ?", (row,)).fetchone()
                records = [
                    LedgerRecord(kind, key, body)
                    for kind, key, body in db.execute(
                        "SELECT kind, key, body FROM records WHERE run = ? ORDER BY seq", (row,)
                    )
                ]
            finally:
                db.execute("COMMIT")
        for record in records:
            if not (type(record.kind) is str and type(record.key) is str):
                raise LedgerError(f"{self.path}: run {run_id!r}: a record's kind or key is damaged")
            if type(record.body) is not bytes or type(header) is not bytes:
                raise LedgerError(f"{self.path}: run {run_id!r}: a record is not stored as bytes")
        return header, records

    # -- beyond the protocol -----------------------------------------------------------

    def run_ids(self, *, finished: bool | None = None) -> list[str]:
        """Every run id recorded, oldest first; ``finished=False`` only those not yet ended.

        After a restart, ``for run_id in ledger.run_ids(finished=False):
        loop.resume(run_id)`` continues every run the crash interrupted.
        """
        if finished is not None and type(finished) is not bool:
            raise TypeError(
                f"expected finished to be a bool or None, got {type(finished).__name__}"
            )
        query = "SELECT run_id FROM runs"
        if finished is not None:
            has_end = "EXISTS (SELECT 1 FROM records WHERE run = runs.id AND kind = ?)"
            query += f" WHERE {'' if finished else 'NOT '}{has_end}"
        query += " ORDER BY id"
        with self._using("listing runs"):
            rows = self._db.execute(query, () if finished is None else (END,)).fetchall()
        return [run_id for (run_id,) in rows]

    def changed(self) -> dict[str, float | None]:
        """When each run last changed: its last record's commit (or its start), as ``time.time()``.

        ``None`` for a run with no time kept (recorded by an agentloop that kept none).
        """
        query = (
            "SELECT run_id, COALESCE((SELECT MAX(at) FROM records WHERE run = runs.id), at) "
            "FROM runs ORDER BY id"
        )
        with self._using("listing runs"):
            rows = self._db.execute(query).fetchall()
        return dict(rows)

    def check(self) -> None:
        """Read the whole file (``PRAGMA quick_check``); ``LedgerError`` listing what is damaged."""
        with self._using("check"):
            problems = [row[0] for row in self._db.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise LedgerError(f"{self.path}: the file is damaged: {'; '.join(problems[:5])}")

    # -- inside -----------------------------------------------------------------------

    def _setup(self, timeout: float, *, written: bool) -> None:
        """WAL mode, the sync level, and the tables (made once; checked every time).

        ``written``: the lock file says the tables were made (read before SQLite
        was asked, so tables made since are seen).
        """
        db = self._db
        mode = _wal_mode(db, timeout)
        if mode != "wal":
            raise LedgerError(
                f"{self.path}: SQLite would not use WAL mode here (it said {mode!r}): "
                "a ledger needs a file on a local disk"
            )
        db.execute(f"PRAGMA synchronous = {self.synchronous}")
        if written and self._version() == (0, 0) and not self._tables():
            raise LedgerError(
                f"{self.path}: the ledger was written, but its tables are missing: the "
                f"write-ahead log that held them ({self.path.name}-wal) is lost or damaged. "
                "Nothing recorded since the ledger was made can be read; restore the file "
                "and its -wal from a backup, or remove the ledger's files to start a new one"
            )
        if self._version() == (0, 0):
            db.execute(
                "BEGIN IMMEDIATE"
            )  # one process makes the tables; others wait, then see them
            try:
                if self._version() == (0, 0):
                    tables = self._tables()
                    if tables:
                        raise LedgerError(
                            f"{self.path}: not an agentloop ledger: an SQLite database of "
                            f"other tables ({', '.join(sorted(tables)[:5])})"
                        )
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
        if tables not in _KNOWN_TABLES:
            found = ", ".join(sorted(tables)) or "no tables"
            same_names = "defined otherwise, " if tables.keys() == _TABLES.keys() else ""
            raise LedgerError(
                f"{self.path}: the ledger's tables are missing or not its own: expected "
                f"{', '.join(sorted(_TABLES))} as agentloop makes them, got {same_names}{found}"
            )
        if tables == _UNTIMED:
            db.execute("BEGIN IMMEDIATE")  # made before rows kept their time: add the column
            try:
                if self._tables() == _UNTIMED:
                    db.execute("ALTER TABLE runs ADD COLUMN at REAL")
                    db.execute("ALTER TABLE records ADD COLUMN at REAL")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

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


class _Using:
    """Hold the connection for one operation; an SQLite failure becomes a ``LedgerError``."""

    __slots__ = ("_ledger", "_what")

    def __init__(self, ledger: SQLiteLedger, what: str) -> None:
        self._ledger, self._what = ledger, what

    def __enter__(self) -> None:
        ledger = self._ledger
        ledger._lock.acquire()
        if ledger._closed:
            ledger._lock.release()
            # Not damage: the file is fine, this object let go of it.
            raise LedgerError(
                f"{ledger.path}: {self._what}: this SQLiteLedger is closed; "
                "open the file again with SQLiteLedger(path) to go on"
            )

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> None:
        self._ledger._lock.release()
        if isinstance(exc, sqlite3.Error):
            damaged = isinstance(exc, sqlite3.DatabaseError) and not isinstance(
                exc, sqlite3.OperationalError | sqlite3.IntegrityError
            )
            problem = "the file is damaged: " if damaged else ""
            raise LedgerError(f"{self._ledger.path}: {self._what}: {problem}{exc}") from exc
        if isinstance(exc, UnicodeDecodeError):
            # SQLite's message quotes a damaged name from the schema, which Python
            # fails to decode: the message is lost, the damage is not.
            raise LedgerError(
                f"{self._ledger.path}: {self._what}: the file is damaged: SQLite's message "
                f"about it is not UTF-8 ({exc.object[:80]!r})"
            ) from exc


class _Writer:
    """The claim on one run of an ``SQLiteLedger``, and the one way to append to it."""

    __slots__ = ("_ledger", "_released", "_row", "run_id")

    def __init__(self, ledger: SQLiteLedger, row: int, run_id: str) -> None:
        self._ledger, self._row, self.run_id = ledger, row, run_id
        self._released = False

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
        with ledger._using(f"run {self.run_id!r}"):
            try:
                ledger._db.execute(
                    "INSERT INTO records (run, kind, key, body, at) VALUES (?, ?, ?, ?, ?)",
                    (self._row, record.kind, record.key, record.body, time.time()),
                )
            except sqlite3.IntegrityError:
                raise LedgerError(
                    f"{ledger.path}: run {self.run_id!r} already holds a {record.kind} record "
                    f"for {record.key!r}; nothing is recorded twice"
                ) from None

    def release(self) -> None:
        """Give up the claim (idempotent)."""
        if not self._released:
            self._released = True
            self._ledger._locks.release(self._row)


# -- fail fast on a file that is not a ledger ------------------------------------------


def _check_file(path: Path, given: Path) -> None:
    """Refuse a file that is not SQLite, has two names, or is shorter than its header says.

    ``path`` is the file's real path, ``given`` the name the caller gave it.
    """
    try:
        stat = path.stat()
    except FileNotFoundError:
        return  # a new ledger
    except OSError as exc:
        raise LedgerError(f"{given}: cannot open the ledger: {exc.strerror or exc}") from None
    size = stat.st_size
    if path.is_dir():
        raise LedgerError(f"{given}: expected a ledger file, got a directory")
    if stat.st_nlink > 1:
        # SQLite names the WAL, and this ledger its lock file, after the name it is
        # given: each name would have its own log and its own writers of one file.
        raise LedgerError(
            f"{given}: expected a ledger file with one name, got a file with "
            f"{stat.st_nlink} (hard links): each name would get its own write-ahead log "
            "and its own lock, and two writers; remove the other names (a symlink is fine)"
        )
    if size == 0:
        return  # made empty: SQLite takes it as a new database
    try:
        with path.open("rb") as file:
            head = file.read(100)
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read the ledger: {exc.strerror or exc}") from None
    if not head.startswith(_MAGIC[: len(head)]) or not head:
        raise LedgerError(
            f"{path}: not a ledger: an SQLite file starts with {_MAGIC!r}, this one with "
            f"{head[:16]!r}"
        )
    if len(head) < 100:
        raise LedgerError(f"{path}: the file is truncated: {size} bytes, not even a header")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    header_size_valid = head[24:28] == head[92:96]
    wal = path.with_name(path.name + "-wal")
    # With frames in the WAL, a checkpoint cut short may leave the file shorter than
    # its first page says, legitimately: SQLite reads those pages from the WAL.
    wal_empty = not wal.exists() or wal.stat().st_size == 0
    if not wal_empty:
        # SQLite takes a WAL whose header it does not know for no WAL at all, and would
        # show the records committed in it as never written. Its header is written whole
        # (or not yet: zeros), so anything else there is damage.
        with wal.open("rb") as file:
            magic = file.read(4)
        if magic not in (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83", b"\0" * len(magic)):
            raise LedgerError(
                f"{wal}: the ledger's write-ahead log is damaged (it starts with {magic!r}, "
                "not SQLite's WAL header): the records committed in it cannot be read"
            )
    if header_size_valid and wal_empty and size < page_size * pages:
        raise LedgerError(
            f"{path}: the file is truncated: {size} bytes, where its header says "
            f"{pages} pages of {page_size} bytes ({pages * page_size} bytes)"
        )


def _check_log(path: Path) -> None:
    """Refuse a WAL that lost records not yet in the file; called with no other process open.

    SQLite's WAL index (``-shm``, which outlives a crash) says how many frames the
    WAL holds (``mxFrame``), how many were copied into the file (``nBackfill``),
    and the WAL's salts. SQLite would take a WAL that is missing, shorter, or
    from another generation for an empty one, and rebuild the index from it.
    """
    wal = path.with_name(path.name + "-wal")
    shm = path.with_name(path.name + "-shm")
    try:
        with wal.open("rb") as file:
            head = file.read(32)
        wal_size = wal.stat().st_size
    except FileNotFoundError:
        head, wal_size = b"", 0
    if head.strip(b"\0") and not _wal_header_valid(head):
        raise LedgerError(
            f"{wal}: the ledger's write-ahead log is damaged: its header fails its "
            "checksum, so SQLite would take it for an empty log and drop every record "
            "committed in it"
        )
    try:
        with shm.open("rb") as file:
            index = file.read(136)
    except FileNotFoundError:
        return
    header = _shm_header(index)
    if header is None:
        return  # no index SQLite wrote whole: nothing it says can be trusted
    frames, copied, salts = header
    if frames <= copied:
        return  # every frame committed is in the file already
    page_size = int.from_bytes(head[8:12], "big") if len(head) == 32 else 0
    if not head.strip(b"\0"):
        found = "it is missing" if wal_size == 0 and not wal.exists() else "it is empty"
    elif head[16:24] != salts:
        found = "it is another log (its salts differ)"
    elif wal_size < 32 + frames * (24 + page_size):
        found = f"it is cut short ({wal_size} bytes)"
    else:
        damaged = _first_damaged_frame(wal, head, frames, page_size)
        if damaged is None:
            return
        # SQLite's recovery stops at the first frame that fails: every later one is lost.
        found = f"its frame {damaged} of {frames} fails its checksum"
    raise LedgerError(
        f"{wal}: the ledger's write-ahead log is lost or damaged: its index "
        f"({shm.name}) says it holds {frames - copied} pages committed and not yet in the "
        f"file, but {found}. Opening it would silently drop those records; restore the "
        "-wal file, or move the ledger's files aside to start a new one"
    )


def _first_damaged_frame(wal: Path, head: bytes, frames: int, page_size: int) -> int | None:
    """The first of the WAL's first ``frames`` frames SQLite's recovery would reject, if any.

    Each frame carries the log's salts and a checksum chained from the header's.
    Read only after a crash (the index says frames are not yet in the file).
    """
    order = ">" if head[3] & 1 else "<"
    s1, s2 = struct.unpack(">2I", head[24:32])
    size = 24 + page_size
    with wal.open("rb") as file:
        file.seek(32)
        for number in range(1, frames + 1):
            frame = file.read(size)
            if len(frame) < size or frame[8:16] != head[16:24]:
                return number
            s1, s2 = _checksum(frame[:8] + frame[24:], order, s1, s2)
            if (s1, s2) != struct.unpack(">2I", frame[16:24]):
                return number
    return None


def _checksum(data: bytes, order: str, s1: int = 0, s2: int = 0) -> tuple[int, int]:
    """SQLite's WAL checksum (``walChecksumBytes``) of ``data``, words in byte ``order``."""
    words = iter(struct.unpack(f"{order}{len(data) // 4}I", data))
    for first, second in zip(words, words, strict=True):
        s1 = (s1 + first + s2) & 0xFFFFFFFF
        s2 = (s2 + second + s1) & 0xFFFFFFFF
    return s1, s2


def _wal_header_valid(head: bytes) -> bool:
    """Whether a WAL's 32-byte header is whole: SQLite's magic, version and checksum."""
    if len(head) < 32 or head[:4] not in _WAL_MAGIC:
        return False
    if int.from_bytes(head[4:8], "big") != _WAL_VERSION:
        return False
    order = ">" if head[3] & 1 else "<"
    return _checksum(head[:24], order) == struct.unpack(">2I", head[24:32])


def _shm_header(index: bytes) -> tuple[int, int, bytes] | None:
    """(frames in the WAL, frames copied into the file, the WAL's salts) from a ``-shm``.

    ``None`` unless SQLite wrote it whole: both copies of the header alike,
    initialized, and with its checksum (in this machine's byte order).
    """
    if len(index) < 100 or index[:48] != index[48:96]:
        return None
    version, _, _, initialized, _, _, frames = struct.unpack("=IIIBBHI", index[:20])
    if version != _WAL_VERSION or initialized != 1:
        return None
    if _checksum(index[:40], "=") != struct.unpack("=2I", index[40:48]):
        return None
    (copied,) = struct.unpack("=I", index[96:100])
    return frames, copied, index[32:40]


# -- one writer per run: POSIX byte-range locks on a sidecar file -------------------------


class _LockFile:
    """One process's claims on the runs of one ledger file, as locks on ``<path>-lock``.

    The descriptor stays open for the process's life: closing any descriptor
    of a file drops every POSIX lock the process holds on it. Byte 0 (no run
    has row 0) is shared by every process that has the ledger open: the
    first to open it holds it alone for a moment, and checks the log then.
    The file's first bytes say whether the ledger's tables were ever made.
    """

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger
        self.path = ledger.with_name(ledger.name + "-lock")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._held: set[int] = set()
        self._open = 0  # SQLiteLedger objects of this process open on the file
        # Reentrant: a run dropped mid-way is released by the garbage collector, which
        # may run anywhere, in this very thread too.
        self._guard = threading.RLock()

    def enter(self, check_alone: Callable[[], None], timeout: float) -> bool:
        """One more ledger open here; whether the tables were made (read before SQLite is).

        With no file, or an empty one, the ledger is new and the marker is
        cleared. Else ``check_alone`` runs if no other process has it open.
        """
        import fcntl

        with self._guard:
            try:
                new = self.ledger.stat().st_size == 0
            except FileNotFoundError:
                new = True
            if new:
                os.ftruncate(self._fd, 0)  # a new ledger: nothing was written yet
            if self._open == 0 and self._alone(timeout):
                try:
                    if not new:
                        check_alone()
                except BaseException:
                    fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0, os.SEEK_SET)
                    raise
                fcntl.lockf(self._fd, fcntl.LOCK_SH, 1, 0, os.SEEK_SET)
            self._open += 1
            return os.pread(self._fd, len(_WRITTEN), 0) == _WRITTEN

    def _alone(self, timeout: float) -> bool:
        """Lock byte 0: alone (``True``, exclusive) or beside other processes (shared)."""
        import fcntl

        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0, os.SEEK_SET)
            except OSError:
                pass
            else:
                return True
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0, os.SEEK_SET)
            except OSError:  # another process is checking the log: a moment
                if time.monotonic() > deadline:
                    raise LedgerError(
                        f"{self.ledger}: another process has been checking the ledger's "
                        f"write-ahead log for over {timeout} s; is it stopped?"
                    ) from None
                time.sleep(0.005)
            else:
                return False

    def leave(self) -> None:
        """One ledger fewer open here; the last lets others check the log when they open."""
        import fcntl

        with self._guard:
            self._open -= 1
            if self._open == 0:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0, os.SEEK_SET)

    def mark_written(self) -> None:
        """Say, on disk, that the ledger's tables were made: from now on they are never new."""
        if os.pread(self._fd, len(_WRITTEN), 0) != _WRITTEN:
            os.pwrite(self._fd, _WRITTEN, 0)
            os.fsync(self._fd)

    def acquire(self, row: int, run_id: str, ledger: Path) -> None:
        import fcntl

        with self._guard:
            if row in self._held:
                raise RunBusyError(
                    f"{ledger}: run {run_id!r} is being driven in this process already, by "
                    "another run object that has not finished; finish it (or drop it) first"
                )
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, row, os.SEEK_SET)
            except OSError:
                raise RunBusyError(
                    f"{ledger}: run {run_id!r} is being driven by another process; a run has "
                    "one writer at a time (resume it once that process has stopped)"
                ) from None
            self._held.add(row)

    def release(self, row: int) -> None:
        import fcntl

        with self._guard:
            if row in self._held:
                self._held.discard(row)
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, row, os.SEEK_SET)

    def close_in_child(self) -> None:
        # A forked child holds none of its parent's POSIX locks: forget them.
        os.close(self._fd)


def _close(db: sqlite3.Connection, locks: _LockFile) -> None:
    """Close a ledger's connection, then tell its lock file (once, by ``weakref.finalize``)."""
    try:
        db.close()
    finally:
        locks.leave()


_LOCK_FILES: dict[str, _LockFile] = {}
_LOCK_FILES_GUARD = threading.Lock()


def _lock_file(path: Path, given: Path) -> _LockFile:
    """The lock file of the ledger whose real path is ``path`` (named ``given``)."""
    try:
        import fcntl  # noqa: F401
    except ImportError:  # pragma: no cover - Windows
        raise LedgerError(
            f"{given}: SQLiteLedger claims runs with POSIX file locks (fcntl), "
            "which this platform does not have"
        ) from None
    lock_path = path.with_name(path.name + "-lock")
    key = str(lock_path)
    with _LOCK_FILES_GUARD:
        found = _LOCK_FILES.get(key)
        if found is None:
            try:
                found = _LOCK_FILES[key] = _LockFile(path)
            except OSError as exc:
                if not path.parent.is_dir():  # what the caller named, not the lock beside it
                    raise LedgerError(
                        f"{given}: expected the ledger's directory {str(given.parent)!r} to "
                        "exist, got no such directory"
                    ) from None
                raise LedgerError(
                    f"{lock_path}: cannot open the ledger's lock file: {exc.strerror or exc}"
                ) from None
        return found


def _forget_locks_in_child() -> None:
    global _LOCK_FILES_GUARD
    _LOCK_FILES_GUARD = threading.Lock()
    for lock_file in _LOCK_FILES.values():
        lock_file.close_in_child()
    _LOCK_FILES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks_in_child)


def _wal_mode(db: sqlite3.Connection, timeout: float) -> str:
    """``PRAGMA journal_mode = WAL``, tried again while another process opens the file.

    SQLite answers "database is locked" at once, without waiting out the busy
    timeout, when several connections switch a new file to WAL together.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.005)
        else:
            return str(mode)
