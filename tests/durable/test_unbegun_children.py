"""A durable agent call whose child cannot go on: its input or its deps fail when it runs again.

The child is recorded under the call already (it waited for a person, or a
crash cut it). The call is answered with the error, the child ends
``cancelled`` with its parent, and the tokens it spent are on the call's
outcome, so the parent's record, its run file and ``view_run`` agree. A
child that had ended answers from its record, which needs no deps.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

import agentloop
from agentloop.ledger import LedgerError, view_run
from agentloop.review import load_run, save_run
from agentloop.testing import call, final, with_usage
from tests.support.ledgers import Crash, CrashingLedger, MemoryLedger


def _family(ledger: Any, deps_fail: list[bool], asks: bool) -> agentloop.Loop:
    """A parent whose agent ``post`` (call c1) gets its deps from a pool that fails when told."""

    def send(to: str) -> str:
        """Send a letter."""
        return "sent"

    def connection(ctx: agentloop.RunContext[Any]) -> str:
        if deps_fail:
            raise RuntimeError("the pool is exhausted")
        return "a connection"

    def answering(script: list[Any]) -> Any:
        return lambda history: script[sum(m["kind"] in ("call", "calls") for m in history)]

    policy = (lambda call: agentloop.ask("a letter leaves")) if asks else None
    child = agentloop.Loop(
        answering([with_usage(call("k1", "send", to="bob"), 30, 5), final("went")]),
        tools=[agentloop.Tool(send, policy=policy)],
    )
    return agentloop.Loop(
        answering([call("c1", "post", input="w"), final("over")]),
        tools=[child.as_tool("post", "Post.", deps=connection)],
        ledger=ledger,
    )


def _agree(result: agentloop.RunResult, ledger: Any, tmp_path: Any) -> None:
    """The result, and the ledger's view of it, each save to a run file that loads back."""
    for shown in (result, view_run(ledger, "r1").result):
        save_run(shown, tmp_path / "run.json")
        assert load_run(tmp_path / "run.json") == shown


def test_a_waiting_child_whose_deps_fail_when_decided_keeps_its_tokens(tmp_path: Any) -> None:
    """Approved in a new process whose pool fails: c1 is answered with the error, the child
    ends cancelled in the ledger, its 35 tokens counted; result and view save and load."""
    memory = MemoryLedger()
    assert _family(memory, [], asks=True).run("go", run_id="r1").status == "awaiting_approval"
    result = _family(memory, [True], asks=True).resume(
        "r1", decisions={("c1", "k1"): agentloop.approve()}
    )
    assert result.transcript[2]["content"]["message"] == "the pool is exhausted"
    assert view_run(memory, "r1:c1").state == "cancelled"
    assert result.usage.total == result.children["c1"].usage.total == 35
    _agree(result, memory, tmp_path)


def test_a_child_cut_by_a_crash_answers_or_ends_whatever_its_deps_do_on_resume(
    tmp_path: Any,
) -> None:
    """Crashed at each append and resumed where the pool fails: a child that had ended answers
    c1 from its record (no deps needed); one that had not ends cancelled, c1 answered with the
    error; either way its tokens count, and result and view save and load."""
    whole = MemoryLedger()
    _family(whole, [], asks=False).run("go", run_id="r1")
    for at in range(1, whole.appends + 1):
        memory = MemoryLedger()
        with pytest.raises((Crash, LedgerError)):
            _family(CrashingLedger(memory, at), [], asks=False).run("go", run_id="r1")
        gc.collect()  # the "dead" process's runs let go of their claims
        try:
            ended = view_run(memory, "r1:c1").done
        except agentloop.ledger.RunNotFoundError:
            ended = None
        result = _family(memory, [True], asks=False).resume("r1")
        answer = result.transcript[2]
        if ended is None:  # no child yet: the call fails as a fresh one does
            assert (answer["status"], result.children) == ("error", {}), at
            continue
        assert answer["content"] == ("went" if ended else answer["content"]), at
        assert answer["status"] == ("ok" if ended else "error"), at
        assert result.usage == result.children["c1"].usage, at  # (35 once its reply is kept)
        _agree(result, memory, tmp_path)
