"""A Loop's settings: the defaults that fit a real agent, ``Loop(system=...)`` and ``owns=``."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import pytest

import agentloop
from agentloop.testing import AsyncScriptedModel, ScriptedModel, batch, call, final
from tests.support.helpers import adder

Message = dict[str, Any]


# -- defaults that fit a real agent ---------------------------------------------------------------


def parallel_agent(*widths: int) -> list[object]:
    """A model that sends a batch of each width in turn, then a final answer."""
    script: list[object] = [
        batch(*(call(f"c{b}-{i}", "adder", a=b, b=i) for i in range(width)))
        for b, width in enumerate(widths)
    ]
    return [*script, final("sum")]


def test_the_defaults_are_stated_once() -> None:
    """Loop's, Budget's and Engine's defaults agree: 25 steps, 100 calls, 10 calls at once."""
    parameters = inspect.signature(agentloop.Loop).parameters
    budget = agentloop.engine.Budget()
    assert (budget.max_steps, budget.max_calls) == (25, 100)
    assert parameters["max_steps"].default == budget.max_steps
    assert parameters["max_calls"].default == budget.max_calls
    assert agentloop.engine.Engine("go").budget == budget
    assert agentloop.Loop(ScriptedModel([])).max_concurrency == 10


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_agent_with_parallel_calls_finishes_with_the_defaults(asynchronous: bool) -> None:
    """A 2-call batch then a 3-call batch (exhausted under the old max_calls=4), and a long
    agent: 24 batches of four calls, then its answer, all within the defaults."""
    for script in (parallel_agent(2, 3), parallel_agent(*[4] * 24)):
        if asynchronous:
            loop = agentloop.Loop(AsyncScriptedModel(script), tools=[adder])
            result = asyncio.run(loop.arun("go"))
        else:
            result = agentloop.Loop(ScriptedModel(script), tools=[adder]).run("go")
        assert result.status == "finished", result.error
    assert (result.steps, result.calls) == (25, 96)
    one_more = parallel_agent(*[4] * 25)  # 26 model calls: past the default max_steps
    result = agentloop.Loop(ScriptedModel(one_more), tools=[adder]).run("go")
    assert (result.status, result.reason) == ("exhausted", "max_steps")


def test_under_asyncio_a_batch_runs_at_once_by_default_ten_at_most() -> None:
    """Unless told, the asyncio driver runs up to 10 calls of a batch at the same time."""
    running, peak = 0, 0

    async def wait(n: int) -> int:
        """Wait a moment."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return n

    def run(width: int, **options: Any) -> int:
        nonlocal peak
        peak = 0
        script = [batch(*(call(f"c{i}", "wait", n=i) for i in range(width))), final("done")]
        loop = agentloop.Loop(AsyncScriptedModel(script), tools=[wait], **options)
        assert asyncio.run(loop.arun("go")).status == "finished"
        return peak

    assert run(3) == 3
    assert run(12) == 10
    assert run(3, max_concurrency=1) == 1


def test_a_synchronous_run_takes_the_default_concurrency_but_refuses_a_chosen_one() -> None:
    """The default is the asyncio driver's: a synchronous run with it runs a call at a time,
    and max_concurrency=2 given by hand still needs the asyncio driver."""
    started: list[float] = []

    def wait(n: int) -> int:
        """Wait a moment."""
        started.append(time.perf_counter())
        time.sleep(0.01)
        return n

    script = [batch(call("c1", "wait", n=1), call("c2", "wait", n=2)), final("done")]
    assert agentloop.Loop(ScriptedModel(script), tools=[wait]).run("go").status == "finished"
    assert started[1] - started[0] >= 0.01  # one after the other
    chosen = agentloop.Loop(ScriptedModel([final("done")]), max_concurrency=2)
    with pytest.raises(ValueError, match=r"max_concurrency > 1 needs the asyncio driver"):
        chosen.run("go")
    assert agentloop.Loop(ScriptedModel([final("done")]), max_concurrency=1).run("go").status == (
        "finished"
    )


def test_a_keyboard_interrupt_in_a_tool_under_the_default_concurrency_pairs_the_call() -> None:
    """The call runs in a task of its own, so the interrupt leaves the event loop at once;
    when the loop cancels what is left (as asyncio.run does), the run ends cancelled, its
    call paired, as with max_concurrency=1 (test_loop.py)."""
    ran = []

    def interrupt(n: int) -> int:
        """Raise KeyboardInterrupt."""
        ran.append(n)
        raise KeyboardInterrupt

    script = AsyncScriptedModel([call("c1", "interrupt", n=1), final("done")])
    run = agentloop.Loop(script, tools=[interrupt]).astart("go")
    runner = asyncio.Runner()
    try:
        runner.run(run.astep())
        runner.run(run.astep())
        with pytest.raises(KeyboardInterrupt):
            runner.run(run.astep())
    finally:
        runner.close()
    assert (run.state, run.steps, run.calls, ran) == ("cancelled", 1, 1, [1])
    assert [m.get("status", m["kind"]) for m in run.transcript] == ["user", "call", "cancelled"]


# -- Loop(system=...) -----------------------------------------------------------------------------

SYSTEM: Message = {"kind": "system", "text": "You add numbers."}


def sees_system_first(reply: Message) -> Any:
    """A scripted reply that first checks the model was given the system prompt, once, first."""

    def check(history: list[Message]) -> Message:
        assert history[0] == SYSTEM
        assert [m for m in history if m["kind"] == "system"] == [SYSTEM]
        return reply

    return check


@pytest.mark.parametrize(
    "given",
    ["add 1 and 2", [{"kind": "user", "text": "add 1 and 2"}]],
    ids=["str", "messages"],
)
def test_system_is_put_first_in_every_runs_input(given: Any) -> None:
    """Loop(system=...) puts {'kind': 'system', 'text': ...} before the input, every run."""
    replies = [sees_system_first(call("c1", "adder", a=1, b=2)), sees_system_first(final("3"))]
    loop = agentloop.Loop(ScriptedModel(replies * 2), tools=[adder], system=SYSTEM["text"])
    for _ in range(2):
        result = loop.run(given)
        assert result.status == "finished", result.error
        assert result.transcript[:2] == [SYSTEM, {"kind": "user", "text": "add 1 and 2"}]
    arun = agentloop.Loop(AsyncScriptedModel(replies), tools=[adder], system=SYSTEM["text"])
    assert asyncio.run(arun.arun(given)).transcript[:2] == result.transcript[:2]


def test_a_transcript_led_by_the_same_system_prompt_goes_on_as_it_is() -> None:
    """The next turn of a conversation: the previous transcript already starts with it."""
    loop = agentloop.Loop(
        ScriptedModel([final("hello"), sees_system_first(final("again"))]), system=SYSTEM["text"]
    )
    first = loop.run("hi")
    second = loop.run([*first.transcript, {"kind": "user", "text": "once more"}])
    assert [m["kind"] for m in second.transcript] == ["system", "user", "final", "user", "final"]


def test_an_input_led_by_another_system_message_is_refused() -> None:
    """Two system prompts would be a guess: the error names both."""
    loop = agentloop.Loop(ScriptedModel([]), system="You add numbers.")
    other = [{"kind": "system", "text": "You multiply."}, {"kind": "user", "text": "go"}]
    with pytest.raises(ValueError, match=r"this Loop's system prompt .*got another: 'You mul"):
        loop.run(other)
    with pytest.raises(TypeError, match="expected system to be a str or None, got list"):
        agentloop.Loop(ScriptedModel([]), system=["You add numbers."])  # type: ignore[call-overload]
    plain = agentloop.Loop(ScriptedModel([final("done")])).run(other)  # without system=, as given
    assert plain.transcript[0] == other[0]


def test_a_durable_run_records_its_system_prompt_and_resumes_with_it(tmp_path: Any) -> None:
    """The system message is part of the recorded input: a resume reads it from the ledger,
    whatever the resuming Loop's own system prompt (it starts new runs only)."""
    ask = agentloop.ToolRegistry([adder], policy=lambda c: agentloop.ask("check"))
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    paused = agentloop.Loop(
        ScriptedModel([call("c1", "adder", a=1, b=2)]),
        tools=ask,
        system=SYSTEM["text"],
        ledger=ledger,
    ).start("add", run_id="r1")
    paused.finish()
    assert paused.state == "awaiting_approval"
    later = agentloop.Loop(
        ScriptedModel([sees_system_first(final("3"))]),
        tools=ask,
        system="Another prompt, for new runs.",
        ledger=ledger,
    )
    result = later.resume("r1", decisions={"c1": agentloop.approve()})
    ledger.close()
    assert result.status == "finished", result.error
    assert result.transcript[0] == SYSTEM


def test_a_dbos_run_starts_with_the_loops_system_prompt(tmp_path: Any) -> None:
    """DBOSLoop's runs start as Loop's do: the system prompt first."""
    dbos = pytest.importorskip("dbos")
    from agentloop.dbos import DBOSLoop

    url = f"sqlite:///{tmp_path / 'sys.sqlite'}"
    # Its notification listener polls every 10 ms: DBOS.destroy() waits a poll for it.
    dbos.DBOS(
        config={
            "name": "first-hour",
            "system_database_url": url,
            "log_level": "WARNING",
            "notification_listener_polling_interval_sec": 0.01,
        }
    )
    dbos.DBOS.launch()
    try:
        runs = DBOSLoop(
            agentloop.Loop(ScriptedModel([final("done")]), system=SYSTEM["text"]), name="first-hour"
        )
        try:
            result = runs.run("go")
        finally:
            runs.close()
    finally:
        dbos.DBOS.destroy(workflow_completion_timeout_sec=0)
    assert result.transcript[0] == SYSTEM


# -- what a Loop owns (owns=) --------------------------------------------------------------------


class _Owned:
    """A context manager that notes when it is opened and closed."""

    def __init__(self, name: str, notes: list[str], fails: bool = False) -> None:
        self.name, self.notes, self.fails = name, notes, fails

    def __enter__(self) -> _Owned:
        if self.fails:
            raise ConnectionError(f"{self.name} cannot be reached")
        self.notes.append(f"open {self.name}")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.notes.append(f"close {self.name}")


def test_a_loop_opens_what_it_owns_in_order_and_closes_it_in_reverse() -> None:
    """``Loop(owns=[...])``: ``with loop:`` opens each, runs go on inside, all close at the end."""
    notes: list[str] = []
    loop = agentloop.Loop(
        ScriptedModel([final("done")]), owns=[_Owned("a", notes), _Owned("b", notes)]
    )
    with loop as same:
        assert same is loop
        assert notes == ["open a", "open b"]
        assert loop.run("hi").status == "finished"
    assert notes == ["open a", "open b", "close b", "close a"]
    # One that cannot open closes those opened before it, and the error shows.
    notes.clear()
    failing = agentloop.Loop(
        ScriptedModel([final("done")]),
        owns=[_Owned("a", notes), _Owned("b", notes, fails=True), _Owned("c", notes)],
    )
    with pytest.raises(ConnectionError, match="b cannot be reached"), failing:
        pass
    assert notes == ["open a", "close a"]


def test_a_loop_that_owns_something_runs_only_inside_with() -> None:
    """Outside ``with loop:`` what it owns is not open (its tools not there): a run, a
    resume and a fork are refused, saying where to run it; nothing is opened or recorded."""
    notes: list[str] = []
    loop = agentloop.Loop(ScriptedModel([final("done")]), owns=[_Owned("a", notes)])
    ended = agentloop.Loop(ScriptedModel([final("done")])).run("hi")
    for attempt in (
        lambda: loop.run("hi"),
        lambda: loop.start("hi"),
        lambda: loop.resume(ended),
        lambda: loop.fork(ended, at=0),
    ):
        with pytest.raises(agentloop.AgentloopError, match=r"only `with loop:` \(or `async"):
            attempt()
    assert notes == []
    with loop:
        assert loop.run("hi").status == "finished"


async def test_a_loop_opens_what_it_owns_under_asyncio_too() -> None:
    """``async with loop:`` enters an async context manager with ``__aenter__``."""
    notes: list[str] = []

    class Async:
        async def __aenter__(self) -> Async:
            notes.append("open")
            return self

        async def __aexit__(self, *exc_info: object) -> None:
            notes.append("close")

    async with agentloop.Loop(ScriptedModel([final("done")]), owns=[Async()]) as loop:
        assert (await loop.arun("hi")).status == "finished"
    assert notes == ["open", "close"]


@pytest.mark.parametrize(
    ("owns", "message"),
    [(object(), "an iterable of context managers"), ([3], r"owns\[0\] to be a context manager")],
)
def test_what_a_loop_owns_is_checked_when_it_is_made(owns: object, message: str) -> None:
    """Anything but context managers is refused, naming what was expected."""
    with pytest.raises(TypeError, match=message):
        agentloop.Loop(ScriptedModel([final("done")]), owns=owns)  # type: ignore[call-overload]
