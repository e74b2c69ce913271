"""A call a crashed process had started is not reviewed again when its run resumes.

Its policies let it start: whatever they answer now (``deny``, ``ask``), the
call is neither denied (it may have taken effect) nor held for a person; it
is answered as at most once says: ``OutcomeUnknown``, or run again when its
tool is idempotent (an agent tool, which resumes its child).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

import agentloop
from agentloop.ledger import LedgerError
from agentloop.review import load_run, save_run
from agentloop.testing import call, final, with_usage
from tests.durable.test_durable import DRIVERS, Driver
from tests.support.ledgers import Crash, CrashingLedger, MemoryLedger

NOW = {"deny": agentloop.deny("not any more"), "ask": agentloop.ask("a person, now")}


def _answering(script: list[Any]) -> Any:
    return lambda history: script[sum(m["kind"] in ("call", "calls") for m in history)]


def _resume(loop: agentloop.Loop, driver: Driver) -> agentloop.RunResult:
    return loop.resume("r1") if driver == "sync" else asyncio.run(loop.aresume("r1"))


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("now", sorted(NOW))
def test_a_started_call_whose_policy_now_refuses_is_answered_outcome_unknown(
    driver: Driver, now: str
) -> None:
    """pay took effect and the process died; resumed where its policy now denies or asks, the
    call is OutcomeUnknown (not denied, not held for a person) and pay ran once."""
    paid: list[str] = []
    dying: list[CrashingLedger] = []

    def pay(to: str) -> str:
        """Pay someone."""
        paid.append(to)
        if dying:
            dying.pop().die()
        return "paid"

    def loop(ledger: Any, verdict: agentloop.Decision) -> agentloop.Loop:
        return agentloop.Loop(
            _answering([call("c1", "pay", to="bob"), final("over")]),
            tools=[agentloop.Tool(pay, policy=lambda call: verdict)],
            ledger=ledger,
        )

    memory = MemoryLedger()
    dying.append(CrashingLedger(memory, at=10**6))
    with pytest.raises(Crash):
        loop(dying[0], agentloop.allow()).run("go", run_id="r1")
    gc.collect()  # the "dead" process's run lets go of its claim
    result = _resume(loop(memory, NOW[now]), driver)
    assert (result.status, result.transcript[2]["status"], paid) == ("finished", "error", ["bob"])
    assert result.transcript[2]["content"]["type"] == "OutcomeUnknown"


def test_an_agent_call_cut_by_a_crash_resumes_its_child_whatever_its_policy_says_now(
    tmp_path: Any,
) -> None:
    """Crashed at each append once c1 started: resumed where post's policy now denies, c1 runs
    again and its child answers it, its tokens counted; the result's run file loads back."""

    def send(to: str) -> str:
        """Send a letter."""
        return "sent"

    def family(ledger: Any, verdict: agentloop.Decision) -> agentloop.Loop:
        child = agentloop.Loop(
            _answering([with_usage(call("k1", "send", to="bob"), 30, 5), final("went")]),
            tools=[send],
        )
        return agentloop.Loop(
            _answering([call("c1", "post", input="w"), final("over")]),
            tools=[child.as_tool("post", "Post.", policy=lambda call: verdict)],
            ledger=ledger,
        )

    whole = MemoryLedger()
    family(whole, agentloop.allow()).run("go", run_id="r1")
    for at in range(2, whole.appends + 1):  # append 1 starts c1
        memory = MemoryLedger()
        with pytest.raises((Crash, LedgerError)):
            family(CrashingLedger(memory, at), agentloop.allow()).run("go", run_id="r1")
        gc.collect()
        result = family(memory, NOW["deny"]).resume("r1")
        assert (result.transcript[2]["status"], result.transcript[2]["content"]) == ("ok", "went")
        assert result.usage.total == result.children["c1"].usage.total == 35, at
        save_run(result, tmp_path / "run.json")
        assert load_run(tmp_path / "run.json") == result, at
