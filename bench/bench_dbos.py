"""DBOS runs: what a model step costs beside pydantic-ai's DBOSAgent, and what bounds throughput.

Needs a Postgres URL in ``AGENTLOOP_TEST_POSTGRES`` (``.ci/postgres`` prints
one; docs/dbos.md says how); without one it says so and stops. Each part
uses a fresh DBOS system schema, dropped afterwards.

1. Per model step, side by side in this process on one Postgres: a scripted
   model, K tool calls one after another (K + 1 model steps), then a final
   answer, at K = 1 and K = 10; ``agentloop.dbos`` against pydantic-ai's
   ``DBOSAgent`` (``run_sync``) with its tool as a DBOS step, alternating run
   by run. Reported: the process's CPU time and the wall time per model step
   (each as the median of the paired ratios), and, counted on DBOS's own
   database engine, the transactions committed, the statements sent and the
   connection checkouts (each a ping) per model step, and the DBOS steps per
   model step. The peer is optional: without pydantic-ai (``pip install
   'pydantic-ai-slim[dbos]'``) only agentloop's numbers are printed.
   Targets: CPU per model step at most 0.8x the peer's at K = 1 and K = 10;
   DBOS steps per model step at most 2.5 (K = 1) and 2.9 (K = 10).
2. I/O-bound runs: a model that waits 100 ms a reply (K = 1: two replies, so
   a run waits 200 ms), 160 runs enqueued, served by one worker process at
   worker concurrency 1, 8 and 32, and by 1, 2 and 4 worker processes at
   concurrency 8; runs per second, and the workers' CPU per run. Target: one
   worker at concurrency 32 completes at least 20x the runs per second of
   concurrency 1.
3. CPU-bound runs (the model answers at once; K = 3): runs per second with 1,
   2 and 4 worker processes (concurrency 8 each), against the SQLite ledger
   in one process.

Reported only (but the targets, which are checked and printed): the numbers
are the machine's and its Postgres's (every step is a commit, and Postgres
syncs each to disk).
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentloop import Loop, SQLiteLedger

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

Message = dict[str, Any]
QUEUE = "agentloop-bench"
URL = os.environ.get("AGENTLOOP_TEST_POSTGRES")
CPU_TARGET = 0.8
STEPS_TARGET = {1: 2.5, 10: 2.9}
CONCURRENCY_TARGET = 20.0
SLEEP = 0.1  # the I/O-bound model's wait per reply


class Echo:
    """The cheapest dispatcher, so the bench measures the recording."""

    def dispatch(self, call: Message) -> Message:
        return {"status": "ok", "content": call["arguments"]}


def scripted(k: int, sleep: float = 0.0) -> Callable[[list[Message]], Message]:
    """k calls one after another, then a final answer; ``sleep`` seconds a reply."""

    def model(history: list[Message]) -> Message:
        if sleep:
            time.sleep(sleep)
        done = (len(history) - 1) // 2
        if done < k:
            return {"kind": "call", "id": f"c{done}", "name": "echo", "arguments": {"n": done}}
        return {"kind": "final", "text": "ok"}

    return model


def loop(k: int, ledger: SQLiteLedger | None = None, sleep: float = 0.0) -> Loop:
    return Loop(scripted(k, sleep), tools=Echo(), max_steps=k + 1, max_calls=k, ledger=ledger)


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


@contextlib.contextmanager
def launched(schema: str, executor: str = "bench") -> Iterator[None]:
    from dbos import DBOS

    DBOS(config=config(schema, executor))
    DBOS.launch()
    try:
        yield
    finally:
        DBOS.destroy(workflow_completion_timeout_sec=0)
        drop(schema)


# -- 1. per model step, beside pydantic-ai's DBOSAgent ----------------------------------------


class Counts:
    """Transactions committed, statements sent and connections checked out, on DBOS's engine."""

    def __init__(self) -> None:
        from dbos._dbos import _get_dbos_instance  # the bench reaches in; the library does not
        from sqlalchemy import event

        self.commits = self.statements = self.checkouts = 0
        engine = _get_dbos_instance()._sys_db.engine

        def commit(*_: Any) -> None:
            self.commits += 1

        def statement(*_: Any) -> None:
            self.statements += 1

        def checkout(*_: Any) -> None:
            self.checkouts += 1

        event.listen(engine, "commit", commit)
        event.listen(engine, "before_cursor_execute", statement)
        event.listen(engine.pool, "checkout", checkout)

    def now(self) -> tuple[int, int, int]:
        return self.commits, self.statements, self.checkouts


def cpu() -> float:
    """This process's CPU time (every thread: the workflow's and DBOS's own)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peer_agent(k: int) -> Any:
    """pydantic-ai's DBOSAgent, its model scripted as ours, its tool a DBOS step; or None."""
    try:
        from dbos import DBOS
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.models.function import FunctionModel

        with warnings.catch_warnings():  # DBOSAgent is deprecated for DBOSDurability
            warnings.simplefilter("ignore")
            from pydantic_ai.durable_exec.dbos import DBOSAgent
    except ImportError:
        return None

    def reply(messages: list[Any], info: Any) -> Any:
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if done < k:
            return ModelResponse(parts=[ToolCallPart("echo", {"n": done}, tool_call_id=f"c{done}")])
        return ModelResponse(parts=[TextPart("ok")])

    @DBOS.step(name=f"peer{k}.echo")
    def echo(n: int) -> dict[str, int]:
        """Echo n."""
        return {"n": n}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DBOSAgent(Agent(FunctionModel(reply), name=f"peer{k}", tools=[echo]))


def steps_of(run_id: str) -> int:
    """The DBOS steps of a workflow and of its children (each child once)."""
    from dbos import DBOS

    steps = DBOS.list_workflow_steps(run_id)
    children = {step["child_workflow_id"] for step in steps} - {None}
    return len(steps) + sum(steps_of(child) for child in children)


def side_by_side(ks: tuple[int, ...], runs: int) -> dict[int, dict[str, dict[str, float]]]:
    """Per model step, for agentloop and the peer (if installed), at each K."""
    from dbos import SetWorkflowID

    from agentloop.dbos import DBOSLoop

    schema = f"agentloop_bench_{uuid.uuid4().hex[:8]}"
    ours = {k: DBOSLoop(loop(k), name=f"bench{k}") for k in ks}
    peers = {k: peer_agent(k) for k in ks}
    found: dict[int, dict[str, dict[str, float]]] = {}
    try:
        with launched(schema):
            counts = Counts()

            def one(k: int, who: str) -> tuple[float, ...]:
                run_id = uuid.uuid4().hex
                c0, w0, n0 = cpu(), time.perf_counter(), counts.now()
                if who == "agentloop":
                    assert ours[k].run("go", run_id=run_id).output == "ok"
                else:
                    with SetWorkflowID(run_id):
                        assert peers[k].run_sync("go").output == "ok"
                c1, w1, n1 = cpu(), time.perf_counter(), counts.now()
                per = k + 1
                return (
                    (c1 - c0) / per * 1e6,
                    (w1 - w0) / per * 1e6,
                    *((b - a) / per for a, b in zip(n0, n1, strict=True)),
                    steps_of(run_id) / per,
                )

            for k in ks:
                who = ["agentloop"] + (["peer"] if peers[k] is not None else [])
                for name in who:  # warm up: imports, caches, prepared connections
                    one(k, name)
                samples: dict[str, list[tuple[float, ...]]] = {name: [] for name in who}
                for _ in range(runs):
                    for name in who:
                        samples[name].append(one(k, name))
                fields = ("cpu_us", "wall_us", "commits", "statements", "checkouts", "steps")
                found[k] = {
                    name: {
                        field: statistics.median(s[i] for s in samples[name])
                        for i, field in enumerate(fields)
                    }
                    for name in who
                }
                if "peer" in who:  # paired: each of our runs against the peer's next one
                    for field in ("cpu_us", "wall_us"):
                        i = fields.index(field)
                        found[k]["ratio"] = found[k].get("ratio", {}) | {
                            field: statistics.median(
                                a[i] / b[i]
                                for a, b in zip(samples["agentloop"], samples["peer"], strict=True)
                            )
                        }
    finally:
        for each in ours.values():
            each.close()
    return found


# -- 2. and 3. runs per second with worker processes ----------------------------------------


def worker(schema: str, executor: str, concurrency: int, k: int, sleep: float) -> None:
    """A worker process: serves the queue until its stdin closes; then prints its CPU time."""
    from dbos import DBOS

    from agentloop.dbos import DBOSLoop

    DBOSLoop(loop(k, sleep=sleep), name="bench")
    DBOS(config=config(schema, executor))
    DBOS.launch()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=0.01)
    began = cpu()
    print("ready", flush=True)
    sys.stdin.read()
    print(cpu() - began, flush=True)
    DBOS.destroy(workflow_completion_timeout_sec=0)


def throughput(
    workers: int, concurrency: int, runs: int, k: int, sleep: float
) -> tuple[float, float]:
    """Runs completed per second by ``workers`` processes, first enqueue to last result;
    and the workers' CPU seconds per run."""
    from dbos import DBOSClient

    from agentloop.dbos import DBOSLoop

    schema = f"agentloop_bench_{uuid.uuid4().hex[:8]}"
    command = [sys.executable, __file__, "worker", schema]
    processes = [
        subprocess.Popen(
            [*command, f"w{index}", str(concurrency), str(k), str(sleep)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(workers)
    ]
    enqueuer = DBOSLoop(loop(k), name="bench")
    spent = 0.0
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready"
        client = DBOSClient(system_database_url=URL, dbos_system_schema=schema)
        began = time.perf_counter()
        handles = [enqueuer.client_enqueue(client, QUEUE, "go") for _ in range(runs)]
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
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            spent += float(line) if line else 0.0
            process.wait(timeout=60)
            process.stdout.close()
        drop(schema)
    return runs / took, spent / runs


def sqlite_throughput(runs: int, k: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        ledgered = loop(k, SQLiteLedger(Path(directory) / "runs.db", synchronous="NORMAL"))
        began = time.perf_counter()
        for _ in range(runs):
            assert ledgered.run("go").output == "ok"
        return runs / (time.perf_counter() - began)


def main() -> int:
    if not URL:
        print("skipped: no Postgres (set AGENTLOOP_TEST_POSTGRES to a URL; docs/dbos.md says how)")
        return 0
    failed = False
    ks = (1, 10)
    found = side_by_side(ks, runs=int(os.environ.get("AGENTLOOP_BENCH_RUNS", "30")))
    print("per model step (K calls one after another, then a final answer; medians):")
    print(
        f"  {'':<14}{'K':>3} {'CPU µs':>8} {'wall µs':>8} {'commits':>8} "
        f"{'statements':>10} {'checkouts':>9} {'DBOS steps':>10}"
    )
    for k in ks:
        for name, got in found[k].items():
            if name == "ratio":
                continue
            print(
                f"  {name:<14}{k:>3} {got['cpu_us']:8.0f} {got['wall_us']:8.0f} "
                f"{got['commits']:8.2f} {got['statements']:10.2f} {got['checkouts']:9.2f} "
                f"{got['steps']:10.2f}"
            )
        steps = found[k]["agentloop"]["steps"]
        if steps > STEPS_TARGET[k]:
            failed = True
            print(f"  MISSED: {steps:.2f} DBOS steps per model step at K={k} (target <= {STEPS_TARGET[k]})")
    if all("ratio" in found[k] for k in ks):
        print("agentloop.dbos / DBOSAgent, paired per run (median):")
        for k in ks:
            ratio = found[k]["ratio"]
            mark = "" if ratio["cpu_us"] <= CPU_TARGET else f"  MISSED (target <= {CPU_TARGET})"
            failed |= bool(mark)
            print(f"  K={k:<3} CPU {ratio['cpu_us']:.2f}x   wall {ratio['wall_us']:.2f}x{mark}")
    else:
        print("pydantic-ai is not installed: no side-by-side ratio (pip install 'pydantic-ai-slim[dbos]')")

    runs = int(os.environ.get("AGENTLOOP_BENCH_IO_RUNS", "160"))
    print(f"I/O-bound: {runs} runs, a model waiting {SLEEP * 1000:.0f} ms a reply, 2 replies a run:")
    print(f"  {'workers':>7} {'concurrency':>11} {'runs/s':>8} {'worker CPU ms/run':>18}")
    rates: dict[tuple[int, int], float] = {}
    for workers, concurrency in ((1, 1), (1, 8), (1, 32), (2, 8), (4, 8)):
        count = min(runs, 20) if concurrency == 1 else runs
        rate, spent = throughput(workers, concurrency, count, 1, SLEEP)
        rates[workers, concurrency] = rate
        print(f"  {workers:>7} {concurrency:>11} {rate:8.1f} {spent * 1000:18.1f}")
    gain = rates[1, 32] / rates[1, 1]
    mark = "" if gain >= CONCURRENCY_TARGET else f"  MISSED (target >= {CONCURRENCY_TARGET:.0f}x)"
    failed |= bool(mark)
    print(f"  one worker, concurrency 32 against 1: {gain:.1f}x{mark}")

    print(f"CPU-bound: {runs} runs of 3 calls, the model answering at once:")
    print(f"  SQLite ledger, 1 process               {sqlite_throughput(runs, 3):8.1f} runs/s")
    for workers in (1, 2, 4):
        rate, spent = throughput(workers, 8, runs, 3, 0.0)
        print(
            f"  DBOS, {workers} worker(s), concurrency 8      {rate:8.1f} runs/s"
            f"  ({spent * 1000:.1f} worker CPU ms/run)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        schema, executor, concurrency, k, sleep = sys.argv[2:7]
        worker(schema, executor, int(concurrency), int(k), float(sleep))
        sys.exit(0)
    sys.exit(main())
