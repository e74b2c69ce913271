"""What an agent tool's call is answered with when its child run ends otherwise than finished.

One rule for the tool that answers (``_loop/agent_tool.py``) and for a run
file's check of its children (``_review/runchildren.py``). A child that
finished answers ``ok`` with its output; one that ended cancelled answers
nothing of its own (the cancel does, in its parent too); any other end
(``failed``, ``exhausted``, ``malformed``...) answers an ``error`` naming the
child's status and why (``ended_content``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop._core.json import exception_content

if TYPE_CHECKING:
    from agentloop._core.values import RunResult

__all__ = ["ChildRunEnded", "ended_content"]


class ChildRunEnded(Exception):
    """An agent tool's child run ended without an output: its ``status`` says how."""


def ended_content(tool: str, result: RunResult[Any]) -> tuple[dict[str, Any], ChildRunEnded]:
    """The ``error`` content a child that ended without an output answers its call with.

    Also the exception behind it (kept on the parent's event). ``tool`` is the
    agent tool's name, ``result`` the child's.
    """
    status, why = result.status.value, result.reason or result.error
    exc = ChildRunEnded(f"agent {tool!r} ended {status}" + (f" ({why})" if why else ""))
    return {**exception_content(exc), "status": status}, exc
