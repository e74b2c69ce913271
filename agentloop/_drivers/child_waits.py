"""A child run (an agent tool's) that waits for a person, as its parent's driver sees it.

``Waiting``: what an agent tool's call answers in place of an outcome when
its child run stops for a person. The driver reports it with
``engine.call_waits``: the call stays without a result, and the child's
pending calls are pending in the parent too, under the call's id.

``end_waiting``: a run that ended while calls waited on their children (it
was cancelled) ends each of those children cancelled too, so that no child
is left waiting under a parent that ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentloop._core.approval import PendingCall

__all__ = ["Waiting", "WaitingChild", "end_waiting"]


class Waiting(dict[str, Any]):
    """A call's answer while its child run waits for a person: the child's ``pending`` calls.

    A dict of the outcome's shape (its content ``None``), so that a
    registry hands it on as it hands on any outcome; the driver reports it
    with ``engine.call_waits(pending, call_id)``, never as a result.
    """

    __slots__ = ("pending",)

    def __init__(self, pending: tuple[PendingCall, ...]) -> None:
        super().__init__(status="waiting", content=None)
        self.pending = pending


class WaitingChild(Protocol):
    """A child run that waits for a person, as its parent's driver holds it."""

    def _end_cancelled(self) -> object:
        """End the child (and its own waiting children) ``cancelled``: its result."""
        ...


def end_waiting(children: dict[str, Any], waiting: dict[str, WaitingChild]) -> None:
    """The run ended while calls waited on their ``waiting`` children: each ends cancelled.

    Each child's result, ended, replaces the waiting one in ``children``.
    """
    while waiting:
        call_id, child = waiting.popitem()
        children[call_id] = child._end_cancelled()
