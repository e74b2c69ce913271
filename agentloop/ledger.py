"""agentloop.ledger: for writing a store of durable runs, and for reading one.

A ``Ledger`` keeps each run's header and records (``LedgerRecord``), with one
writer (``LedgerWriter``) per run; ``SQLiteLedger`` is the one agentloop
ships: ``Loop(model, ledger=SQLiteLedger("runs.db"))``. ``view_run``,
``list_runs`` and ``decide_run`` read a ledger's runs and record a person's
decisions without a ``Loop``, a model or tools: what the command line's
``runs``, ``show``, ``pending`` and ``decide`` do. The errors only a ledger
raises are here: ``LedgerError`` (a store that cannot be read or written),
and its kinds ``RunNotFoundError``, ``RunExistsError`` (and
``ConversationBusyError``, a conversation's next turn begun elsewhere first) and
``RunBusyError``. A tool handler reads its idempotency key with
``agentloop.idempotency_key()``. See the docs' "Durable runs and approval"
page.
"""

from __future__ import annotations

from agentloop._durable.protocol import Ledger, LedgerRecord, LedgerWriter
from agentloop._durable.sqlite import SQLiteLedger
from agentloop._durable.view import LedgerRun, RunSummary, decide_run, list_runs, view_run
from agentloop._errors import (
    ConversationBusyError,
    LedgerError,
    RunBusyError,
    RunExistsError,
    RunNotFoundError,
)
from agentloop._names import publish as _publish

__all__ = [
    "ConversationBusyError",
    "Ledger",
    "LedgerError",
    "LedgerRecord",
    "LedgerRun",
    "LedgerWriter",
    "RunBusyError",
    "RunExistsError",
    "RunNotFoundError",
    "RunSummary",
    "SQLiteLedger",
    "decide_run",
    "list_runs",
    "view_run",
]

_publish(__name__, globals(), __all__)
