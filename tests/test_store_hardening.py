"""Hardening of the stores and readers: linear reading, and a ledger that never starts over."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

import agentloop
from agentloop import Loop, Tool, ToolRegistry, approve, ask
from agentloop.__main__ import main
from agentloop._review import _runfile
from agentloop._review._report import report_html, run_lines
from agentloop.testing import batch, call, final

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from agentloop import RunResult
    from agentloop._core._values import Transition


# -- linear in the events ------------------------------------------------------------
#
# Counted, not timed: a run's events are handed out by a tuple that counts every
# event read from it (by index, by slice or by iteration, itertools.islice included).
# Reading a run twice as long must read at most 2.5 times as many events; a reader
# that walks from the first event for each event reads four times as many.


class _Counted(tuple["Transition", ...]):
    """A run's events, counting each one read."""

    reads: int = 0

    def __iter__(self) -> Any:
        for event in super().__iter__():
            self.reads += 1
            yield event

    def __getitem__(self, key: Any) -> Any:
        found = super().__getitem__(key)
        self.reads += len(found) if isinstance(key, slice) else 1
        return found


def _echo(n: int) -> int:
    """A tool."""
    return n


def _calls_one_by_one(n: int) -> RunResult:
    """``n`` calls, one a step, then a final: 3 events a call."""
    replies = [call(f"c{i}", "echo", n=i) for i in range(n)] + [final("ok")]
    model = agentloop.testing.ScriptedModel(replies)
    return Loop(model, tools={"echo": _echo}, max_steps=n + 1, max_calls=n).run("go")


def _one_batch(n: int) -> RunResult:
    """One batch of ``n`` calls, then a final."""
    replies = [batch(*(call(f"c{i}", "echo", n=i) for i in range(n))), final("ok")]
    model = agentloop.testing.ScriptedModel(replies)
    return Loop(model, tools={"echo": _echo}, max_calls=n).run("go")


def _each_call_approved(n: int) -> RunResult:
    """``n`` calls, one a step, each asked about and approved by a person."""
    replies = [call(f"c{i}", "echo", n=i) for i in range(n)] + [final("ok")]
    tools = ToolRegistry([Tool(_echo, name="echo", policy=lambda _: ask("every call"))])
    loop = Loop(agentloop.testing.ScriptedModel(replies), tools=tools, max_steps=n + 1, max_calls=n)
    result = loop.run("go")
    while result.status == "awaiting_approval":
        result = loop.resume(result, decisions={p.call_id: approve() for p in result.pending})
    return result


def _counted(result: RunResult) -> tuple[RunResult, _Counted]:
    events = _Counted(result.events)
    return result._replace(events=events), events


def _reads_loading(text: bytes, monkeypatch: pytest.MonkeyPatch) -> int:
    """Events read by ``run_from_json`` while it checks the story (from the events it built)."""
    made: list[_Counted] = []
    build = _runfile._build

    def counting_build(document: dict[str, Any]) -> RunResult:
        result, events = _counted(build(document))
        made.append(events)
        return result

    with monkeypatch.context() as patch:
        patch.setattr(_runfile, "_build", counting_build)
        agentloop.run_from_json(text)
    return sum(events.reads for events in made)


def _reads_showing(result: RunResult) -> int:
    counted, events = _counted(result)
    run_lines(counted, title="run")
    return events.reads


def _reads_reporting(result: RunResult) -> int:
    counted, events = _counted(result)
    report_html(counted, svg=False)
    return events.reads


def _reads_cli(command: str, path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Events read by ``agentloop show`` or ``report``, loading included."""
    made: list[_Counted] = []
    build = _runfile._build

    def counting_build(document: dict[str, Any]) -> RunResult:
        result, events = _counted(build(document))
        made.append(events)
        return result

    with monkeypatch.context() as patch:
        patch.setattr(_runfile, "_build", counting_build)
        extra = ["-o", str(tmp_path / "report.html")] if command == "report" else []
        assert main([command, str(path), *extra]) == 0
    return sum(events.reads for events in made)


SHAPES: dict[str, Callable[[int], RunResult]] = {
    "calls one by one": lambda n: _calls_one_by_one(n),
    "one batch": lambda n: _one_batch(3 * n),
    "each call approved": lambda n: _each_call_approved(n // 2),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_loading_showing_and_reporting_read_each_event_a_bounded_number_of_times(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twice the events are read at most 2.5 times as often by load, show and the report."""
    small, large = SHAPES[shape](200), SHAPES[shape](400)
    assert 1.8 < len(large.events) / len(small.events) < 2.2
    for name, reads in {
        "load": lambda result: _reads_loading(agentloop.run_to_json(result).encode(), monkeypatch),
        "show": _reads_showing,
        "report": _reads_reporting,
    }.items():
        few, many = reads(small), reads(large)
        assert few >= len(small.events), f"{name} read each event"
        assert many <= 2.5 * few, (
            f"{name}: {few} reads for {len(small.events)} events, {many} for {len(large.events)}"
        )


@pytest.mark.parametrize("command", ["show", "report"])
def test_the_command_line_reads_each_event_a_bounded_number_of_times(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``agentloop show`` and ``report`` on twice the events read at most 2.5 times as many."""
    reads = []
    for n in (200, 400):
        path = tmp_path / f"run{n}.json"
        agentloop.save_run(_calls_one_by_one(n), path)
        reads.append(_reads_cli(command, path, tmp_path, monkeypatch))
    capsys.readouterr()
    assert reads[1] <= 2.5 * reads[0], reads


def test_a_call_in_a_batch_shows_its_own_result() -> None:
    """Each call of a batch is described with its own result, found in the batch's closing event."""
    result = _one_batch(3)
    shown = "\n".join(run_lines(result, title="run", limit=None))
    for i in range(3):
        assert f"echo#c{i}  ok: {i}" in shown
