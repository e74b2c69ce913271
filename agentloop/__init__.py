"""agentloop: an LLM tool-calling loop as an explicit finite-state machine.

The model is a callback over a copy of the history that answers with a tool
call, a batch of calls or a final answer. The engine validates the reply,
dispatches the accepted calls, feeds the results back, and stops in a named
terminal state. Everything in ``__all__`` is the public API for a user of
``Loop``, tools, run files and approval; documented submodules hold the
rest: ``agentloop.engine`` (for writing a driver), ``agentloop.ledger`` (for
writing or reading a store of durable runs), ``agentloop.review`` (run
documents, diagrams and pages), and the features' own: ``context``,
``models``, ``streaming``, ``mcp``, ``providers``, ``dbos``, ``otel`` and
``testing``. The modules behind them are private.
"""

from __future__ import annotations

from agentloop import engine as engine
from agentloop import ledger as ledger
from agentloop import review as review
from agentloop._core.approval import PendingCall, approve, ask
from agentloop._core.table import State
from agentloop._core.values import (
    Budget,
    CancelToken,
    NotJSON,
    RecordedException,
    RunResult,
    Transition,
    Usage,
)
from agentloop._drivers.asyncio import AsyncRun
from agentloop._drivers.progress import report_progress
from agentloop._drivers.sync import Run
from agentloop._durable.key import idempotency_key
from agentloop._durable.sqlite import SQLiteLedger
from agentloop._errors import (
    AgentloopError,
    ConfigurationMismatchError,
    InvalidStateError,
    JSONError,
    LedgerError,
    RunBusyError,
    RunExistsError,
    RunFileError,
    RunNotFoundError,
)
from agentloop._loop.loop import Loop
from agentloop._names import publish as _publish
from agentloop._review.runfile import load_run, save_run
from agentloop._tools.registry import (
    Decision,
    Policy,
    SpecFormat,
    Tool,
    ToolRegistry,
    allow,
    deny,
)

__all__ = [
    "AgentloopError",
    "AsyncRun",
    "Budget",
    "CancelToken",
    "ConfigurationMismatchError",
    "Decision",
    "InvalidStateError",
    "JSONError",
    "LedgerError",
    "Loop",
    "NotJSON",
    "PendingCall",
    "Policy",
    "RecordedException",
    "Run",
    "RunBusyError",
    "RunExistsError",
    "RunFileError",
    "RunNotFoundError",
    "RunResult",
    "SQLiteLedger",
    "SpecFormat",
    "State",
    "Tool",
    "ToolRegistry",
    "Transition",
    "Usage",
    "allow",
    "approve",
    "ask",
    "deny",
    "idempotency_key",
    "load_run",
    "report_progress",
    "save_run",
]

_publish(__name__, globals(), __all__)
