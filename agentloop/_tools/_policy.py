"""Permission policies: ``policy(call)`` answers ``allow()``, ``deny(reason)`` or ``ask(reason)``.

The answers themselves live with the engine (``agentloop._core._approval``):
an ``ask`` stops the run, which is the engine's business.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentloop._core._approval import Decision, allow, ask, deny

__all__ = ["Decision", "Policy", "allow", "ask", "deny"]

#: A permission policy: sees a copy of the call, answers (or, ``async``, awaits) a ``Decision``.
Policy = Callable[[dict[str, Any]], Decision | Awaitable[Decision]]
