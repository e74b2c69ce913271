"""A ledger's lock file: one writer per run, and a witness that the ledger was written.

A claim is a POSIX lock (``fcntl.lockf``) on one byte of ``<path>-lock`` at
the run's row number, dropped by the kernel when its process dies; claims in
one process are also kept in a table, since POSIX locks do not exclude their
own process. The file also says "written" from the moment a ledger's tables
are made (see ``sqlite.py``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Final

from agentloop._errors import LedgerError, RunBusyError

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable
    from pathlib import Path

#: What the lock file holds once the ledger's tables are made.
_WRITTEN: Final = b"agentloop ledger: written\n"


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
