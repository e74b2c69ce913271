"""agentloop.engine: for writing a driver of your own around the sans-I/O engine.

``Engine`` is the state machine ``Loop``'s drivers wrap: ``next()`` says what
the run needs (``AskModel``, ``RunTool``, ``ReviewCalls``, ``AwaitApproval``,
``Wait`` before a retry, or the ``Transition`` it made by itself;
``agentloop.context.Summarise`` under a context policy that summarises), and
the driver reports what happened (``waited()`` once a ``Wait`` is over). A
registry's ``review`` answers a ``ReviewCalls`` with a ``PreparedCall`` per
call, which the engine hands back in ``RunTool.review``.
The table it interprets is here too (``ROWS``: each a ``Row`` of ``State``,
``Trigger``, ``Guard`` and ``Effect``; each feature's rows are a ``Feature``'s,
in the table only when a configuration turns it on), with the callback types a driver
calls (``Model``, ``Dispatcher``, ``Listener``). See the docs' "Writing a
driver" page.
"""

from __future__ import annotations

from agentloop._core.build import ROWS, Row
from agentloop._core.engine import Engine
from agentloop._core.table import TERMINAL, Effect, Feature, Guard, State, Trigger
from agentloop._core.values import (
    AskModel,
    AwaitApproval,
    ReviewCalls,
    RunTool,
    Transition,
    Wait,
)
from agentloop._drivers.callbacks import Dispatcher, Listener, Model
from agentloop._names import publish as _publish
from agentloop._tools.policy import PreparedCall

__all__ = [
    "ROWS",
    "TERMINAL",
    "AskModel",
    "AwaitApproval",
    "Dispatcher",
    "Effect",
    "Engine",
    "Feature",
    "Guard",
    "Listener",
    "Model",
    "PreparedCall",
    "ReviewCalls",
    "Row",
    "RunTool",
    "State",
    "Transition",
    "Trigger",
    "Wait",
]

_publish(__name__, globals(), [name for name in __all__ if name not in ("State", "Transition")])
