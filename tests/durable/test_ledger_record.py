"""A ledger's record is the run's events, as a run file encodes them; one replay rebuilds the run.

A run recorded in a ledger holds, in its records' bodies, the events its run
file holds (without the times, with every input written out); a run stopped
after any of its transitions resumes to the run that was never stopped,
recorded the same; the committed fixture of this version (3) opens, resumes
and shows.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import sqlite3
from typing import TYPE_CHECKING, Any

import orjson
import pytest

import agentloop
from agentloop import Loop
from agentloop.__main__ import main
from agentloop._core.values import NotJSON
from agentloop._durable.journal import events_body
from agentloop._durable.queries import KINDS
from agentloop.models import RetryPolicy
from agentloop.testing import ScriptedModel, final
from tests.durable.test_approval import Desk, banker, until_done
from tests.durable.test_durable import DRIVERS, SCRIPT, Driver, World, go, make_loop
from tests.support import FIXTURES
from tests.support.fixture_tools import tools
from tests.support.helpers import City
from tests.support.ledgers import MemoryLedger

if TYPE_CHECKING:
    from pathlib import Path

    from agentloop.ledger import Ledger

PARIS = '{"name": "Paris", "population": 2100000}'


def recorded_events(ledger: Ledger, run_id: str) -> list[dict[str, Any]]:
    """The events a run's records hold, in order."""
    events: list[dict[str, Any]] = []
    for record in ledger.read(run_id)[1]:
        events.extend(orjson.loads(record.body))
    return events


def file_events(result: agentloop.RunResult) -> list[dict[str, Any]]:
    """The events of the run read back from its run file, as a ledger encodes them.

    Each holds what the run file's event holds, its times aside, and every input.
    """
    loaded = agentloop.review.run_from_json(agentloop.review.run_to_json(result))
    document = orjson.loads(agentloop.review.run_to_json(result))
    rejected = loaded.rejected_value
    assert rejected is None or isinstance(rejected, NotJSON)
    encoded: list[dict[str, Any]] = orjson.loads(events_body(loaded.events, rejected))
    for in_file, in_ledger in zip(document["events"], encoded, strict=True):
        held = {name: value for name, value in in_file.items() if name not in ("at", "took")}
        assert held.items() <= in_ledger.items(), (in_file, in_ledger)
    return encoded


def records_of(ledger: MemoryLedger, run_id: str) -> list[tuple[str, str, Any]]:
    return [(r.kind, r.key, orjson.loads(r.body)) for r in ledger.records[run_id]]


# -- one encoding ------------------------------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_ledger_run_records_the_events_its_run_file_holds(driver: Driver) -> None:
    """Tools that return and fail, a batch: the records' events are the run file's."""
    memory = MemoryLedger()
    result = go(make_loop(SCRIPT, World(), memory, driver), driver, "r1")
    assert result.status == "finished"
    assert recorded_events(memory, "r1") == file_events(result)


def test_a_run_that_waited_for_a_person_records_the_events_its_run_file_holds() -> None:
    """Asked, then decided (one approved, one denied): the same events, asks and decisions."""
    memory = MemoryLedger()
    loop = Loop(banker, tools=Desk().registry, ledger=memory)
    assert loop.run("go", run_id="r").status == "awaiting_approval"
    result = until_done(loop)
    assert result.status == "finished"
    assert recorded_events(memory, "r") == file_events(result)
    triggers = [event["on"] for event in recorded_events(memory, "r")]
    assert "approval_asked" in triggers
    assert "approval_decided" in triggers


# -- one replay: stopped anywhere, the same run ------------------------------------------


def stopped_after(k: int, driver: Driver, memory: MemoryLedger) -> None:
    """Run "r1" for ``k`` transitions, then drop it as a process that stops would."""
    loop = make_loop(SCRIPT, World(), memory, driver)
    if driver == "sync":
        run = loop.start("go", run_id="r1")
        for _ in range(k):
            run.step()
        del run
    else:

        async def steps() -> None:
            run = loop.astart("go", run_id="r1")
            for _ in range(k):
                await run.astep()

        asyncio.run(steps())
    gc.collect()  # the dropped run gives up its claim


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_run_stopped_after_any_transition_resumes_to_the_run_never_stopped(
    driver: Driver,
) -> None:
    """resume(run_id) after each transition index: the result, the records and the effects are
    the uninterrupted run's."""
    world, memory = World(), MemoryLedger()
    whole = go(make_loop(SCRIPT, world, memory, driver), driver, "r1")
    for k in range(len(whole.events) + 1):
        stopped = MemoryLedger()
        stopped_after(k, driver, stopped)
        again = World()
        loop = make_loop(SCRIPT, again, stopped, driver)
        result = loop.resume("r1") if driver == "sync" else asyncio.run(loop.aresume("r1"))
        assert result == whole, k
        assert records_of(stopped, "r1") == records_of(memory, "r1"), k
        assert (
            len(again.effects)
            == len(world.effects)
            - sum(  # each call ran once in all
                1 for event in whole.events[:k] if event.trigger == "tool_returned"
            )
        ), k


# -- the committed ledger ----------------------------------------------------------------------


def test_a_version_3_ledger_opens_and_its_runs_go_on(tmp_path: Path) -> None:
    """The committed version 3 fixture: a finished run reads back, a paused one is decided, a
    crashed one's call is unknown and not run again; each run's record is its events."""
    path = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "v3-ledger.db", path)
    ledger = agentloop.ledger.SQLiteLedger(path)
    assert sorted(ledger.run_ids()) == ["crashed", "finished", "paused"]
    for run_id in ("crashed", "finished", "paused"):
        assert orjson.loads(ledger.read(run_id)[0])["version"] == 3
    assert agentloop.ledger.view_run(ledger, "paused").state == "awaiting_approval"
    assert agentloop.ledger.view_run(ledger, "crashed").started[0]["id"] == "c1"

    def loop(script: list[object]) -> Loop:
        return Loop(ScriptedModel(script), tools=tools(), max_steps=5, max_calls=4, ledger=ledger)

    finished = loop([]).resume("finished")
    assert finished.output == "3"
    assert recorded_events(ledger, "finished") == file_events(finished)
    decided = loop([final("502")]).resume("paused", decisions={"c1": agentloop.approve()})
    assert (decided.status, decided.transcript[2]["content"]) == ("finished", 502)
    crashed = loop([final("after the crash")]).resume("crashed")
    assert crashed.output == "after the crash"
    assert crashed.transcript[2]["content"]["type"] == "OutcomeUnknown"
    for run_id, result in (("paused", decided), ("crashed", crashed)):
        assert recorded_events(ledger, run_id) == file_events(result)


def test_damaged_records_are_named(tmp_path: Path) -> None:
    """A record that is not an array of events, under another kind than its last event's, or
    with an event no run file holds: each a LedgerError naming the record."""
    v3 = tmp_path / "v3.db"
    shutil.copy(FIXTURES / "v3-ledger.db", v3)

    def damage(sql: str, *args: object) -> None:
        with sqlite3.connect(v3) as raw:
            raw.execute(sql, args)
        raw.close()

    def loop() -> Loop:
        return Loop(
            ScriptedModel([]),
            tools=tools(),
            max_steps=5,
            max_calls=4,
            ledger=agentloop.ledger.SQLiteLedger(v3),
        )

    body = orjson.loads(agentloop.ledger.SQLiteLedger(v3).read("finished")[1][1].body)
    outcome = f"WHERE kind = {KINDS['tool_finished']} AND key = 'c1'"  # kinds as their numbers
    damage(f"UPDATE records SET body = ? {outcome}", orjson.dumps({"events": body}))
    with pytest.raises(
        agentloop.ledger.LedgerError,
        match=r"record 1 \(tool_finished 'c1'\): expected an array of its events",
    ):
        loop().resume("finished")
    damage(f"UPDATE records SET kind = {KINDS['decision']}, body = ? {outcome}", orjson.dumps(body))
    with pytest.raises(
        agentloop.ledger.LedgerError,
        match=r"record 1 \(decision 'c1'\): expected tool_finished 'c1', the record its last",
    ):
        loop().resume("finished")
    body[0]["status"] = 5  # an event as no run file holds it
    damage(
        f"UPDATE records SET kind = {KINDS['tool_finished']}, body = ? "
        f"WHERE kind = {KINDS['decision']}",
        orjson.dumps(body),
    )
    with pytest.raises(
        agentloop.ledger.LedgerError, match=r"\$\.events\[2\]\.status: expected string, got"
    ):
        loop().resume("finished")


def test_the_command_line_reads_and_decides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """runs, show, pending, report and decide on the fixture ledger; the decided run goes on."""
    path = tmp_path / "runs.db"
    shutil.copy(FIXTURES / "v3-ledger.db", path)
    assert main(["runs", str(path)]) == 0
    states = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()}
    assert (states["finished"], states["paused"], states["crashed"]) == (
        "finished",
        "awaiting_approval",
        "dispatching",
    )
    assert main(["show", str(path), "finished"]) == 0
    assert "agentloop run finished: finished" in capsys.readouterr().out
    assert main(["pending", str(path)]) == 0
    assert "c1" in capsys.readouterr().out
    assert main(["report", str(path), "crashed", "-o", str(tmp_path / "page.html")]) == 0
    assert main(["decide", str(path), "paused", "c1=approve"]) == 0
    capsys.readouterr()
    loop = Loop(
        ScriptedModel([final("502")]),
        tools=tools(),
        max_steps=5,
        max_calls=4,
        ledger=agentloop.ledger.SQLiteLedger(path),
    )
    assert loop.resume("paused").output == "502"


def test_a_run_that_waits_for_a_person_stopped_anywhere_resumes_to_the_same_run() -> None:
    """Stopped after each transition (asked, decided or not yet): resumed and decided, the
    result, the records and the calls that ran are those of the run never stopped."""

    def decisions(pending: tuple[agentloop.PendingCall, ...]) -> dict[str, agentloop.Decision]:
        return {
            call.call_id: call.approve() if call.call_id == "b" else call.deny("no")
            for call in pending
        }

    def drive(run: agentloop.Run, k: int | None) -> None:
        steps = 0
        while not run.done and (k is None or steps < k):
            if run.state == "awaiting_approval":
                run.decide(decisions(run.pending))
            else:
                run.step()
            steps += 1

    whole_desk, whole = Desk(), MemoryLedger()
    run = Loop(banker, tools=whole_desk.registry, ledger=whole).start("go", run_id="r")
    drive(run, None)
    expected = run.result()
    for k in range(len(expected.events) + 1):
        desk, stopped = Desk(), MemoryLedger()
        drive(Loop(banker, tools=desk.registry, ledger=stopped).start("go", run_id="r"), k)
        gc.collect()  # the dropped run gives up its claim
        loop = Loop(banker, tools=desk.registry, ledger=stopped)
        result = loop.resume("r")
        if result.status == "awaiting_approval":
            result = loop.resume("r", decisions=decisions(result.pending))
        assert result == expected, k
        assert records_of(stopped, "r") == records_of(whole, "r"), k
        assert desk.ran == whole_desk.ran, k


# -- when a model's answer is written ----------------------------------------------------------


def test_an_answer_that_starts_no_call_is_kept_before_the_model_is_asked_again() -> None:
    """What the model raised is kept before the retry's wait; a final refused for its output
    before the model is asked again: killed then, neither is asked for again (and both count)."""
    memory = MemoryLedger()
    seen: list[list[tuple[str, str]]] = []
    answers: list[object] = [TimeoutError("slow"), final('{"name": "Paris"}'), final(PARIS)]

    def model(history: list[dict[str, Any]]) -> object:
        seen.append([(r.kind, r.key) for r in memory.records["r1"]])
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(seconds: float, token: agentloop.CancelToken | None) -> None:
        seen.append([(r.kind, r.key) for r in memory.records["r1"]])

    retry = RetryPolicy(attempts=2, base=0.0, jitter=0.0, sleep=sleep)
    loop = Loop(model, output=City, retry=retry, max_steps=4, ledger=memory)
    result = loop.run("Biggest French city?", run_id="r1")
    assert (result.status, result.steps) == ("finished", 3)
    assert seen == [
        [],  # the first ask
        [("reply", "1")],  # the wait: what the model raised is kept
        [("reply", "1")],  # the second ask, after the wait (its end is no answer)
        [("reply", "1"), ("reply", "2")],  # the third: the refused final is kept
    ]
    assert [(r.kind, r.key) for r in memory.records["r1"]] == [
        ("reply", "1"),
        ("reply", "2"),
        ("end", ""),
    ]
    assert loop.resume("r1") == result  # read back from those records


def test_a_reply_record_that_holds_no_answer_or_another_step_is_refused() -> None:
    """A ``reply`` record keeps a model's answers, keyed by the last one's step."""
    memory = MemoryLedger()
    loop = Loop(
        ScriptedModel([final('{"name": "Paris"}'), final(PARIS)]), output=City, ledger=memory
    )
    loop.run("Biggest French city?", run_id="r1")
    records = memory.records["r1"]
    kept = list(records)
    assert [(r.kind, r.key) for r in records] == [("reply", "1"), ("end", "")]
    records[0] = kept[0]._replace(key="2")
    with pytest.raises(agentloop.ledger.LedgerError, match=r"expected reply '1', the step of"):
        loop.resume("r1")
    body = orjson.loads(kept[0].body)
    body = body[1:]  # the validate only: no answer
    records[:] = [kept[0]._replace(body=orjson.dumps(body)), kept[1]]
    with pytest.raises(
        agentloop.ledger.LedgerError, match=r"expected an array of events with a model's answer"
    ):
        loop.resume("r1")
