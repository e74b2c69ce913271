"""Kill tests on real processes: SIGKILL at each checkpoint, then resume in a new process.

A fork server (``tests/support/durable_child.py``) runs each job in a forked child,
which is killed with SIGKILL at the job's checkpoint: around a ledger append
(before or after a reply, ``tool_started``, ``tool_finished`` or the end is
recorded), inside a tool right after its effect, or at a random moment. A
new child then resumes the run (and may be killed again), until one finishes.

Then: the final status, counters and transcript are those of an
uninterrupted run, except the documented outcome-unknown results; every
effect (a line in a file outside the ledger) happened at most once, and at
least once for the idempotent tool (whose "external system" deduplicates
by key); the ledger holds no record twice; and resuming the finished run
in this process returns the same result.

The random kill points: 30 runs per driver in the fast tier (``make test``), 500 in
the long one (``make test-all``), the number the durable-runs issue asks for, which
``AGENTLOOP_FUZZ=N`` multiplies (``AGENTLOOP_FUZZ=4`` gives 2,000 each).
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest

import agentloop
from tests.conftest import count
from tests.support import ROOT, durable_child
from tests.support.ledgers import MemoryLedger, check_effects, stored, unknown_ids, unsound

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill tests fork")


FUZZ = int(os.environ.get("AGENTLOOP_FUZZ", "1"))
Message = dict[str, Any]


class Server:
    """A fork server (``module``, run with ``-m``), started once for the module."""

    def __init__(self, module: str = "tests.support.durable_child") -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", module],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def ask(self, request: dict[str, Any]) -> Any:
        """One request, one answer line; a child's crash (its traceback) fails the test."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(orjson.dumps(request) + b"\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "the fork server died"
        answer = orjson.loads(line)
        assert not (isinstance(answer, dict) and "crash" in answer), answer["crash"]
        return answer

    def job(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run one job; how its child ended, and what it said if it finished."""
        Path(job["out"]).unlink(missing_ok=True)
        ended: dict[str, Any] = self.ask({"job": job})
        return ended | self._said(job, ended)

    def race(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run jobs at once, each in its own child."""
        for job in jobs:
            Path(job["out"]).unlink(missing_ok=True)
        ended = self.ask({"race": jobs})
        return [end | self._said(job, end) for job, end in zip(jobs, ended, strict=True)]

    @staticmethod
    def _said(job: dict[str, Any], ended: dict[str, Any]) -> dict[str, Any]:
        if ended.get("code") is None:
            return {}
        said: dict[str, Any] = orjson.loads(Path(job["out"]).read_bytes())
        assert "crash" not in said, said["crash"]
        return said

    def close(self) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.process.stdout.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server()
    yield started
    started.close()


# -- scripts, and what an uninterrupted run of one does -------------------------------------------


def call(call_id: str, name: str, n: int) -> Message:
    return {"kind": "call", "id": call_id, "name": name, "arguments": {"n": n}}


def batch(*calls: Message) -> Message:
    keys = ("id", "name", "arguments")
    return {"kind": "calls", "calls": [{key: c[key] for key in keys} for c in calls]}


FINAL: Message = {"kind": "final", "text": "done"}
CHECKPOINT_SCRIPT = [
    call("c1", "effect", 1),
    batch(call("c2", "idem", 2), call("c3", "effect", 3), call("c4", "fail", 4)),
    FINAL,
]


def random_script(rng: random.Random) -> list[Message]:
    script, number = [], 0
    for _ in range(rng.randint(1, 4)):
        calls = []
        for _ in range(rng.randint(1, 3)):
            number += 1
            calls.append(call(f"c{number}", rng.choice(["effect", "idem", "fail"]), number))
        script.append(calls[0] if len(calls) == 1 and rng.random() < 0.5 else batch(*calls))
    return [*script, FINAL]


class Baseline:
    """The uninterrupted run, in this process: its result, appends and handler calls."""

    def __init__(self, job: dict[str, Any]) -> None:
        memory = MemoryLedger()
        handlers = durable_child._STATE["handlers"]
        loop = durable_child.loop(job, memory)
        if job["driver"] == "sync":
            result = loop.run("go", run_id="count")
        else:
            result = asyncio.run(loop.arun("go", run_id="count"))
        self.result = durable_child.result_json(result)
        self.appends = memory.appends
        self.handlers = durable_child._STATE["handlers"] - handlers
        self.ledger = memory  # its records (a child run's, say), to compare with


def job_for(tmp: Path, driver: str, script: list[Message], **more: Any) -> dict[str, Any]:
    return {
        "db": str(tmp / "runs.db"),
        "effects": str(tmp / "effects"),
        "out": str(tmp / "out.json"),
        "driver": driver,
        "script": script,
        "run_id": "r1",
        "synchronous": "FULL",
        "concurrency": 1,
    } | more


def run_with_kills(
    server: Server, job: dict[str, Any], kills: list[dict[str, Any] | None]
) -> tuple[dict[str, Any], int]:
    """Start the run, then resume it, each process killed at the next kill point; the result,
    and how many processes were killed (a random moment may fall after the run ended)."""
    mode, attempts, killed = "start", [*kills, None, None], 0
    for kill in attempts:
        ended = server.job(job | {"mode": mode, "kill": kill})
        if "result" in ended:
            return ended["result"], killed
        killed += 1
        if ended.get("error") == "RunNotFoundError":
            mode = "start"  # killed before the run's header was committed: start it again
            continue
        assert "signal" in ended, ended
        mode = "resume"
    raise AssertionError(f"no process finished the run: {job}")


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_kill_around_a_check_asks_it_again_only_if_unrecorded(
    server: Server, tmp_path: Path, driver: str
) -> None:
    """Killed before a check's record, a resume runs it again; after it, never.

    The records: the first reply with its check (1), the second reply with its
    check (2), the end (3). Each check is an effect ``check:<text>``.
    """
    script = [{"kind": "final", "text": "short"}, {"kind": "final", "text": "long enough"}]
    for at, when, short, long in [
        (1, "before", 2, 1),
        (1, "after", 1, 1),
        (2, "before", 1, 2),
        (2, "after", 1, 1),
    ]:
        job = job_for(tmp_path / f"{at}{when}", driver, script, validate=True)
        Path(job["db"]).parent.mkdir()
        got, killed = run_with_kills(server, job, [{"append": at, "when": when}])
        assert killed == 1
        assert (got["status"], got["steps"]) == ("finished", 2)
        checks = Path(job["effects"]).read_text().splitlines()
        ran = [line.split(" ")[0] for line in checks]
        assert (ran.count("check:short"), ran.count("check:long")) == (short, long), (at, when)


def ended_as_baseline(
    job: dict[str, Any], got: dict[str, Any], baseline: Baseline
) -> tuple[set[str], dict[str, int]]:
    """The resumed run ended as the uninterrupted one did: its unknown ids, and how often
    each effect the job's tools logged happened."""
    want = baseline.result
    assert (got["status"], got["steps"], got["calls"]) == (
        want["status"],
        want["steps"],
        want["calls"],
    )
    unknown = unknown_ids(got["transcript"], want["transcript"], {"idem"})
    path = Path(job["effects"])
    effects = Counter(path.read_text().splitlines() if path.exists() else [])
    return unknown, effects


def check(job: dict[str, Any], got: dict[str, Any], baseline: Baseline) -> set[str]:
    """The resumed run against the uninterrupted one; effects and records; the unknown ids."""
    unknown, effects = ended_as_baseline(job, got, baseline)
    check_effects(
        got["transcript"],
        unknown,
        lambda result: effects.get(f"{result['name']} r1:{result['id']}", 0),
    )
    twice, unstarted = unsound(stored(job["db"]))
    assert twice == []
    assert unstarted == []  # every outcome recorded is of a call recorded as started
    # This process, resuming the finished run, reads the same result.
    ledger = agentloop.ledger.SQLiteLedger(job["db"])
    loop = durable_child.loop(job, ledger)
    again = loop.resume("r1") if job["driver"] == "sync" else asyncio.run(loop.aresume("r1"))
    ledger.close()
    assert durable_child.result_json(again) == got
    return unknown


# -- each checkpoint ----------------------------------------------------------------------------


def checkpoints(baseline: Baseline) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = [
        {"append": n, "when": when}
        for n in range(1, baseline.appends + 1)
        for when in ("before", "after")
    ]
    return points + [{"effect": k} for k in range(1, baseline.handlers + 1)]


@pytest.mark.parametrize(
    ("driver", "concurrency"), [("sync", 1), ("async", 1), ("async", 3)], ids=str
)
def test_sigkill_at_each_checkpoint(
    server: Server, tmp_path: Path, driver: str, concurrency: int
) -> None:
    """Before and after each record (tool_started with the reply before it, tool_finished, the
    end), and inside each tool after its effect: the batch's steps included."""
    template = job_for(tmp_path, driver, CHECKPOINT_SCRIPT, concurrency=concurrency)
    baseline = Baseline(template)
    assert baseline.appends == 9
    assert baseline.handlers == 4
    unknown_seen = set()
    for index, kill in enumerate(checkpoints(baseline)):
        case = tmp_path / f"k{index}"
        case.mkdir()
        job = job_for(case, driver, CHECKPOINT_SCRIPT, concurrency=concurrency)
        got, killed = run_with_kills(server, job, [kill])
        assert killed == 1, kill
        unknown_seen |= check(job, got, baseline)
    assert unknown_seen == {"c1", "c3", "c4"}  # the idempotent c2 is run again instead


# -- random kill points -------------------------------------------------------------------------


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_sigkill_at_random_points(server: Server, tmp_path: Path, driver: str) -> None:
    """Random scripts killed at random points: a checkpoint, or a random moment (mid-commit too).

    30 runs a driver (500 in the long tier) whose process was in fact killed; a run whose
    random moment fell after its end is checked too, but not counted."""
    rng = random.Random(f"kill-{driver}-{FUZZ}")
    runs, killed_runs = count(30, 500 * FUZZ), 0
    landed = {"checkpoint": 0, "moment": 0, "twice": 0}  # each kind of kill, in fact made
    spans = []  # how long a run takes, so that a random moment falls inside one
    for index in range(3):  # the first fork of a server pays for what is imported lazily
        probe = job_for(tmp_path, driver, CHECKPOINT_SCRIPT, db=str(tmp_path / f"probe{index}.db"))
        began = time.perf_counter()
        run_with_kills(server, probe, [])
        spans.append((time.perf_counter() - began) * 1000)
    span_ms = min(spans)
    for index in range(2 * runs):
        if killed_runs == runs:
            break
        case = tmp_path / f"r{index}"
        case.mkdir()
        script = random_script(rng)
        job = job_for(
            case,
            driver,
            script,
            concurrency=rng.choice([1, 2, 3]) if driver == "async" else 1,
            synchronous=rng.choice(["FULL", "NORMAL"]),
        )
        baseline = Baseline(job)
        points = checkpoints(baseline)
        kills: list[dict[str, Any] | None] = []
        for _ in range(rng.choice([1, 1, 1, 2])):  # now and then, the resuming process dies too
            if rng.random() < 0.25:
                kills.append({"after_ms": rng.uniform(0, span_ms)})
            else:
                kills.append(rng.choice(points))
        got, killed = run_with_kills(server, job, kills)
        check(job, got, baseline)
        killed_runs += killed > 0
        if killed:
            landed["moment" if kills[0] and "after_ms" in kills[0] else "checkpoint"] += 1
        landed["twice"] += killed > 1
    assert killed_runs == runs
    assert all(landed.values()), landed  # the fast tier's few runs still make every kind


# -- two processes, one run ----------------------------------------------------------------------


def test_two_processes_race_to_resume_one_run(server: Server, tmp_path: Path) -> None:
    """One drives the run, the other is refused with RunBusyError; nothing is recorded twice."""
    for index in range(count(1, 3 * FUZZ)):
        case = tmp_path / f"race{index}"
        case.mkdir()
        job = job_for(case, "sync", CHECKPOINT_SCRIPT)
        ended = server.job(job | {"mode": "start", "kill": {"append": 3, "when": "after"}})
        assert "signal" in ended
        barrier = time.time() + 0.3
        racers = [
            job | {"mode": "resume", "barrier": barrier, "slow_ms": 150, "out": str(case / name)}
            for name in ("a.json", "b.json")
        ]
        first, second = server.race(racers)
        said = sorted([first, second], key=lambda answer: "error" in answer)
        assert "result" in said[0], said
        assert said[1].get("error") == "RunBusyError", said
        assert "is being driven by another process" in said[1]["message"]
        check(job, said[0]["result"], Baseline(job))


def test_processes_share_one_ledger_file(server: Server, tmp_path: Path) -> None:
    """Runs of different ids, each in its own process, on one file at once: all are kept."""
    jobs = [
        job_for(tmp_path, "sync", CHECKPOINT_SCRIPT, run_id=f"r{index}", mode="start")
        | {"out": str(tmp_path / f"out{index}.json"), "effects": str(tmp_path / f"e{index}")}
        for index in range(4)
    ]
    results = server.race(jobs)
    assert all("result" in answer for answer in results), results
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    assert sorted(ledger.run_ids(finished=True)) == ["r0", "r1", "r2", "r3"]
    ledger.close()


@pytest.mark.parametrize("refuse", ["deny", "ask"])
def test_a_call_killed_after_its_effect_is_not_reviewed_again_on_resume(
    server: Server, tmp_path: Path, refuse: str
) -> None:
    """Killed right after c1's effect; resumed in a process whose policy for effect now
    denies, or asks a person: c1 is OutcomeUnknown (not denied, not held), its effect once."""
    job = job_for(tmp_path, "sync", [call("c1", "effect", 1), FINAL], refuse=refuse)
    got, killed = run_with_kills(server, job, [{"effect": 1}])
    assert (killed, got["status"]) == (1, "finished")
    assert got["transcript"][2]["content"]["type"] == "OutcomeUnknown"
    assert Path(job["effects"]).read_text().splitlines() == ["effect r1:c1"]
