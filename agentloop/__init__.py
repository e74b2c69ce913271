"""agentloop: an LLM tool-calling loop as an explicit finite-state machine.

The model is a callback over a copy of the history that answers with a tool
call or a final answer. The engine validates the reply, dispatches an
accepted call, feeds the result back, and stops in a named terminal state.
Everything in ``__all__`` is the public API; the modules behind it are private.
"""

from __future__ import annotations

from agentloop._async import AsyncRun
from agentloop._callbacks import Dispatcher, Listener, Model
from agentloop._core._approval import PendingCall, approve, ask
from agentloop._core._engine import Engine
from agentloop._core._table import ROWS, TERMINAL, Effect, Guard, Row, State, Trigger
from agentloop._core._values import (
    AskModel,
    AwaitApproval,
    Budget,
    CancelToken,
    NotJSON,
    RecordedException,
    RunResult,
    RunTool,
    Transition,
    Usage,
)
from agentloop._durable._key import idempotency_key
from agentloop._durable._ledger import Ledger, LedgerRecord, LedgerWriter
from agentloop._durable._sqlite import SQLiteLedger
from agentloop._durable._view import LedgerRun, RunSummary, decide_run, list_runs, view_run
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
    SVGUnavailableError,
    TableError,
)
from agentloop._loop import Loop
from agentloop._names import publish as _publish
from agentloop._review._diagram import to_dot, to_mermaid, to_svg
from agentloop._review._report import report_html
from agentloop._review._runfile import load_run, run_from_json, run_to_json, save_run
from agentloop._sync import Run
from agentloop._tools._registry import (
    Decision,
    Policy,
    SpecFormat,
    Tool,
    ToolRegistry,
    allow,
    deny,
)

__all__ = [
    "ROWS",
    "TERMINAL",
    "AgentloopError",
    "AskModel",
    "AsyncRun",
    "AwaitApproval",
    "Budget",
    "CancelToken",
    "ConfigurationMismatchError",
    "Decision",
    "Dispatcher",
    "Effect",
    "Engine",
    "Guard",
    "InvalidStateError",
    "JSONError",
    "Ledger",
    "LedgerError",
    "LedgerRecord",
    "LedgerRun",
    "LedgerWriter",
    "Listener",
    "Loop",
    "Model",
    "NotJSON",
    "PendingCall",
    "Policy",
    "RecordedException",
    "Row",
    "Run",
    "RunBusyError",
    "RunExistsError",
    "RunFileError",
    "RunNotFoundError",
    "RunResult",
    "RunSummary",
    "RunTool",
    "SQLiteLedger",
    "SVGUnavailableError",
    "SpecFormat",
    "State",
    "TableError",
    "Tool",
    "ToolRegistry",
    "Transition",
    "Trigger",
    "Usage",
    "allow",
    "approve",
    "ask",
    "decide_run",
    "deny",
    "idempotency_key",
    "list_runs",
    "load_run",
    "report_html",
    "run_from_json",
    "run_to_json",
    "save_run",
    "to_dot",
    "to_mermaid",
    "to_svg",
    "view_run",
]


_publish(__name__, globals(), __all__)
