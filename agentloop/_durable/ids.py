"""The run ids agentloop derives: a conversation's turns, and an agent tool's child runs.

A user's run id has no ``':'`` (``resume.checked_run_id``), so an id with one
is agentloop's own. Turn ``n`` of conversation ``c`` is the run ``f"{c}::{n}"``
(turns counted from 1): a conversation's turns share the prefix ``f"{c}::"``,
which no user's run id and no other conversation's turn has. The child run
that answers call ``k`` of run ``r`` is ``f"{r}:{esc(k)}"``, the call's
idempotency key: the escaped call id has no ``':'``, so a child's id is its
parent's with one ``':'`` and no other added.
"""

from __future__ import annotations

from agentloop._drivers.run_context import esc

__all__ = ["child_call_id", "child_run_id", "parse_turn", "turn_of", "turn_prefix", "turn_run_id"]


def child_run_id(parent_run_id: str, call_id: str) -> str:
    """The run id of the child run that answers call ``call_id`` of run ``parent_run_id``."""
    return f"{parent_run_id}:{esc(call_id)}"


def child_call_id(parent_run_id: str, run_id: str) -> str | None:
    """The call of run ``parent_run_id`` whose child run is ``run_id``; ``None`` if none is.

    The inverse of ``child_run_id``: ``run_id`` is the parent's id, one ``':'``
    and an escaped call id (``%3A`` read back as ``:``, then ``%25`` as ``%``).
    """
    prefix = f"{parent_run_id}:"
    escaped = run_id[len(prefix) :]
    if not run_id.startswith(prefix) or not escaped or ":" in escaped:
        return None
    call_id = escaped.replace("%3A", ":").replace("%25", "%")
    return call_id if esc(call_id) == escaped else None


def turn_run_id(conversation_id: str, turn: int) -> str:
    """The run id of turn ``turn`` (from 1) of the conversation ``conversation_id``."""
    return f"{conversation_id}::{turn}"


def turn_prefix(conversation_id: str) -> str:
    """What every turn's run id of the conversation ``conversation_id`` starts with."""
    return f"{conversation_id}::"


def turn_of(run_id: str, conversation_id: str) -> int | None:
    """The turn ``run_id`` is of the conversation ``conversation_id``; ``None`` if none."""
    prefix = turn_prefix(conversation_id)
    if not run_id.startswith(prefix):
        return None
    number = run_id[len(prefix) :]
    # Only the form turn_run_id makes: digits without a leading zero, from 1.
    if not number.isascii() or not number.isdigit() or number.startswith("0"):
        return None
    return int(number)


def parse_turn(run_id: str) -> tuple[str, int] | None:
    """``(conversation_id, turn)`` if ``run_id`` is a turn's id (``turn_run_id``); else ``None``."""
    conversation_id, found, _ = run_id.rpartition("::")
    if not found or not conversation_id or ":" in conversation_id:
        return None
    turn = turn_of(run_id, conversation_id)
    return None if turn is None else (conversation_id, turn)
