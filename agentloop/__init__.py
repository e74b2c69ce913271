"""agentloop: an LLM tool-calling loop as an explicit finite-state machine.

The model is a callback over a copy of the history that answers with a tool
call or a final answer. The engine validates the reply, dispatches an
accepted call, feeds the result back, and stops in a named terminal state.
Everything in ``__all__`` is the public API; the modules behind it are private.
"""

from __future__ import annotations

from agentloop._async_driver import AsyncRun
from agentloop._diagram import SVGUnavailableError, to_dot, to_mermaid, to_svg
from agentloop._driver import Loop, Model, Run
from agentloop._engine import AgentloopError, Engine, InvalidStateError, Listener
from agentloop._machine import ROWS, TERMINAL, Guard, State, Trigger, build_machine
from agentloop._messages import DISPATCH_STATUSES, RESULT_STATUSES, JSONError
from agentloop._registry import Decision, Policy, SpecFormat, Tool, ToolRegistry, allow, deny
from agentloop._report import report_html
from agentloop._runfile import NotJSON, RecordedException, RunFileError
from agentloop._tools import Dispatcher
from agentloop._values import Budget, CancelToken, RunResult, Transition

__all__ = [
    "DISPATCH_STATUSES",
    "RESULT_STATUSES",
    "ROWS",
    "TERMINAL",
    "AgentloopError",
    "AsyncRun",
    "Budget",
    "CancelToken",
    "Decision",
    "Dispatcher",
    "Engine",
    "Guard",
    "InvalidStateError",
    "JSONError",
    "Listener",
    "Loop",
    "Model",
    "NotJSON",
    "Policy",
    "RecordedException",
    "Run",
    "RunFileError",
    "RunResult",
    "SVGUnavailableError",
    "SpecFormat",
    "State",
    "Tool",
    "ToolRegistry",
    "Transition",
    "Trigger",
    "allow",
    "build_machine",
    "deny",
    "report_html",
    "to_dot",
    "to_mermaid",
    "to_svg",
]
