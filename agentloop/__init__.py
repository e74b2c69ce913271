"""agentloop: an LLM tool-calling loop as an explicit finite-state machine.

The model is a callback over a copy of the history that answers with a tool
call, a batch of calls or a final answer. The engine validates the reply,
dispatches the accepted calls, feeds the results back, and stops in a named
terminal state. Everything in ``__all__`` is what a user of ``Loop``, tools
and approval needs; each other public name has one home, a documented
submodule: ``agentloop.review`` (run files, diagrams and pages),
``agentloop.ledger`` (durable runs' stores and what only they raise),
``agentloop.engine`` (for writing a driver), and the features' own:
``context``, ``models``, ``streaming``, ``mcp``, ``providers``, ``dbos``,
``otel`` and ``testing``. The modules behind them are private.
"""

from __future__ import annotations

from agentloop import engine as engine
from agentloop import ledger as ledger
from agentloop import review as review
from agentloop._core.approval import PendingCall, approve, ask
from agentloop._core.table import State
from agentloop._core.values import CancelToken, RunResult, Transition, Usage
from agentloop._drivers.asyncio import AsyncRun
from agentloop._drivers.run_context import (
    RunContext,
    current_context,
    idempotency_key,
    report_progress,
)
from agentloop._drivers.sync import Run
from agentloop._errors import (
    AgentloopError,
    ConfigurationMismatchError,
    InvalidStateError,
    JSONError,
)
from agentloop._loop.handoffs import handoff
from agentloop._loop.loop import Loop
from agentloop._loop.output_checks import Retry
from agentloop._names import publish as _publish
from agentloop._tools.registry import Decision, Tool, ToolRegistry, allow, deny

#: The installed version (pyproject.toml's, which a test holds it to).
__version__ = "0.1.0"

__all__ = [
    "AgentloopError",
    "AsyncRun",
    "CancelToken",
    "ConfigurationMismatchError",
    "Decision",
    "InvalidStateError",
    "JSONError",
    "Loop",
    "PendingCall",
    "Retry",
    "Run",
    "RunContext",
    "RunResult",
    "State",
    "Tool",
    "ToolRegistry",
    "Transition",
    "Usage",
    "allow",
    "approve",
    "ask",
    "current_context",
    "deny",
    "handoff",
    "idempotency_key",
    "report_progress",
]

_publish(__name__, globals(), __all__)
