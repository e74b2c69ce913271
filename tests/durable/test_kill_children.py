"""Kill tests of agents as tools: a durable parent's child run, SIGKILLed and resumed.

The parent's tool ``research`` is an agent tool; its child run is recorded in
the parent's ledger as ``r1:cA`` and runs tools with effects of its own. A
forked process (``tests/support/durable_child.py``) is killed inside the
child's tools, around each append of parent and child, or after the child's
end and before the parent's outcome; a new process resumes the parent.

Then: parent and child end as an uninterrupted run does (but for the
documented outcome-unknown results of the child's tools cut by the kill);
each tool of either took effect at most once (at least once for the
idempotent one); the ledger holds no record twice, no outcome without its
start, and the child's end before the parent's outcome that answers from it.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest

import agentloop
from agentloop.ledger import view_run
from tests.durable import test_kill
from tests.durable.test_kill import (
    FINAL,
    FUZZ,
    Server,
    batch,
    call,
    checkpoints,
    job_for,
    random_script,
    run_with_kills,
    server,  # noqa: F401 - the module's fork server, a fixture
)
from tests.support import durable_child
from tests.support.ledgers import check_effects, stored, unknown_ids, unsound

Message = dict[str, Any]

RESEARCH: Message = {"kind": "call", "id": "cA", "name": "research", "arguments": {"input": "go"}}
PARENT = [RESEARCH, call("c2", "effect", 2), FINAL]
CHILD = [
    call("k1", "effect", 1),
    batch(call("k2", "idem", 2), call("k3", "effect", 3), call("k4", "fail", 4)),
    FINAL,
]


class Baseline(test_kill.Baseline):
    """The uninterrupted run in this process (run ``count``), and its child's transcript."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(job)
        self.child = view_run(self.ledger, "count:cA").transcript


def family_job(tmp: Path, driver: str, **more: Any) -> dict[str, Any]:
    return job_for(tmp, driver, PARENT, **({"child": CHILD} | more))


def check(job: dict[str, Any], got: dict[str, Any], baseline: Baseline) -> set[str]:
    """Parent and child against the uninterrupted run; effects and records; unknown child ids."""
    parent_unknown, effects = test_kill.ended_as_baseline(job, got, baseline)
    assert "cA" not in parent_unknown  # an agent call is resumed, never left unknown
    own = [message for message in got["transcript"] if message.get("name") != "research"]
    check_effects(own, parent_unknown, lambda r: effects.get(f"{r['name']} r1:{r['id']}", 0))
    ledger = agentloop.ledger.SQLiteLedger(job["db"])
    child = view_run(ledger, "r1:cA")
    assert (child.state.value, child.caller) == ("finished", ("r1", "cA"))
    unknown = unknown_ids(child.transcript, baseline.child, {"idem"})
    check_effects(
        child.transcript,
        unknown,
        lambda r: effects.get(f"{r['name']} r1:cA:{r['id']}", 0),
        "r1:cA",
    )
    assert sorted(ledger.run_ids()) == ["r1", "r1:cA"]
    # This process, resuming the finished run, reads the same result and child.
    loop = durable_child.loop(job, ledger)
    again = loop.resume("r1") if job["driver"] == "sync" else asyncio.run(loop.aresume("r1"))
    assert durable_child.result_json(again) == got
    assert again.children["cA"].transcript == child.transcript
    ledger.close()
    records = stored(job["db"])
    twice, unstarted = unsound(records)
    order = [r for r in records if r in (("r1:cA", "end", ""), ("r1", "tool_finished", "cA"))]
    assert twice == []
    assert unstarted == []
    assert order == [("r1:cA", "end", ""), ("r1", "tool_finished", "cA")]
    return unknown


def test_killed_inside_a_childs_tool_and_after_the_childs_end(
    server: Server,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    """The fast tier's two kills: right after the child's k1 effect, and right after the child's
    end is committed (before the parent's outcome)."""
    baseline = Baseline(family_job(tmp_path, "sync"))
    assert (baseline.appends, baseline.handlers) == (14, 5)
    ended = 10  # r1: tool_started cA, with its reply; then r1:cA: 9 records, its end the last
    kills: list[dict[str, Any]] = [{"effect": 1}, {"append": ended, "when": "after"}]
    for index, kill in enumerate(kills):
        case = tmp_path / f"k{index}"
        case.mkdir()
        job = family_job(case, "sync")
        got, killed = run_with_kills(server, job, [kill])
        assert killed == 1, kill
        unknown = check(job, got, baseline)
        assert unknown == ({"k1"} if "effect" in kill else set())
        if "append" in kill:  # the child was only read: its model and tools never again
            assert Path(job["effects"]).read_text().count("r1:cA:") == 4


@pytest.mark.slow
@pytest.mark.parametrize(
    ("driver", "concurrency"), [("sync", 1), ("async", 1), ("async", 3)], ids=str
)
def test_sigkill_at_each_checkpoint_of_parent_and_child(
    server: Server,  # noqa: F811 - the fixture
    tmp_path: Path,
    driver: str,
    concurrency: int,
) -> None:
    """Before and after each append of parent and child, and inside each tool after its effect."""
    baseline = Baseline(family_job(tmp_path, driver, concurrency=concurrency))
    assert (baseline.appends, baseline.handlers) == (14, 5)
    unknown_seen: set[str] = set()
    for index, kill in enumerate(checkpoints(baseline)):
        case = tmp_path / f"k{index}"
        case.mkdir()
        job = family_job(case, driver, concurrency=concurrency)
        got, killed = run_with_kills(server, job, [kill])
        assert killed == 1, kill
        unknown_seen |= check(job, got, baseline)
    assert unknown_seen == {"k1", "k3", "k4"}  # the idempotent k2 is run again instead


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_sigkill_at_random_points_of_parent_and_child(
    server: Server,  # noqa: F811 - the fixture
    tmp_path: Path,
    driver: str,
) -> None:
    """Random child scripts, killed at a random checkpoint of parent or child, or a random
    moment; now and then the resuming process is killed too. 100 runs a driver (the long
    tier's), times ``AGENTLOOP_FUZZ``."""
    rng = random.Random(f"kill-children-{driver}-{FUZZ}")
    probe = family_job(tmp_path, driver, db=str(tmp_path / "probe.db"))
    began = time.perf_counter()
    run_with_kills(server, probe, [])
    span_ms = (time.perf_counter() - began) * 1000
    killed_runs = 0
    for index in range(100 * FUZZ):
        case = tmp_path / f"r{index}"
        case.mkdir()
        job = family_job(
            case,
            driver,
            child=random_script(rng),
            concurrency=rng.choice([1, 2, 3]) if driver == "async" else 1,
            synchronous=rng.choice(["FULL", "NORMAL"]),
        )
        baseline = Baseline(job)
        points = checkpoints(baseline)
        kills: list[dict[str, Any] | None] = [
            {"after_ms": rng.uniform(0, span_ms)} if rng.random() < 0.25 else rng.choice(points)
            for _ in range(rng.choice([1, 1, 1, 2]))
        ]
        got, killed = run_with_kills(server, job, kills)
        check(job, got, baseline)
        killed_runs += killed > 0
    assert killed_runs > 50 * FUZZ  # most random moments fall inside a run


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_killed_after_the_childs_decision_before_the_parent_goes_on(
    server: Server,  # noqa: F811 - the fixture
    tmp_path: Path,
    driver: str,
) -> None:
    """A child asks a person; the resume that approves cA/k1 is SIGKILLed right after the
    child's decision record (the parent's is first). A new process resumes without decisions:
    the child's decision is not recorded twice, k1 runs once, and both end paired."""
    job = family_job(tmp_path, driver, child=[call("k1", "effect", 1), FINAL], ask=True)
    waits = server.job(job | {"mode": "start", "kill": None})
    assert waits["result"]["status"] == "awaiting_approval"
    decided = job | {"mode": "resume", "decide": [["cA", "k1"]]}
    killed = server.job(decided | {"kill": {"append": 2, "when": "after"}})
    assert killed == {"signal": 9}
    decisions = [(run_id, key) for run_id, kind, key in stored(job["db"]) if kind == "decision"]
    assert decisions == [("r1", "cA/k1"), ("r1:cA", "k1")]
    assert Path(job["effects"]).read_text() == ""  # killed before k1 ran
    got = server.job(job | {"mode": "resume", "kill": None})["result"]
    assert got["status"] == "finished"
    assert Path(job["effects"]).read_text().splitlines() == ["effect r1:cA:k1", "effect r1:c2"]
    order = [
        record
        for record in stored(job["db"])
        if record[1] in ("decision", "end") or record[1:] == ("tool_finished", "cA")
    ]
    assert order == [
        ("r1", "decision", "cA/k1"),
        ("r1:cA", "decision", "k1"),
        ("r1:cA", "end", ""),
        ("r1", "tool_finished", "cA"),
        ("r1", "end", ""),
    ]
    ledger = agentloop.ledger.SQLiteLedger(job["db"])
    assert (view_run(ledger, "r1").state.value, view_run(ledger, "r1:cA").state.value) == (
        "finished",
        "finished",
    )
    ledger.close()
