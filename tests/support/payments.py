"""A pay desk whose policy answers as it is told, the model that asks it to pay twice, and what of
a run a refused input must leave as it was."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

import agentloop
from agentloop import Decision, State, Tool, ToolRegistry, ask
from agentloop.testing import ScriptedModel, batch, call, final

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop.ledger import SQLiteLedger

Message = dict[str, Any]


class Desk:
    """A ``pay`` tool that records what ran, and a policy that answers ``answer(call)``."""

    def __init__(self, answer: Callable[[Message], Decision] | None = None) -> None:
        self.ran: list[str] = []
        self.asked: list[str] = []
        self.answer = answer or (lambda call: ask("moves money"))
        self.registry = ToolRegistry([Tool(self.pay, name="pay")], policy=self.policy)

    def policy(self, call: Message) -> Decision:
        self.asked.append(call["id"])
        return self.answer(call)

    def pay(self, cents: int) -> str:
        self.ran.append(f"pay {cents}")
        return f"paid {cents}"


def two() -> Message:
    """A batch of two payments: ``c1`` (10 cents), then ``c2`` (1 cent)."""
    return batch(call("c1", "pay", cents=10), call("c2", "pay", cents=1))


def script() -> ScriptedModel:
    """The model: ``two()``, then a final reply."""
    return ScriptedModel([two(), final("done")])


def state_of(run: agentloop.Run | agentloop.AsyncRun) -> tuple[Any, ...]:
    """Everything of a live run a refused input must leave as it was."""
    return (
        run.state,
        run.steps,
        run.calls,
        run.transcript,
        run.pending,
        run.events,
        agentloop.review.run_to_json(run.result())
        if run.state is State.AWAITING_APPROVAL
        else None,
    )


def records(ledger: SQLiteLedger, run_id: str) -> list[tuple[str, str, Any]]:
    """A run's ledger records, decoded."""
    return [(r.kind, r.key, orjson.loads(r.body)) for r in ledger.read(run_id)[1]]
