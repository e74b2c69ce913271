"""Agent tools whose child runs a cancel cuts: what they spent still counts in the parent's.

A child that ends ``cancelled`` answers no outcome of its own (the cancel answers
its call, as the parent ends so), yet the tokens it spent are spent: they roll
into the parent's usage on the event that ends the parent, in memory, in a run
file and in a ledger, live and read back alike. Each test checks parent and
children together: status, counters, answers, usage and the records.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import agentloop
from agentloop import CancelToken, Loop
from agentloop.ledger import SQLiteLedger, view_run
from agentloop.review import run_from_json, run_to_json
from agentloop.testing import ScriptedModel, assert_contract, batch, call, final, with_usage
from tests.support.helpers import DRIVERS, AsyncDriver, Driver
from tests.support.ledgers import stored

Message = dict[str, Any]


def child_of(token: CancelToken, wait_on: str | None = None, cancels: str = "b") -> Loop[Any]:
    """A child that spends 12 tokens on its first reply, a call of ``lookup`` on its input.

    ``lookup(cancels)`` cancels the token; ``lookup(wait_on)`` awaits until cancelled.
    """

    async def lookup(q: str) -> str:
        """Look a question up."""
        await asyncio.sleep(0)
        if q == cancels:
            token.cancel()
        if q in (wait_on or ""):
            await asyncio.Event().wait()
        return f"found {q}"

    def plain(q: str) -> str:
        """Look a question up."""
        if q == "b":
            token.cancel()
        return f"found {q}"

    def model(history: list[Message]) -> Message:
        question = history[0]["text"]
        if len(history) == 1:
            return with_usage(call("k1", "lookup", q=question), 10, 2)
        return with_usage(final(f"answer {question}"), 3, 1)

    tools = [plain] if wait_on is None else [lookup]
    if wait_on is None:
        plain.__name__ = "lookup"
    return Loop(model, tools=tools)


def parent_of(child: Loop[Any], concurrency: int, ledger: Any = None) -> Loop[Any]:
    two = batch(call("c1", "research", input="a"), call("c2", "research", input="b"))
    return Loop(
        ScriptedModel([with_usage(two, 4, 1), final("never")]),
        tools=[child.as_tool("research", "Research.")],
        max_concurrency=concurrency,
        ledger=ledger,
    )


def check_cut(result: agentloop.RunResult[Any], kids: dict[str, tuple[str, int]]) -> None:
    """The parent ended cancelled, each child as ``kids`` says (status, tokens), and the
    parent's usage is its own 5 tokens plus every child's."""
    assert (result.status, result.steps, result.calls) == ("cancelled", 1, 2)
    answers = [m["id"] for m in result.transcript if m["kind"] == "tool_result"]
    assert answers == ["c1", "c2"]
    assert {k: (c.status.value, c.usage.total) for k, c in result.children.items()} == kids
    assert result.usage.total == 5 + sum(tokens for _, tokens in kids.values())
    assert_contract(result, "write")
    assert run_from_json(run_to_json(result)) == result


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_child_cut_by_a_cancel_counts_in_its_parents_usage(driver: Driver) -> None:
    """One call at a time: c1's child finishes (16 tokens), c2's child cancels the token in
    its tool after its first reply (12 tokens). Both count in the parent's usage."""
    token = CancelToken()
    result = driver.run(parent_of(child_of(token), 1), "write", cancel=token)
    check_cut(result, {"c1": ("finished", 16), "c2": ("cancelled", 12)})
    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == [
        "ok",
        "cancelled",
    ]


def test_children_cut_at_once_count_in_their_parents_usage() -> None:
    """asyncio, calls at once: c1's child waits in its tool when c2's child cancels the
    token; the parent's cancel cuts c1's child. Each spent 12 tokens, and both count."""
    token = CancelToken()
    parent = parent_of(child_of(token, wait_on="a"), 2)
    result = AsyncDriver().run(parent, "write", cancel=token)
    check_cut(result, {"c1": ("cancelled", 12), "c2": ("cancelled", 12)})
    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == [
        "cancelled",
        "cancelled",
    ]


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_durable_parent_records_the_usage_of_children_a_cancel_cut(
    tmp_path: Path, concurrency: int
) -> None:
    """Under a ledger the end's usage is recorded: read back, resumed and from a run file,
    the parent's usage is the live one, its children's with it."""
    token = CancelToken()
    ledger = SQLiteLedger(tmp_path / "runs.db")
    wait_on = "a" if concurrency == 2 else None
    parent = parent_of(child_of(token, wait_on), concurrency, ledger)
    live = asyncio.run(parent.arun("write", run_id="r1", cancel=token))
    want = {"c1": ("cancelled", 12), "c2": ("cancelled", 12)}
    if concurrency == 1:
        want["c1"] = ("finished", 16)
    check_cut(live, want)
    read = view_run(ledger, "r1").result
    assert (read.usage, read.events[-1].usage) == (live.usage, live.events[-1].usage)
    assert read == live
    assert asyncio.run(parent.aresume("r1")) == live
    ledger.close()


def test_a_parent_whose_task_is_cancelled_ends_after_its_children_at_once(
    tmp_path: Path,
) -> None:
    """asyncio, calls at once: both children wait in their tools when the parent's task is
    cancelled (not its token). The calls' tasks end first, as a task group's do: each
    child's end is committed before the parent's, and their tokens count in its usage."""
    path = tmp_path / "runs.db"
    ledger = SQLiteLedger(path)
    parent = parent_of(child_of(CancelToken(), wait_on="ab", cancels=""), 2, ledger)

    async def cancelled_while_they_wait() -> None:
        task = asyncio.ensure_future(parent.arun("write", run_id="r1"))
        for _ in range(20):
            await asyncio.sleep(0)  # both children reach their tools, and wait there
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_while_they_wait())
    read = view_run(ledger, "r1").result
    check_cut(read, {"c1": ("cancelled", 12), "c2": ("cancelled", 12)})
    ends = [run_id for run_id, kind, _ in stored(path) if kind == "end"]
    assert ends[-1] == "r1"
    assert sorted(ends[:-1]) == ["r1:c1", "r1:c2"]
    assert asyncio.run(parent.aresume("r1")) == read
    ledger.close()
