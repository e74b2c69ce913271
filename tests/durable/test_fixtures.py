"""Every format this agentloop reads has committed fixtures, which open and go on.

``tests/fixtures`` holds what was written in each: version 6 run files
(finished, paused for a person, cancelled mid-batch, malformed, failed, and
what version 6 records where the transcript does not hold it; made by
``tests/support/make_v6_run_files.py``) and a version 3 ledger (a
finished run, a paused one, one whose process died inside a tool; made by
``tests/support/make_v3_ledger.py``, read in ``test_ledger_record.py``). A
format change comes with its reader and a fixture of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import pytest

import agentloop
from agentloop import Loop
from agentloop._durable import journal
from agentloop._review import runshape
from agentloop.testing import ScriptedModel, final
from tests.support import FIXTURES
from tests.support.fixture_tools import tools
from tests.support.make_v6_run_files import STATUSES

if TYPE_CHECKING:
    from pathlib import Path

RUN_FILES = sorted(FIXTURES.glob("v6-*.json"))


def test_every_format_read_has_a_committed_fixture() -> None:
    """Each run file and ledger version this agentloop reads, and no other, has fixtures."""
    run_files = {int(path.name[1:].split("-")[0]) for path in FIXTURES.glob("v*.json")}
    ledgers = {int(path.name[1:].split("-")[0]) for path in FIXTURES.glob("v*-ledger.db")}
    assert run_files == set(runshape.READS)
    assert ledgers == set(journal.READS)
    assert runshape.VERSION in run_files
    assert journal.VERSION in ledgers


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda path: path.stem)
def test_a_run_file_fixture_opens_and_saves_as_it_was(path: Path, tmp_path: Path) -> None:
    """Loaded and saved again, a fixture is the same file, byte for byte; its run is the one
    it was made as (the engine's words in its transcript included, made again by the replay)."""
    assert orjson.loads(path.read_bytes())["version"] == runshape.VERSION
    result = agentloop.review.load_run(path)
    assert result.status == STATUSES[path.stem.removeprefix("v6-")]
    again = tmp_path / "again.json"
    agentloop.review.save_run(result, again)
    assert again.read_bytes() == path.read_bytes()


def test_a_paused_run_file_goes_on_when_decided() -> None:
    """The paused run waits for the call it asked about; approved, it runs and finishes."""
    paused = agentloop.review.load_run(FIXTURES / "v6-paused.json")
    assert [call.call_id for call in paused.pending] == ["c2"]
    loop = Loop(ScriptedModel([final("502")]), tools=tools(), max_steps=5, max_calls=4)
    result = loop.resume(paused, decisions={"c2": agentloop.approve()})
    assert (result.status, result.output) == ("finished", "502")
    assert [m["content"] for m in result.transcript if m["kind"] == "tool_result"] == [3, 501]


def test_every_run_the_fixtures_were_made_of_has_its_fixture() -> None:
    """The fixtures are the runs ``make_v6_run_files`` makes, one file each."""
    assert sorted(path.stem.removeprefix("v6-") for path in RUN_FILES) == sorted(STATUSES)


def test_what_version_6_records_beside_the_transcript_is_in_its_fixture() -> None:
    """Each input the transcript does not hold is written in the fixture made to hold it."""
    events = {
        path.stem.removeprefix("v6-"): orjson.loads(path.read_bytes())["events"]
        for path in RUN_FILES
    }
    assert "not_json" in events["notjson"][0]
    assert any("problems" in event for event in events["typed"])
    assert [event.get("call") for event in events["concurrent"][2:4]] == ["c2", "c1"]
    assert any(e["on"] == "summary_written" and "input" in e for e in events["context"])
    assert {"wait", "model"} <= set().union(*events["fallback"])
    assert any("usage" in event for event in events["fallback"])
    assert events["streamed"][-1]["partial_text"] == "Hel"
    children = agentloop.review.load_run(FIXTURES / "v6-children.json").children
    assert children["c1"].output == "two"
