"""Every feature at once: random scripts through a Loop with typed output, the wrap-up,
the loop guard, a context policy, retries, fallback models and approval.

Each feature has its own tests; these look for what their meeting breaks (a
wrap-up request the context cannot fit, a fallback model in the wrap-up step).
Whatever the script, a run keeps the contract, both drivers make the same run,
its run file replays to it, a paused run resumes from its file or its ledger,
and a fork at any cut goes on to a run that keeps the contract.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Loop
from agentloop.context import keep_last, summarise
from agentloop.ledger import SQLiteLedger
from agentloop.models import RetryPolicy, fallback
from agentloop.review import run_from_json, run_to_json
from agentloop.testing import assert_contract
from tests.core import test_properties as props
from tests.core.test_typed import TYPED_FINALS
from tests.support.helpers import City

if TYPE_CHECKING:
    from pathlib import Path

    from agentloop import RunResult
    from agentloop.context import ContextPolicy

Message = dict[str, Any]

#: Replies of every kind, typed finals, and errors a retry policy retries.
REPLIES = st.one_of(props.REPLIES, TYPED_FINALS, st.just(ConnectionError("reset")))
SUMMARIES = st.lists(st.one_of(props.FINALS, props.GARBAGE, props.ERRORS), max_size=3)
NEVER_SLEEP = RetryPolicy(attempts=2, base=0.0, jitter=0.0, sleep=lambda seconds, token: None)


def scripted(replies: list[object], world: props.World, cancel_at: int | None) -> Any:
    """A model that takes tool_choice (the wrap-up step's) and plays ``replies`` in order."""
    asked = []

    def model(history: list[Message], tool_choice: object = None) -> object:
        asked.append(tool_choice)
        if len(asked) == cancel_at:
            world.token.cancel()
        reply = replies.pop(0) if replies else {"kind": "final", "text": "end"}
        if isinstance(reply, Exception):
            raise reply
        return reply

    return model


def asking(world: props.World, asks: int) -> agentloop.ToolRegistry:
    """The world's tools, under a policy that asks a person about some ``add`` calls."""

    def policy(call: Message) -> agentloop.Decision:
        a = call["arguments"].get("a")
        if call["name"] == "add" and (asks == 0 or (type(a) is int and a % 2 == asks - 1)):
            return agentloop.ask("adds")
        return agentloop.allow()

    return agentloop.ToolRegistry(world.tools(), policy=policy)


@st.composite
def settings_of(draw: st.DrawFn) -> dict[str, Any]:
    """The Loop's budgets and feature settings."""
    return {
        "max_steps": draw(st.integers(0, 8)),
        "max_calls": draw(st.integers(0, 5)),
        "max_total_tokens": draw(st.none() | st.integers(1, 500)),
        "on_exhausted": draw(st.sampled_from(["stop", "answer"])),
        "max_identical_calls": draw(st.none() | st.integers(1, 2)),
        "output": draw(st.sampled_from([None, City])),
        "max_output_retries": draw(st.integers(0, 2)),
        "retry": draw(st.sampled_from([None, NEVER_SLEEP])),
    }


def context_of(kind: str, tokens: int, summaries: list[object]) -> ContextPolicy | None:
    """No policy, keep_last, or summarise with a writer that plays ``summaries``."""

    def writer(history: list[Message]) -> object:
        reply = summaries.pop(0) if summaries else {"kind": "final", "text": "so far"}
        if isinstance(reply, Exception):
            raise reply
        return reply

    if kind == "keep":
        return keep_last(tokens=tokens)
    return None if kind == "none" else summarise(writer, tokens=tokens)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    limits=settings_of(),
    kind=st.sampled_from(["none", "keep", "summarise"]),
    tokens=st.integers(1, 400),
    falls_back=st.booleans(),
)
def test_every_feature_at_once_keeps_the_contract_on_both_drivers(
    data: st.DataObject, limits: dict[str, Any], kind: str, tokens: int, falls_back: bool
) -> None:
    """Both drivers make the same run; it keeps the contract and its run file replays."""
    replies = data.draw(st.lists(REPLIES, max_size=10), label="replies")
    others = data.draw(st.lists(REPLIES, max_size=4), label="the fallback's replies")
    summaries = data.draw(SUMMARIES, label="summaries")
    cancel_at = data.draw(st.none() | st.integers(1, 8), label="cancel_at")
    made = []
    for asynchronous in (False, True):
        world = props.World([], None)
        model = scripted(list(replies), world, cancel_at)
        if falls_back:
            model = fallback(model, scripted(list(others), world, None), names=["a", "b"])
        context = context_of(kind, tokens, list(summaries))
        loop = Loop(model, tools=world.tools(), context=context, max_concurrency=1, **limits)
        cancel = world.token
        result = asyncio.run(loop.arun("go", cancel=cancel)) if asynchronous else loop.run(
            "go", cancel=cancel
        )  # fmt: skip
        assert_contract(result, "go")
        assert _same(run_from_json(run_to_json(result)), result)
        made.append((result.events, result.transcript, result.rejected, world.handler_runs))
    assert made[0] == made[1]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    limits=settings_of(),
    keeps=st.none() | st.integers(1, 400),
    asks=st.integers(0, 2),
    durable=st.booleans(),
)
def test_paused_runs_resume_and_any_cut_forks_with_every_feature(
    tmp_path_factory: Any,
    data: st.DataObject,
    limits: dict[str, Any],
    keeps: int | None,
    asks: int,
    durable: bool,
) -> None:
    """A run paused for a person resumes from its file or its ledger to a run that keeps the
    contract; the ledger reads the ended run back; a fork at any cut goes on to one too."""
    replies = data.draw(st.lists(REPLIES, max_size=10), label="replies")
    cancel_at = data.draw(st.none() | st.integers(1, 8), label="cancel_at")
    approvals = data.draw(st.lists(st.booleans(), min_size=12, max_size=12), label="approvals")
    directory: Path = tmp_path_factory.mktemp("together")
    world = props.World([], None)
    context = None if keeps is None else keep_last(tokens=keeps)
    ledger = SQLiteLedger(directory / "runs.db") if durable else None
    loop = Loop(
        scripted(list(replies), world, cancel_at),
        tools=asking(world, asks),
        context=context,
        ledger=ledger,
        **limits,
    )
    result = loop.run("go", cancel=world.token, run_id="r1" if durable else None)
    for turn in range(12):
        if result.status != "awaiting_approval":
            break
        assert_contract(result, "go")
        saved = run_from_json(run_to_json(result))
        assert _same(saved, result)
        decisions = {
            pending.call_id: pending.approve() if approvals[turn] else pending.deny("no")
            for pending in result.pending
        }
        result = loop.resume("r1" if durable else saved, decisions=decisions, cancel=world.token)
    assert result.status != "awaiting_approval", "a person decided twelve times"
    assert_contract(result, "go")
    assert _same(run_from_json(run_to_json(result)), result)
    if durable:
        assert _same(loop.resume("r1"), result)
    at = data.draw(st.integers(0, len(result.events)), label="at")
    again = props.World([], None)
    other = Loop(scripted([], again, None), tools=asking(again, asks), context=context, **limits)
    try:
        forked = other.fork(result, at=at)
    except ValueError as exc:  # a cut among running calls; the same budget replays the rest
        assert "where no call is running" in str(exc), exc  # noqa: PT017 - only some cuts raise
    else:
        assert forked.events == result.events[:at]
        assert_contract(forked.finish(), "go")
    finally:
        if ledger is not None:
            ledger.close()


def _same(one: RunResult, other: RunResult) -> bool:
    """The same run: its end, its events, its transcript and its output's text (a run file
    keeps a typed output as its JSON: a loaded run has no type to make it one again)."""
    return (one.status, one.events, one.transcript, one.output_text) == (
        other.status,
        other.events,
        other.transcript,
        other.output_text,
    )
