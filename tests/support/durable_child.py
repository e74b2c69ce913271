"""A fork server for the kill tests: each job runs in a forked child, which may be SIGKILLed.

Started once (``python -m tests.support.durable_child``), it imports agentloop once and
then reads one JSON job a line from stdin. For each, it forks a child that
runs the job (a durable run started or resumed, on either driver) and answers
with how the child ended, one JSON line on stdout: ``{"code": n}`` or
``{"signal": n}``. A fork costs a millisecond where a fresh interpreter costs
most of a second, which is what lets the suite kill hundreds of real processes.

Where the child dies is chosen by the job:

* ``{"append": n, "when": "before" | "after"}``: around the process's n-th
  ledger append (a reply, ``tool_started``, ``tool_finished`` or the end);
* ``{"effect": k}``: inside the k-th handler call, right after its effect;
* ``{"after_ms": t}``: the server kills it ``t`` ms after the fork, wherever it is.

A job with ``"validate": true`` has an output validator too (``long_enough``),
whose every call is an effect ``check:<text>``.

The tools write their effect (the call's idempotency key, a line) to a file
outside the ledger: ``effect`` has a plain effect, ``idem`` is idempotent,
``fail`` raises. The model is a function of the history, as a real one is:
the script's entry for the number of replies appended so far. A job with
``"child"`` has an agent tool too, ``research``, whose child run (recorded in
the same ledger) runs that script: the appends counted are the parent's and
the child's, in the order they are made. With ``"ask"``, the child's ``effect``
asks a person; ``"decide"`` (a list of paths) resumes with each approved.
With ``"refuse": "deny" | "ask"``, a resume's ``effect`` has a policy that answers so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any

import orjson

import agentloop

if TYPE_CHECKING:
    from collections.abc import Callable

Message = dict[str, Any]

#: Where the tools write their effects, and how this process is to die.
_STATE: dict[str, Any] = {"effects": None, "kill": None, "appends": 0, "handlers": 0, "slow": 0}


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _effect(kind: str) -> None:
    if _STATE["slow"]:
        time.sleep(_STATE["slow"] / 1000)
    key = agentloop.idempotency_key()
    fd = _STATE["effects"]
    if fd is not None:
        os.write(fd, f"{kind} {key}\n".encode())
    _STATE["handlers"] += 1
    kill = _STATE["kill"]
    if kill is not None and kill.get("effect") == _STATE["handlers"]:
        _die()


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


async def aeffect(n: int) -> int:
    """``effect`` under asyncio: it yields once first, so a batch's calls interleave."""
    await asyncio.sleep(0)
    return effect(n)


async def aidem(n: int) -> int:
    """``idem`` under asyncio."""
    await asyncio.sleep(0)
    return idem(n)


async def afail(n: int) -> int:
    """``fail`` under asyncio."""
    await asyncio.sleep(0)
    return fail(n)


def long_enough(text: str) -> None:
    """An output validator with an effect (``check:<text>``): it refuses a final under 10."""
    _effect(f"check:{text}")
    if len(text) < 10:
        raise agentloop.Retry("too short")


def tools(driver: str) -> agentloop.ToolRegistry:
    """The three tools, plain or async."""
    plain = driver == "sync"
    return agentloop.ToolRegistry(
        [
            agentloop.Tool(effect if plain else aeffect, name="effect"),
            agentloop.Tool(idem if plain else aidem, name="idem", idempotent=True),
            agentloop.Tool(fail if plain else afail, name="fail"),
        ]
    )


def scripted(script: list[Message]) -> Callable[[list[Message]], Message]:
    """A model that answers by the history alone: the entry for the replies so far."""

    def turn(history: list[Message]) -> Message:
        done = sum(1 for message in history if message["kind"] in ("call", "calls", "final"))
        reply: Message = script[done]
        return reply

    return turn


def loop(
    job: dict[str, Any], ledger: agentloop.ledger.Ledger | None, script: str = "script"
) -> agentloop.Loop:
    """The job's Loop: its script, its tools, its driver's settings.

    With ``"child"`` (a script), it has one more tool, ``research``: an agent
    tool whose child Loop runs that script with the same three tools.
    """
    turn = scripted(job[script])
    model: Any = turn
    if job["driver"] == "async":

        async def amodel(history: list[Message]) -> Message:
            await asyncio.sleep(0)
            reply: Message = turn(history)
            return reply

        model = amodel
    registry = tools(job["driver"])
    if script == "child" and job.get("ask"):
        registry["effect"].policy = lambda call: agentloop.ask("a person decides")
    if script == "script" and job.get("refuse") and job.get("mode") == "resume":
        refusal = {"deny": agentloop.deny("not any more"), "ask": agentloop.ask("a person now")}
        registry["effect"].policy = lambda call: refusal[job["refuse"]]
    if script == "script" and job.get("child"):
        registry.add(loop(job, None, "child").as_tool("research", "Research one question."))
    return agentloop.Loop(
        model,
        tools=registry,
        max_steps=len(job[script]) + 1,
        max_calls=64,
        max_concurrency=job.get("concurrency", 1),
        ledger=ledger,
        output_validators=[long_enough] if job.get("validate") else (),
    )


class KillingLedger:
    """A ledger that SIGKILLs its own process around its n-th append."""

    def __init__(self, inner: agentloop.ledger.SQLiteLedger) -> None:
        self.inner = inner

    def create(self, run_id: str, header: bytes) -> agentloop.ledger.LedgerWriter:
        return _KillingWriter(self.inner.create(run_id, header))

    def claim(self, run_id: str) -> agentloop.ledger.LedgerWriter:
        return _KillingWriter(self.inner.claim(run_id))

    def read(self, run_id: str) -> tuple[bytes, list[agentloop.ledger.LedgerRecord]]:
        return self.inner.read(run_id)


class _KillingWriter:
    def __init__(self, inner: agentloop.ledger.LedgerWriter) -> None:
        self.inner = inner

    def append(self, record: agentloop.ledger.LedgerRecord) -> None:
        _STATE["appends"] += 1
        kill = _STATE["kill"]
        here = kill is not None and kill.get("append") == _STATE["appends"]
        if here and kill["when"] == "before":
            _die()
        self.inner.append(record)
        if here and kill["when"] == "after":
            _die()

    def release(self) -> None:
        self.inner.release()


def result_json(result: agentloop.RunResult) -> dict[str, Any]:
    """What the tests compare: status, counters, transcript."""
    return {
        "status": result.status.value,
        "steps": result.steps,
        "calls": result.calls,
        "transcript": result.transcript,
    }


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Start or resume the job's run in this process; what happened, as JSON."""
    _STATE["kill"] = job.get("kill")
    _STATE["slow"] = job.get("slow_ms", 0)
    _STATE["effects"] = os.open(job["effects"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    if job.get("barrier"):  # the race: both children start resuming at the same moment
        while time.time() < job["barrier"]:
            time.sleep(0.0005)
    ledger = KillingLedger(agentloop.ledger.SQLiteLedger(job["db"], synchronous=job["synchronous"]))
    the_loop = loop(job, ledger)
    decisions = {tuple(path): agentloop.approve() for path in job.get("decide", ())} or None
    try:
        if job["driver"] == "sync":
            if job["mode"] == "start":
                result = the_loop.run("go", run_id=job["run_id"])
            else:
                result = the_loop.resume(job["run_id"], decisions=decisions)
        elif job["mode"] == "start":
            result = asyncio.run(the_loop.arun("go", run_id=job["run_id"]))
        else:
            result = asyncio.run(the_loop.aresume(job["run_id"], decisions=decisions))
    except agentloop.AgentloopError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    return {"result": result_json(result)}


def _child(job: dict[str, Any]) -> None:
    code = 0
    try:
        answer = run_job(job)
    except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
        answer = {"crash": traceback.format_exc()}
        code = 3
    with open(job["out"], "wb") as file:
        file.write(orjson.dumps(answer))
    os._exit(code)


def _wait(pid: int) -> dict[str, int]:
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"code": os.WEXITSTATUS(status)}


def _fork(job: dict[str, Any]) -> int:
    pid = os.fork()
    if pid == 0:
        _child(job)
    return pid


def serve() -> None:
    """Answer each job line with how its child ended."""
    for line in sys.stdin.buffer:
        request = orjson.loads(line)
        if "race" in request:
            pids = [_fork(job) for job in request["race"]]
            answer: Any = [_wait(pid) for pid in pids]
        else:
            job = request["job"]
            pid = _fork(job)
            after = (job.get("kill") or {}).get("after_ms")
            if after is not None:
                time.sleep(after / 1000)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            answer = _wait(pid)
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    serve()
