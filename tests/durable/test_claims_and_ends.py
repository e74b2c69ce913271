"""A durable run's claim and its end: a claim is never left with an object the caller never got,
and every end is recorded before it is reported."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest

import agentloop
from agentloop import CancelToken, InvalidStateError, Loop, allow, approve
from agentloop.engine import Trigger
from agentloop.ledger import LedgerRecord, LedgerWriter, RunBusyError, SQLiteLedger
from agentloop.testing import ScriptedModel, final
from tests.support.payments import Desk, records, script, state_of, two

if TYPE_CHECKING:
    from pathlib import Path


# -- a claim is never left with an object the caller never got -----------------------


def test_resume_with_decisions_for_a_run_not_waiting_releases_it(tmp_path: Path) -> None:
    """``InvalidStateError``, and the run can be resumed at once (it was ``RunBusyError``)."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    desk = Desk(lambda call: allow())
    loop = Loop(ScriptedModel([two()]), tools=desk.registry, ledger=ledger)
    run = loop.start("pay", run_id="r1")
    while not desk.ran:  # the reply is recorded with the first call it starts
        run.step()
    del run  # the process stops here
    gc.collect()
    again = Loop(ScriptedModel([final("done")]), tools=desk.registry, ledger=ledger)
    with pytest.raises(InvalidStateError, match="not awaiting approval") as refused:
        again.resume("r1", decisions={"c1": approve(), "c2": approve()})
    assert refused.value is not None  # the traceback, and its frames, are still held here
    assert again.resume("r1").status == "finished"
    assert desk.ran == ["pay 10", "pay 1"]


async def test_aresume_with_decisions_for_a_run_not_waiting_releases_it(tmp_path: Path) -> None:
    """The asyncio driver's ``aresume`` releases the run as ``resume`` does."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    desk = Desk(lambda call: allow())
    run = Loop(ScriptedModel([two()]), tools=desk.registry, ledger=ledger).start("pay", run_id="r1")
    run.step()
    del run
    gc.collect()
    again = Loop(ScriptedModel([final("done")]), tools=desk.registry, ledger=ledger)
    with pytest.raises(InvalidStateError) as refused:
        await again.aresume("r1", decisions={"c1": approve()})
    assert refused.value is not None
    assert (await again.aresume("r1")).status == "finished"


def test_a_run_whose_listener_raised_is_released(tmp_path: Path) -> None:
    """``loop.run`` that raises hands the caller no run: the claim goes with it."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    desk = Desk(lambda call: allow())

    def listener(transition: agentloop.Transition) -> None:
        if transition.trigger is Trigger.TOOL_RETURNED:  # the first call's outcome, recorded
            raise RuntimeError("a listener that fails")

    loop = Loop(script(), tools=desk.registry, ledger=ledger, listeners=[listener])
    with pytest.raises(RuntimeError, match="a listener that fails") as failed:
        loop.run("pay", run_id="r1")
    assert failed.value is not None
    result = Loop(ScriptedModel([final("done")]), tools=desk.registry, ledger=ledger).resume("r1")
    assert (result.status, desk.ran) == ("finished", ["pay 10", "pay 1"])


# -- every end is recorded before it is reported -----------------------------------


def test_a_cancellation_that_cannot_be_recorded_is_not_taken(tmp_path: Path) -> None:
    """Another process holds the paused run: ``RunBusyError``, and the run still waits.

    It used to end ``cancelled`` in memory only: a second ``finish()``
    returned that unrecorded end while the ledger said ``awaiting_approval``.
    """
    ledger = SQLiteLedger(tmp_path / "runs.db")
    desk, token = Desk(), CancelToken()
    run = Loop(script(), tools=desk.registry, ledger=ledger).start("pay", run_id="r1", cancel=token)
    assert run.finish().status == "awaiting_approval"
    before, kept = state_of(run), records(ledger, "r1")
    elsewhere = SQLiteLedger(ledger.path).claim("r1")  # another process, briefly
    token.cancel()
    with pytest.raises(RunBusyError):
        run.finish()
    assert state_of(run) == before
    assert records(ledger, "r1") == kept
    elsewhere.release()
    assert run.finish().status == "cancelled"
    assert records(ledger, "r1")[-1][0] == "end"
    resumed = Loop(ScriptedModel([]), tools=desk.registry, ledger=ledger).resume("r1")
    assert (resumed.status, desk.ran) == ("cancelled", [])


class InterruptedClaim:
    """A ledger whose next claim is interrupted, then refused: another process holds the run."""

    def __init__(self, ledger: SQLiteLedger) -> None:
        self.ledger, self.claims = ledger, 0

    def create(self, run_id: str, header: bytes) -> LedgerWriter:
        return self.ledger.create(run_id, header)

    def claim(self, run_id: str) -> LedgerWriter:
        self.claims += 1
        if self.claims == 2:
            raise KeyboardInterrupt
        if self.claims == 3:
            raise RunBusyError(f"run {run_id!r} is held elsewhere")
        return self.ledger.claim(run_id)

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        return self.ledger.read(run_id)


def test_an_interrupt_whose_end_cannot_be_recorded_leaves_the_run_waiting(tmp_path: Path) -> None:
    """Interrupted while the paused run is held elsewhere: it still waits, in memory and ledger."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    flaky = InterruptedClaim(ledger)
    desk, token = Desk(), CancelToken()
    run = Loop(script(), tools=desk.registry, ledger=flaky).start("pay", run_id="r1", cancel=token)
    run.finish()  # paused: its claim given up
    flaky.claims = 1
    before, kept = state_of(run), records(ledger, "r1")
    token.cancel()
    with pytest.raises(KeyboardInterrupt):
        run.finish()  # the claim back is interrupted; the interruption's end, refused
    assert state_of(run) == before
    assert records(ledger, "r1") == kept
    assert run.finish().status == "cancelled"  # claimed at last: recorded, then reported
    assert records(ledger, "r1")[-1][0] == "end"


class FullAtTheEnd:
    """A ledger whose disk fills up just as a run's ``end`` is written."""

    def __init__(self, ledger: SQLiteLedger) -> None:
        self.ledger = ledger

    def create(self, run_id: str, header: bytes) -> LedgerWriter:
        return FullWriter(self.ledger.create(run_id, header))

    def claim(self, run_id: str) -> LedgerWriter:
        return FullWriter(self.ledger.claim(run_id))

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        return self.ledger.read(run_id)


class FullWriter:
    """A writer that fails on the ``end`` record."""

    def __init__(self, writer: LedgerWriter) -> None:
        self.writer = writer

    def append(self, record: LedgerRecord) -> None:
        if record.kind == "end":
            raise OSError(28, "No space left on device")
        self.writer.append(record)

    def release(self) -> None:
        self.writer.release()


def test_an_end_that_could_not_be_recorded_is_not_reported(tmp_path: Path) -> None:
    """The caller sees the failed write, then ``LedgerError``: never an unrecorded end.

    A second ``finish()`` used to return the end the ledger never got.
    """
    ledger = SQLiteLedger(tmp_path / "runs.db")
    desk, token = Desk(), CancelToken()
    loop = Loop(script(), tools=desk.registry, ledger=FullAtTheEnd(ledger))
    run = loop.start("pay", run_id="r1", cancel=token)
    run.finish()
    token.cancel()
    with pytest.raises(OSError, match="No space left"):
        run.finish()
    assert run.state == "awaiting_approval"  # the end it could not record was not made
    assert [event.dest for event in run.events][-1] == "awaiting_approval"
    with pytest.raises(agentloop.ledger.LedgerError, match="the ledger failed earlier"):
        run.finish()
    assert records(ledger, "r1")[-1][0] == "approval_asked"  # no end, no decision
    resumed = Loop(ScriptedModel([]), tools=desk.registry, ledger=ledger).resume("r1")
    assert (resumed.status, desk.ran) == ("awaiting_approval", [])
