"""agentloop.engine: for writing a driver of your own around the sans-I/O engine.

``Engine`` is the state machine ``Loop``'s drivers wrap, made with the
run's input and its ``Budget``: ``next()`` says what the run needs
(``AskModel``, ``RunTool``, ``ReviewCalls``, ``AwaitApproval``, ``Wait``
before a retry, or the ``agentloop.Transition`` it made by itself;
``agentloop.context.Summarise`` under a context policy that summarises), and
the driver reports what happened (``waited()`` once a ``Wait`` is over;
``output_checked(problems)`` once a ``CheckOutput``, handed out only to a
driver that set ``engine.output_check``, is answered). A
registry's ``review`` asks each tool's ``Policy`` and answers a
``ReviewCalls`` with a ``PreparedCall`` per call, which the engine hands back
in ``RunTool.review``; its ``specs(format)`` describes the tools for a
provider's request, in a ``SpecFormat``. The table it interprets is here too (``ROWS``: each a
``Row`` of ``agentloop.State``, ``Trigger``, ``Guard`` and ``Effect``; a
``Feature``'s rows are in the table an engine consults only when its
configuration turns the feature on), with
the callback types a driver calls (``Model``, ``Dispatcher``, ``Listener``).
See the docs' "Writing a driver" page.
"""

from __future__ import annotations

from agentloop._core.build import ROWS, Row
from agentloop._core.engine import Engine
from agentloop._core.requests import CheckOutput
from agentloop._core.table import TERMINAL, Effect, Feature, Guard, Trigger
from agentloop._core.values import (
    AskModel,
    AwaitApproval,
    Budget,
    ReviewCalls,
    RunTool,
    Wait,
)
from agentloop._drivers.callbacks import Dispatcher, Listener, Model
from agentloop._names import publish as _publish
from agentloop._tools.policy import Policy, PreparedCall
from agentloop._tools.specs import SpecFormat

__all__ = [
    "ROWS",
    "TERMINAL",
    "AskModel",
    "AwaitApproval",
    "Budget",
    "CheckOutput",
    "Dispatcher",
    "Effect",
    "Engine",
    "Feature",
    "Guard",
    "Listener",
    "Model",
    "Policy",
    "PreparedCall",
    "ReviewCalls",
    "Row",
    "RunTool",
    "SpecFormat",
    "Trigger",
    "Wait",
]

_publish(__name__, globals(), __all__)
