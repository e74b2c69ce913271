"""The tools the committed fixtures (``tests/fixtures``) were made with, and go on with."""

from __future__ import annotations

from typing import Any

import agentloop
from agentloop import Tool, ToolRegistry
from tests.support.helpers import add


def asks(call: dict[str, Any]) -> agentloop.Decision:
    """The policy the fixtures were made with: a person decides about big sums."""
    return agentloop.ask("moves money") if call["arguments"]["a"] > 100 else agentloop.allow()


def tools() -> ToolRegistry:
    """The tools the fixtures were made with."""
    return ToolRegistry([Tool(add, policy=asks)])
