"""A ledger's files as SQLite leaves them: its tables, its database file and its write-ahead log.

What ``SQLiteLedger`` checks before it trusts a file, so that a lost or
damaged log is never taken for a new, empty ledger (see ``sqlite.py``'s
docstring): the tables are exactly the ledger's, the database file has one
name, and a log that holds committed pages not yet in the file is present,
whole and of the same generation; and how the file is switched to WAL mode.
A file SQLite may hold is never opened behind its back: the file itself is
looked at with ``os.stat`` (what it holds, SQLite reads), and the log only
while no connection has it open.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import time
from typing import TYPE_CHECKING, Final

from agentloop._errors import LedgerError

if TYPE_CHECKING:
    from pathlib import Path

_WAL_MAGIC: Final = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")
_WAL_VERSION: Final = 3007000

_SCHEMA: Final = (
    "CREATE TABLE runs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " run_id TEXT NOT NULL UNIQUE,"
    " header BLOB NOT NULL,"
    " at REAL)",
    # A record's row id is its place: the run's row id * 2**32 + its place in the run. A run's
    # records are one range of the one B-tree, in order; a place is taken once.
    # A record's kind is its number in ``queries.KINDS``.
    "CREATE TABLE records ("
    " place INTEGER PRIMARY KEY,"
    " kind INTEGER NOT NULL,"
    " key TEXT NOT NULL,"
    " body BLOB NOT NULL,"
    " at REAL)",
    # The runs that ended (their end, kind 9), found without reading the others' records.
    "CREATE INDEX ends ON records (place) WHERE kind = 9",
)

#: The tables a ledger holds, as ``sqlite_master`` keeps their SQL.
_TABLES: Final = {
    statement.split()[2]: statement for statement in _SCHEMA if statement.startswith("CREATE TABLE")
}


def _tables_of(db: sqlite3.Connection) -> dict[str, str]:
    """Each table SQLite knows in ``db`` (its own ``sqlite_`` ones aside), and its SQL."""
    rows = db.execute(
        "SELECT name, sql FROM sqlite_master "
        "WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
    )
    return dict(rows)


def _check_file(path: Path, given: Path, *, make: bool) -> None:
    """Refuse a directory, a file with two names, or none unless ``make``: ``os.stat`` only.

    ``path`` is the file's real path, ``given`` the name the caller gave it.
    What the file holds is SQLite's to read (``SQLiteLedger._setup``): opening and
    closing it here would drop every POSIX lock this process holds on it, SQLite's
    own, and another process would then take the live write-ahead log for one
    nobody uses, copy it in and remove it, while commits still go to it.
    """
    try:
        stat = path.stat()
    except FileNotFoundError:
        if make:
            return  # a new ledger
        raise LedgerError(
            f"{given}: expected a ledger, got no such file (make=False makes none)"
        ) from None
    except OSError as exc:
        raise LedgerError(f"{given}: cannot open the ledger: {exc.strerror or exc}") from None
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


def _check_log(path: Path) -> None:
    """Refuse a WAL that lost records not yet in the file; called with no other process open.

    SQLite's WAL index (``-shm``, which outlives a crash) says how many frames the
    WAL holds (``mxFrame``), how many were copied into the file (``nBackfill``),
    and the WAL's salts. SQLite would take a WAL that is missing, shorter, or
    from another generation for an empty one, and rebuild the index from it.
    These are read with plain ``open()`` only while no SQLite connection can
    hold them: no other process has the ledger open (the caller holds its lock
    file's byte 0 alone), and none of the three files is open in this process
    (``_open_here``); else SQLite's own connections keep the log, and it is theirs.
    """
    wal = path.with_name(path.name + "-wal")
    shm = path.with_name(path.name + "-shm")
    if _open_here(path, wal, shm):
        return
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


def _open_here(*paths: Path) -> bool:
    """Whether this process has any of ``paths`` open (so SQLite may hold locks through it).

    Compared by identity (device and inode), each open descriptor's ``fstat``
    against each path's ``stat``; without a list of descriptors to read
    (``/dev/fd``), taken as open.
    """
    files = set()
    for path in paths:
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue
        files.add((stat.st_dev, stat.st_ino))
    if not files:
        return False
    try:
        descriptors = os.listdir("/dev/fd")
    except OSError:
        return True
    for name in descriptors:
        try:
            stat = os.fstat(int(name))
        except (OSError, ValueError):
            continue  # the listing's own descriptor, closed since
        if (stat.st_dev, stat.st_ino) in files:
            return True
    return False


def _has_log(path: Path) -> bool:
    """Whether the ledger has a write-ahead log that is not empty (by ``os.stat``)."""
    try:
        return os.stat(f"{os.path.realpath(path)}-wal").st_size > 0
    except FileNotFoundError:
        return False


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
