"""agentloop.ledger: for writing a store of durable runs, and for reading one.

A ``Ledger`` keeps each run's header and records (``LedgerRecord``), with one
writer (``LedgerWriter``) per run; ``SQLiteLedger`` is the one agentloop
ships. ``view_run``, ``list_runs`` and ``decide_run`` read a ledger's runs
and record a person's decisions without a ``Loop``, a model or tools: what
the command line's ``runs``, ``show``, ``pending`` and ``decide`` do. See
the docs' "Durable runs and approval" page.
"""

from __future__ import annotations

from agentloop._durable.key import idempotency_key
from agentloop._durable.protocol import Ledger, LedgerRecord, LedgerWriter
from agentloop._durable.sqlite import SQLiteLedger
from agentloop._durable.view import LedgerRun, RunSummary, decide_run, list_runs, view_run
from agentloop._names import publish as _publish

__all__ = [
    "Ledger",
    "LedgerRecord",
    "LedgerRun",
    "LedgerWriter",
    "RunSummary",
    "SQLiteLedger",
    "decide_run",
    "idempotency_key",
    "list_runs",
    "view_run",
]

_publish(
    __name__,
    globals(),
    [name for name in __all__ if name not in ("SQLiteLedger", "idempotency_key")],
)
