"""What a paused run holds: each call of its batch, and what it waits for.

A call waits for a person's decision about itself, or, an agent call, about
its child run's calls (their paths begin with its id); ``show`` and the
report list each so, by the key a decision takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop._core.approval import key_text

if TYPE_CHECKING:
    from agentloop._core.approval import PendingCall
    from agentloop._core.values import RunResult

__all__ = ["held_calls", "waits_for"]


def held_calls(result: RunResult) -> list[tuple[dict[str, Any], tuple[PendingCall, ...]]]:
    """Each call of the batch a paused run holds, with the pending calls it waits on.

    Its own pending entry, if a person decides it; for an agent call whose child
    waits, the child's pending calls (their paths begin with its id); else none.
    """
    held = result.held or {}
    calls = held.get("calls") or ([held] if held.get("kind") == "call" else [])
    return [
        (
            call,
            tuple(p for p in result.pending if (p.path[:1] or (p.call_id,)) == (call.get("id"),)),
        )
        for call in calls
    ]


def waits_for(pending: tuple[PendingCall, ...]) -> str:
    """What a held call waits for: a person's decision about it, or about its child's calls."""
    if len(pending) == 1 and not pending[0].path:
        return pending[0].reason
    asks = "; ".join(f"{c.name}#{key_text(c.key)} ({c.reason})" for c in pending)
    return f"its child run waits for a person: {asks}"
