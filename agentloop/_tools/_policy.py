"""Permission policies: ``policy(call)`` answers ``allow()``, ``deny(reason)`` or ``ask(reason)``.

The answers themselves live with the engine (``agentloop._core._approval``):
an ``ask`` stops the run, which is the engine's business. A registry's
review hands back a ``PreparedCall``: the call checked once, with the
policies' answer, for the dispatch that follows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from agentloop._core._approval import Decision, allow, ask, deny
from agentloop._tools._tool import Tool

__all__ = ["Decision", "Policy", "PreparedCall", "allow", "ask", "deny", "stopped_by"]

#: A permission policy: sees a copy of the call, answers (or, ``async``, awaits) a ``Decision``.
Policy = Callable[[dict[str, Any]], Decision | Awaitable[Decision]]


@attrs.frozen
class PreparedCall:
    """A call a registry's review checked: its tool, its converted arguments, the policies' answer.

    The engine hands it back with the call (``RunTool.review``), and
    ``dispatch(call, review=prepared)`` runs it without validating or
    converting its arguments again. ``asks`` and ``reason`` are the
    answer's: an ask makes the batch wait for a person.
    """

    tool: Tool
    kwargs: dict[str, Any]
    decision: Decision

    @property
    def asks(self) -> bool:
        """Whether the policies asked a person about the call."""
        return self.decision.asks

    @property
    def reason(self) -> str:
        """The policies' reason (an ask's question, a denial's cause)."""
        return self.decision.reason


def stopped_by(decision: Decision) -> dict[str, Any] | None:
    """The ``denied`` outcome a decision gives its call, or ``None`` when the call may run."""
    if decision.allowed:
        return None
    if decision.asks:  # no run to wait in: fail closed, and say what was needed
        return {
            "status": "denied",
            "content": f"this call needs a person's approval, which was not given: "
            f"{decision.reason}",
        }
    return {"status": "denied", "content": decision.reason}
