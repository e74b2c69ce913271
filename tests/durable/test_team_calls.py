"""A durable team's calls after a handoff: each runs under its own agent's tools, crash or pause.

A call is made by the agent in force, and run by that agent's tools: so a
call a crash cut runs again when that agent's tool is idempotent (an agent
tool is, which resumes its child), whatever the starting agent's tools are.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

import agentloop
from agentloop.ledger import decide_run, view_run
from agentloop.testing import call, final
from tests.durable.test_durable import DRIVERS, Driver
from tests.support.ledgers import Crash, CrashingLedger, MemoryLedger


def _answering(script: list[Any], driver: Driver) -> Any:
    """A model that answers by how many replies its history holds, plain or ``async def``."""

    def model(history: list[dict[str, Any]]) -> object:
        return script[sum(m["kind"] in ("call", "calls") for m in history)]

    async def amodel(history: list[dict[str, Any]]) -> object:
        return model(history)

    return model if driver == "sync" else amodel


def _team(ledger: Any, driver: Driver, tool: agentloop.Tool, **arguments: Any) -> agentloop.Loop:
    """``triage`` hands off to ``billing``, whose call ``p1`` is to ``tool``."""
    script = [call("b0", "transfer_to_billing"), call("p1", tool.name, **arguments), final("ok")]
    billing = agentloop.Loop(
        _answering(script, driver),
        name="billing",
        tools=[tool],
    )
    return agentloop.Loop(
        _answering([call("t1", "transfer_to_billing")], driver),
        name="triage",
        handoffs=[agentloop.handoff(billing)],
        ledger=ledger,
    )


def _run(loop: agentloop.Loop, driver: Driver, **options: Any) -> agentloop.RunResult:
    if driver == "sync":
        return loop.run("hi", run_id="r1", **options)
    return asyncio.run(loop.arun("hi", run_id="r1", **options))


def _resume(loop: agentloop.Loop, driver: Driver, **options: Any) -> agentloop.RunResult:
    if driver == "sync":
        return loop.resume("r1", **options)
    return asyncio.run(loop.aresume("r1", **options))


@pytest.mark.parametrize("driver", DRIVERS)
def test_an_idempotent_tool_of_an_agent_handed_to_runs_again_after_a_crash(driver: Driver) -> None:
    """billing's idempotent tool, cut by a crash right after its effect, runs again on resume
    under the same key, as the starting agent's would: not answered OutcomeUnknown."""
    keys: list[str | None] = []
    dying: list[CrashingLedger] = []

    def pay() -> str:
        """Pay, once per key (the bank deduplicates)."""
        keys.append(agentloop.idempotency_key())
        if dying:
            dying.pop().die()
        return "paid"

    tool = agentloop.Tool(pay, idempotent=True)
    memory = MemoryLedger()
    dying.append(CrashingLedger(memory, at=10**6))
    with pytest.raises(Crash):
        _run(_team(dying[0], driver, tool), driver)
    gc.collect()  # the "dead" process's runs let go of their claims
    result = _resume(_team(memory, driver, tool), driver)
    assert (result.status, result.agent, result.output) == ("finished", "billing", "ok")
    assert result.transcript[4] == {
        "kind": "tool_result",
        "id": "p1",
        "name": "pay",
        "status": "ok",
        "content": "paid",
    }
    assert keys == ["r1:p1", "r1:p1"]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("decide", ["resume", "decide_run"])
def test_approval_inside_a_child_of_an_agent_handed_to_goes_on_once_decided(
    driver: Driver, decide: str
) -> None:
    """billing's agent tool's child asks a person; decided (by resume, or decide_run as the
    command line does) in a new process, the child goes on and answers billing's call."""
    sent: list[str] = []

    def send() -> str:
        """Send a letter."""
        sent.append("bob")
        return "sent"

    def team(ledger: Any) -> agentloop.Loop:
        asks = agentloop.Tool(send, policy=lambda call: agentloop.ask("a letter leaves"))
        clerk = agentloop.Loop(
            _answering([call("k1", "send"), final("went out")], driver), tools=[asks]
        )
        return _team(ledger, driver, clerk.as_tool("post", "Post."), input="bob")

    memory = MemoryLedger()
    waiting = _run(team(memory), driver)
    assert [p.key for p in waiting.pending] == [("p1", "k1")]
    decisions: dict[str | tuple[str, ...], agentloop.Decision] = {("p1", "k1"): agentloop.approve()}
    if decide == "decide_run":
        decide_run(memory, "r1", decisions)
        result = _resume(team(memory), driver)
    else:
        result = _resume(team(memory), driver, decisions=decisions)
    assert (result.status, result.output, sent) == ("finished", "ok", ["bob"])
    assert result.transcript[4]["content"] == "went out"  # the child's output answers p1
    assert view_run(memory, "r1:p1").state == "finished"
    assert result.children["p1"].status == "finished"
