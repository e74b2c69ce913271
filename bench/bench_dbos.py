"""DBOS runs: what a step costs, and runs completed per second with 1, 2 and 4 workers.

Needs a Postgres URL in ``AGENTLOOP_TEST_POSTGRES`` (``.ci/run`` sets one; the
README says how to start Postgres locally); without one it says so and stops.
Each part uses a fresh DBOS system schema, dropped afterwards.

1. µs per model step, one run after another in this process: a run without
   a ledger (in memory), with ``SQLiteLedger`` (``NORMAL`` and ``FULL``), and
   as a DBOS workflow on Postgres. Each run has K = 3 calls (4 model steps;
   DBOS records 11 steps: begin, 4 replies, 3 x tool_started and tool). The
   difference per model step is the overhead DBOS adds. Median of the repeats.
2. Runs completed per second: 200 runs enqueued (``DBOSLoop.client_enqueue``)
   on a queue served by 1, 2 and 4 worker processes (worker concurrency 8
   each), from the first enqueue to the last result; against the same runs on
   the SQLite ledger (``NORMAL``), one after another in one process.

Reported only: the numbers are the machine's and its Postgres's (every step
is a commit, and Postgres syncs each to disk).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agentloop import Loop, SQLiteLedger

Message = dict[str, Any]
K = 3
RUNS = 200
QUEUE = "agentloop-bench"
URL = os.environ.get("AGENTLOOP_TEST_POSTGRES")


class Echo:
    """The cheapest dispatcher, so the bench measures the recording."""

    def dispatch(self, call: Message) -> Message:
        return {"status": "ok", "content": call["arguments"]}


def model(history: list[Message]) -> Message:
    done = (len(history) - 1) // 2
    if done < K:
        return {"kind": "call", "id": f"c{done}", "name": "echo", "arguments": {"n": done}}
    return {"kind": "final", "text": "ok"}


def loop(ledger: SQLiteLedger | None = None) -> Loop:
    return Loop(model, tools=Echo(), max_steps=K + 1, max_calls=K, ledger=ledger)


def config(schema: str, executor: str) -> Any:
    return {
        "name": "agentloop-bench",
        "system_database_url": URL,
        "dbos_system_schema": schema,
        "executor_id": executor,
        "log_level": "WARNING",
    }


def drop(schema: str) -> None:
    import psycopg

    assert URL is not None
    with psycopg.connect(URL, autocommit=True) as connection:
        connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


# -- 1. per step -------------------------------------------------------------------------------


def per_step(repeats: int, runs: int) -> dict[str, float]:
    """Median µs per model step of runs one after another: memory, SQLite, DBOS."""
    from dbos import DBOS

    from agentloop.dbos import DBOSLoop

    schema = f"agentloop_bench_{uuid.uuid4().hex[:8]}"
    steps = (K + 1) * runs
    found: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as directory:
        loops = {
            "memory": loop(),
            "sqlite NORMAL": loop(SQLiteLedger(Path(directory) / "n.db", synchronous="NORMAL")),
            "sqlite FULL": loop(SQLiteLedger(Path(directory) / "f.db", synchronous="FULL")),
        }
        dbos_loop = DBOSLoop(loop(), name="bench")
        DBOS(config=config(schema, "bench"))
        DBOS.launch()
        try:
            for _ in range(repeats):
                for name, each in loops.items():
                    began = time.perf_counter()
                    for _ in range(runs):
                        each.run("go")
                    found.setdefault(name, []).append((time.perf_counter() - began) / steps)
                began = time.perf_counter()
                for _ in range(runs):
                    dbos_loop.run("go")
                found.setdefault("dbos postgres", []).append((time.perf_counter() - began) / steps)
        finally:
            DBOS.destroy(workflow_completion_timeout_sec=0)
            dbos_loop.close()
            drop(schema)
    return {name: statistics.median(times) * 1e6 for name, times in found.items()}


# -- 2. runs per second with worker processes ---------------------------------------------


def worker(schema: str, executor: str) -> None:
    """A worker process: serves the queue until its stdin closes."""
    from dbos import DBOS

    from agentloop.dbos import DBOSLoop

    DBOSLoop(loop(), name="bench")
    DBOS(config=config(schema, executor))
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=8, polling_interval_sec=0.01)
    print("ready", flush=True)
    sys.stdin.read()
    DBOS.destroy(workflow_completion_timeout_sec=0)


def throughput(workers: int) -> float:
    """Runs completed per second by ``workers`` processes, first enqueue to last result."""
    from dbos import DBOSClient

    from agentloop.dbos import DBOSLoop

    schema = f"agentloop_bench_{uuid.uuid4().hex[:8]}"
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "worker", schema, f"w{index}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(workers)
    ]
    enqueuer = DBOSLoop(loop(), name="bench")
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        client = DBOSClient(system_database_url=URL, dbos_system_schema=schema)
        began = time.perf_counter()
        handles = [enqueuer.client_enqueue(client, QUEUE, "go") for _ in range(RUNS)]
        for handle in handles:
            assert handle.get_result(polling_interval_sec=0.01).output == "ok"
        took = time.perf_counter() - began
        client.destroy()
    finally:
        enqueuer.close()
        for process in processes:
            assert process.stdin is not None
            process.stdin.close()
        for process in processes:
            process.wait(timeout=60)
            assert process.stdout is not None
            process.stdout.close()
        drop(schema)
    return RUNS / took


def sqlite_throughput() -> float:
    with tempfile.TemporaryDirectory() as directory:
        ledgered = loop(SQLiteLedger(Path(directory) / "runs.db", synchronous="NORMAL"))
        began = time.perf_counter()
        for _ in range(RUNS):
            assert ledgered.run("go").output == "ok"
        return RUNS / (time.perf_counter() - began)


def main() -> int:
    if not URL:
        print("skipped: no Postgres (set AGENTLOOP_TEST_POSTGRES to a URL; the README says how)")
        return 0
    costs = per_step(repeats=3, runs=20)
    print(f"µs per model step (K = {K} calls a run, runs one after another, median of 3):")
    for name, cost in costs.items():
        print(f"  {name:<14} {cost:9.0f}")
    memory = costs["memory"]
    print(
        f"  DBOS adds {costs['dbos postgres'] - memory:.0f} µs per model step over memory, "
        f"{costs['dbos postgres'] - costs['sqlite NORMAL']:.0f} over the SQLite ledger (NORMAL), "
        f"{costs['dbos postgres'] - costs['sqlite FULL']:.0f} over FULL"
    )
    print(f"runs completed per second ({RUNS} runs of {K} calls):")
    print(f"  SQLite ledger, 1 process      {sqlite_throughput():7.1f}")
    for workers in (1, 2, 4):
        print(f"  DBOS, {workers} worker process(es)   {throughput(workers):7.1f}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2], sys.argv[3])
        sys.exit(0)
    sys.exit(main())
