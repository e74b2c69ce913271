"""A fork server for the DBOS process tests: each worker or job runs in a forked child.

Started once (``python -m tests.support.dbos_worker``), it imports agentloop.dbos
(and so DBOS, which is slow to import) once, then reads one JSON request a
line from stdin and answers with one JSON line on stdout:

* ``{"job": job}``: a child launches DBOS, starts a run (``"mode": "start"``)
  or waits for the recovered one (``"mode": "recover"``: DBOS's launch
  recovers the pending workflows of its executor), writes the result to
  ``job["out"]`` and exits; answered with how it ended, ``{"code": n}`` or
  ``{"signal": n}`` (it may be killed at the job's ``kill`` point);
* ``{"serve": job}``: a child launches DBOS as a worker of the queue and
  serves it until it is killed; answered ``{"pid": n}`` once it is serving;
* ``{"reap": pid}``: wait for a killed worker; answered ``{"reaped": pid}``.

A job's ``"loop"`` names the DBOSLoop it starts or recovers a run of:
``"scripted"`` (the default); ``"provided"``, whose runs are given deps by
a provider that writes each call of it as an effect (``"provided"``, with the
process id and the run id); ``"team"``, whose "triage" agent may hand the
run to "special" (``transfer_to_special``); ``"parent"``, whose agent tool
``agent`` runs the scripted loop as a child workflow (its input is the
child's script); ``"team_parent"``, a team whose "special" is a parent; or
``"asking_parent"``, whose ``agent`` runs the approving loop (a person
decides any call whose n is 100 or more).

The model reads its script from the run's input (the first message's text
is the script as JSON), so one ``DBOSLoop`` serves runs of any script. The
tools are ``tests/support/durable_child.py``'s three (an effect, an idempotent one,
one that fails after its effect), writing each effect (kind and idempotency
key) outside DBOS: a line in a file, or a row of a Postgres table.

Kill points (``job["kill"]``, counted in the child): ``{"model": k}`` inside
the k-th model call; ``{"handler": k}`` in the k-th handler before its
effect; ``{"effect": k}`` right after it; ``{"transition": n}`` after the
n-th transition (the step behind it recorded, the next one not yet); ``{"forked": k}``
right after the k-th ``DBOS.fork_workflow`` (a fork's wait forking its child).
``job["within"]``: in ``"recover"`` mode, the seconds the run has to end in.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

import attrs
import orjson

import agentloop
from agentloop.dbos import DBOSLoop

Message = dict[str, Any]

QUEUE = "agentloop-tests"
#: The budget every scripted run is made with (the fingerprint is the loop's, not the run's).
MAX_STEPS, MAX_CALLS = 8, 64
_STATE: dict[str, Any] = {"sink": None, "kill": None, "counts": {}}
_LOCK = threading.Lock()
_LOCAL = threading.local()


def _reached(point: str) -> None:
    """Count ``point``; die here if the job says so."""
    with _LOCK:
        counts = _STATE["counts"]
        counts[point] = counts.get(point, 0) + 1
        kill = _STATE["kill"]
        if kill is not None and kill.get(point) == counts[point]:
            os.kill(os.getpid(), signal.SIGKILL)


def _record(kind: str, key: str | None = None) -> None:
    """Write the effect outside DBOS: committed (or written) before the tool returns.

    ``key``: the call's idempotency key unless given.
    """
    key = agentloop.idempotency_key() if key is None else key
    sink = _STATE["sink"]
    if sink is None:
        return
    if "file" in sink:
        fd = getattr(_LOCAL, "fd", None)
        if fd is None:
            fd = _LOCAL.fd = os.open(sink["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{kind} {key}\n".encode())
    else:
        connection = getattr(_LOCAL, "connection", None)
        if connection is None:
            import psycopg

            connection = _LOCAL.connection = psycopg.connect(sink["postgres"], autocommit=True)
        connection.execute(
            f"INSERT INTO {sink['table']} (kind, key) VALUES (%s, %s)",
            (kind, key),
        )


def _effect(kind: str) -> None:
    _reached("handler")
    _record(kind)
    _reached("effect")


def effect(n: int) -> int:
    """A tool with an effect that must happen at most once."""
    _effect("effect")
    return 2 * n


def idem(n: int) -> int:
    """An idempotent tool: its external system deduplicates by the key."""
    _effect("idem")
    return 3 * n


def fail(n: int) -> int:
    """A tool that has its effect, then raises."""
    _effect("fail")
    raise ValueError(f"failed on {n}")


@attrs.frozen
class Worker:
    """The deps of a run of the "provided" loop: made by the process that drives it."""

    pid: int
    run_id: str


def provide(run_id: str) -> Worker:
    """The "provided" loop's deps provider: each time it is called is written as an effect."""
    _record("provided", f"{os.getpid()}:{run_id}")
    return Worker(os.getpid(), run_id)


def stamp(ctx: agentloop.RunContext[Worker], n: int) -> str:
    """A tool with an effect that answers with the deps it was given."""
    _effect("stamp")
    return f"{ctx.deps.pid}:{ctx.deps.run_id}"


def model(history: list[Message]) -> Message:
    """Answers by the history alone: the script (the input) at the replies so far."""
    _reached("model")
    script = orjson.loads(history[0]["text"])
    done = sum(1 for message in history if message["kind"] in ("call", "calls"))
    reply: Message = script[done]
    return reply


def asks_big(call: Message) -> agentloop.Decision:
    """The approving loop's policy: a person decides any call whose n is 100 or more."""
    return agentloop.ask("a big one") if call["arguments"].get("n", 0) >= 100 else agentloop.allow()


def _listener(transition: agentloop.Transition) -> None:
    _reached("transition")


def loop(
    *, listen: bool = True, policy: bool = False, provided: bool = False, **options: Any
) -> agentloop.Loop:
    """The scripted loop (the same in every process; ``listen`` only adds the kill hook).

    ``policy``: the approving loop's, whose runs wait for a person about big calls.
    ``provided``: the loop whose runs are given deps (``Worker``), with a ``stamp`` tool.
    ``options``: more of ``Loop``'s (a team's agent: ``name=``, ``handoffs=``).
    """
    tools = agentloop.ToolRegistry(
        [
            agentloop.Tool(effect, name="effect"),
            agentloop.Tool(idem, name="idem", idempotent=True),
            agentloop.Tool(fail, name="fail"),
            *([agentloop.Tool(stamp)] if provided else []),
        ],
        policy=asks_big if policy else None,
    )
    return agentloop.Loop(
        model,
        tools=tools,
        max_steps=MAX_STEPS,
        max_calls=MAX_CALLS,
        listeners=[_listener] if listen else [],
        deps_type=Worker,  # only the provided loop has a tool that takes a context
        **options,
    )


def team() -> agentloop.Loop:
    """The team: "triage" may hand the run to "special"; both the scripted model and tools."""
    return loop(name="triage", handoffs=[agentloop.handoff(loop(name="special"))])


def parent(*, policy: bool = False, **options: Any) -> agentloop.Loop:
    """The "parent" loop: the scripted loop's tools and an agent tool, ``agent``, running it.

    The parent's script calls ``agent`` with a child's script as its input.
    ``policy``: the "asking_parent" loop, whose child is the approving loop.
    ``options``: more of ``Loop``'s (a team's agent: ``name=``).
    """
    tools = agentloop.ToolRegistry(
        [
            agentloop.Tool(effect, name="effect"),
            agentloop.Tool(idem, name="idem", idempotent=True),
            agentloop.Tool(fail, name="fail"),
            loop(policy=policy).as_tool("agent", "A child run of the scripted loop."),
        ]
    )
    return agentloop.Loop(
        model,
        tools=tools,
        max_steps=MAX_STEPS,
        max_calls=MAX_CALLS,
        listeners=[_listener],
        **options,
    )


def team_parent() -> agentloop.Loop:
    """The "team_parent" team: "triage" may hand the run to "special", a parent (``agent``)."""
    return loop(
        name="triage", handoffs=[agentloop.handoff(parent(name="special", deps_type=Worker))]
    )


def result_json(result: agentloop.RunResult) -> dict[str, Any]:
    """What the tests compare: status, counters, transcript."""
    return {
        "status": result.status.value,
        "steps": result.steps,
        "calls": result.calls,
        "transcript": result.transcript,
    }


def config(job: dict[str, Any]) -> Any:
    """The DBOS configuration of a job's process."""
    found: dict[str, Any] = {
        "name": "agentloop-tests",
        "system_database_url": job["db"],
        "executor_id": job.get("executor", "job"),
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": 0.01,
    }
    if "schema" in job:
        found["dbos_system_schema"] = job["schema"]
    return found


def poll_quickly() -> None:
    """Poll DBOS's internal queue every 20 ms, not every second.

    Recovered and forked workflows go on that queue: a test would mostly wait. Its
    interval has no public setter (a test-only reach inside).
    """
    from dbos._dbos import _get_or_create_dbos_registry

    _get_or_create_dbos_registry().get_internal_queue()._polling_interval_sec = 0.02


def _launch(job: dict[str, Any]) -> DBOSLoop:
    from dbos import DBOS

    _STATE["sink"], _STATE["kill"] = job.get("sink"), job.get("kill")
    loops = {
        "scripted": DBOSLoop(loop(), name="scripted"),
        "provided": DBOSLoop(loop(provided=True), name="provided", deps=provide),
        "team": DBOSLoop(team(), name="team"),
        "parent": DBOSLoop(parent(), name="parent"),
        "team_parent": DBOSLoop(team_parent(), name="team_parent"),
        "asking_parent": DBOSLoop(parent(policy=True), name="asking_parent"),
    }
    DBOSLoop(loop(policy=True), name="approving")
    if "forked" in (job.get("kill") or {}):  # a kill point right after a workflow is forked
        _count_forks(DBOS)
    DBOS(config=config(job))
    poll_quickly()
    DBOS.launch()
    DBOS.register_queue(
        QUEUE, worker_concurrency=job.get("concurrency", 8), polling_interval_sec=0.02
    )
    return loops[job.get("loop", "scripted")]


def _count_forks(dbos: Any) -> None:
    """Make each ``DBOS.fork_workflow`` of this process reach the point ``"forked"`` after it."""
    forked = dbos.fork_workflow

    def counted(*args: Any, **kwargs: Any) -> Any:
        handle = forked(*args, **kwargs)
        _reached("forked")
        return handle

    dbos.fork_workflow = staticmethod(counted)


def _job(job: dict[str, Any]) -> None:
    code = 0
    try:
        runs = _launch(job)
        if job["mode"] == "start":
            result = runs.run(job["input"], run_id=job["run_id"])
        else:
            if "within" in job:  # seconds: a run that has not ended by then fails the job
                _ended(job["run_id"], job["within"])
            result = runs.result(job["run_id"], polling_interval_sec=0.02)
        # How often this process asked the model: a recovery asks only for unrecorded replies.
        answer: dict[str, Any] = {
            "result": result_json(result),
            "asked": _STATE["counts"].get("model", 0),
            "agent": result.agent,
        }
        # Everything is committed: exit without DBOS.destroy(), which takes a second.
    except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
        answer = {"crash": traceback.format_exc()}
        code = 3
    with open(job["out"], "wb") as file:
        file.write(orjson.dumps(answer))
    os._exit(code)


def _ended(run_id: str, seconds: float) -> None:
    """Wait for run ``run_id`` to end; ``TimeoutError`` if it has not in ``seconds``."""
    from dbos import DBOS

    deadline = time.monotonic() + seconds
    while DBOS.get_workflow_status(run_id).status in ("PENDING", "ENQUEUED"):  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id!r} has not ended in {seconds} s")
        time.sleep(0.02)


def _serve(job: dict[str, Any], ready: int) -> None:
    try:
        _launch(job)
        os.write(ready, b"ok")
    except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
        os.write(ready, traceback.format_exc().encode())
        os._exit(3)
    threading.Event().wait()  # serve until killed


def _wait(pid: int) -> dict[str, int]:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"code": os.WEXITSTATUS(status)}


def serve() -> None:
    """Answer each request line."""
    for line in sys.stdin.buffer:
        request = orjson.loads(line)
        answer: dict[str, Any]
        if "job" in request:
            pid = os.fork()
            if pid == 0:
                _job(request["job"])
            answer = _wait(pid)
        elif "serve" in request:
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _serve(request["serve"], write)
            os.close(write)
            said = os.read(read, 65536)
            os.close(read)
            answer = {"pid": pid} if said == b"ok" else {"crash": said.decode()}
        else:
            answer = {"reaped": request["reap"]} | _wait(request["reap"])
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    serve()
