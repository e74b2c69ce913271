"""DBOS kill tests on real processes: SIGKILL a worker, let DBOS recover its runs.

The durable-runs guarantees, as ``tests/durable/test_kill.py`` states them, for runs
that are DBOS workflows: the scripts, the uninterrupted baseline and the
comparison are that file's. A fork server (``tests/support/dbos_worker.py``) runs
each DBOS process in a forked child.

* On a SQLite system database (always): one process is killed at each
  checkpoint of the checkpoint script (inside the model, around each step,
  inside each tool before and after its effect; in the fast tier, three of
  them: inside the model, after a non-idempotent effect, after an idempotent
  one); a new process with the same executor id launches DBOS, which
  recovers the run, and finishes it.
* On Postgres (``AGENTLOOP_TEST_POSTGRES``, a URL; skipped without one): two
  worker processes serve one queue; 200 runs of random scripts are enqueued
  from this process (a ``DBOSClient``), and one worker is SIGKILLed at random
  moments, several times, and restarted, recovering its pending runs.

Each run ends as its uninterrupted run does, but for the documented
outcome-unknown results; no effect (kept outside DBOS) happened twice, and
each idempotent call's at least once; every call is answered.
``AGENTLOOP_FUZZ=N`` multiplies the Postgres runs and kills.
"""

from __future__ import annotations

import os
import random
import signal
import time
import uuid
from typing import TYPE_CHECKING, Any

import orjson
import pytest

import agentloop

pytest.importorskip("dbos")

from tests.conftest import LONG
from tests.durable.test_kill import CHECKPOINT_SCRIPT, Server, random_script
from tests.support import dbos_worker
from tests.support.ledgers import check_effects, unknown_ids

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill tests fork")

FUZZ = int(os.environ.get("AGENTLOOP_FUZZ", "1"))
_AFTER_A_STEP = (
    agentloop.engine.Trigger.MODEL_REPLIED,
    agentloop.engine.Trigger.MODEL_RAISED,
    agentloop.engine.Trigger.TOOL_RETURNED,
)
POSTGRES = os.environ.get("AGENTLOOP_TEST_POSTGRES")
Message = dict[str, Any]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server("tests.support.dbos_worker")
    yield started
    started.close()


def as_input(script: list[Message]) -> str:
    """A run's input: its script, which the model reads back."""
    return orjson.dumps(script).decode()


class Baseline:
    """The uninterrupted run, in this process and without DBOS: result and kill points."""

    def __init__(self, script: list[Message]) -> None:
        before = dict(dbos_worker._STATE["counts"])
        result = dbos_worker.loop().run(as_input(script))
        self.result = dbos_worker.result_json(result)
        after = dbos_worker._STATE["counts"]
        self.counts = {point: after.get(point, 0) - before.get(point, 0) for point in after}
        # The transitions right after a step was recorded (a reply, a call's outcome), and
        # the last: between the others no step is recorded, so a kill there is one of these.
        self.after_steps = [
            index
            for index, event in enumerate(result.events, 1)
            if event.trigger in _AFTER_A_STEP or index == len(result.events)
        ]
        self.triggers = [event.trigger for event in result.events]

    def replies_before(self, kill: dict[str, int]) -> int:
        """The replies a run killed at ``kill`` got: recorded, so never asked for again."""
        ((point, k),) = kill.items()
        if point == "model":
            return k - 1
        replies = tools = 0
        for index, trigger in enumerate(self.triggers, 1):
            if point == "transition" and index > k:
                break
            if trigger is agentloop.engine.Trigger.TOOL_RETURNED:
                tools += 1
                if tools == k and point in ("handler", "effect"):
                    break
            replies += trigger in (
                agentloop.engine.Trigger.MODEL_REPLIED,
                agentloop.engine.Trigger.MODEL_RAISED,
            )
        return replies

    def kill_points(self) -> list[dict[str, int]]:
        return [{"transition": n} for n in self.after_steps] + [
            {point: k}
            for point in ("model", "handler", "effect")
            for k in range(1, self.counts.get(point, 0) + 1)
        ]


def stop(server: Server, workers: dict[str, int], client: Any, enqueuer: Any) -> None:
    """Kill and reap every worker, then close this process's client and its DBOSLoop."""
    for pid in workers.values():
        os.kill(pid, signal.SIGKILL)
        server.ask({"reap": pid})
    client.destroy()
    if enqueuer is not None:
        enqueuer.close()


def sqlite_job(tmp_path: Path, run_id: str, script: list[Message], **more: Any) -> dict[str, Any]:
    """A job on the SQLite system database in ``tmp_path``, its effects written to a file there."""
    return {
        "db": f"sqlite:///{tmp_path / 'dbos.sqlite'}",
        "sink": {"file": str(tmp_path / "effects")},
        "out": str(tmp_path / "out.json"),
        "run_id": run_id,
        "input": as_input(script),
        **more,
    }


def killed_and_recovered(
    server: Server, job: dict[str, Any], kill: dict[str, int]
) -> dict[str, Any]:
    """``job``'s run started in a process killed at ``kill``, then recovered by another: its
    answer (``result``, and how often it asked the model)."""
    ended = server.job(job | {"mode": "start", "kill": kill})
    assert ended.get("signal") == signal.SIGKILL, (kill, ended)
    ended = server.job(job | {"mode": "recover"})
    assert "result" in ended, (kill, ended)
    return ended


def effects_of(lines: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
    counted: dict[tuple[str, str], int] = {}
    for kind, key in lines:
        counted[kind, key] = counted.get((kind, key), 0) + 1
    return counted


def check(
    run_id: str, got: dict[str, Any], baseline: Baseline, effects: dict[tuple[str, str], int]
) -> set[str]:
    """The recovered run against the uninterrupted one, and its effects; its unknown ids."""
    want = baseline.result
    assert (got["status"], got["steps"], got["calls"]) == (
        want["status"],
        want["steps"],
        want["calls"],
    ), (run_id, got, want)
    # Equal but for outcome-unknown results of tools that are not idempotent: every call
    # of the transcript is answered as in the uninterrupted run.
    unknown = unknown_ids(got["transcript"], want["transcript"], {"idem"})
    check_effects(
        got["transcript"],
        unknown,
        lambda result: effects.get((result["name"], f"{run_id}:{result['id']}"), 0),
        run_id,
    )
    return unknown


# -- SQLite system database: one process killed at each checkpoint ---------------------------------


def test_sigkill_at_each_checkpoint_then_dbos_recovers(server: Server, tmp_path: Path) -> None:
    """Inside the model, after each transition (its step recorded), inside each tool before and
    after its effect: the next process's DBOS recovers the run, which ends as uninterrupted.

    The fast tier kills at three of them; test_two_processes_recover_one_run_at_once kills at
    one of each kind."""
    baseline = Baseline(CHECKPOINT_SCRIPT)
    points = baseline.kill_points()
    assert len(points) == len(baseline.after_steps) + 3 + 4 + 4
    assert len(baseline.after_steps) == 3 + 4 + 1  # three replies, four outcomes, the end
    if not LONG:  # the second reply is asked again; c1's outcome is unknown; c2 runs again
        points = [{"model": 2}, {"effect": 1}, {"effect": 2}]
    unknown_seen: set[str] = set()
    for index, kill in enumerate(points):
        run_id = f"r{index}"
        # One system database for all (DBOS makes its tables once): each run its own id.
        ended = killed_and_recovered(server, sqlite_job(tmp_path, run_id, CHECKPOINT_SCRIPT), kill)
        # Recovery asks the model only for the replies the killed process had not got.
        assert ended["asked"] == baseline.counts["model"] - baseline.replies_before(kill), kill
        lines = (tmp_path / "effects").read_text().splitlines()
        effects = effects_of([tuple(line.split(" ")) for line in lines])  # type: ignore[misc]
        unknown_seen |= check(run_id, ended["result"], baseline, effects)
    # Killed after c1's, c3's or c4's effect (or before it, once the step before the call, which
    # marks it started, is recorded), the call is answered outcome-unknown; the idempotent c2
    # is run again instead.
    assert unknown_seen == ({"c1", "c3", "c4"} if LONG else {"c1"})


@pytest.mark.parametrize("model", [1, 2])
def test_a_cancellation_outlives_the_worker(server: Server, tmp_path: Path, model: int) -> None:
    """Cancelled from this process (a client) while its worker lies dead inside the model.

    Inside the first ask, the recovery's first model step reads the marker
    before it asks (the checkpoint before the first ask): it ends cancelled,
    never asking. Inside a later one, it takes the reply and, at the
    checkpoint right after it, ends cancelled."""
    from dbos import DBOSClient

    from agentloop.dbos import cancel_run

    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    job = {
        "db": url,
        "sink": {"file": str(tmp_path / "effects")},
        "out": str(tmp_path / "out.json"),
        "run_id": "doomed",
        "input": as_input(CHECKPOINT_SCRIPT),
    }
    ended = server.job(job | {"mode": "start", "kill": {"model": model}})
    assert ended.get("signal") == signal.SIGKILL, ended
    client = DBOSClient(system_database_url=url)
    try:
        cancel_run("doomed", client=client)
    finally:
        client.destroy()
    ended = server.job(job | {"mode": "recover"})
    got = ended["result"]
    kinds = [m["kind"] for m in got["transcript"]]
    if model == 1:
        assert (got["status"], got["steps"], got["calls"]) == ("cancelled", 0, 0)
        assert kinds == ["user"]
        assert ended["asked"] == 0
        assert not (tmp_path / "effects").exists()  # no tool ran
    else:
        assert (got["status"], got["steps"], got["calls"]) == ("cancelled", 2, 1)
        assert kinds == ["user", "call", "tool_result"]  # the second reply was not taken
        assert ended["asked"] == 1
        assert (tmp_path / "effects").read_text().split() == ["effect", "doomed:c1"]


def test_two_processes_recover_one_run_at_once(server: Server, tmp_path: Path) -> None:
    """Two processes launched with the killed one's executor id both recover its run: DBOS
    lets one own it (the other stops at its next step and waits for the result); no call
    ran twice, every call is answered, and the run ends as uninterrupted but for
    outcome-unknown results."""
    from dbos import DBOSClient, WorkflowHandle

    baseline = Baseline(CHECKPOINT_SCRIPT)
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    worker = {"db": url, "sink": {"file": str(tmp_path / "effects")}, "executor": "job"}
    kills = [{"transition": 1}, {"handler": 1}, {"effect": 1}, {"model": 2}, {"handler": 3}]
    for index, kill in enumerate(kills * FUZZ):
        run_id = f"race{index}"
        job = worker | {"out": str(tmp_path / "out.json"), "run_id": run_id}
        ended = server.job(
            job | {"input": as_input(CHECKPOINT_SCRIPT), "mode": "start", "kill": kill}
        )
        assert ended.get("signal") == signal.SIGKILL, (kill, ended)
        workers = {name: server.ask({"serve": worker})["pid"] for name in ("a", "b")}
        client = DBOSClient(system_database_url=url)
        try:
            handle: WorkflowHandle[agentloop.RunResult] = client.retrieve_workflow(run_id)
            got = dbos_worker.result_json(handle.get_result(polling_interval_sec=0.02))
        finally:
            stop(server, workers, client, None)
        lines = (tmp_path / "effects").read_text().splitlines()
        check(run_id, got, baseline, effects_of([tuple(line.split(" ")) for line in lines]))  # type: ignore[misc]


# -- Postgres: two workers, 200 runs, one worker killed at random moments -------------------------


@pytest.fixture
def postgres() -> Iterator[tuple[str, str, str]]:
    """The URL, a fresh DBOS system schema, and an effects table, dropped afterwards."""
    if not POSTGRES:
        pytest.skip("no Postgres: set AGENTLOOP_TEST_POSTGRES to a URL (the README says how)")
    import psycopg

    suffix = uuid.uuid4().hex[:12]
    schema, table = f"agentloop_kill_{suffix}", f"agentloop_effects_{suffix}"
    with psycopg.connect(POSTGRES, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE {table} (kind text NOT NULL, key text NOT NULL)")
    yield POSTGRES, schema, table
    with psycopg.connect(POSTGRES, autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {table}")
        connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.mark.slow
def test_two_workers_200_runs_one_worker_killed_again_and_again(
    server: Server, postgres: tuple[str, str, str]
) -> None:
    """Runs on a queue served by two workers; one is SIGKILLed and restarted several times."""
    import psycopg
    from dbos import DBOSClient

    from agentloop.dbos import DBOSLoop

    url, schema, table = postgres
    rng = random.Random(f"dbos-kill-{FUZZ}")
    runs, kills = 200 * FUZZ, 4 * FUZZ
    worker = {
        "db": url,
        "schema": schema,
        "sink": {"postgres": url, "table": table},
        "concurrency": 8,
    }
    workers = {
        name: server.ask({"serve": worker | {"executor": name}})["pid"] for name in ("a", "b")
    }
    client = DBOSClient(system_database_url=url, dbos_system_schema=schema)
    enqueuer = DBOSLoop(dbos_worker.loop(listen=False), name="scripted")
    try:
        scripts = {f"run{index}": random_script(rng) for index in range(runs)}
        for run_id, script in scripts.items():
            enqueuer.client_enqueue(client, dbos_worker.QUEUE, as_input(script), run_id=run_id)
        for _ in range(kills):  # a random moment while runs are in flight, then a restart
            time.sleep(rng.uniform(0.1, 0.6))
            os.kill(workers["a"], signal.SIGKILL)
            server.ask({"reap": workers["a"]})
            workers["a"] = server.ask({"serve": worker | {"executor": "a"}})["pid"]
        results = {
            run_id: dbos_worker.result_json(
                client.retrieve_workflow(run_id).get_result(polling_interval_sec=0.05)
            )
            for run_id in scripts
        }
        recovered = [
            status.workflow_id
            for status in client.list_workflows(queue_name=None)
            if status.workflow_id in scripts and (status.recovery_attempts or 0) > 1
        ]
    finally:
        stop(server, workers, client, enqueuer)
    with psycopg.connect(url) as connection:
        rows = connection.execute(f"SELECT kind, key FROM {table}").fetchall()
    effects = effects_of(rows)
    unknown = 0
    for run_id, script in scripts.items():
        unknown += len(check(run_id, results[run_id], Baseline(script), effects))
    assert recovered, "no kill landed on a run in flight: nothing was recovered"
    print(f"{len(recovered)} runs recovered, {unknown} outcome-unknown results")


# -- approvals: runs wait on the workers, a worker is killed, decisions come from a third process -


APPROVAL_SCRIPT: list[Message] = [
    {
        "kind": "calls",
        "calls": [
            {"id": "c1", "name": "effect", "arguments": {"n": 1}},
            {"id": "c2", "name": "effect", "arguments": {"n": 100}},
            {"id": "c3", "name": "idem", "arguments": {"n": 200}},
        ],
    },
    {"kind": "final", "text": "done"},
]


def approved(index: int) -> dict[str, agentloop.Decision]:
    """Every other run's person denies c2."""
    deny = index % 2 == 1
    return {"c2": agentloop.deny("no") if deny else agentloop.approve(), "c3": agentloop.approve()}


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def test_runs_wait_for_a_person_across_a_killed_worker(
    server: Server, tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """Runs pause on the workers; a worker is killed and restarted while they wait; decisions
    sent from this (a third) process let every run finish on the workers. This process, which
    does not launch DBOS, also cancels a waiting run and a run not started yet."""
    from dbos import DBOSClient, WorkflowHandle

    from agentloop.dbos import DBOSLoop, cancel_requested, cancel_run, decide, pending

    if store == "postgres":
        url, schema, table = request.getfixturevalue("postgres")
        worker: dict[str, Any] = {
            "db": url,
            "schema": schema,
            "sink": {"postgres": url, "table": table},
        }
        client = DBOSClient(system_database_url=url, dbos_system_schema=schema)
        # A waiting run holds its place in the queue's concurrency (8 a worker): 16 at most.
        names: tuple[str, ...] = ("a", "b")
        count = 16
    else:
        url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
        worker = {"db": url, "sink": {"file": str(tmp_path / "effects")}}
        names, count = ("a",), 8
    workers = {name: server.ask({"serve": worker | {"executor": name}})["pid"] for name in names}
    if store == "sqlite":
        client = DBOSClient(system_database_url=url)
    enqueuer = DBOSLoop(dbos_worker.loop(listen=False, policy=True), name="approving")
    run_ids = [f"ask{index}" for index in range(count)]
    try:
        for run_id in run_ids:
            enqueuer.client_enqueue(
                client, dbos_worker.QUEUE, as_input(APPROVAL_SCRIPT), run_id=run_id
            )
        for run_id in run_ids:  # every run waits, none of its batch ran
            assert [p.call_id for p in pending(run_id, timeout_seconds=60, client=client)] == [
                "c2",
                "c3",
            ]
        os.kill(workers["a"], signal.SIGKILL)
        server.ask({"reap": workers["a"]})
        workers["a"] = server.ask({"serve": worker | {"executor": "a"}})["pid"]
        waiting, early = run_ids.pop(), "early"
        assert not cancel_requested(waiting, client=client)
        cancel_run(waiting, client=client)
        cancel_run(early, client=client)  # before it is enqueued: it ends before its first step
        assert cancel_requested(waiting, client=client)
        enqueuer.client_enqueue(client, dbos_worker.QUEUE, as_input(APPROVAL_SCRIPT), run_id=early)
        for index, run_id in enumerate(run_ids):
            decide(run_id, approved(index), client=client)
        results = {
            run_id: dbos_worker.result_json(
                DBOSLoop.result(run_id, polling_interval_sec=0.05, client=client)
            )
            for run_id in [*run_ids, waiting, early]
        }
        # A worker ran the marker to its end, from DBOS's own queue.
        marker: WorkflowHandle[str] = client.retrieve_workflow(f"agentloop.cancel:{early}")
        assert marker.get_result(polling_interval_sec=0.05) == early
    finally:
        stop(server, workers, client, enqueuer)
    if store == "postgres":
        import psycopg

        with psycopg.connect(url) as connection:
            rows = connection.execute(f"SELECT kind, key FROM {table}").fetchall()
    else:
        rows = [tuple(line.split(" ")) for line in (tmp_path / "effects").read_text().splitlines()]
    effects = effects_of(rows)
    for run_id, steps in [(waiting, 1), (early, 0)]:
        cancelled = results.pop(run_id)
        assert (cancelled["status"], cancelled["steps"]) == ("cancelled", steps), run_id
        answered = [(m["id"], m["status"]) for m in cancelled["transcript"] if "status" in m]
        assert answered == ([(c, "cancelled") for c in ("c1", "c2", "c3")] if steps else []), run_id
        assert not [key for key in effects if key[1].startswith(f"{run_id}:")], run_id
    for index, run_id in enumerate(run_ids):
        plain = dbos_worker.loop(listen=False, policy=True).start(as_input(APPROVAL_SCRIPT))
        plain.finish()
        plain.decide(approved(index))
        assert results[run_id] == dbos_worker.result_json(plain.finish()), run_id
        denied = index % 2 == 1
        assert effects.get(("effect", f"{run_id}:c1")) == 1
        assert effects.get(("effect", f"{run_id}:c2"), 0) == (0 if denied else 1)
        assert effects.get(("idem", f"{run_id}:c3")) == 1


@pytest.mark.slow
def test_a_recovering_worker_makes_the_runs_deps_again(server: Server, tmp_path: Path) -> None:
    """A DBOSLoop's deps provider runs in the worker that drives the run: killed right after
    c1's effect, the run is recovered by a new process, which calls the provider again for
    the same run id; c1 is answered outcome-unknown (not idempotent), and c2, run there,
    answers with the new process's deps. Dependencies are never recorded: nothing of the
    first process's reaches the second."""
    script: list[Message] = [
        {"kind": "call", "id": "c1", "name": "stamp", "arguments": {"n": 1}},
        {"kind": "call", "id": "c2", "name": "stamp", "arguments": {"n": 2}},
        {"kind": "final", "text": "done"},
    ]
    job = sqlite_job(tmp_path, "given", script, loop="provided")
    ended = killed_and_recovered(server, job, {"effect": 1})
    lines = [line.split(" ") for line in (tmp_path / "effects").read_text().splitlines()]
    provided = [key for kind, key in lines if kind == "provided"]
    assert len(provided) == 2
    (first, first_run), (second, second_run) = (key.split(":") for key in provided)
    assert first != second
    assert first_run == second_run == "given"
    assert [(kind, key) for kind, key in lines if kind == "stamp"] == [
        ("stamp", "given:c1"),
        ("stamp", "given:c2"),
    ]
    result = ended["result"]
    assert (result["status"], result["steps"], result["calls"]) == ("finished", 3, 2)
    contents = {m["id"]: m["content"] for m in result["transcript"] if m["kind"] == "tool_result"}
    assert contents["c1"]["type"] == "OutcomeUnknown"
    assert contents["c2"] == f"{second}:given"


@pytest.mark.parametrize("kill", [{"model": 2}, {"effect": 1}], ids=["special-asked", "effect"])
def test_a_team_killed_after_its_handoff_recovers_with_the_agent_in_force(
    server: Server, tmp_path: Path, kill: dict[str, int]
) -> None:
    """A team's run killed after its handoff (inside the specialist's first ask, or right
    after its first call's effect): the recovery goes on with the specialist, asks only for
    the replies not recorded, and runs no effect twice (c2's cut one is OutcomeUnknown)."""
    script: list[Message] = [
        {"kind": "call", "id": "c1", "name": "transfer_to_special", "arguments": {}},
        {"kind": "call", "id": "c2", "name": "effect", "arguments": {"n": 1}},
        {"kind": "call", "id": "c3", "name": "idem", "arguments": {"n": 2}},
        {"kind": "final", "text": "done"},
    ]
    ended = killed_and_recovered(server, sqlite_job(tmp_path, "team", script, loop="team"), kill)
    result = ended["result"]
    assert (result["status"], result["steps"], result["calls"]) == ("finished", 4, 3)
    assert ended["agent"] == "special"
    assert ended["asked"] == (3 if "model" in kill else 2)  # the replies not recorded
    lines = (tmp_path / "effects").read_text().splitlines()
    assert sorted(lines) == ["effect team:c2", "idem team:c3"]  # each once
    contents = {m["id"]: m["content"] for m in result["transcript"] if m["kind"] == "tool_result"}
    assert contents["c1"] == {"handed_off_to": "special"}
    assert contents["c3"] == 6
    if "effect" in kill:
        assert contents["c2"]["type"] == "OutcomeUnknown"
    else:
        assert contents["c2"] == 2


# -- agents as tools: a worker killed while a child workflow's tool runs --------------------------

CHILD_SCRIPT: list[Message] = [
    {"kind": "call", "id": "k1", "name": "effect", "arguments": {"n": 1}},
    {"kind": "call", "id": "k2", "name": "idem", "arguments": {"n": 2}},
    {"kind": "final", "text": "child done"},
]
PARENT_SCRIPT: list[Message] = [
    {"kind": "call", "id": "c1", "name": "agent", "arguments": {"input": as_input(CHILD_SCRIPT)}},
    {"kind": "final", "text": "done"},
]


@pytest.mark.slow
@pytest.mark.parametrize("kill", [{"handler": 1}, {"effect": 1}])
def test_a_killed_workers_child_workflow_resumes_where_it_was(
    server: Server, tmp_path: Path, kill: dict[str, int]
) -> None:
    """The parent's agent call runs its child as a child workflow; the worker is killed
    inside the child's non-idempotent tool (before or after its effect). The next process
    recovers both: the parent gets its child's handle back, and the child goes on from its
    recorded steps (only its unrecorded replies are asked for), its cut call answered
    OutcomeUnknown, its effect at most once; the parent finishes with the child's result."""
    from dbos import DBOSClient

    job = sqlite_job(tmp_path, "boss", PARENT_SCRIPT, loop="parent")
    url = job["db"]
    ended = killed_and_recovered(server, job, kill)
    # Recorded before the kill: the parent's first reply and the child's; not asked again.
    assert ended["asked"] == 3
    got = ended["result"]
    assert (got["status"], got["steps"], got["calls"]) == ("finished", 2, 1)
    assert [(m["id"], m["status"], m["content"]) for m in got["transcript"] if "status" in m] == [
        ("c1", "ok", "child done")
    ]
    sink = tmp_path / "effects"
    lines = sink.read_text().splitlines() if sink.exists() else []
    assert lines == ([] if "handler" in kill else ["effect boss:c1:k1"]) + ["idem boss:c1:k2"]
    client = DBOSClient(system_database_url=url)
    try:
        child: agentloop.RunResult = client.retrieve_workflow("boss:c1").get_result()
        status = client.retrieve_workflow("boss:c1").get_status()
    finally:
        client.destroy()
    assert (child.status, child.steps, child.calls) == ("finished", 3, 2)
    results = {m["id"]: m for m in child.transcript if m["kind"] == "tool_result"}
    assert results["k1"]["content"]["type"] == "OutcomeUnknown"
    assert (results["k2"]["status"], results["k2"]["content"]) == ("ok", 6)
    assert status.parent_workflow_id == "boss"


@pytest.mark.slow
def test_a_parents_cancellation_reaches_its_child_across_a_killed_worker(
    server: Server, tmp_path: Path
) -> None:
    """Killed inside the child's second ask, then cancel_run of the parent from this process
    (a client): the recovered child takes the reply and, at the checkpoint right after it,
    reads its parent's marker and ends cancelled; the parent's call is answered cancelled,
    and the parent ends cancelled. The child's first call's effect happened once."""
    from dbos import DBOSClient

    from agentloop.dbos import cancel_run

    job = sqlite_job(tmp_path, "doomed", PARENT_SCRIPT, loop="parent")
    url = job["db"]
    # The parent's first ask, then the child's first and second: killed in the third.
    ended = server.job(job | {"mode": "start", "kill": {"model": 3}})
    assert ended.get("signal") == signal.SIGKILL, ended
    client = DBOSClient(system_database_url=url)
    try:
        cancel_run("doomed", client=client)
        ended = server.job(job | {"mode": "recover"})
        child: agentloop.RunResult = client.retrieve_workflow("doomed:c1").get_result()
    finally:
        client.destroy()
    got = ended["result"]
    assert (got["status"], got["steps"], got["calls"]) == ("cancelled", 1, 1)
    assert [(m["id"], m["status"]) for m in got["transcript"] if "status" in m] == [
        ("c1", "cancelled")
    ]
    assert (child.status, child.steps, child.calls) == ("cancelled", 2, 1)
    assert [(m["id"], m["status"]) for m in child.transcript if "status" in m] == [("k1", "ok")]
    assert ended["asked"] == 1  # the child's second ask, whose reply the cancel rejected
    assert (tmp_path / "effects").read_text().splitlines() == ["effect doomed:c1:k1"]


# -- approval inside a child workflow: the worker killed while the child waits ---------------------

ASKING_CHILD: list[Message] = [
    {"kind": "call", "id": "k1", "name": "effect", "arguments": {"n": 1}},
    {"kind": "call", "id": "k2", "name": "effect", "arguments": {"n": 200}},  # asks a person
    {"kind": "final", "text": "child done"},
]
ASKING_PARENT: list[Message] = [
    {"kind": "call", "id": "c1", "name": "agent", "arguments": {"input": as_input(ASKING_CHILD)}},
    {"kind": "final", "text": "done"},
]


@pytest.mark.slow
def test_a_child_waiting_for_a_person_outlives_its_killed_worker(
    server: Server, tmp_path: Path
) -> None:
    """A worker drives the parent, whose child's second call waits for a person; the worker
    is killed while it waits. From this process (a client), the parent lists the child's
    call under its path and takes the decision, sent while no worker is alive; the worker
    restarted recovers the tree, the child runs the approved call and finishes, and the
    parent finishes with the child's output. Each effect happened once."""
    from dbos import DBOSClient

    from agentloop.dbos import DBOSLoop, decide, pending

    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    worker = {"db": url, "sink": {"file": str(tmp_path / "effects")}, "executor": "a"}
    workers = {"a": server.ask({"serve": worker})["pid"]}
    client = DBOSClient(system_database_url=url)
    enqueuer = DBOSLoop(dbos_worker.parent(policy=True), name="asking_parent")
    effects = tmp_path / "effects"
    try:
        enqueuer.client_enqueue(client, dbos_worker.QUEUE, as_input(ASKING_PARENT), run_id="boss")
        (waiting,) = pending("boss", timeout_seconds=60, client=client)
        assert (waiting.key, waiting.arguments) == (("c1", "k2"), {"n": 200})
        os.kill(workers["a"], signal.SIGKILL)
        server.ask({"reap": workers.pop("a")})
        assert effects.read_text().splitlines() == ["effect boss:c1:k1"]
        # Sent while no worker is alive: kept in the database for the child's wait.
        decide("boss", {waiting.key: waiting.approve()}, client=client)
        workers["a"] = server.ask({"serve": worker})["pid"]
        got = dbos_worker.result_json(
            DBOSLoop.result("boss", polling_interval_sec=0.05, client=client)
        )
        child: agentloop.RunResult = client.retrieve_workflow("boss:c1").get_result()
        assert pending("boss", client=client) == ()
    finally:
        stop(server, workers, client, enqueuer)
    plain = dbos_worker.parent(policy=True).start(as_input(ASKING_PARENT))
    plain.finish()
    plain.decide({("c1", "k2"): agentloop.approve()})
    expected = plain.finish()
    assert got == dbos_worker.result_json(expected)
    assert (got["status"], got["steps"], got["calls"]) == ("finished", 2, 1)
    assert [(m["id"], m["status"], m["content"]) for m in got["transcript"] if "status" in m] == [
        ("c1", "ok", "child done")
    ]
    assert dbos_worker.result_json(child) == dbos_worker.result_json(expected.children["c1"])
    assert [(m["id"], m["status"]) for m in child.transcript if "status" in m] == [
        ("k1", "ok"),
        ("k2", "ok"),
    ]
    assert effects.read_text().splitlines() == ["effect boss:c1:k1", "effect boss:c1:k2"]


@pytest.mark.slow
def test_a_specialists_child_workflow_killed_in_its_tool_recovers_with_the_agent_in_force(
    server: Server, tmp_path: Path
) -> None:
    """A team's run hands off to a specialist whose agent call's child runs as a child
    workflow; the worker is killed right after the child's non-idempotent effect. The next
    process recovers both: the parent goes on with the specialist (its agent tool's
    DBOSLoop, f"team_parent/special/agent", drives the child), the child's cut call is
    OutcomeUnknown, every effect ran at most once, and the specialist finishes."""
    script: list[Message] = [
        {"kind": "call", "id": "c1", "name": "transfer_to_special", "arguments": {}},
        {
            "kind": "call",
            "id": "c2",
            "name": "agent",
            "arguments": {"input": as_input(CHILD_SCRIPT)},
        },
        {"kind": "final", "text": "done"},
    ]
    job = sqlite_job(tmp_path, "desk", script, loop="team_parent")
    ended = killed_and_recovered(server, job, {"effect": 1})
    assert ended["agent"] == "special"
    assert ended["asked"] == 3  # the child's last two replies and the specialist's final
    got = ended["result"]
    assert (got["status"], got["steps"], got["calls"]) == ("finished", 3, 2)
    assert [(m["id"], m["status"], m["content"]) for m in got["transcript"] if "status" in m] == [
        ("c1", "ok", {"handed_off_to": "special"}),
        ("c2", "ok", "child done"),
    ]
    lines = (tmp_path / "effects").read_text().splitlines()
    assert lines == ["effect desk:c2:k1", "idem desk:c2:k2"]  # each once


@pytest.mark.slow
def test_a_fork_killed_right_after_forking_its_child_wakes_it_when_recovered(
    server: Server, tmp_path: Path
) -> None:
    """The parent's child waits for a person when its worker is killed. From this process
    the fork "fk" of the parent (from after the child's start) is cancelled, then made;
    a worker takes it and is killed right after its wait forked "fk:c1" from the waiting
    child, before it woke it. The next worker recovers the fork: its wait finds its child
    made and wakes it, so the child ends cancelled (its waiting call never run) and so
    does the fork, while the original waits on, untouched."""
    from dbos import DBOSClient, SetWorkflowID

    from agentloop.dbos import DBOSLoop, cancel_run, pending

    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    worker = {"db": url, "sink": {"file": str(tmp_path / "effects")}, "executor": "a"}
    workers = {"a": server.ask({"serve": worker})["pid"]}
    client = DBOSClient(system_database_url=url)
    enqueuer = DBOSLoop(dbos_worker.parent(policy=True), name="asking_parent")
    try:
        enqueuer.client_enqueue(client, dbos_worker.QUEUE, as_input(ASKING_PARENT), run_id="boss")
        (waiting,) = pending("boss", timeout_seconds=60, client=client)
        os.kill(workers["a"], signal.SIGKILL)
        server.ask({"reap": workers.pop("a")})
        start = client.list_workflow_steps("boss")[-1]["function_id"] + 1
        cancel_run("fk", client=client)  # nothing below the fork yet: nothing to wake
        with SetWorkflowID("fk"):
            client.fork_workflow("boss", start)
        job = sqlite_job(tmp_path, "fk", ASKING_PARENT, loop="asking_parent", mode="recover")
        ended = server.job(job | {"kill": {"forked": 1}})
        assert ended.get("signal") == signal.SIGKILL, ended
        assert client.retrieve_workflow("fk:c1").get_status().status in ("PENDING", "ENQUEUED")
        ended = server.job(job | {"within": 30})
        assert "result" in ended, ended
        child: agentloop.RunResult = client.retrieve_workflow("fk:c1").get_result()
        assert pending("boss", client=client) == (waiting,)
    finally:
        stop(server, workers, client, enqueuer)
    got = ended["result"]
    assert [(m["id"], m["status"]) for m in got["transcript"] if "status" in m] == [
        ("c1", "cancelled")
    ]
    assert (got["status"], child.status) == ("cancelled", "cancelled")
    assert [(m["id"], m["status"]) for m in child.transcript if "status" in m] == [
        ("k1", "ok"),
        ("k2", "cancelled"),
    ]
    assert (tmp_path / "effects").read_text().splitlines() == ["effect boss:c1:k1"]
