"""Agents as tools under a durable parent: the child recorded in the parent's ledger.

The child that answers call ``c1`` of run ``r1`` is the run ``r1:c1`` of the
same ledger, its header naming its caller. Crashes are simulated in process
at every append of parent and child (``CrashingLedger``, whose count spans
both) and inside each of the child's tools; the kill tests
(``test_kill_children.py``) do it with real processes.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop._durable.ids import child_run_id, parse_turn
from agentloop.ledger import LedgerError, SQLiteLedger, view_run
from agentloop.testing import assert_contract, batch, call, final, with_usage
from tests.conftest import count
from tests.durable.test_durable import DRIVERS, Driver, World, by_history
from tests.support.helpers import DRIVERS as STEPPED
from tests.support.helpers import Driver as SteppedDriver
from tests.support.ledgers import (
    Crash,
    CrashingLedger,
    MemoryLedger,
    check_effects,
    replies_recorded,
    unknown_ids,
)

Message = dict[str, Any]

CHILD_SCRIPT: list[object] = [
    call("k1", "effect", n=1),
    batch(call("k2", "idem", n=2), call("k3", "effect", n=3)),
    final("found it"),
]
PARENT_SCRIPT: list[object] = [
    call("c1", "research", input="look it up"),
    final("done"),
]


class Asked:
    """A model that answers by the history, counting how often it is asked."""

    def __init__(self, script: list[object], driver: Driver) -> None:
        self.model, self.asked = by_history(script), 0
        self.driver = driver

    def __call__(self, history: list[Message]) -> object:
        self.asked += 1
        return self.model(history)

    def bound(self) -> Any:
        if self.driver == "sync":
            return self

        async def amodel(history: list[Message]) -> object:
            await asyncio.sleep(0)
            return self(history)

        return amodel


class Family:
    """A parent Loop whose tool ``research`` is a child Loop, both with fresh models."""

    def __init__(self, world: World, ledger: Any, driver: Driver) -> None:
        self.child_model = Asked(CHILD_SCRIPT, driver)
        self.parent_model = Asked(PARENT_SCRIPT, driver)
        child = agentloop.Loop(
            self.child_model.bound(), tools=world.registry(driver), max_steps=4, max_calls=8
        )
        self.loop = agentloop.Loop(
            self.parent_model.bound(),
            tools=[child.as_tool("research", "Research one question.")],
            max_steps=3,
            ledger=ledger,
        )
        self.driver = driver

    def run(self) -> agentloop.RunResult:
        if self.driver == "sync":
            return self.loop.run("go", run_id="r1")
        return asyncio.run(self.loop.arun("go", run_id="r1"))

    def resume(self) -> agentloop.RunResult:
        if self.driver == "sync":
            return self.loop.resume("r1")
        return asyncio.run(self.loop.aresume("r1"))


class OrderedLedger(MemoryLedger):
    """A ``MemoryLedger`` that also keeps every append's (run, kind, key), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[tuple[str, str, str]] = []

    def create(self, run_id: str, header: bytes) -> Any:
        return _Logging(self, super().create(run_id, header))

    def claim(self, run_id: str) -> Any:
        return _Logging(self, super().claim(run_id))


class _Logging:
    def __init__(self, ledger: OrderedLedger, inner: Any) -> None:
        self.ledger, self.inner = ledger, inner

    def append(self, record: Any) -> None:
        self.inner.append(record)
        self.ledger.order.append((self.inner.run_id, record.kind, record.key))

    def release(self) -> None:
        self.inner.release()


@pytest.mark.parametrize("driver", DRIVERS)
def test_the_child_is_recorded_in_the_parents_ledger_under_its_call(driver: Driver) -> None:
    world, ledger = World(), OrderedLedger()
    family = Family(world, ledger, driver)
    result = family.run()

    assert (result.status, result.output, result.steps, result.calls) == ("finished", "done", 2, 1)
    assert result.transcript[2] == {
        "kind": "tool_result",
        "id": "c1",
        "name": "research",
        "status": "ok",
        "content": "found it",
    }
    child = result.children["c1"]
    assert (child.status, child.run_id, child.steps, child.calls) == ("finished", "r1:c1", 3, 3)
    assert sorted(ledger.headers) == ["r1", "r1:c1"]
    header = orjson.loads(ledger.headers["r1:c1"])
    assert header["caller"] == {"run_id": "r1", "call_id": "c1"}
    assert header["input"] == [{"kind": "user", "text": "look it up"}]
    assert "caller" not in orjson.loads(ledger.headers["r1"])
    # The child's tools run under keys of its own run: at most once, as everywhere.
    assert world.effects == [("effect", "r1:c1:k1"), ("idem", "r1:c1:k2"), ("effect", "r1:c1:k3")]
    # The child's end is committed before the parent's outcome that answers from it.
    assert (
        ledger.order
        == [
            ("r1", "tool_started", "c1"),  # each reply goes with the first call it starts
            ("r1:c1", "tool_started", "k1"),
            ("r1:c1", "tool_finished", "k1"),
            # the batch k2, k3: one after the other, or at once under asyncio
            *ledger.order[3:7],
            ("r1:c1", "end", ""),
            ("r1", "tool_finished", "c1"),
            ("r1", "end", ""),
        ]
    )
    batch_records = ledger.order[3:7]
    assert sorted(batch_records) == [
        ("r1:c1", kind, key) for kind in ("tool_finished", "tool_started") for key in ("k2", "k3")
    ]
    for key in ("k2", "k3"):
        started = batch_records.index(("r1:c1", "tool_started", key))
        assert started < batch_records.index(("r1:c1", "tool_finished", key))
    assert ledger.claimed == set()  # both claims given up at their ends
    assert_contract(result, "go")
    assert_contract(child, "look it up")
    # Viewed without a Loop, the parent holds its child, read from the ledger by its id.
    viewed = view_run(ledger, "r1")
    assert viewed.result.children["c1"].transcript == child.transcript
    assert view_run(ledger, "r1:c1").caller == ("r1", "c1")
    # Resumed once ended, it is only read: no model asked, no tool run, the child kept.
    again = Family(world, ledger, driver)
    read = again.resume()
    assert (read.status, read.transcript) == (result.status, result.transcript)
    assert read.children["c1"].transcript == child.transcript
    assert (again.parent_model.asked, again.child_model.asked, len(world.effects)) == (0, 0, 3)


def test_a_call_id_with_a_colon_is_escaped_in_the_childs_id(tmp_path: Any) -> None:
    world = World()
    with SQLiteLedger(tmp_path / "runs.db") as ledger:
        child = agentloop.Loop(by_history([final("ok")]), tools=world.registry())
        parent = agentloop.Loop(
            by_history([call("a:b%", "research", input="x"), final("done")]),
            tools=[child.as_tool("research", "Research.")],
            ledger=ledger,
        )
        result = parent.run("go", run_id="r1")
        assert result.children["a:b%"].run_id == "r1:a%3Ab%25"
        assert sorted(ledger.run_ids()) == ["r1", "r1:a%3Ab%25"]


def crash_then_resume(
    driver: Driver, at: int = 0, when: str = "before", crash_in: str | None = None
) -> tuple[agentloop.RunResult, World, MemoryLedger, Family]:
    """Run until the crash, then resume in a "new process" (new Loops, the same ledger).

    Each model is asked once for each step whose reply the crash left unrecorded, never for
    a step recorded.
    """
    memory, world = MemoryLedger(), World()
    crashing = CrashingLedger(memory, at, when)  # type: ignore[arg-type]
    world.ledger, world.crash_in = crashing, crash_in
    with pytest.raises((Crash, LedgerError)):
        Family(world, crashing, driver).run()
    assert crashing.dead
    replies = {run: replies_recorded(records) for run, records in memory.records.items()}
    world.ledger = None
    family = Family(world, memory, driver)
    result = family.resume()
    assert family.parent_model.asked == 2 - replies.get("r1", 0)
    assert family.child_model.asked == 3 - replies.get("r1:c1", 0)
    return result, world, memory, family


def check_resumed(
    result: agentloop.RunResult, world: World, memory: MemoryLedger, baseline: agentloop.RunResult
) -> set[str]:
    """The resumed parent and its child against an uncrashed run; the child's unknown calls."""
    assert (result.status, result.steps, result.calls) == ("finished", 2, 1)
    assert result.transcript == baseline.transcript
    child = view_run(memory, "r1:c1")
    want = baseline.children["c1"]
    assert (child.state, child.steps, child.calls, child.caller) == ("finished", 3, 3, ("r1", "c1"))
    unknown = unknown_ids(child.transcript, want.transcript, {"idem"})
    effects = [key for _, key in world.effects]
    check_effects(child.transcript, unknown, lambda r: effects.count(f"r1:c1:{r['id']}"), "r1:c1")
    assert result.children["c1"].transcript == child.transcript
    assert memory.claimed == set()
    assert sorted(memory.headers) == ["r1", "r1:c1"]
    return unknown


def baseline_of(driver: Driver) -> tuple[agentloop.RunResult, int]:
    memory = MemoryLedger()
    return Family(World(), memory, driver).run(), memory.appends


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_crash_at_each_append_of_parent_and_child_resumes_the_child(driver: Driver) -> None:
    """Before and after each of the 10 appends (the child's 7 among the parent's 3)."""
    baseline, appends = baseline_of(driver)
    assert appends == 10
    unknown_seen: set[str] = set()
    for at in range(1, appends + 1):
        for when in ("before", "after"):
            result, world, memory, _ = crash_then_resume(driver, at, when)
            unknown_seen |= check_resumed(result, world, memory, baseline)
    assert unknown_seen == {"k1", "k3"}  # the child's effects cut by a crash; idem k2 ran again


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("crash_in", ["k1", "k3"])
def test_a_crash_inside_a_childs_tool_keeps_it_at_most_once(driver: Driver, crash_in: str) -> None:
    baseline, _ = baseline_of(driver)
    result, world, memory, _ = crash_then_resume(driver, crash_in=crash_in)
    assert check_resumed(result, world, memory, baseline) == {crash_in}
    assert [key for _, key in world.effects].count(f"r1:c1:{crash_in}") == 1


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_child_that_ended_answers_the_parents_call_from_its_record(driver: Driver) -> None:
    """Killed after the child's end is committed, before the parent's outcome."""
    baseline, _ = baseline_of(driver)
    result, world, memory, family = crash_then_resume(driver, at=8, when="after")
    assert memory.records["r1:c1"][-1].kind == "end"
    assert [record.kind for record in memory.records["r1"]] == [
        "tool_started",
        "tool_finished",
        "end",
    ]
    assert check_resumed(result, world, memory, baseline) == set()
    assert family.child_model.asked == 0  # the child is only read
    assert len(world.effects) == 3


class Watching(World):
    """A world whose tools also note which runs of ``memory`` are claimed as they run."""

    def __init__(self, memory: MemoryLedger) -> None:
        super().__init__()
        self.memory = memory
        self.claims: list[set[str]] = []

    def _effect(self, tool: str) -> None:
        self.claims.append(set(self.memory.claimed))
        super()._effect(tool)


@pytest.mark.parametrize("driver", STEPPED, ids=lambda d: d.name)
def test_step_by_step_the_child_ends_in_the_ledger_before_the_call_is_answered(
    driver: SteppedDriver,
) -> None:
    """Each parent step on both drivers: its counters, the ledger's runs and records, claims."""
    memory = MemoryLedger()
    world = Watching(memory)
    family = Family(world, memory, "sync")  # the driver below makes the parent's model async
    run = driver.start(family.loop, "go", run_id="r1")
    seen = []
    for transition in run:
        records = {name: [(r.kind, r.key) for r in memory.records[name]] for name in memory.records}
        seen.append((transition.trigger.value, transition.dest.value, run.steps, run.calls))
        if transition.trigger == "model_replied" and run.steps == 1:
            assert records == {"r1": []}  # the reply goes with the call it starts
        if transition.trigger == "tool_returned":
            # The child ran inside the call: ended and recorded, before the parent's outcome.
            assert records["r1:c1"][-1] == ("end", "")
            assert records["r1"][-1] == ("tool_finished", "c1")
            assert memory.claimed == {"r1"}  # the child's claim went with its end
    assert seen == [
        ("model_replied", "validating", 1, 0),
        ("validate", "dispatching", 1, 1),
        ("tool_returned", "awaiting_model", 1, 1),
        ("model_replied", "validating", 2, 1),
        ("validate", "finished", 2, 1),
    ]
    result = run.result()
    assert (result.status, result.output, result.children["c1"].output) == (
        "finished",
        "done",
        "found it",
    )
    # While the child's tools ran, the parent and the child were both claimed.
    assert world.claims == [{"r1", "r1:c1"}] * 3
    assert memory.claimed == set()


def cut_after_k1(driver: Driver) -> MemoryLedger:
    """The ledger of a family whose process died right after the child's k1 outcome."""
    memory = MemoryLedger()
    crashing = CrashingLedger(memory, 3, "after")
    with pytest.raises((Crash, LedgerError)):
        Family(World(), crashing, driver).run()
    return memory


@pytest.mark.parametrize("driver", DRIVERS)
def test_resuming_the_parent_claims_the_child(driver: Driver) -> None:
    """Cut after the child's first tool: the resumed parent holds both claims as it goes on."""
    memory = cut_after_k1(driver)
    assert [r.kind for r in memory.records["r1:c1"]] == ["tool_started", "tool_finished"]
    assert memory.claimed == set()  # a dead process's claims went with it
    world = Watching(memory)
    result = Family(world, memory, driver).resume()
    assert result.status == "finished"
    assert world.claims == [{"r1", "r1:c1"}] * 2  # k2 and k3, run by the resumed child
    assert [key for _, key in world.effects] == ["r1:c1:k2", "r1:c1:k3"]
    assert memory.claimed == set()


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_cancel_inside_the_child_ends_both_records_paired(driver: Driver) -> None:
    """The parent's token, cancelled in the child's first tool: both end cancelled, recorded."""
    memory, token = MemoryLedger(), agentloop.CancelToken()
    world = World()
    world.registry = _cancelling(world.registry, token)  # type: ignore[method-assign]
    family = Family(world, memory, driver)
    if driver == "sync":
        result = family.loop.run("go", run_id="r1", cancel=token)
    else:
        result = asyncio.run(family.loop.arun("go", run_id="r1", cancel=token))
    assert (result.status, result.transcript[2]["status"]) == ("cancelled", "cancelled")
    child = view_run(memory, "r1:c1")
    assert child.state == "cancelled"
    # Sync: k1 ran to its end, and the child stopped before asking again; asyncio: the token
    # interrupted k1 as it awaited.
    answered = "ok" if driver == "sync" else "cancelled"
    assert [m["status"] for m in child.transcript if m["kind"] == "tool_result"] == [answered]
    assert [r.kind for r in memory.records["r1:c1"]][-1] == "end"
    # The child's end first; the parent's end answers its call cancelled.
    assert [r.kind for r in memory.records["r1"]][-2:] == ["tool_started", "end"]
    assert_contract(result, "go")
    assert_contract(child.result, "look it up")
    # Read again, the parent is as it ended; the child's cancel is not run again.
    again = Family(World(), memory, driver).resume()
    assert (again.status, again.transcript) == (result.status, result.transcript)


def _cancelling(registry: Any, token: agentloop.CancelToken) -> Any:
    """``registry``, its tools cancelling ``token`` as they run."""

    def made(driver: Driver = "sync") -> agentloop.ToolRegistry:
        tools = registry(driver)

        def stop(**_: Any) -> None:
            token.cancel()

        return agentloop.ToolRegistry(
            [
                agentloop.Tool(
                    _then(tool.handler, stop), name=tool.name, idempotent=tool.idempotent
                )
                for tool in tools
            ]
        )

    return made


def _then(handler: Any, stop: Any) -> Any:
    if asyncio.iscoroutinefunction(handler):

        async def ahandler(n: int) -> int:
            stop()
            return await handler(n)  # type: ignore[no-any-return]

        return ahandler

    def handler_then(n: int) -> int:
        stop()
        return handler(n)  # type: ignore[no-any-return]

    return handler_then


def test_a_finished_parent_reads_a_child_whose_loop_changed_since() -> None:
    """Only read: the child is given as its records hold it, not refused as a resume would."""
    memory = MemoryLedger()
    result = Family(World(), memory, "sync").run()
    changed = World()
    changed.registry = _cancelling(changed.registry, agentloop.CancelToken())  # type: ignore[method-assign]
    family = Family(changed, memory, "sync")
    family.loop.dispatcher["research"].loop.dispatcher.add(  # type: ignore[index]
        agentloop.Tool(lambda n: n, name="more", description="More.")
    )
    read = family.resume()
    assert read.children["c1"].transcript == result.children["c1"].transcript
    assert read.children["c1"].status == "finished"


class FailingChild(MemoryLedger):
    """A ``MemoryLedger`` whose writes to the child run fail from its ``at``-th on (disk full)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.child_appends = at, 0

    def create(self, run_id: str, header: bytes) -> Any:
        return self._failing(super().create(run_id, header))

    def claim(self, run_id: str) -> Any:
        return self._failing(super().claim(run_id))

    def _failing(self, writer: Any) -> Any:
        if writer.run_id != "r1:c1":
            return writer
        ledger, append = self, writer.append

        def failing(record: Any) -> None:
            ledger.child_appends += 1
            if ledger.child_appends >= ledger.at:
                raise LedgerError("disk full")
            append(record)

        writer.append = failing
        return writer


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_childs_failed_write_stops_the_parent_unanswered(driver: Driver) -> None:
    """Not the call's outcome: the parent stops with the error, its call started, and a
    resume goes on with the child."""
    baseline, _ = baseline_of(driver)
    for at in (1, 2, 7):  # the child's first call's start (with its reply), k1's outcome, its end
        ledger, world = FailingChild(at), World()
        with pytest.raises(LedgerError, match="disk full"):
            Family(world, ledger, driver).run()
        assert [(r.kind, r.key) for r in ledger.records["r1"]] == [("tool_started", "c1")]
        assert ledger.claimed == set()
        ledger.at = 1_000  # the disk has room again
        result = Family(world, ledger, driver).resume()
        check_resumed(result, world, ledger, baseline)


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_child_whose_loop_changed_is_refused_when_the_parent_resumes(driver: Driver) -> None:
    memory = cut_after_k1(driver)
    changed = Family(World(), memory, driver)
    changed.loop.dispatcher["research"].loop.dispatcher.add(  # type: ignore[index]
        agentloop.Tool(lambda n: n, name="more", description="More.")
    )
    with pytest.raises(LedgerError, match=r"ConfigurationMismatchError: run 'r1:c1'.*tools\.more"):
        changed.resume()
    assert [r.kind for r in memory.records["r1"]] == ["tool_started"]  # unanswered
    assert memory.claimed == set()
    result = Family(World(), memory, driver).resume()  # the Loops as recorded: it goes on
    assert (result.status, result.transcript[2]["content"]) == ("finished", "found it")


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_crash_at_each_append_of_three_generations(driver: Driver) -> None:
    """A child with an agent tool of its own: the grandchild ``r1:c1:g1`` resumes as its parent."""

    def family(world: World, ledger: Any) -> agentloop.Loop:
        grandchild = agentloop.Loop(
            Asked(CHILD_SCRIPT, driver).bound(), tools=world.registry(driver), max_steps=4
        )
        child = agentloop.Loop(
            Asked([call("g1", "dig", input="deeper"), final("dug")], driver).bound(),
            tools=[grandchild.as_tool("dig", "Dig.")],
        )
        return agentloop.Loop(
            Asked(PARENT_SCRIPT, driver).bound(),
            tools=[child.as_tool("research", "Research.")],
            ledger=ledger,
        )

    def go(loop: agentloop.Loop, resume: bool = False) -> agentloop.RunResult:
        if driver == "sync":
            return loop.resume("r1") if resume else loop.run("go", run_id="r1")
        return asyncio.run(loop.aresume("r1") if resume else loop.arun("go", run_id="r1"))

    memory = MemoryLedger()
    baseline = go(family(World(), memory))
    deepest = baseline.children["c1"].children["g1"]
    assert (deepest.run_id, memory.appends) == ("r1:c1:g1", 13)
    for at in range(1, memory.appends + 1):
        for when in ("before", "after"):
            memory, world = MemoryLedger(), World()
            crashing = CrashingLedger(memory, at, when)
            world.ledger = crashing
            with pytest.raises((Crash, LedgerError)):
                go(family(world, crashing))
            world.ledger = None
            result = go(family(world, memory), resume=True)
            assert result.transcript == baseline.transcript
            assert result.children["c1"].transcript == baseline.children["c1"].transcript
            grandchild = view_run(memory, "r1:c1:g1")
            assert grandchild.caller == ("r1:c1", "g1")
            unknown = unknown_ids(grandchild.transcript, deepest.transcript, {"idem"})
            check_effects(grandchild.transcript, unknown, ran_under(world, "r1:c1:g1"))

            assert memory.claimed == set()


def ran_under(world: World, run_id: str) -> Any:
    """How many times the call a tool result answers took effect, in the run ``run_id``."""
    ran = Counter(key for _, key in world.effects)
    return lambda result: ran[f"{run_id}:{result['id']}"]


def test_children_at_once_resume_with_the_token_limit_they_began_with() -> None:
    """Two agent calls of a batch run at once under a parent's max_total_tokens: each child
    began with what the parent had left then; resumed after the other's answer, it keeps it."""

    def family(world: World, ledger: Any) -> agentloop.Loop:
        child = agentloop.Loop(
            Asked(
                [with_usage(call("k1", "idem", n=1), 30, 5), with_usage(final("found"), 30, 5)],
                "async",
            ).bound(),
            tools=world.registry("async"),
        )
        two = batch(call("c1", "research", input="a"), call("c2", "research", input="b"))
        return agentloop.Loop(
            Asked([with_usage(two, 100, 10), final("done")], "async").bound(),
            tools=[child.as_tool("research", "Research.")],
            max_total_tokens=1_000,
            max_concurrency=2,
            ledger=ledger,
        )

    memory = MemoryLedger()
    baseline = asyncio.run(family(World(), memory).arun("go", run_id="r1"))
    limits = {view_run(memory, f"r1:{c}").budget.max_total_tokens for c in ("c1", "c2")}
    assert limits == {890}  # both handed out before either answered
    assert baseline.usage.total == 110 + 2 * 70
    for at in range(1, memory.appends + 1):
        memory, world = MemoryLedger(), World()
        crashing = CrashingLedger(memory, at, "after")
        world.ledger = crashing
        with pytest.raises((Crash, LedgerError)):
            asyncio.run(family(world, crashing).arun("go", run_id="r1"))
        result = asyncio.run(family(World(), memory).aresume("r1"))
        assert (result.transcript, result.usage) == (baseline.transcript, baseline.usage)
        for c in ("c1", "c2"):
            assert view_run(memory, f"r1:{c}").budget.max_total_tokens == 890


@pytest.mark.parametrize("driver", DRIVERS)
def test_an_agent_call_refused_before_it_runs_makes_no_child(driver: Driver) -> None:
    """Invalid arguments answer the call without a child; a resume reads it so."""
    memory = MemoryLedger()
    family = Family(World(), memory, driver)
    family.parent_model.model = by_history(
        [call("c1", "research", question="no input"), final("done")]
    )
    result = family.run()
    assert (result.status, result.transcript[2]["status"]) == ("finished", "invalid_arguments")
    assert (sorted(memory.headers), dict(result.children)) == (["r1"], {})
    again = Family(World(), memory, driver).resume()
    assert (again.transcript, dict(again.children)) == (result.transcript, {})


@pytest.mark.parametrize("driver", DRIVERS)
def test_an_agent_call_approved_in_another_process_starts_its_child_there(
    driver: Driver,
) -> None:
    """A policy on the agent tool asks before the child starts: no child until decided."""
    memory, world = MemoryLedger(), World()

    def asking(world: World) -> Family:
        family = Family(world, memory, driver)
        tool = family.loop.dispatcher["research"]  # type: ignore[index]
        tool.policy = lambda call: agentloop.ask("runs an agent")
        return family

    paused = asking(world).run()
    assert (paused.status, [p.call_id for p in paused.pending]) == ("awaiting_approval", ["c1"])
    assert (sorted(memory.headers), world.effects, memory.claimed) == (["r1"], [], set())
    resumed = asking(world)
    if driver == "sync":
        result = resumed.loop.resume("r1", decisions={"c1": agentloop.approve()})
    else:
        result = asyncio.run(resumed.loop.aresume("r1", decisions={"c1": agentloop.approve()}))
    assert (result.status, result.transcript[2]["content"]) == ("finished", "found it")
    assert result.children["c1"].run_id == "r1:c1"
    assert [key for _, key in world.effects] == ["r1:c1:k1", "r1:c1:k2", "r1:c1:k3"]


def test_a_child_of_an_agent_handed_to_is_read_back_with_the_run() -> None:
    """With handoffs: the agent in force's agent tool records its child; a resume reads it."""
    memory = MemoryLedger()

    def team(world: World) -> agentloop.Loop:
        child = agentloop.Loop(by_history(CHILD_SCRIPT), tools=world.registry(), max_steps=4)
        expert = agentloop.Loop(
            by_history(["unused", call("c2", "research", input="look"), final("done")]),
            name="expert",
            tools=[child.as_tool("research", "Research.")],
        )
        return agentloop.Loop(
            by_history([call("c1", "transfer_to_expert")]),
            name="triage",
            handoffs=[agentloop.handoff(expert)],
            ledger=memory,
        )

    result = team(World()).run("go", run_id="r1")
    assert (result.status, result.agent, result.children["c2"].run_id) == (
        "finished",
        "expert",
        "r1:c2",
    )
    again = team(World()).resume("r1")
    assert again.children["c2"].transcript == result.children["c2"].transcript


def test_a_ctrl_c_inside_the_child_records_the_childs_end_first() -> None:
    """Sync driver: the interrupt ends the child cancelled, then the parent, each recorded."""
    ledger, world = OrderedLedger(), World()

    def interrupting(driver: Driver = "sync") -> agentloop.ToolRegistry:
        def effect(n: int) -> int:
            """Interrupted."""
            raise KeyboardInterrupt

        return agentloop.ToolRegistry([agentloop.Tool(effect, name="effect")])

    world.registry = interrupting  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        Family(world, ledger, "sync").run()
    ends = [(run, kind) for run, kind, _ in ledger.order if kind == "end"]
    assert ends == [("r1:c1", "end"), ("r1", "end")]
    assert (view_run(ledger, "r1").state, view_run(ledger, "r1:c1").state) == (
        "cancelled",
        "cancelled",
    )
    assert_contract(view_run(ledger, "r1").result, "go")
    assert_contract(view_run(ledger, "r1:c1").result, "look it up")
    assert ledger.claimed == set()


_CALL_IDS = st.text(st.sampled_from("ab:%1"), min_size=1, max_size=4)
_RUN_IDS = st.text(st.sampled_from("ab%1"), min_size=1, max_size=3)


def descendant(run_id: str, path: list[str]) -> str:
    for call_id in path:
        run_id = child_run_id(run_id, call_id)
    return run_id


@settings(max_examples=count(300, 5_000), deadline=None)
@given(
    _RUN_IDS,
    st.one_of(st.none(), _RUN_IDS),
    st.lists(_CALL_IDS, min_size=1, max_size=3),
    st.lists(_CALL_IDS, min_size=1, max_size=3),
)
def test_a_descendants_id_names_one_run_and_one_path_of_calls(
    run_id: str, other: str | None, path: list[str], other_path: list[str]
) -> None:
    """(a user's run id, the call ids down to a descendant) -> its id is injective: two
    descendants never share an id, and none is a conversation's turn."""
    other = run_id if other is None else other  # mostly the same run, other paths
    if (run_id, path) != (other, other_path):
        assert descendant(run_id, path) != descendant(other, other_path)
    assert parse_turn(descendant(run_id, path)) is None
    # The nearest miss: two calls of a path joined into one call id with a ':' in it.
    for at in range(len(path) - 1):
        joined = [*path[:at], f"{path[at]}:{path[at + 1]}", *path[at + 2 :]]
        assert descendant(run_id, path) != descendant(run_id, joined)


def _grand_family(ledger: Any, ran: list[str]) -> agentloop.Loop:
    """A parent's batch: an agent call ``c1`` (whose child calls an agent ``k1`` of its own)
    and a plain call ``c2``; every model answers by how many replies its history holds."""

    def answering(script: list[Any]) -> Any:
        return lambda history: script[sum(m["kind"] in ("call", "calls") for m in history)]

    def note(what: str) -> str:
        """Note."""
        ran.append(what)
        return what

    grandchild = agentloop.Loop(answering([final("deep")]))
    child = agentloop.Loop(
        answering([call("k1", "dig", input="x"), final("mid")]),
        tools=[grandchild.as_tool("dig", "Dig.")],
    )
    parent_script = [
        batch(call("c1", "ask", input="q"), call("c2", "note", what="n")),
        final("top"),
    ]
    return agentloop.Loop(
        answering(parent_script),
        tools=[child.as_tool("ask", "Ask."), note],
        ledger=ledger,
    )


def test_a_resumed_parent_holds_every_recorded_child_and_its_children() -> None:
    """Crashed at any append: the resumed result's children are those view_run reads,
    a child answered in a batch not yet appended and a grandchild included."""
    whole = _grand_family(MemoryLedger(), []).run("go", run_id="r1")
    assert list(whole.children) == ["c1"]
    assert list(whole.children["c1"].children) == ["k1"]
    memory = MemoryLedger()
    _grand_family(memory, []).run("go", run_id="r1")
    for at in range(1, memory.appends + 1):
        crashed = MemoryLedger()
        with pytest.raises((Crash, LedgerError)):
            _grand_family(CrashingLedger(crashed, at), []).run("go", run_id="r1")
        result = _grand_family(crashed, []).resume("r1")
        assert result.status == "finished", at
        assert list(result.children) == ["c1"], at
        assert list(result.children["c1"].children) == ["k1"], at
        assert result.children["c1"].output == "mid", at


def test_a_durable_fork_reads_back_and_resumes_with_the_children_it_carries(
    tmp_path: Any,
) -> None:
    """A fork of a durable run past an agent call carries that call's child, recorded under
    the run it was forked from: view_run of the fork, a resume of it in another process (new
    Loops and ledger object over the file) and a fork of the fork all hold it, as the source
    does; its tool did not run again. A turn after the source claims none of its children."""
    asked: list[str] = []

    def look(q: str) -> str:
        """Look."""
        asked.append(q)
        return "seen"

    def answering(script: list[Any]) -> Any:
        return lambda history: script[sum(m["kind"] in ("call", "calls") for m in history)]

    def parent(ledger: SQLiteLedger) -> agentloop.Loop:
        kid = agentloop.Loop(answering([call("k1", "look", q="b"), final("kid out")]), tools=[look])
        script = [call("c1", "post", input="w"), final("y")]
        return agentloop.Loop(
            answering(script), tools=[kid.as_tool("post", "Post.")], ledger=ledger
        )

    def shown(run: agentloop.RunResult) -> tuple[Any, ...]:
        return run.status, run.output, run.usage, run.transcript

    loop = parent(SQLiteLedger(tmp_path / "runs.db"))
    source = loop.run("t", conversation="chat")  # turn 1: chat::1
    returned = next(i for i, e in enumerate(source.events) if e.trigger == "tool_returned")
    fork = loop.fork("chat::1", at=returned + 1, run_id="fork").finish()
    assert shown(fork.children["c1"]) == shown(source.children["c1"])
    ledger = SQLiteLedger(tmp_path / "runs.db")  # another process, as far as it knows
    again = parent(ledger)
    for read in (view_run(ledger, "fork").result, again.resume("fork")):
        assert list(read.children) == ["c1"]
        assert shown(read.children["c1"]) == shown(source.children["c1"])
    twice = again.fork("fork", at=returned + 1, run_id="twice").finish()
    assert shown(view_run(ledger, "twice").result.children["c1"]) == shown(twice.children["c1"])
    assert shown(twice.children["c1"]) == shown(source.children["c1"])
    assert asked == ["b"]  # carried each time, never run again
    turn = again.run("more", conversation="chat")  # its input holds turn 1's answered call
    assert (turn.run_id, turn.status) == ("chat::2", "finished")
    assert list(view_run(ledger, "chat::2").result.children) == []
