"""Output validators in durable runs: each check's answer is recorded, and a resume feeds it back.

A check whose ``output_checked`` record was committed is never asked again,
after a crash at any append (``CrashingLedger``) or a pause for a person; a
check the crash cut off before its record runs again, as the model step does.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Literal

import pytest

import agentloop
from agentloop import Loop, Retry
from agentloop.ledger import LedgerError, view_run
from agentloop.testing import call, final
from tests.support.ledgers import Crash, CrashingLedger, MemoryLedger

if TYPE_CHECKING:
    from agentloop.ledger import Ledger

Driver = Literal["sync", "async"]
SCRIPT = [final("short"), final("a long enough answer")]


class Counted:
    """A validator that counts its calls, and refuses a short answer."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, text: str) -> None:
        self.calls += 1
        if len(text) < 10:
            raise Retry("too short")


def make_loop(ledger: Ledger, validator: Counted, script: list[Any], **options: Any) -> Loop:
    def model(history: list[dict[str, Any]]) -> object:
        return script[sum(m["kind"] in ("final", "call", "calls") for m in history)]

    return Loop(model, ledger=ledger, output_validators=[validator], **options)


def go(loop: Loop, driver: Driver, resume: bool = False) -> agentloop.RunResult:
    if driver == "sync":
        return loop.resume("r1") if resume else loop.run("go", run_id="r1")
    return asyncio.run(loop.aresume("r1") if resume else loop.arun("go", run_id="r1"))


def shape(result: agentloop.RunResult) -> list[tuple[object, ...]]:
    """Each event's row, counters, input and error: the run, whenever it ran."""
    return [(*e[:4], e.steps, e.input_json, e.error) for e in result.events]


def checked_records(memory: MemoryLedger) -> int:
    return sum(record.kind == "output_checked" for record in memory.records["r1"])


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_crash_at_any_append_never_asks_a_recorded_check_again(driver: Driver) -> None:
    """Resumed after a crash at each append: the same run, and only unrecorded checks run."""
    baseline = go(make_loop(MemoryLedger(), Counted(), SCRIPT), driver)
    assert (baseline.status, baseline.output, baseline.steps) == (
        "finished",
        "a long enough answer",
        2,
    )
    memory = MemoryLedger()
    go(make_loop(memory, Counted(), SCRIPT), driver)
    appends = memory.appends
    assert [r.kind for r in memory.records["r1"]] == [  # each with the reply it checked
        "output_checked",
        "output_checked",
        "end",
    ]
    for at in range(1, appends + 1):
        for when in ("before", "after"):
            memory = MemoryLedger()
            with pytest.raises((Crash, LedgerError)):
                go(make_loop(CrashingLedger(memory, at, when), Counted(), SCRIPT), driver)
            recorded = checked_records(memory)
            again = Counted()
            if when == "after" and at == appends:
                continue  # the end is recorded: nothing to resume
            result = go(make_loop(memory, again, SCRIPT), driver, resume=True)
            assert shape(result) == shape(baseline), (at, when)
            assert (result.status, result.output, result.steps) == (
                "finished",
                "a long enough answer",
                2,
            )
            assert again.calls == 2 - recorded, (at, when)  # a recorded check is never asked


def _noted(text: str) -> str:
    """Notes a text."""
    return text


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_check_recorded_after_a_call_resumes_past_the_call(driver: Driver) -> None:
    """A call, then a final refused and one accepted: resumed after a crash at each check's
    record or the end's (before or after its commit), the run takes its recorded check (the
    call it replayed is not handed out again) and ends as uncrashed, each check asked once."""
    script = [call("c1", "noted", text="x"), *SCRIPT]
    tools = [agentloop.Tool(_noted, name="noted")]
    baseline = go(make_loop(MemoryLedger(), Counted(), script, tools=tools), driver)
    assert (baseline.status, baseline.steps, baseline.calls) == ("finished", 3, 1)
    memory = MemoryLedger()
    go(make_loop(memory, Counted(), script, tools=tools), driver)
    kinds = [r.kind for r in memory.records["r1"]]
    assert kinds == ["tool_started", "tool_finished", "output_checked", "output_checked", "end"]
    for at in range(3, len(kinds) + 1):  # from the first check on: the call's outcome is known
        for when in ("before", "after"):
            memory = MemoryLedger()
            with pytest.raises((Crash, LedgerError)):
                go(
                    make_loop(CrashingLedger(memory, at, when), Counted(), script, tools=tools),
                    driver,
                )
            recorded, again = checked_records(memory), Counted()
            result = go(make_loop(memory, again, script, tools=tools), driver, resume=True)
            assert shape(result) == shape(baseline), (at, when)
            assert again.calls == 2 - recorded, (at, when)


def test_a_run_paused_for_a_person_resumes_without_asking_its_recorded_check() -> None:
    """Refused once, then paused on an asking policy: the resume calls the validator once, live."""
    memory = MemoryLedger()

    def pay(n: int) -> int:
        """Pay."""
        return n

    tools = [agentloop.Tool(pay, policy=lambda call: agentloop.ask("a person decides"))]
    script = [final("short"), call("c1", "pay", n=1), final("a long enough answer")]
    first = Counted()
    paused = make_loop(memory, first, script, tools=tools).run("go", run_id="r1")
    assert (paused.status, first.calls) == ("awaiting_approval", 1)
    again = Counted()
    result = make_loop(memory, again, script, tools=tools).resume(
        "r1", decisions={"c1": agentloop.approve()}
    )
    assert (result.status, result.output, result.steps) == ("finished", "a long enough answer", 3)
    assert again.calls == 1  # the last final's check only: the first was fed from the record
    assert [e.input_json for e in result.events if e.trigger == "output_checked"] == [
        b'["too short"]',
        b"[]",
    ]


def test_a_final_stopped_before_its_check_is_recorded_is_asked_again() -> None:
    """Stopped between a final's reply and its check's record, nothing of that step is kept.

    A final is recorded with its check: read without its Loop (``view_run``,
    ``agentloop show``), the run waits for the model after the first check's
    retry; a resume asks the model and the validators again.
    """
    memory = MemoryLedger()
    script = [final("short"), final("a long enough answer")]
    with pytest.raises(Crash):  # the first check recorded; the crash before the second's
        go(make_loop(CrashingLedger(memory, 2, "before"), Counted(), script), "sync")
    viewed = view_run(memory, "r1").result
    assert (viewed.status, viewed.steps) == ("awaiting_model", 1)
    assert [e.trigger for e in viewed.events] == ["model_replied", "output_checked", "validate"]
    again = Counted()
    resumed = go(make_loop(memory, again, script), "sync", resume=True)
    assert (resumed.status, resumed.steps, again.calls) == ("finished", 2, 1)


def family(ledger: Ledger, validator: Counted) -> Loop:
    """A durable parent whose agent tool's child has the validator."""

    def parent_model(history: list[dict[str, Any]]) -> object:
        answered = any(m["kind"] == "tool_result" for m in history)
        return final("done") if answered else call("c1", "research", input="q")

    def child_model(history: list[dict[str, Any]]) -> object:
        return SCRIPT[sum(m["kind"] == "final" for m in history)]

    child = Loop(child_model, output_validators=[validator])
    return Loop(parent_model, tools=[child.as_tool("research", "Research.")], ledger=ledger)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_crash_around_a_childs_check_never_leaves_its_final_unchecked(driver: Driver) -> None:
    """A child's checks are kept as a top run's are: a check the crash cut runs again."""
    memory = MemoryLedger()
    go(family(memory, Counted()), driver)
    appends = memory.appends
    for at in range(1, appends + 1):
        for when in ("before", "after"):
            memory = MemoryLedger()
            with pytest.raises((Crash, LedgerError)):
                go(family(CrashingLedger(memory, at, when), Counted()), driver)
            if when == "after" and at == appends:
                continue  # the parent's end is recorded: nothing to resume
            recorded = sum(r.kind == "output_checked" for r in memory.records.get("r1:c1", []))
            again = Counted()
            result = go(family(memory, again), driver, resume=True)
            assert result.status == "finished", (at, when)
            assert result.transcript[2]["content"] == "a long enough answer", (at, when)
            assert again.calls == 2 - recorded, (at, when)
            child = view_run(memory, "r1:c1").result
            assert [e.input_json for e in child.events if e.trigger == "output_checked"] == [
                b'["too short"]',
                b"[]",
            ], (at, when)
