"""``idempotency_key()``: the key of the call a tool handler is running, in a durable run."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Final

__all__ = ["KEY", "idempotency_key"]

#: Set by the durable driver around each handler call (a task or thread gets a copy).
KEY: Final[ContextVar[str | None]] = ContextVar("agentloop_idempotency_key", default=None)


def idempotency_key() -> str | None:
    """The idempotency key of the call being run: ``f"{run_id}:{call_id}"``, or ``None``.

    Inside a tool handler of a durable run (``Loop(..., ledger=...)``) this is
    the same string every time the call runs, in any process: pass it to an
    external system that deduplicates (an ``Idempotency-Key`` header, a unique
    column) so that a re-run after a crash has no second effect. Anywhere
    else (no ledger, outside a handler) it is ``None``.
    """
    return KEY.get()
