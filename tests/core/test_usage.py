"""Token usage, the token budget and timing: recorded on events, never in the transcript."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

import agentloop
from agentloop import CancelToken, Loop, Usage
from agentloop.engine import Budget, Engine, RunTool
from agentloop.testing import (
    ScriptedModel,
    assert_contract,
    batch,
    call,
    cancel,
    final,
    with_usage,
)
from tests.support.helpers import Driver, Recorder


def test_usage_goes_on_the_reply_event_and_sums_on_the_result(driver: Driver) -> None:
    """Each reply's usage is on its model_replied event; totals on the result; not in the record."""
    model = ScriptedModel(
        [with_usage(call("c1", "add", a=1, b=2), 100, 20, 60), with_usage(final("3"), 130, 5, 100)]
    )
    result = driver.run(Loop(model, tools={"add": Recorder()}), "go")

    assert result.status == "finished"
    replied = [e for e in result.events if e.trigger == "model_replied"]
    assert [e.usage for e in replied] == [Usage(100, 20, 60), Usage(130, 5, 100)]
    assert all(e.usage is None for e in result.events if e.trigger != "model_replied")
    assert result.usage == Usage(230, 25, 160)
    assert result.usage.total == 255
    assert all("usage" not in message for message in result.transcript)
    assert_contract(result, "go")


@pytest.mark.row("awaiting_model --ask_model [tokens_exhausted]--> exhausted")
def test_the_token_budget_stops_before_the_next_model_call(driver: Driver) -> None:
    """Tokens reach max_total_tokens: exhausted before asking; the step budget is checked first."""
    model = ScriptedModel([with_usage(call("c1", "add", a=1, b=1), 700, 300), final("never asked")])
    run = driver.start(Loop(model, tools={"add": Recorder()}, max_total_tokens=1000), "go")
    events = list(run)

    last = events[-1]
    assert (last.source, last.dest, last.trigger, last.guard) == (
        "awaiting_model",
        "exhausted",
        "ask_model",
        "tokens_exhausted",
    )
    result = run.result()
    assert (result.status, result.reason, result.steps, result.calls) == (
        "exhausted",
        "max_total_tokens",
        1,
        1,
    )
    assert len(model.seen) == 1  # the model was not asked again
    assert [m["kind"] for m in result.transcript] == ["user", "call", "tool_result"]

    # One token short of the budget, the model is asked; with no step left, steps win.
    under = ScriptedModel([with_usage(call("c1", "add", a=1, b=1), 700, 299), final("ok")])
    assert (
        driver.run(Loop(under, tools={"add": Recorder()}, max_total_tokens=1000), "go").status
        == "finished"
    )
    both = ScriptedModel([with_usage(call("c1", "add", a=1, b=1), 700, 300)])
    spent = driver.run(
        Loop(both, tools={"add": Recorder()}, max_steps=1, max_total_tokens=1000), "go"
    )
    assert spent.reason == "max_steps"


def test_usage_of_a_reply_that_ends_the_run_still_counts() -> None:
    """Cancelled after the reply, or a malformed reply: the tokens were spent all the same."""
    token = CancelToken()
    result = Loop(ScriptedModel([cancel(token), with_usage(final("x"), 10, 2)])).run(
        "go", cancel=token
    )
    assert (result.status, result.usage) == ("cancelled", Usage(10, 2, 0))
    assert result.rejected == final("x")  # the reply, without its bill

    bad = Loop(ScriptedModel([with_usage({"kind": "nope"}, 7, 1)])).run("go")
    assert (bad.status, bad.usage) == ("malformed", Usage(7, 1, 0))


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 1, "output_tokens": 1},
        {"input_tokens": 1, "output_tokens": -1, "cached_tokens": 0},
        {"input_tokens": True, "output_tokens": 1, "cached_tokens": 0},
        {"input_tokens": 1.0, "output_tokens": 1, "cached_tokens": 0},
        {"input_tokens": 1, "output_tokens": 2, "cached_tokens": 5},
        [1, 2, 3],
    ],
)
def test_a_usage_of_the_wrong_shape_makes_the_reply_malformed(usage: object) -> None:
    """The bill must be exactly three non-negative ints; it stays in the rejected reply."""
    reply = {**final("x"), "usage": usage}
    result = Loop(ScriptedModel([reply])).run("go")

    assert result.status == "malformed"
    assert result.error is not None
    assert result.error.startswith(
        "malformed reply: expected 'usage' to be {'input_tokens', 'output_tokens', "
        "'cached_tokens'}, each a non-negative int, cached_tokens at most input_tokens, got "
    )
    assert result.usage == Usage()
    assert result.rejected == reply


def test_the_token_budget_is_checked_when_the_loop_is_built() -> None:
    """None or an int from 0 to 2**63 - 1, as the other budgets."""
    with pytest.raises(TypeError, match="max_total_tokens must be a non-negative int or None, got"):
        Loop(ScriptedModel([]), max_total_tokens="1000")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="max_total_tokens must be a non-negative int"):
        Loop(ScriptedModel([]), max_total_tokens=-1)
    assert Loop(ScriptedModel([])).budget.max_total_tokens is None


def test_transitions_record_when_and_how_long() -> None:
    """at: the clock when made; took: since the model was asked or the tool handed out."""
    ticks = itertools.count(0.0, 0.5)  # each read of the clock is half a second later
    engine = Engine("go", budget=Budget(max_steps=3, max_calls=2), clock=lambda: next(ticks))
    engine.next()  # asked at 0.0
    replied = engine.replied(batch(call("c1", "add"), call("c2", "add")))  # made at 0.5
    assert (replied.at, replied.took) == (0.5, 0.5)
    accepted = engine.next()  # validate: made by the engine, answers nothing
    assert isinstance(accepted, agentloop.Transition)
    assert accepted.took is None
    first, second = engine.next(), engine.next()  # handed out at 1.5 and 2.0
    assert isinstance(first, RunTool)
    assert isinstance(second, RunTool)
    done = engine.returned({"status": "ok", "content": 1}, "c2")  # made at 2.5
    assert (done.at, done.took) == (2.5, 0.5)
    last = engine.returned({"status": "ok", "content": 1}, "c1")  # made at 3.0
    assert (last.at, last.took) == (3.0, 1.5)


def test_times_do_not_take_part_in_equality_or_replay(tmp_path: Any) -> None:
    """Two runs of the same story are equal; a saved run replays and keeps its own times,
    as seconds since the run began (its first request), to the microsecond."""
    script = [with_usage(call("c1", "add", a=1, b=2), 5, 1), final("3")]
    first = Loop(ScriptedModel(list(script)), tools={"add": Recorder()}).run("go")
    second = Loop(ScriptedModel(list(script)), tools={"add": Recorder()}).run("go")
    assert first.events == second.events
    assert [e.at for e in first.events] != [e.at for e in second.events]

    path = tmp_path / "run.json"
    agentloop.review.save_run(first, path)
    loaded = agentloop.review.load_run(path)
    assert loaded == first
    times = [(e.at or 0.0, e.took) for e in first.events]
    began = times[0][0] - (times[0][1] or 0.0)
    assert [e.at for e in loaded.events] == pytest.approx([at - began for at, _ in times], abs=1e-6)
    assert [e.took for e in loaded.events] == pytest.approx(
        [e.took for e in first.events], abs=1e-6
    )
    assert loaded.usage == Usage(5, 1, 0)


def test_show_and_the_report_give_tokens_and_times(tmp_path: Any) -> None:
    """The run's token line, each reply's tokens, and how long each call took."""
    from agentloop._review.report import report_html
    from agentloop._review.text import describe, run_lines

    model = ScriptedModel([with_usage(call("c1", "add", a=1, b=2), 100, 20, 60), final("3")])
    result = Loop(model, tools={"add": Recorder()}, max_total_tokens=5000).run("go")

    lines = run_lines(result, title="t")
    assert "tokens   120 of 5000: 100 in (60 cached), 20 out" in lines
    assert describe(result, 0)[-1] == "tokens: 100 in (60 cached), 20 out"
    assert describe(result, 2)[5].endswith(("µs", "ms"))  # the tool's row: how long it ran
    assert '<dd id="summary-tokens">120 of 5000: 100 in (60 cached), 20 out</dd>' in report_html(
        result, svg=False
    )


def test_a_refused_reply_still_counts_what_it_cost(tmp_path: Any) -> None:
    """IncompleteReply carries usage: on the model_raised event, in the totals, through a save."""
    from agentloop.providers import IncompleteReply

    cut = IncompleteReply(
        "the reply was cut off at max_tokens",
        {"input_tokens": 50, "output_tokens": 400, "cached_tokens": 0},
    )
    result = Loop(
        ScriptedModel([with_usage(call("c1", "add", a=1, b=1), 10, 2), cut]),
        tools={"add": Recorder()},
    ).run("go")

    assert (result.status, result.usage) == ("failed", Usage(60, 402, 0))
    assert result.events[-1].usage == Usage(50, 400, 0)
    path = tmp_path / "run.json"
    agentloop.review.save_run(result, path)
    assert agentloop.review.load_run(path) == result


def test_a_run_in_progress_shows_its_usage() -> None:
    """run.usage sums what the replies so far reported, before the run is over."""
    run = Loop(
        ScriptedModel([with_usage(call("c1", "add", a=1, b=1), 10, 2), final("2")]),
        tools={"add": Recorder()},
    ).start("go")
    assert run.usage == Usage()
    run.step()
    assert run.usage == Usage(10, 2, 0)


def test_a_negative_duration_in_a_run_file_is_refused() -> None:
    """took is a duration: a hand-edited negative one is named, not loaded."""
    result = Loop(ScriptedModel([final("x")])).run("go")
    document = orjson.loads(agentloop.review.run_to_json(result))
    document["events"][0]["took"] = -5
    with pytest.raises(agentloop.review.RunFileError, match=r"\$\.events\[0\]\.took"):
        agentloop.review.run_from_json(orjson.dumps(document))
