"""Run files (version 6) as properties: every run of each harness loads back equal and saves
again to the same text, and an input left out where the transcript does not hold it is named.

The harnesses draw runs of the features whose events carry what the transcript
may not hold: context policies (summaries), typed outputs (a converter's
refusals), fallback models and retries (waits, model names, usage), people
deciding (asks and decisions), batches run at once (outcomes out of order) and
agent tools (child runs).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import CancelToken, Loop, Tool, ToolRegistry
from agentloop.context import keep_last, summarise
from agentloop.models import RetryPolicy, fallback
from agentloop.review import RunFileError, run_from_json, run_to_json
from agentloop.testing import ScriptedModel, batch, call, final, with_usage
from tests.conftest import capped
from tests.review.test_runfile import REPLIES, random_run
from tests.support.make_v6_run_files import Adult

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop import RunResult

Message = dict[str, Any]

_SETTINGS = capped(
    settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
)


def add(a: int = 0, b: int = 0) -> int:
    """Add two numbers."""
    return a + b


async def slow(a: int = 0, b: int = 0) -> int:
    """Add, after ``a`` turns of the event loop: batches finish out of order."""
    for _ in range(a % 4):
        await asyncio.sleep(0)
    return a + b


CALLS = st.builds(
    lambda i, a: call(f"c{i}", "add", a=a, b=1), st.integers(0, 5), st.integers(0, 300)
)
BATCHES = st.lists(CALLS, min_size=1, max_size=3).map(lambda made: batch(*made))
TOKENS = st.builds(with_usage, st.just(final("done")), st.integers(0, 9), st.integers(0, 9))
# (Ctrl-C from the model: the plain harness's, random_run, which steps the run through it.)
ERRORS = st.sampled_from([TimeoutError("slow"), ValueError("down")])
AGES = st.builds(lambda age: final(f'{{"age": {age}}}'), st.integers(0, 40))


@st.composite
def runs(draw: st.DrawFn) -> Callable[[], RunResult[Any]]:
    """How to make a run of one of the harnesses (made in the test: it may use ``random``)."""
    kind = draw(st.sampled_from(["plain", "context", "typed", "fallback", "asks", "async"]))
    if kind == "plain":
        replies = draw(st.lists(REPLIES, max_size=8))
        limits = (
            draw(st.integers(0, 7)),
            draw(st.integers(0, 4)),
            draw(st.none() | st.integers(0, 12)),
        )
        return lambda: random_run(replies, *limits)
    steps = draw(st.lists(st.one_of(CALLS, BATCHES, TOKENS, ERRORS), max_size=6))

    def script() -> ScriptedModel:
        return ScriptedModel([*steps, *[final("end")] * 8])

    if kind == "context":
        writer = draw(st.sampled_from([final("so far"), ValueError("no summary")]))
        summarised = draw(st.booleans())

        def policy() -> Any:
            if summarised:
                return summarise(ScriptedModel([writer] * 20), tokens=80)
            return keep_last(tokens=60)

        return lambda: _ran(Loop(script(), tools=[add], context=policy(), max_steps=8))
    if kind == "typed":
        ages = [*draw(st.lists(AGES, min_size=1, max_size=4)), *[final("{}")] * 5]
        retries = draw(st.integers(0, 3))
        return lambda: _ran(Loop(ScriptedModel(ages), output=Adult, max_output_retries=retries))
    if kind == "fallback":
        second = [*draw(st.lists(st.one_of(TOKENS, ERRORS), max_size=3)), *[final("end")] * 8]

        def chain() -> Any:
            first = ScriptedModel([*steps[:2], *[final("end")] * 8])
            return fallback(first, ScriptedModel(second))

        retry = RetryPolicy(attempts=2, base=0.25, jitter=0.0, sleep=lambda s, t: None)
        return lambda: _ran(Loop(chain(), tools=[add], retry=retry, max_steps=8))
    if kind == "asks":
        decisions = draw(st.lists(st.booleans(), min_size=8, max_size=8))
        return lambda: _asked(script(), decisions)
    concurrency = draw(st.sampled_from([1, 3]))
    return lambda: _at_once(script(), concurrency)


def _asked(script: ScriptedModel, decisions: list[bool]) -> RunResult[Any]:
    """A run whose big sums a person decides, approving or denying in turn."""
    asking = Tool(
        add,
        policy=lambda c: agentloop.ask("big") if c["arguments"]["a"] > 100 else agentloop.allow(),
    )
    loop = Loop(script, tools=ToolRegistry([asking]), max_steps=8)
    result = _ran(loop)
    for allowed in decisions:
        if result.status != "awaiting_approval":
            break
        decided = {
            p.call_id: agentloop.approve() if allowed else agentloop.deny("no")
            for p in result.pending
        }
        result = loop.resume(result, decisions=decided)
    return result


def _at_once(script: ScriptedModel, concurrency: int) -> RunResult[Any]:
    """A run under asyncio whose batches run at once, with an agent tool beside."""
    child = Loop(_researcher, tools=[add])
    tools = [Tool(slow), child.as_tool("research", "Research.")]
    loop = Loop(script, tools=tools, max_concurrency=concurrency, max_steps=8)
    return asyncio.run(loop.arun("go", cancel=CancelToken()))


def _researcher(history: list[Message]) -> Message:
    """An agent tool's model: a call, then the answer."""
    return call("k1", "add", a=1, b=1) if len(history) == 1 else final("two")


def _ran(loop: Loop[Any]) -> RunResult[Any]:
    token = CancelToken()
    run = loop.start("go", cancel=token)
    while not run.done and run.state != "awaiting_approval":
        with contextlib.suppress(KeyboardInterrupt):  # the run records it, then re-raises
            run.step()
    return run.result()


@_SETTINGS
@given(make=runs())
def test_every_harness_run_loads_back_equal_and_saves_as_it_was(
    make: Callable[[], RunResult[Any]],
) -> None:
    """Loaded, each run equals its result (a typed output's value aside: the file keeps its
    JSON), has the same transcript, and saved again is the same text."""
    result = make()
    text = run_to_json(result)
    loaded = run_from_json(text)
    assert loaded._replace(output=result.output) == result
    assert loaded.output_text == result.output_text
    assert loaded.transcript_json == result.transcript_json
    assert [e.input_json for e in loaded.events] == [e.input_json for e in result.events]
    assert run_to_json(loaded) == text


@_SETTINGS
@given(make=runs(), pick=st.integers(0, 2**16))
def test_an_input_left_out_that_the_transcript_does_not_hold_is_named(
    make: Callable[[], RunResult[Any]], pick: int
) -> None:
    """An event whose input the file writes out (the transcript does not hold it where the
    replay looks), with it left out: a RunFileError naming that event."""
    result = make()
    document = orjson.loads(run_to_json(result))
    written = [i for i, event in enumerate(document["events"]) if "input" in event]
    if not written:
        return
    index = written[pick % len(written)]
    damaged = document["events"][index]
    del damaged["input"]
    damaged.pop("status", None)
    with pytest.raises(RunFileError) as caught:
        run_from_json(orjson.dumps(document))
    assert caught.value.where.startswith(f"run file: $.events[{index}]")


def test_a_summary_left_out_is_refused_even_where_the_next_reply_matches_it() -> None:
    """A summary is never in the transcript: its input is always written, never looked for.

    Here the summariser says exactly what the model says next, so a file without the
    summary's input would otherwise take the model's reply as the summary, and load.
    """
    steps = [call("c0", "add", a=0, b=1), batch(call("c1", "add", a=0, b=1))]
    policy = summarise(ScriptedModel([final("end")] * 20), tokens=80)
    result = _ran(Loop(ScriptedModel([*steps, *[final("end")] * 8]), tools=[add], context=policy))
    document = orjson.loads(run_to_json(result))
    summaries = [
        i for i, event in enumerate(document["events"]) if event["on"] == "summary_written"
    ]
    assert summaries
    assert all("input" in document["events"][i] for i in summaries)
    del document["events"][summaries[0]]["input"]
    with pytest.raises(RunFileError) as caught:
        run_from_json(orjson.dumps(document))
    assert caught.value.where.startswith(f"run file: $.events[{summaries[0]}].input")


@pytest.mark.parametrize(
    "edit",
    [
        lambda e: e.pop("call"),
        lambda e: e.update(call="zz"),
        lambda e: e["waits"][0].update(path=["zz"]),
    ],
    ids=["no call", "a call not running", "a path under another call"],
)
def test_a_damaged_call_waits_event_is_refused_where_it_is(edit: Callable[[Any], Any]) -> None:
    """A wait naming no call, or a call that does not run, is the file's damage at that event."""

    def send(to: str) -> str:
        """Send."""
        return "sent"

    clerk = Loop(
        ScriptedModel([call("k1", "send", to="b"), final("x")]),
        tools=[agentloop.Tool(send, policy=lambda c: agentloop.ask("a person decides"))],
    )
    office = Loop(
        ScriptedModel([call("c1", "post", input="w"), final("y")]),
        tools=[clerk.as_tool("post", "Post.")],
    )
    document = orjson.loads(run_to_json(office.run("t")))
    index = next(i for i, e in enumerate(document["events"]) if e["on"] == "call_waits")
    edit(document["events"][index])
    with pytest.raises(RunFileError) as caught:
        run_from_json(orjson.dumps(document))
    assert caught.value.where.startswith(f"run file: $.events[{index}]")


def _office(script: list[Any], asks: bool) -> Loop[Any]:
    """A parent whose agent tool ``post``'s child sends mail (asking a person first, or not)."""

    def send(to: str) -> str:
        """Send."""
        return "sent"

    def answering(replies: list[Any]) -> Any:
        return lambda history: replies[sum(m["kind"] in ("call", "calls") for m in history)]

    policy = (lambda c: agentloop.ask("a person decides")) if asks else None
    clerk = Loop(
        answering([call("k1", "send", to="bob"), with_usage(final("x"), 3, 2)]),
        tools=[Tool(send, policy=policy)],
    )
    return Loop(answering(script), tools=[clerk.as_tool("post", "Post."), add])


def _edit_waiting_child(d: dict[str, Any]) -> str:
    d["children"]["c1"]["events"][0]["input"]["arguments"]["to"] = "eve"
    return "$.children.c1"


def _move_child(d: dict[str, Any]) -> str:
    d["children"]["c2"] = d["children"].pop("c1")
    return "$.children.c2"


def _extra_child(d: dict[str, Any]) -> str:
    d["children"]["zz"] = d["children"]["c1"]
    return "$.children.zz"


def _edit_usage(d: dict[str, Any]) -> str:
    answer = next(e for e in d["events"] if e["on"] == "tool_returned" and "usage" in e)
    answer["usage"] = [500, 2, 0]
    return "$.children.c1"


@pytest.mark.parametrize(
    ("asks", "edit"),
    [
        (True, _edit_waiting_child),
        (False, _move_child),
        (False, _extra_child),
        (False, _edit_usage),
    ],
    ids=["a waiting child's call edited", "moved under a plain call", "under no call", "tokens"],
)
def test_children_their_parent_does_not_vouch_for_are_refused(
    asks: bool, edit: Callable[[dict[str, Any]], str]
) -> None:
    """A child under a call the run did not answer from it, with other tokens than the call
    reported, or waiting on other calls than the run lists: the file's damage, named."""
    script = [batch(call("c1", "post", input="w"), call("c2", "add", a=1, b=2)), final("y")]
    document = orjson.loads(run_to_json(_office(script, asks).run("t")))
    where = edit(document)
    with pytest.raises(RunFileError) as caught:
        run_from_json(orjson.dumps(document))
    assert caught.value.where.startswith(f"run file: {where}")
