"""Holding an ``SQLiteLedger``'s connection for one operation: what a failure of SQLite means.

Each operation holds the ledger's lock, and is refused once the ledger is
closed. SQLite's failures become a ``LedgerError`` that says what it found:
a file it does not read as a database (no ledger, or one whose log is
damaged), damage, or a refusal such as a lock held elsewhere.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from agentloop._durable.files import _has_log
from agentloop._errors import LedgerError

if TYPE_CHECKING:
    from agentloop._durable.sqlite import SQLiteLedger


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
            path = self._ledger.path
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_NOTADB" and self._what == "open":
                if not _has_log(path):
                    raise LedgerError(
                        f"{path}: not a ledger: expected an SQLite database that "
                        f"agentloop.ledger.SQLiteLedger made, got a file SQLite does not read as "
                        f"one ({exc})"
                    ) from exc
                raise LedgerError(
                    f"{path}: open: the file or its write-ahead log ({path.name}-wal) is "
                    f"damaged: {exc}"
                ) from exc
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
