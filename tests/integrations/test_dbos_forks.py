"""Forks of DBOS runs whose agent tools' children started: forks of forks, and their trees.

The fixtures and helpers are ``test_dbos``'s.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("dbos")

from dbos import DBOS, SetWorkflowID

import agentloop
import agentloop._dbos.loops
import agentloop.dbos
from agentloop.dbos import DBOSLoop
from agentloop.ledger import RunBusyError
from tests.durable.test_kill import CHECKPOINT_SCRIPT, FINAL
from tests.integrations.test_dbos import (
    ASKED_EFFECTS,
    CHILD_SCRIPT,
    PARENT_SCRIPT,
    World,
    asking_team,
    make,
    names,
    new_id,
    scripted,
    sent_from_another_thread,
    system_db,
    team,
    within,
)

__all__ = ["make", "system_db"]


def waiting_tree(runs: DBOSLoop) -> tuple[Any, tuple[Any, ...], int]:
    """A run of ``runs`` (an ``asking_team``) started, once its child waits for a person:
    its handle, its pending calls, and the step a fork from after the child's start takes."""
    run_id = new_id()
    handle = runs.start("go", run_id=run_id)
    waiting = agentloop.dbos.pending(run_id, timeout_seconds=30)
    return handle, waiting, DBOS.list_workflow_steps(run_id)[-1]["function_id"] + 1


@pytest.mark.slow
def test_a_fork_of_a_fork_waits_for_its_sources_child_not_the_originals(make: Any) -> None:
    """F1, a fork of R taken while R's child waits for a person, is decided and ends: its
    child F1:c1 ran the calls. F2, a fork of F1 from its wait for that child, is a recovery
    of F1 there: it gets F1's child back (ended: read back as recorded), never R's waiting
    child, so nothing waits in F2 and no call runs again."""
    world = World()
    handle, waiting, start = waiting_tree(make(asking_team(world)))
    run_id = handle.workflow_id
    first = DBOS.fork_workflow(run_id, start)
    decided = agentloop.dbos.pending(first.workflow_id, timeout_seconds=30)
    approved = {p.key: p.approve() for p in decided}
    sent_from_another_thread(agentloop.dbos.decide, first.workflow_id, approved)
    done = within(first)
    mine = f"{first.workflow_id}:c1"
    assert world.effects == [(kind, f"{mine}:{k}") for kind, k in ASKED_EFFECTS]
    second = DBOS.fork_workflow(first.workflow_id, start)
    again = within(second, 10)
    assert agentloop.dbos.pending(second.workflow_id) == ()
    assert (again.status, again.children["c1"]) == (done.status, done.children["c1"])
    assert world.effects == [(kind, f"{mine}:{k}") for kind, k in ASKED_EFFECTS]
    sent_from_another_thread(agentloop.dbos.decide, run_id, {p.key: p.approve() for p in waiting})
    assert within(handle).status == "finished"


def test_a_close_right_after_a_start_is_refused_while_the_run_is_driven(make: Any) -> None:
    """A close between start() and the moment the workflow's thread finds its DBOSLoop
    (held back here) is refused with RunBusyError, as one while the run is driven: the
    run is driven to its end, not failed for want of its DBOSLoop; then the close
    forgets the DBOSLoop, and a start is refused."""
    release = threading.Event()
    world = World()
    runs = make(
        agentloop.Loop(
            scripted(CHECKPOINT_SCRIPT), tools=world.registry(lambda n: release.wait(30))
        )
    )
    with agentloop._dbos.loops._FOUND:  # the workflow's thread waits to find its DBOSLoop
        handle = runs.start("go", run_id=new_id())
        with pytest.raises(RunBusyError):
            runs.close()
    with pytest.raises(RunBusyError):
        runs.close()
    release.set()
    assert within(handle).status == "finished"
    runs.close()
    with pytest.raises(ValueError, match="was closed"):
        runs.start("go")


@pytest.mark.slow
def test_a_fork_whose_child_was_forked_before_a_crash_wakes_it_when_cancelled(make: Any) -> None:
    """The state a worker killed inside the fork's wait leaves: cancel_run(fork) found no
    run below the fork, then the fork's child was forked (from the original's child, which
    waits for a person), and the worker died before it woke it. The recovery finds its
    child made, and wakes it too: the child ends cancelled, none of its calls run, and so
    does the fork; the original waits on, untouched."""
    world = World()
    handle, waiting, start = waiting_tree(make(asking_team(world)))
    run_id = handle.workflow_id
    fork_id = new_id()
    agentloop.dbos.cancel_run(fork_id)
    theirs = f"{run_id}:c1"
    with SetWorkflowID(f"{fork_id}:c1"):
        DBOS.fork_workflow(theirs, 1 + DBOS.list_workflow_steps(theirs)[-1]["function_id"])
    with SetWorkflowID(fork_id):
        fork = DBOS.fork_workflow(run_id, start)
    stopped = within(fork, 10)
    assert (stopped.status, stopped.children["c1"].status) == ("cancelled", "cancelled")
    assert world.effects == []
    assert agentloop.dbos.pending(run_id) == waiting
    sent_from_another_thread(agentloop.dbos.decide, run_id, {p.key: p.approve() for p in waiting})
    assert within(handle).status == "finished"


def three_levels(world: World, hook: Any) -> agentloop.Loop:
    """A parent whose agent tool's child has an agent tool too: the grandchild runs
    ``CHILD_SCRIPT`` (its first call, k1, is not idempotent, and calls ``hook``)."""
    grandchild = agentloop.Loop(scripted(CHILD_SCRIPT), tools=world.registry(hook))
    middle: list[dict[str, Any]] = [
        {"kind": "call", "id": "j1", "name": "deeper", "arguments": {"input": "dig"}},
        {"kind": "final", "text": "dug"},
    ]
    child = agentloop.Loop(scripted(middle), tools=[grandchild.as_tool("deeper", "Dig.")])
    return agentloop.Loop(scripted(PARENT_SCRIPT), tools=[child.as_tool("research", "Look it up.")])


@pytest.mark.slow
def test_a_fork_at_each_step_while_a_grandchilds_call_runs_never_runs_it_again(
    make: Any,
) -> None:
    """Forked at each step of the parent while its grandchild's first call (not
    idempotent) runs: a fork from before its child's start makes its own tree, whose
    grandchild runs that call under the fork's key; one from after gets its child and
    grandchild forked from the running ones, where that call is answered OutcomeUnknown
    and never runs again. Every fork ends finished, as the original does."""
    entered, release = threading.Event(), threading.Event()

    def blocking(n: int) -> None:
        if n == 1 and not entered.is_set():
            entered.set()
            assert release.wait(30)

    world = World()
    runs = make(three_levels(world, blocking))
    run_id = new_id()
    handle = runs.start("go", run_id=run_id)
    try:
        assert entered.wait(30)
        steps = DBOS.list_workflow_steps(run_id)
        assert names(steps) == ["agentloop.model", "agentloop.run"]
        forks = [DBOS.fork_workflow(run_id, step) for step in (1, 2, 3)]
        # Each fork from after the start has its grandchild forked before the call ends.
        for fork in forks[2:]:
            deadline = time.monotonic() + 30
            while DBOS.get_workflow_status(f"{fork.workflow_id}:c1:j1") is None:
                assert time.monotonic() < deadline
                time.sleep(0.02)
    finally:
        release.set()
    assert within(handle).status == "finished"
    for step, fork in zip((1, 2, 3), forks, strict=True):
        result = within(fork)
        grand = f"{fork.workflow_id}:c1:j1"
        assert result.status == "finished"
        assert result.children["c1"].children["j1"].run_id == grand
        mine = [kind for kind, key in world.effects if key == f"{grand}:k1"]
        answers = {
            m["id"]: m
            for m in result.children["c1"].children["j1"].transcript
            if m["kind"] == "tool_result"
        }
        if step < 3:  # its own tree: the call is its own
            assert mine == ["effect"]
        else:
            assert mine == []
            assert answers["k1"]["content"]["type"] == "OutcomeUnknown"
    assert [kind for kind, key in world.effects if key == f"{run_id}:c1:j1:k1"] == ["effect"]


def test_a_fork_of_a_child_under_an_id_of_its_own_gets_its_deps_for_the_recorded_top_run(
    system_db: str,
) -> None:
    """DBOS's fork of a child run (its id names no parent) is driven with its hand-out's
    ancestors as recorded: the provider is called with the top run's id, as for the child."""
    seen: list[str] = []

    def provider(run_id: str) -> object:
        seen.append(run_id)
        return None

    runs = DBOSLoop(team(World(), CHILD_SCRIPT), name=f"t-{new_id()[:8]}", deps=provider)
    try:
        run_id = new_id()
        assert runs.run("go", run_id=run_id).status == "finished"
        assert seen == [run_id, run_id]  # the parent's, then the child's
        child_id = f"{run_id}:c1"
        last = DBOS.list_workflow_steps(child_id)[-1]["function_id"]
        fork = DBOS.fork_workflow(child_id, last)
        assert within(fork).status == "finished"
        assert seen == [run_id, run_id, run_id]
    finally:
        runs.close()


def test_a_dbos_loop_whose_childs_name_is_taken_is_refused_naming_itself(
    system_db: str,
) -> None:
    """A DBOSLoop whose agent tool's child DBOSLoop would take a name another DBOSLoop of
    the process has is refused with a ValueError naming it (the one being made) and its
    agent tool, not asking for another name for the child; nothing of it is made."""
    loops = agentloop._dbos.loops.LOOPS
    name = f"t-{new_id()[:8]}"
    first = DBOSLoop(agentloop.Loop(scripted([FINAL])), name=f"{name}/research")
    try:
        researcher = agentloop.Loop(scripted([FINAL]))
        writer = agentloop.Loop(scripted([FINAL]), tools=[researcher.as_tool("research", "L.")])
        with pytest.raises(ValueError, match="exists in this process already") as refused:
            DBOSLoop(writer, name=name)
        said = str(refused.value)
        assert f"the DBOSLoop {name!r} names the child DBOSLoop of its agent tool" in said
        assert "give the new one another name" not in said
        assert sorted(known for known in loops if known.startswith(name)) == [f"{name}/research"]
        assert loops[f"{name}/research"] is first
    finally:
        first.close()
