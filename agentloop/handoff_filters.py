"""agentloop.handoff_filters: ready-made filters for ``handoff(target, filter=...)``.

A handoff's filter decides what the next agent of a team is sent: it is
called as ``filter(history, to)`` with a copy of the history up to the
handoff's call and the name of the agent handed to. ``without_tools`` sends
what was said without the tool calls and their results; ``last_turns(n)``
sends the system messages and the last ``n`` user turns, whole. Each keeps
every call it sends with its result. See the docs' "Handoffs" page.
"""

from __future__ import annotations

from agentloop._core.handoff_filters import last_turns, without_tools
from agentloop._names import publish as _publish

__all__ = ["last_turns", "without_tools"]

_publish(__name__, globals(), ["last_turns", "without_tools"])
