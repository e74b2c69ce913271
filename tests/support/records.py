"""Real records for the readers' property tests: run files and ledgers of every kind of run.

``make(directory)`` records one run of each kind in a ledger (batches, a
person's decisions, a run waiting for one, a call started with no outcome,
summaries and the ranges they fold, kept turns, typed output and its retry,
a retried model and a fallback, a cancel mid-stream with its partial text, a
reply that was not JSON, a continued run) and saves each as a run file too;
``KINDS[run_id].loop(ledger)`` is the Loop that resumes it. ``mutations``
lists every one-value change of a JSON document, which the property tests
draw from.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

import agentloop
from agentloop import CancelToken, Loop, Tool, ToolRegistry, approve, ask, deny
from agentloop.context import keep_last, summarise
from agentloop.ledger import SQLiteLedger
from agentloop.models import RetryPolicy, fallback
from agentloop.review import run_to_json
from agentloop.streaming import TextDelta
from agentloop.testing import ScriptedModel, batch, call, final
from tests.support.helpers import City
from tests.support.ledgers import Crash, CrashingLedger

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from agentloop import RunResult
    from agentloop.ledger import Ledger

Message = dict[str, Any]
NEVER_SLEEP = RetryPolicy(attempts=2, base=0.0, jitter=0.0, sleep=lambda seconds, token: None)


def _add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _boom(a: int) -> int:
    """Always fails."""
    raise RuntimeError(f"boom {a}")


def _asks_about_add(called: Message) -> agentloop.Decision:
    return ask("adds need a person") if called["name"] == "add" else agentloop.allow()


def _tools(policy: Callable[[Message], agentloop.Decision] | None = None) -> ToolRegistry:
    return ToolRegistry(
        [Tool(_add, name="add", policy=policy), Tool(_boom, name="boom", policy=policy)]
    )


def _writer(history: list[Message]) -> Message:
    return final("the story so far")


def answers(history: list[Message]) -> Message:
    """A model that answers at once: what a resume asks, if anything."""
    return final("resumed")


class Kind(NamedTuple):
    """A kind of run: the Loop it runs under (with a model), and how it is driven."""

    #: The Loop, made with ``ledger`` and ``model`` (a resume's: ``answers``).
    loop: Callable[[Ledger, Any], Loop]
    #: The script its first process plays.
    script: Callable[[], Any]
    #: Drive it in ``ledger`` under ``run_id``: its result (as it stands).
    drive: Callable[[Loop, Ledger, str], RunResult]


def _run(loop: Loop, ledger: Ledger, run_id: str) -> RunResult:
    return loop.run("add things up " * 5, run_id=run_id)


def _decided(loop: Loop, ledger: Ledger, run_id: str) -> RunResult:
    paused = loop.run("go", run_id=run_id)
    assert paused.status == "awaiting_approval"
    return loop.resume(run_id, decisions={"c1": approve(), "c2": deny("not that one")})


def _cancelled(loop: Loop, ledger: Ledger, run_id: str) -> RunResult:
    model = loop.model
    assert isinstance(model, _Cancelled)
    return loop.run("go", run_id=run_id, cancel=model.token)


def _started(loop: Loop, ledger: Ledger, run_id: str) -> RunResult:
    """Dies right after ``tool_started`` of its second call: an outcome never recorded."""
    crashing = CrashingLedger(ledger, at=3, when="after")
    dying = Loop(loop.model, tools=loop.dispatcher, ledger=crashing, max_concurrency=1)
    with contextlib.suppress(Crash):
        dying.run("go", run_id=run_id)
    return agentloop.ledger.view_run(ledger, run_id).result


def _continued(loop: Loop, ledger: Ledger, run_id: str) -> RunResult:
    Loop(ScriptedModel([ValueError("down")]), ledger=ledger).run("go", run_id=f"{run_id}-0")
    return loop.continue_run(f"{run_id}-0", run_id=run_id)


class _Cancelled:
    """A model that streams, and its run is cancelled mid-stream: its partial text is kept."""

    def __init__(self) -> None:
        self.token = CancelToken()

    def __call__(self, history: list[Message]) -> Iterator[object]:
        yield TextDelta(text="Hel")
        self.token.cancel()  # as another thread would, while the reply streams
        yield TextDelta(text="lo")


def _recorded_names(model: Any) -> Any:
    """``model``, or ``answers`` under the fallback names the run was recorded with."""
    return fallback(answers, answers, names=_NAMES) if model is answers else model


_NAMES = ["primary", "secondary"]


def _retried_model(replies: list[object]) -> Any:
    left = iter(replies)

    def flaky(history: list[Message]) -> Message:
        reply = next(left, final("done"))
        if isinstance(reply, Exception):
            raise reply
        return reply  # type: ignore[return-value]

    def down(history: list[Message]) -> Message:
        raise ValueError("the primary is down")

    return fallback(down, flaky, names=_NAMES)


#: Each kind of run, by its run id.
KINDS: dict[str, Kind] = {
    "plain": Kind(
        lambda ledger, model: Loop(model, tools=_tools(), ledger=ledger),
        lambda: ScriptedModel(
            [batch(call("c1", "add", a=1, b=2), call("c2", "boom", a=3)), final("three")]
        ),
        _run,
    ),
    "decided": Kind(
        lambda ledger, model: Loop(model, tools=_tools(_asks_about_add), ledger=ledger),
        lambda: ScriptedModel(
            [batch(call("c1", "add", a=1, b=2), call("c2", "add", a=5, b=5)), final("ok")]
        ),
        _decided,
    ),
    "waiting": Kind(
        lambda ledger, model: Loop(model, tools=_tools(_asks_about_add), ledger=ledger),
        lambda: ScriptedModel([call("c1", "add", a=1, b=2)]),
        _run,
    ),
    "summarised": Kind(
        lambda ledger, model: Loop(
            model, tools=_tools(), context=summarise(_writer, tokens=150), ledger=ledger
        ),
        lambda: ScriptedModel([call(f"c{i}", "add", a=i, b=i) for i in range(4)] + [final("x")]),
        _run,
    ),
    "kept-last": Kind(
        lambda ledger, model: Loop(
            model, tools=_tools(), context=keep_last(tokens=100), ledger=ledger
        ),
        lambda: ScriptedModel([call(f"c{i}", "add", a=i, b=i) for i in range(3)] + [final("x")]),
        _run,
    ),
    "typed": Kind(
        lambda ledger, model: Loop(model, output=City, max_output_retries=1, ledger=ledger),
        lambda: ScriptedModel([final('{"name": 3}'), final('{"name": "Paris", "population": 2}')]),
        _run,
    ),
    "retried": Kind(
        lambda ledger, model: Loop(
            _recorded_names(model), tools=_tools(), retry=NEVER_SLEEP, ledger=ledger
        ),
        lambda: _retried_model([ConnectionError("reset"), call("c1", "add", a=1, b=1)]),
        _run,
    ),
    "cancelled": Kind(
        lambda ledger, model: Loop(model, tools=_tools(), ledger=ledger),
        _Cancelled,
        _cancelled,
    ),
    "rejected": Kind(
        lambda ledger, model: Loop(model, ledger=ledger),
        lambda: ScriptedModel([{"kind": "final", "text": float("nan")}]),
        _run,
    ),
    "started": Kind(
        lambda ledger, model: Loop(model, tools=_tools(), ledger=ledger, max_concurrency=1),
        lambda: ScriptedModel([batch(call("c1", "add", a=1, b=2), call("c2", "add", a=3, b=4))]),
        _started,
    ),
    "continued": Kind(
        lambda ledger, model: Loop(model, ledger=ledger),
        lambda: ScriptedModel([final("two")]),
        _continued,
    ),
}


def make(directory: Path) -> tuple[Path, dict[str, bytes]]:
    """A ledger in ``directory`` holding a run of each kind, and each run as a run file."""
    path = directory / "runs.db"
    files = {}
    with SQLiteLedger(path) as ledger:
        for run_id, kind in KINDS.items():
            result = kind.drive(kind.loop(ledger, kind.script()), ledger, run_id)
            files[run_id] = run_to_json(result).encode()
    return path, files


# -- one-value changes ----------------------------------------------------------------------

#: Marks a key removed, where a change's new value goes.
REMOVED: Any = type("Removed", (), {"__repr__": lambda self: "REMOVED"})()


def paths(document: object, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value in ``document`` but the document itself, containers too."""
    if path:
        yield path
    if type(document) is dict:
        for key, item in document.items():
            yield from paths(item, (*path, key))
    elif type(document) is list:
        for index, item in enumerate(document):
            yield from paths(item, (*path, index))


def changed(document: object, path: tuple[Any, ...], value: object) -> Any:
    """A copy of ``document`` with the value at ``path`` replaced, or removed (``REMOVED``)."""
    copied = orjson.loads(orjson.dumps(document))
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    if value is REMOVED:
        if type(parent) is dict:
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return copied


__all__ = ["KINDS", "REMOVED", "Kind", "answers", "changed", "make", "paths"]
