"""An agent call cut by ``tool_timeout``: answered with the error, and with what its child spent.

Only the asyncio driver has a deadline for an agent call: under the synchronous
driver the child runs in the call's own thread, to its end. The timeout cancels
the child (its own calls answered ``cancelled``); the parent's call is answered
``error`` (``TimeoutError``) carrying the child's usage, which rolls into the
parent's, and the parent's record (a run file, a ledger) loads back with it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agentloop
from agentloop import Loop, Usage
from agentloop.ledger import view_run
from agentloop.review import run_from_json, run_to_json
from agentloop.testing import (
    ScriptedModel,
    assert_contract,
    assert_paired,
    batch,
    call,
    final,
    with_usage,
)
from tests.support.ledgers import MemoryLedger

#: Long enough for the child's first step (pure Python) under load, short for the suite.
TIMEOUT = 0.1
CHILD_SPENT = Usage(5, 2, 0)  # the child's one reply: a call of its slow tool


def family(effects: list[str], **parent: Any) -> Loop[Any]:
    """A parent whose ``research`` is a child that, asked ``slow``, calls a tool that never ends.

    Asked anything else, the child answers at once. Each reply of either reports its tokens.
    """

    async def wait(q: str) -> str:
        """Wait for ever (until cancelled)."""
        effects.append(f"start {q}")
        await asyncio.Event().wait()
        effects.append(f"end {q}")  # never reached
        return q

    def child_model(history: list[dict[str, Any]]) -> dict[str, Any]:
        question = history[0]["text"]
        if question == "slow":
            return with_usage(call("k1", "wait", q=question), *CHILD_SPENT[:2])
        return with_usage(final(f"found {question}"), 7, 3)

    child = Loop(child_model, tools=[wait])
    return Loop(
        parent.pop("model"),
        tools=[child.as_tool("research", "Research.")],
        tool_timeout=TIMEOUT,
        to_thread=True,
        **parent,
    )


def timed_out(result: agentloop.RunResult[Any], call_id: str) -> None:
    """``call_id``'s answer is the timeout's error; its child ended cancelled, paired, and spent."""
    (answer,) = [m for m in result.transcript if m.get("id") == call_id and "status" in m]
    assert (answer["status"], answer["content"]["type"]) == ("error", "TimeoutError")
    child = result.children[call_id]
    assert (child.status, child.steps, child.calls, child.usage) == ("cancelled", 1, 1, CHILD_SPENT)
    assert [(m["id"], m["status"]) for m in child.transcript if m["kind"] == "tool_result"] == [
        ("k1", "cancelled")
    ]
    assert_paired(child)
    (event,) = [e for e in result.events if e.call_id == call_id and e.result_status]
    assert event.usage == CHILD_SPENT  # the outcome that answers the call carries it


def test_a_timed_out_agent_call_rolls_its_childs_usage_into_the_parents() -> None:
    effects: list[str] = []
    model = ScriptedModel(
        [with_usage(call("c1", "research", input="slow"), 3, 1), with_usage(final("done"), 4, 1)]
    )
    result = asyncio.run(family(effects, model=model).arun("go"))

    assert (result.status, result.output, result.steps, result.calls) == ("finished", "done", 2, 1)
    assert effects == ["start slow"]  # the child's tool began, and the timeout cut it
    timed_out(result, "c1")
    assert result.usage == Usage(3 + 5 + 4, 1 + 2 + 1, 0)
    assert_contract(result, "go")
    loaded = run_from_json(run_to_json(result))
    assert loaded == result
    assert loaded.usage == result.usage
    assert loaded.children["c1"].usage == CHILD_SPENT


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_timed_out_agent_call_beside_one_that_finishes(concurrency: int) -> None:
    """A batch: each call answered by its own child; both children's tokens roll up."""
    effects: list[str] = []
    model = ScriptedModel(
        [
            with_usage(
                batch(call("c1", "research", input="slow"), call("c2", "research", input="quick")),
                3,
                1,
            ),
            with_usage(final("done"), 4, 1),
        ]
    )
    loop = family(effects, model=model, max_concurrency=concurrency)
    result = asyncio.run(loop.arun("go"))

    assert (result.status, result.steps, result.calls) == ("finished", 2, 2)
    assert effects == ["start slow"]
    timed_out(result, "c1")
    assert result.transcript[3]["content"] == "found quick"
    assert result.children["c2"].usage == Usage(7, 3, 0)
    assert result.usage == Usage(3 + 5 + 7 + 4, 1 + 2 + 3 + 1, 0)
    assert_contract(result, "go")
    assert run_from_json(run_to_json(result)) == result


def test_a_durable_parent_records_the_timed_out_childs_usage() -> None:
    """The ledger holds the same: the parent's event with the child's tokens, and the child
    ended cancelled under its call; read back or resumed, the parent is as it ended."""
    ledger, effects = MemoryLedger(), list[str]()
    script = [
        with_usage(call("c1", "research", input="slow"), 3, 1),
        with_usage(final("done"), 4, 1),
    ]
    result = asyncio.run(
        family(effects, model=ScriptedModel(script), ledger=ledger).arun("go", run_id="r1")
    )

    assert (result.status, result.usage) == ("finished", Usage(12, 4, 0))
    timed_out(result, "c1")
    assert view_run(ledger, "r1:c1").state == "cancelled"
    viewed = view_run(ledger, "r1").result
    assert (viewed.usage, viewed.transcript) == (result.usage, result.transcript)
    assert viewed.children["c1"].usage == CHILD_SPENT
    assert run_from_json(run_to_json(viewed)).usage == result.usage
    again = family([], model=ScriptedModel(script), ledger=ledger)
    resumed = asyncio.run(again.aresume("r1"))
    assert (resumed.usage, resumed.transcript) == (result.usage, result.transcript)
    assert resumed.children["c1"].usage == CHILD_SPENT
    assert run_from_json(run_to_json(resumed)) == resumed
