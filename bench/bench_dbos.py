"""DBOS runs: what a model step costs beside pydantic-ai's DBOSAgent, and what bounds throughput.

Needs a Postgres URL in ``AGENTLOOP_TEST_POSTGRES`` (``.ci/postgres`` prints
one; docs/dbos.md says how); without one it says so and stops. Each part
uses a fresh DBOS system schema, dropped afterwards.

1. Per model step, side by side in this process on one Postgres: a scripted
   model, K tool calls one after another (K + 1 model steps), then a final
   answer, at K = 1 and K = 10; ``agentloop.dbos`` against pydantic-ai's
   ``DBOSAgent`` (``run_sync``) with its tool as a DBOS step, alternating run
   by run. Reported: the process's CPU time and the wall time per model step
   (medians, and the medians of the paired ratios), and, counted on DBOS's own
   database engine, the transactions, statements, pings (one a connection
   checkout) and round trips per model step, and the DBOS steps per model
   step. The peer is optional (``make bench`` installs it: the ``bench``
   group); without pydantic-ai only agentloop's numbers are printed.
   Targets: CPU per model step at most 0.8x the peer's at K = 1 and K = 10;
   DBOS steps per model step at most 2.5 (K = 1) and 2.9 (K = 10).
2. I/O-bound runs: a model that waits 100 ms a reply (K = 1: two replies, so
   a run waits 200 ms), enqueued (20 runs at concurrency 1, about 15 a slot
   otherwise, from 160 to 960), then served by one worker process at worker
   concurrency 1, 8, 32 and 64, and by 2 and 4 at concurrency 8 and 32:
   runs per second; the workers' CPU per run, and the cores they kept busy;
   how busy the machine's cores were (theirs, Postgres's, anyone's); the
   machine's load average as the row ended. Target (issue 38, what scales
   out): two workers at concurrency 32 complete at least 20x the runs per
   second of one worker at concurrency 1. One worker at concurrency 32 is
   bounded by DBOS's own steps (about 80% of its CPU): it is measured in turn
   beside DBOS alone (a workflow of the same three steps with nothing in
   them: what any driver of such runs costs at the least), DBOS alone as an
   ``async def`` workflow (its steps ``run_step_async``, the model's wait an
   ``asyncio.sleep``: whether DBOS's async workflows lift a worker's
   ceiling) and (with pydantic-ai installed) the peer's ``run_sync``
   workflows, one worker at concurrency 1 and 32 each; each with its runs
   per CPU-second (the worker's CPU seconds per run, inverted).
3. CPU-bound runs (the model answers at once; K = 3): runs per second with 1,
   2 and 4 worker processes (concurrency 8 each), against the SQLite ledger
   in one process.

``AGENTLOOP_BENCH_PARTS`` (default ``123``) picks the parts.
Reported only (but the targets, which are checked and printed): the numbers
are the machine's and its Postgres's (every step is a commit, and Postgres
syncs each to disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
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

from targets import verdict

from agentloop import Loop
from agentloop.ledger import SQLiteLedger

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

Message = dict[str, Any]
QUEUE = "agentloop-bench"
URL = os.environ.get("AGENTLOOP_TEST_POSTGRES")
CPU_TARGET = 0.8
STEPS_TARGET = {1: 2.5, 10: 2.9}
CONCURRENCY_TARGET = 20.0
SLEEP = 0.1  # the I/O-bound model's wait per reply
# (workers, worker concurrency) of the I/O-bound part
SHAPES = ((1, 1), (1, 8), (1, 32), (1, 64), (2, 8), (4, 8), (2, 32), (4, 32))


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
    """On DBOS's engine: transactions (each a BEGIN, then a COMMIT or ROLLBACK), statements,
    and connection checkouts (each pinged). Round trips: the statements, the pings, and two
    a transaction (checked against Postgres's statement log)."""

    def __init__(self) -> None:
        from dbos._dbos import _get_dbos_instance  # the bench reaches in; the library does not
        from sqlalchemy import event

        self.txns = self.statements = self.checkouts = 0
        engine = _get_dbos_instance()._sys_db.engine

        def ended(connection: Any) -> None:
            # A connection in AUTOCOMMIT sends neither BEGIN nor COMMIT/ROLLBACK.
            if connection.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
                self.txns += 1

        def statement(*_: Any) -> None:
            self.statements += 1

        def checkout(*_: Any) -> None:
            self.checkouts += 1

        # agentloop reads its cancel marker on the driver's connection, past SQLAlchemy's
        # events: one statement a read (its checkout is the pool's, counted below).
        from agentloop._dbos import marker

        read = marker._exists_on_postgres

        def marker_read(*args: Any) -> bool:
            self.statements += 1
            return read(*args)

        marker._exists_on_postgres = marker_read  # type: ignore[assignment]
        event.listen(engine, "commit", ended)
        event.listen(engine, "rollback", ended)
        event.listen(engine, "before_cursor_execute", statement)
        event.listen(engine.pool, "checkout", checkout)

    def now(self) -> tuple[int, int, int]:
        return self.txns, self.statements, self.checkouts


def machine() -> tuple[float, float]:
    """The machine's busy and total CPU seconds so far, every core (Linux; zeros elsewhere)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0, 0.0
    ticks = [int(field) for field in fields]
    total = sum(ticks[:8])  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + ticks[4]
    hz = os.sysconf("SC_CLK_TCK")
    return (total - idle) / hz, total / hz


def cpu() -> float:
    """This process's CPU time (every thread: the workflow's and DBOS's own)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peer_agent(k: int, sleep: float = 0.0) -> Any:
    """pydantic-ai's DBOSAgent, its model scripted as ours, its tool a DBOS step; or None.

    Its ``run_sync`` workflow is named ``peer{k}.run_sync``; ``sleep`` seconds a reply."""
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
        if sleep:
            time.sleep(sleep)
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
    children = {step["child_workflow_id"] for step in steps if step["child_workflow_id"]}
    return len(steps) + sum(steps_of(str(child)) for child in children)


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
                fields = ("cpu_us", "wall_us", "txns", "statements", "checkouts", "steps")
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


def floor_workflow() -> None:
    """Registers DBOS alone: the steps of a run of one call (two that wait as the model does),
    with nothing in them: what any driver of such runs on DBOS costs at the least."""
    from dbos import DBOS

    def reply(sleep: float) -> Message:
        time.sleep(sleep)
        return {"kind": "final", "text": "ok"}

    def outcome() -> Message:
        return {"status": "ok", "content": {"n": 0}}

    @DBOS.workflow(name="bench.floor")
    def floor(prompt: str, sleep: float) -> str:
        DBOS.run_step({"name": "bench.model"}, reply, sleep)
        DBOS.run_step({"name": "bench.tool"}, outcome)
        DBOS.run_step({"name": "bench.model"}, reply, sleep)
        return "ok"

    async def areply(sleep: float) -> Message:
        await asyncio.sleep(sleep)
        return {"kind": "final", "text": "ok"}

    @DBOS.workflow(name="bench.floor_async")
    async def floor_async(prompt: str, sleep: float) -> str:
        await DBOS.run_step_async({"name": "bench.model"}, areply, sleep)
        await DBOS.run_step_async({"name": "bench.tool"}, outcome)
        await DBOS.run_step_async({"name": "bench.model"}, areply, sleep)
        return "ok"


def worker(who: str, schema: str, executor: str, concurrency: int, k: int, sleep: float) -> None:
    """A worker process of ``who``'s runs (``agentloop``, ``peer``, or DBOS alone: ``dbos``,
    ``dbos-async``):
    launched, it serves the queue from a "go" line until its stdin closes, then prints the CPU
    seconds it spent serving."""
    from dbos import DBOS

    from agentloop.dbos import DBOSLoop

    if who == "peer":
        peer_agent(k, sleep)
    elif who in ("dbos", "dbos-async"):
        floor_workflow()
    else:
        DBOSLoop(loop(k, sleep=sleep), name="bench")
    DBOS(config=config(schema, executor))
    DBOS.launch()
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    began = cpu()
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=0.01)
    sys.stdin.read()
    print(cpu() - began, flush=True)
    DBOS.destroy(workflow_completion_timeout_sec=0)


def throughput(
    workers: int, concurrency: int, runs: int, k: int, sleep: float, who: str = "agentloop"
) -> tuple[float, float, float]:
    """Runs completed per second by ``workers`` processes; their CPU seconds per run; and how
    busy the machine's cores were meanwhile (0 to 1: every process's, Postgres's and others').
    ``who``: ``agentloop`` (a DBOSLoop's runs), ``peer`` (DBOSAgent's ``run_sync``),
    ``dbos`` or ``dbos-async`` (DBOS alone: ``floor_workflow``'s threaded or async one).

    The runs are enqueued first (a ``DBOSClient``), then every worker is told
    to serve the queue at once: timed from then to the last run's end (as
    DBOS recorded it), so neither the workers' start nor the enqueuing is counted.
    """
    from dbos import DBOSClient

    from agentloop.dbos import DBOSLoop

    schema = f"agentloop_bench_{uuid.uuid4().hex[:8]}"
    command = [sys.executable, __file__, "worker", who, schema]
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
        if who == "peer":
            options: Any = {"workflow_name": f"peer{k}.run_sync", "queue_name": QUEUE}
            handles: list[Any] = [client.enqueue(options, "go", deps=None) for _ in range(runs)]
        elif who in ("dbos", "dbos-async"):
            assert k == 1, "DBOS alone makes the steps of a run of one call"
            name = "bench.floor" if who == "dbos" else "bench.floor_async"
            options = {"workflow_name": name, "queue_name": QUEUE}
            handles = [client.enqueue(options, "go", sleep) for _ in range(runs)]
        else:
            handles = [enqueuer.client_enqueue(client, QUEUE, "go") for _ in range(runs)]
        run_ids = {handle.workflow_id for handle in handles}
        began, (busy, total) = time.time(), machine()
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        deadline = began + 600
        while time.time() < deadline:
            time.sleep(0.05)
            done = client.list_workflows(queue_name=QUEUE, load_input=False, load_output=False)
            states = {status.status for status in done}
            assert "ERROR" not in states, "a run failed: see the workers' output"
            if states == {"SUCCESS"} and len(done) == runs:
                break
        else:
            raise TimeoutError(f"{runs} runs did not end within 600 s")
        busy_end, total_end = machine()
        assert {status.workflow_id for status in done} == run_ids
        ended = max(status.updated_at or 0 for status in done) / 1000
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
    load = (busy_end - busy) / (total_end - total) if total_end > total else 0.0
    return runs / (ended - began), spent / runs, load


def sqlite_throughput(runs: int, k: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        ledgered = loop(k, SQLiteLedger(Path(directory) / "runs.db", synchronous="NORMAL"))
        began = time.perf_counter()
        for _ in range(runs):
            assert ledgered.run("go").output == "ok"
        return runs / (time.perf_counter() - began)


def part_side_by_side() -> bool:
    """Part 1; whether it met its targets."""
    met = True
    ks = (1, 10)
    found = side_by_side(ks, runs=int(os.environ.get("AGENTLOOP_BENCH_RUNS", "30")))
    print("1. per model step (K calls one after another, then a final answer; medians):")
    print(
        f"  {'':<10}{'K':>3} {'CPU µs':>8} {'wall µs':>8} {'txns':>6} {'statements':>10} "
        f"{'pings':>6} {'round trips':>11} {'DBOS steps':>10}"
    )
    for k in ks:
        for name, got in found[k].items():
            if name == "ratio":
                continue
            trips = got["statements"] + got["checkouts"] + 2 * got["txns"]
            print(
                f"  {name:<10}{k:>3} {got['cpu_us']:8.0f} {got['wall_us']:8.0f} "
                f"{got['txns']:6.2f} {got['statements']:10.2f} {got['checkouts']:6.2f} "
                f"{trips:11.2f} {got['steps']:10.2f}"
            )
        steps = found[k]["agentloop"]["steps"]
        if steps > STEPS_TARGET[k]:
            met = False
            print(f"  MISSED: {steps:.2f} DBOS steps a model step at K={k} (<= {STEPS_TARGET[k]})")
    if not all("ratio" in found[k] for k in ks):
        print("  pydantic-ai is not installed: no peer (pip install 'pydantic-ai-slim[dbos]')")
        return met
    print("  agentloop.dbos / DBOSAgent, paired run by run (median of the ratios):")
    for k in ks:
        ratio = found[k]["ratio"]
        mark = "" if ratio["cpu_us"] <= CPU_TARGET else f"  MISSED (target <= {CPU_TARGET})"
        met &= not mark
        print(f"  K={k:<3} CPU {ratio['cpu_us']:.2f}x   wall {ratio['wall_us']:.2f}x{mark}")
    return met


def part_io_bound() -> bool:
    """Part 2; whether it met its target."""
    runs = int(os.environ.get("AGENTLOOP_BENCH_IO_RUNS", "160"))
    print(f"2. I/O-bound runs: a model waiting {SLEEP * 1000:.0f} ms a reply, 2 replies a run:")
    print(
        f"  {'workers':>7} {'concurrency':>11} {'runs':>5} {'runs/s':>8} "
        f"{'worker CPU ms/run':>18} {'worker cores':>12} {'machine busy':>12} {'load':>5}"
    )
    rates: dict[tuple[int, int], float] = {}
    for workers, concurrency in SHAPES:
        # About 15 runs a slot, so that starting and draining the slots weighs little.
        count = 20 if concurrency == 1 else min(max(runs, 15 * concurrency * workers), 960)
        rate, spent, load = throughput(workers, concurrency, count, 1, SLEEP)
        rates[workers, concurrency] = rate
        print(
            f"  {workers:>7} {concurrency:>11} {count:>5} {rate:8.1f} {spent * 1000:18.1f} "
            f"{rate * spent:12.2f} {load:12.0%} {os.getloadavg()[0]:5.2f}"
        )
    scaled = rates[2, 32] / rates[1, 1]
    met = verdict(
        "2 workers at concurrency 32 over 1 at 1, runs/s",
        scaled,
        CONCURRENCY_TARGET,
        f"{scaled:.1f}x (>= {CONCURRENCY_TARGET:.0f}x)",
        at_least=True,
    )
    # One worker at concurrency 1 and 32, beside DBOS alone (the same three steps, with nothing
    # in them) and the peer: taken in turn, so that the machine's drift weighs on each alike.
    who = ["agentloop", "dbos", "dbos-async"] + (
        ["peer"] if importlib.util.find_spec("pydantic_ai") else []
    )
    names = {
        "agentloop": "agentloop",
        "dbos": "DBOS alone",
        "dbos-async": "DBOS async",
        "peer": "DBOSAgent",
    }
    got: dict[tuple[str, int], float] = {}
    print(
        "  one worker, side by side (DBOS alone: its steps, with nothing in them; async: an "
        "async def workflow):"
    )
    print(
        f"  {'':>10} {'concurrency':>11} {'runs':>5} {'runs/s':>8} {'worker CPU ms/run':>18} "
        f"{'worker cores':>12} {'machine busy':>12} {'load':>5} {'runs/CPU-s':>10}"
    )
    for concurrency in (1, 32):
        count = 20 if concurrency == 1 else 15 * concurrency
        for name in who:
            rate, spent, load = throughput(1, concurrency, count, 1, SLEEP, who=name)
            got[name, concurrency] = rate
            print(
                f"  {names[name]:>10} {concurrency:>11} {count:>5} {rate:8.1f} "
                f"{spent * 1000:18.1f} {rate * spent:12.2f} {load:12.0%} "
                f"{os.getloadavg()[0]:5.2f} {1 / spent:10.1f}"
            )
    gains = {name: got[name, 32] / got[name, 1] for name in who}
    print(
        "  one worker, concurrency 32 against 1 (reported): "
        + ", ".join(f"{names[name]} {gains[name]:.1f}x" for name in who)
    )
    print(
        f"  agentloop's runs/s at 32: {got['agentloop', 32] / got['dbos', 32]:.2f}x DBOS alone's"
        + (f", {got['agentloop', 32] / got['peer', 32]:.1f}x DBOSAgent's" if "peer" in who else "")
    )
    return met


def part_cpu_bound() -> bool:
    """Part 3: reported only."""
    runs = int(os.environ.get("AGENTLOOP_BENCH_IO_RUNS", "160"))
    print(f"3. CPU-bound runs: {runs} runs of 3 calls, the model answering at once:")
    print(f"  SQLite ledger, 1 process               {sqlite_throughput(runs, 3):8.1f} runs/s")
    for workers in (1, 2, 4):
        rate, spent, load = throughput(workers, 8, runs, 3, 0.0)
        print(
            f"  DBOS, {workers} worker(s), concurrency 8      {rate:8.1f} runs/s"
            f"  ({spent * 1000:.1f} worker CPU ms/run, machine {load:.0%} busy)"
        )
    return True


def main() -> int:
    if not URL:
        print("skipped: no Postgres (set AGENTLOOP_TEST_POSTGRES to a URL; docs/dbos.md says how)")
        return 0
    parts = {"1": part_side_by_side, "2": part_io_bound, "3": part_cpu_bound}
    chosen = os.environ.get("AGENTLOOP_BENCH_PARTS", "123")  # e.g. "2" for part 2 alone
    met = [parts[part]() for part in chosen]
    return 0 if all(met) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        who, schema, executor, concurrency, k, sleep = sys.argv[2:8]
        worker(who, schema, executor, int(concurrency), int(k), float(sleep))
        sys.exit(0)
    sys.exit(main())
