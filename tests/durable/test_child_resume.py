"""A child run is resumed only inside its parent's call: by its own id it is refused.

The child that answers call ``c1`` of run ``r1`` is the run ``r1:c1`` of the
same ledger (``test_agent_children.py``). Given to ``resume`` or ``aresume``
it is refused before anything is claimed or written, and the error names the
run to resume instead, which still goes on as if nothing was asked. And a
crash that unwinds a child in process leaves no claim behind: the parent
resumes at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agentloop
from agentloop.ledger import RunBusyError, view_run
from tests.durable.test_agent_children import Family, _grand_family, cut_after_k1
from tests.durable.test_durable import DRIVERS, Driver, World
from tests.support.ledgers import Crash, CrashingLedger, MemoryLedger


class Claims(MemoryLedger):
    """A ``MemoryLedger`` that counts the claims asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.claims: list[str] = []

    def claim(self, run_id: str) -> Any:
        self.claims.append(run_id)
        return super().claim(run_id)


def resumed(loop: agentloop.Loop, run_id: str, driver: Driver) -> agentloop.RunResult:
    if driver == "sync":
        return loop.resume(run_id)
    return asyncio.run(loop.aresume(run_id))


def as_it_stands(ledger: MemoryLedger) -> tuple[Any, ...]:
    records = {run_id: list(kept) for run_id, kept in ledger.records.items()}
    return dict(ledger.headers), records, set(ledger.claimed)


def crashed_in_the_child(driver: Driver) -> Claims:
    """The ledger of a family whose process died right after the child's first outcome."""
    ledger = Claims()
    cut = cut_after_k1(driver)
    ledger.headers, ledger.records = cut.headers, cut.records
    return ledger


@pytest.mark.parametrize("driver", DRIVERS)
def test_resuming_a_child_by_its_id_is_refused_and_its_parent_still_resumes(
    driver: Driver,
) -> None:
    ledger = crashed_in_the_child(driver)
    assert [r.kind for r in ledger.records["r1:c1"]] == ["tool_started", "tool_finished"]
    before = as_it_stands(ledger)
    world = World()
    family = Family(world, ledger, driver)
    with pytest.raises(ValueError, match=r"'r1:c1'.*call 'c1' of run 'r1'.*resume 'r1'") as exc:
        resumed(family.loop, "r1:c1", driver)
    assert not isinstance(exc.value, agentloop.ledger.LedgerError)
    # Refused before anything was claimed, asked, run or written.
    assert (ledger.claims, family.parent_model.asked, family.child_model.asked) == ([], 0, 0)
    assert world.effects == []
    assert as_it_stands(ledger) == before
    # A Loop made as the child's is refused alike: only the call resumes its child.
    child_loop = agentloop.Loop(
        family.child_model.bound(),
        tools=world.registry(driver),
        max_steps=4,
        max_calls=8,
        ledger=ledger,
    )
    with pytest.raises(ValueError, match="resume 'r1'"):
        resumed(child_loop, "r1:c1", driver)
    assert (ledger.claims, as_it_stands(ledger)) == ([], before)

    result = resumed(family.loop, "r1", driver)
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "done", 2, 1)
    child = result.children["c1"]
    assert (child.status, child.output, child.steps, child.calls) == ("finished", "found it", 3, 3)
    assert [key for _, key in world.effects] == ["r1:c1:k2", "r1:c1:k3"]  # k1 is not run again
    assert ledger.claims == ["r1", "r1:c1"]
    assert ledger.claimed == set()
    # A fork of a child's id is a new run of its own, which only reads the child.
    fork = child_loop.fork if driver == "sync" else child_loop.afork
    forked = fork("r1:c1", at=0, run_id="f1")
    assert (forked.run_id, ledger.claims) == ("f1", ["r1", "r1:c1"])
    assert view_run(ledger, "f1").result.continues == "r1:c1"
    assert view_run(ledger, "f1").caller is None


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_child_held_by_its_running_parent_is_refused_as_a_child_not_as_busy(
    driver: Driver,
) -> None:
    """Asked from inside the child's own tool, while parent and child are both claimed."""
    ledger, world = Claims(), World()
    refusals: list[BaseException] = []
    family = Family(world, ledger, driver)
    other = Family(World(), ledger, "sync")  # another Loop of the same ledger, called in a tool

    def effect_then_resume(tool: str) -> None:
        World._effect(world, tool)
        if len(world.effects) == 1:
            with pytest.raises(ValueError, match="child run") as refused:
                other.loop.resume("r1:c1")  # the sync call: this runs inside a tool
            refusals.append(refused.value)
            with pytest.raises(RunBusyError):
                other.loop.resume("r1")

    world._effect = effect_then_resume  # type: ignore[method-assign]
    result = family.run()
    assert (result.status, result.output) == ("finished", "done")
    assert "resume 'r1'" in str(refusals[0])
    assert ledger.claims == ["r1"]  # the busy parent's; never the child's
    assert ledger.claimed == set()


def test_a_grandchild_names_the_run_at_the_top_of_its_tree() -> None:
    """Cut before the grandchild ``r1:c1:k1``'s end (its reply, with it, unrecorded): it
    names its parent's call, and the top run to resume."""
    whole = MemoryLedger()
    _grand_family(whole, []).run("go", run_id="r1")
    assert sorted(whole.headers) == ["r1", "r1:c1", "r1:c1:k1"]
    ledger = Claims()
    with pytest.raises((Crash, agentloop.ledger.LedgerError)):
        _grand_family(CrashingLedger(ledger, 3), []).run("go", run_id="r1")
    assert sorted(ledger.headers) == ["r1", "r1:c1", "r1:c1:k1"]
    before = as_it_stands(ledger)
    loop = _grand_family(ledger, [])
    with pytest.raises(ValueError, match=r"call 'k1' of run 'r1:c1'.*resume 'r1',"):
        loop.resume("r1:c1:k1")
    with pytest.raises(ValueError, match=r"call 'c1' of run 'r1'.*resume 'r1',"):
        loop.resume("r1:c1")
    assert (ledger.claims, as_it_stands(ledger)) == ([], before)
    result = loop.resume("r1")
    assert (result.status, result.children["c1"].children["k1"].output) == ("finished", "deep")
    # An ended child is refused too: it is read with its parent (view_run, the result's children).
    with pytest.raises(ValueError, match="resume 'r1'"):
        loop.resume("r1:c1")


class Dying(CrashingLedger):
    """A process that dies in place: once a tool has called ``die``, every write raises
    ``Crash`` again (a ``BaseException``, as an interrupt that keeps coming), so no run can
    record its end, and nothing the journal catches (an ``Exception``) gives its claim up."""

    def __init__(self, inner: MemoryLedger) -> None:
        super().__init__(inner, 0)

    def create(self, run_id: str, header: bytes) -> Any:
        return _DyingWriter(self, self.inner.create(run_id, header))

    def claim(self, run_id: str) -> Any:
        return _DyingWriter(self, self.inner.claim(run_id))


class _DyingWriter:
    def __init__(self, ledger: Dying, inner: Any) -> None:
        self.ledger, self.inner = ledger, inner

    def append(self, record: Any) -> None:
        if self.ledger.dead:
            raise Crash("the process is dying")
        self.inner.append(record)

    def release(self) -> None:
        self.inner.release()


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_crash_that_escapes_the_child_gives_up_its_claim_at_once(driver: Driver) -> None:
    """The child's first tool dies after its effect; the crash unwinds the child's driver
    and then the parent's, neither able to record its end. Handled in the same process,
    while the crash (and every frame it went through) is still held, the parent resumes at
    once: both claims were given up as the drivers unwound, not when collected."""
    memory, world = MemoryLedger(), World()
    dying = Dying(memory)
    world.ledger, world.crash_in = dying, "k1"
    with pytest.raises(Crash) as caught:
        Family(world, dying, driver).run()
    # Still held, as by a handler: the frames it went through, and the engines in them, live.
    assert caught.value.__traceback__ is not None
    assert dying.dead
    assert memory.claimed == set()
    assert [r.kind for r in memory.records["r1:c1"]] == ["tool_started"]
    world.ledger = None
    result = Family(world, memory, driver).resume()
    assert caught.value.__traceback__ is not None
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "done", 2, 1)
    child = result.children["c1"]
    assert (child.status, child.steps, child.calls) == ("finished", 3, 3)
    assert child.transcript[2]["content"]["type"] == "OutcomeUnknown"  # k1 died mid-call
    assert [key for _, key in world.effects] == ["r1:c1:k1", "r1:c1:k2", "r1:c1:k3"]
    assert memory.claimed == set()
