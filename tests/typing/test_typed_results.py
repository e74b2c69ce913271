"""A Loop's output type reaches its runs and results, under mypy --strict and pyright.

Each ``assert_type`` is checked by both type checkers (``make check``) and each
test runs under pytest, so the types describe what the runs hand back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, assert_type

import attrs
import pytest

import agentloop
from agentloop import AsyncRun, ConfigurationMismatchError, InvalidStateError, Loop, Run, RunResult
from agentloop.dbos import DBOSLoop
from agentloop.ledger import SQLiteLedger
from agentloop.review import load_run, save_run
from agentloop.testing import ScriptedModel, final

if TYPE_CHECKING:
    from pathlib import Path


@attrs.frozen
class City:
    """A city and its population."""

    name: str
    population: int


PARIS = '{"name": "Paris", "population": 2100000}'


def paris() -> ScriptedModel:
    return ScriptedModel([final(PARIS)])


def test_a_loop_without_output_is_a_loop_of_str() -> None:
    loop = Loop(ScriptedModel([final("Paris")]))
    assert_type(loop, Loop[str])
    result = loop.run("Capital of France?")
    assert_type(result, RunResult[str])
    assert_type(result.output, str | None)
    assert_type(result.require_output(), str)
    assert result.require_output() == "Paris"
    assert_type(Loop(ScriptedModel([]), output=str), Loop[str])


def test_a_loop_of_a_class_hands_out_that_class() -> None:
    loop = Loop(paris(), output=City)
    assert_type(loop, Loop[City])
    result = loop.run("Biggest city in France?")
    assert_type(result, RunResult[City])
    assert_type(result.output, City | None)
    city = result.require_output()
    assert_type(city, City)
    assert city == City("Paris", 2100000)


def test_a_step_by_step_run_hands_out_the_same_type() -> None:
    run = Loop(paris(), output=City).start("Biggest city?")
    assert_type(run, Run[City])
    assert_type(run.finish(), RunResult[City])
    assert_type(run.result(), RunResult[City])
    assert run.result().require_output().population == 2100000


async def test_an_asyncio_run_hands_out_the_same_type() -> None:
    loop = Loop(paris(), output=City)
    run = loop.astart("Biggest city?")
    assert_type(run, AsyncRun[City])
    result = await run.afinish()
    assert_type(result, RunResult[City])
    assert_type(result.require_output(), City)
    again = await Loop(paris(), output=City).arun("Biggest city?")
    assert_type(again, RunResult[City])
    assert again.output == result.output == City("Paris", 2100000)


async def test_resumed_continued_and_forked_runs_keep_the_loops_type(tmp_path: Path) -> None:
    done = Loop(paris(), output=City).run("Biggest city?")
    save_run(done, tmp_path / "run.json")
    loaded = load_run(tmp_path / "run.json")
    assert_type(loaded, RunResult[Any])  # a run file holds JSON, not classes
    assert loaded.output == {"name": "Paris", "population": 2100000}
    loop = Loop(ScriptedModel([]), output=City)  # nothing is asked: the run ended
    resumed = loop.resume(loaded)
    assert_type(resumed, RunResult[City])
    assert resumed.require_output() == City("Paris", 2100000)
    assert_type(await loop.aresume(loaded), RunResult[City])
    forked = Loop(paris(), output=City).fork(loaded, at=0)
    assert_type(forked, Run[City])
    assert forked.finish().require_output() == City("Paris", 2100000)
    assert_type(Loop(paris(), output=City).afork(loaded, at=0), AsyncRun[City])
    ran_out = Loop(ScriptedModel([]), output=City, max_steps=0).run("Biggest city?")
    continued = Loop(paris(), output=City).continue_run(ran_out)
    assert_type(continued, RunResult[City])
    assert continued.require_output() == City("Paris", 2100000)


async def test_a_conversations_turns_have_the_loops_type(tmp_path: Path) -> None:
    """conversation() gives each turn's output as resume does: a City, not its JSON."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    lyon = '{"name": "Lyon", "population": 520000}'
    loop = Loop(
        ScriptedModel([final(PARIS), final(f"```json\n{lyon}\n```")]), output=City, ledger=ledger
    )
    loop.run("Biggest city?", conversation="u")
    loop.run("And the next?", conversation="u")
    turns = loop.conversation("u")
    assert_type(turns, tuple[RunResult[City], ...])
    assert [t.output for t in turns] == [City("Paris", 2100000), City("Lyon", 520000)]
    assert_type(await loop.aconversation("u"), tuple[RunResult[City], ...])
    assert await loop.aconversation("u") == turns
    # A Loop of another output reads no City as its own.
    with pytest.raises(ConfigurationMismatchError, match=r"another output than this Loop's"):
        Loop(ScriptedModel([]), ledger=ledger).conversation("u")


def test_an_output_that_is_not_a_class_gives_a_loop_of_any() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    by_schema = Loop(ScriptedModel([final('{"name": "Paris"}')]), output=schema)
    assert_type(by_schema, Loop[Any])
    assert by_schema.run("x").output == {"name": "Paris"}
    assert_type(Loop(ScriptedModel([]), output=list[City]), Loop[list[City]])


def test_a_run_that_did_not_finish_has_no_output() -> None:
    result = Loop(ScriptedModel([]), output=City, max_steps=0).run("Biggest city?")
    assert result.status == "exhausted"
    assert result.output is None
    with pytest.raises(InvalidStateError) as raised:
        result.require_output()
    assert raised.value.state == "exhausted"
    assert "'exhausted'" in str(raised.value)
    assert "max_steps" in str(raised.value)


def check_a_dbos_loop(loop: Loop[City], queue: Any) -> None:
    """Types only (a DBOSLoop needs DBOS launched): tests/integrations runs them."""
    dbos_loop = DBOSLoop(loop, name="cities")
    assert_type(dbos_loop, DBOSLoop[City])
    assert_type(dbos_loop.run("Biggest city?"), RunResult[City])
    assert_type(dbos_loop.start("Biggest city?").get_result(), RunResult[City])
    assert_type(dbos_loop.enqueue(queue, "Biggest city?").get_result(), RunResult[City])
    assert_type(DBOSLoop.result("run-1"), RunResult[Any])


def test_a_bare_name_in_an_annotation_takes_any_output() -> None:
    """``Loop`` and ``RunResult`` alone are ``Loop[Any]`` and ``RunResult[Any]``."""
    any_loop: Loop = Loop(paris(), output=City)
    assert_type(any_loop, Loop[Any])
    any_result: agentloop.RunResult = any_loop.run("Biggest city?")
    assert_type(any_result.output, Any | None)
    wider: RunResult[object] = Loop(paris(), output=City).run("Biggest city?")  # covariant
    assert wider.output == City("Paris", 2100000)
