"""Typed agent tools under a durable parent: a child read from the ledger keeps its type.

A child Loop with ``output=T`` answers a live parent with a ``T`` in
``result.children``. A parent resumed from its ledger (after a crash, or
read back once it ended) has the same children: each read through its agent
tool's Loop, so typed as the live run's, never the JSON ``view_run`` gives
without a Loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest

import agentloop
from agentloop.ledger import LedgerError, view_run
from agentloop.testing import call, final
from tests.support.ledgers import Crash, CrashingLedger, MemoryLedger


@attrs.frozen
class Found:
    """What a researcher found."""

    answer: str
    sources: int


def _family(ledger: Any) -> agentloop.Loop[Found]:
    """A typed parent whose typed child calls a typed grandchild; models answer by history."""

    def answering(script: list[Any]) -> Any:
        return lambda history: script[sum(m["kind"] in ("call", "calls") for m in history)]

    grandchild = agentloop.Loop(
        answering([final('{"answer": "deep", "sources": 1}')]), output=Found
    )
    child = agentloop.Loop(
        answering([call("k1", "dig", input="x"), final('{"answer": "mid", "sources": 2}')]),
        tools=[grandchild.as_tool("dig", "Dig.")],
        output=Found,
    )
    return agentloop.Loop(
        answering([call("c1", "ask", input="q"), final('{"answer": "top", "sources": 3}')]),
        tools=[child.as_tool("ask", "Ask.")],
        output=Found,
        ledger=ledger,
    )


def _outputs(result: agentloop.RunResult[Any]) -> list[object]:
    """The outputs of a run, its child and its grandchild."""
    child = result.children["c1"]
    return [result.output, child.output, child.children["k1"].output]


TYPED = [Found("top", 3), Found("mid", 2), Found("deep", 1)]


def test_a_resumed_parents_children_keep_their_child_loops_output_type() -> None:
    """Crashed at any append and resumed, or read back once ended (by either driver): every
    child and grandchild is a Found, as in the live run; view_run, with no Loop, gives JSON."""
    memory = MemoryLedger()
    whole = _family(memory).run("go", run_id="r1")
    assert _outputs(whole) == TYPED
    assert _family(memory).resume("r1") == whole
    assert _outputs(asyncio.run(_family(memory).aresume("r1"))) == TYPED
    assert view_run(memory, "r1").result.children["c1"].output == {"answer": "mid", "sources": 2}
    for at in range(1, memory.appends + 1):
        crashed = MemoryLedger()
        with pytest.raises((Crash, LedgerError)):
            _family(CrashingLedger(crashed, at)).run("go", run_id="r1")
        assert _outputs(_family(crashed).resume("r1")) == TYPED, at


def test_a_durable_forks_carried_children_keep_their_type() -> None:
    """A fork of r1 by id, cut after c1 returned, carries c1's child (recorded under r1) as a
    Found, as do a resume of the fork and a fork of the fork."""
    memory = MemoryLedger()
    whole = _family(memory).run("go", run_id="r1")
    returned = next(i for i, e in enumerate(whole.events) if e.trigger == "tool_returned")
    fork = _family(memory).fork("r1", at=returned + 1, run_id="f1").finish()
    again = _family(memory).fork("f1", at=returned + 1, run_id="f2").finish()
    for result in (fork, _family(memory).resume("f1"), again, _family(memory).resume("f2")):
        assert result.children["c1"].run_id == "r1:c1"
        assert _outputs(result) == TYPED
