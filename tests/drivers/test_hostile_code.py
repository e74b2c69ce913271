"""Hostile models, tools, dispatchers, listeners and callers: a run is never wedged.

Each defect found by adversarial testing of v0.1 has a test here that failed
before its fix; the principle behind each group has a property test, so that
the next defect of the same kind is caught too. ``AGENTLOOP_FUZZ=N`` runs the
properties N times longer.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import InvalidStateError, Loop
from agentloop.engine import TERMINAL
from agentloop.review import NotJSON
from agentloop.testing import (
    ScriptedModel,
    assert_paired,
    assert_transcript_is_input_plus_appended,
    assert_within_budget,
)
from tests.conftest import count
from tests.support.helpers import DRIVERS, Driver, call, final, kinds

SCALE = int(os.environ.get("AGENTLOOP_FUZZ", "1"))


def check(run: Any) -> None:
    """The contract's invariants, with the testing kit's assertions (they name what broke)."""
    run = getattr(run, "run", run)  # the stepped async wrapper of tests/support/helpers.py
    assert_paired(run)
    assert_within_budget(run)
    assert_transcript_is_input_plus_appended(run, "go")


# -- objects whose dunders misbehave --------------------------------------------------


class BadStr(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __hash__ = str.__hash__


class LiarStr(str):
    """Equal to anything, hashing as "ok": a status that would pass any check by value."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("ok")


class Lenient(dict):  # type: ignore[type-arg]
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None


class Shifty(dict):  # type: ignore[type-arg]
    """A dict whose 'status' changes every time it is read."""

    def __init__(self) -> None:
        super().__init__(status="ok", content=1)
        self.reads = 0

    def __getitem__(self, key: object) -> object:
        self.reads += 1
        return "ok" if self.reads == 1 else "<img src=x onerror=alert(1)>"


class Unrepresentable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __deepcopy__(self, memo: object) -> object:
        raise RuntimeError("no copy")


class Loud(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


def run_to_end(driver: Driver, loop: Loop, messages: Any = "go", **kwargs: Any) -> Any:
    run = driver.start(loop, messages, **kwargs)
    for _ in range(100):
        if run.done:
            return run
        run.step()
    raise AssertionError("the run did not end in 100 steps")


# -- defect 3, 4 and 8: replies the library cannot record faithfully ------------------


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param({"kind": "final", "text": BadStr("hi")}, id="str whose __eq__ raises"),
        pytest.param(Unrepresentable(), id="__deepcopy__ and __repr__ raise"),
        pytest.param({"kind": "final", "text": threading.Lock()}, id="holds a lock"),
        pytest.param(Lenient(kind="final", text=float("nan")), id="dict with a lenient __eq__"),
        pytest.param({"kind": "call", "id": "c", "name": "add", "arguments": {"a": (1, 2)}},
                     id="a tuple"),
        pytest.param({"kind": "final", "text": "\ud800"}, id="a lone surrogate"),
    ],
)  # fmt: skip
def test_a_reply_that_is_not_plain_json_is_malformed_and_saves(driver: Driver, reply: Any) -> None:
    """The run ends malformed (never wedged), and load(save(run)) gives back the same run."""
    run = run_to_end(driver, Loop(ScriptedModel([reply])))
    result = run.result()
    assert (result.status, result.steps, result.calls) == ("malformed", 1, 0)
    assert isinstance(result.rejected, NotJSON)
    assert kinds(result.transcript) == ["user"]
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


def test_an_exception_message_with_a_lone_surrogate_is_recorded_escaped(driver: Driver) -> None:
    """os.listdir gives such names; the run saves, and the report writes as UTF-8."""
    result = run_to_end(driver, Loop(ScriptedModel([OSError("no file 'x\udcff'")]))).result()
    assert result.status == "failed"
    assert result.error == "the model raised OSError: no file 'x\\udcff'"
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result
    agentloop.review.report_html(result, svg=False).encode("utf-8")


# -- defect 5: dispatchers that raise oddly, or answer with spoofs -----------------------


class Dispatcher:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def dispatch(self, call: dict[str, Any]) -> Any:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "content_says"),
    [
        pytest.param(ValueError("bad \ud800"), "bad \\ud800", id="raises with a surrogate"),
        pytest.param(Loud(), "<unprintable: RuntimeError>", id="raises, its __str__ raises"),
        pytest.param({"status": "ok", "content": BadStr("x")}, "not JSON", id="content __eq__"),
        pytest.param(Shifty(), "was not valid", id="status changes as it is read"),
        pytest.param({"status": LiarStr("<img>"), "content": 1}, "was not valid", id="liar"),
        pytest.param({"status": "cancelled", "content": 1}, "was not valid", id="cancelled"),
    ],
)
def test_a_hostile_dispatcher_gives_an_error_result(
    driver: Driver, answer: Any, content_says: str
) -> None:
    """The call is paired with an error result, the run goes on, and it saves."""
    loop = Loop(ScriptedModel([call("c1"), final()]), tools=Dispatcher(answer))
    result = run_to_end(driver, loop).result()
    assert (result.status, result.calls) == ("finished", 1)
    assert kinds(result.transcript) == ["user", "call", "tool_result:error", "final"]
    content = result.transcript[2]["content"]
    assert content_says in (content["message"] if isinstance(content, dict) else content)
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


def test_an_interrupt_with_a_surrogate_message_still_pairs_the_call(driver: Driver) -> None:
    """A KeyboardInterrupt whose message cannot be encoded: the call is paired, cancelled."""
    tools = Dispatcher(KeyboardInterrupt("stop \ud800"))
    loop = Loop(ScriptedModel([call("c1")]), tools=tools, max_concurrency=1)
    run = driver.start(loop, "go")
    run.step(), run.step()
    with pytest.raises(KeyboardInterrupt):
        run.step()
    assert (run.state, kinds(run.transcript)) == (
        "cancelled",
        ["user", "call", "tool_result:cancelled"],
    )
    assert (
        agentloop.review.run_from_json(agentloop.review.run_to_json(run.result())) == run.result()
    )


def test_an_adispatch_that_cannot_be_read_is_refused_at_the_loop() -> None:
    """The async dispatch method is looked up once, when the Loop is built."""

    class Broken:
        def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
            return {"status": "ok", "content": 1}

        @property
        def adispatch(self) -> Any:
            raise RuntimeError("no")

    with pytest.raises(TypeError, match="reading them raised RuntimeError"):
        Loop(ScriptedModel([]), tools=Broken())


# -- defect 6 and 12: listeners -----------------------------------------------------------


@pytest.mark.row("dispatching --interrupted--> cancelled")
async def test_cancelling_the_task_in_an_async_listener_ends_the_run_cancelled() -> None:
    """The transition is made; the cancellation then ends the run; the call never runs."""
    ran: list[object] = []
    entered = asyncio.Event()

    async def listener(transition: agentloop.Transition) -> None:
        if transition.dest == "dispatching":
            entered.set()
            await asyncio.sleep(3600)

    loop = Loop(ScriptedModel([call("c1"), final()]), tools={"add": lambda **kw: ran.append(kw)},
                listeners=[listener])  # fmt: skip
    run = loop.astart("go")
    await run.astep()
    step = asyncio.create_task(run.astep())
    await entered.wait()
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    assert (run.state, run.calls, ran) == ("cancelled", 1, [])
    assert [e.trigger for e in run.events][-1] == "interrupted"
    assert kinds(run.transcript) == ["user"]
    assert (
        agentloop.review.run_from_json(agentloop.review.run_to_json(run.result())) == run.result()
    )


def test_a_listener_that_steps_the_run_is_refused() -> None:
    """Listeners see transitions in order: a step from inside one raises, changing nothing."""
    seen: list[str] = []
    errors: list[Exception] = []

    def listener(transition: agentloop.Transition) -> None:
        seen.append(transition.dest)
        try:
            run.step()
        except InvalidStateError as exc:
            errors.append(exc)

    run = Loop(ScriptedModel([final()]), listeners=[listener]).start("go")
    run.step()
    assert seen == ["validating"]
    assert run.state == "validating"
    assert "another step of this run is under way" in str(errors[0])


async def test_an_async_listener_that_steps_the_run_is_refused() -> None:
    """The same under asyncio: the listener's astep() is refused; the order holds."""
    seen: list[str] = []
    errors: list[Exception] = []

    async def listener(transition: agentloop.Transition) -> None:
        seen.append(transition.dest)
        try:
            await run.astep()
        except InvalidStateError as exc:
            errors.append(exc)

    run = Loop(ScriptedModel([final()]), listeners=[listener]).astart("go")
    await run.astep()
    assert seen == ["validating"]
    assert run.state == "validating"
    assert "another step of this run is under way" in str(errors[0])


# -- defect 10: steps from several threads -------------------------------------------------


def test_concurrent_steps_from_threads_are_refused() -> None:
    """One step proceeds; the others get InvalidStateError; budgets and ids stay exact."""
    for _ in range(50 * SCALE):
        release = threading.Event()

        def slow(history: list[dict[str, Any]], release: threading.Event = release) -> Any:
            release.wait(5)
            return final()

        run = Loop(slow).start("go")
        outcomes: list[object] = []

        def step(run: Any = run, outcomes: list[object] = outcomes) -> None:
            try:
                outcomes.append(run.step())
            except InvalidStateError as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=step) for _ in range(4)]
        for thread in threads:
            thread.start()
        while sum(isinstance(o, InvalidStateError) for o in outcomes) < 3:
            threading.Event().wait(0.001)
        release.set()
        for thread in threads:
            thread.join()
        made = [o for o in outcomes if isinstance(o, agentloop.Transition)]
        assert len(made) == 1
        assert run.steps == 1
        assert run.state == "validating"


# -- defect 12: input messages -------------------------------------------------------------


# -- principle 1: whatever user code does, a run is never wedged ----------------------------

ODD: list[object] = [
    None,
    "text",
    [],
    {"kind": "call"},
    {"kind": "final", "text": 1},
    {"kind": "final", "text": BadStr("x")},
    Lenient(kind="final", text="x"),
    Unrepresentable(),
    {"kind": "call", "id": "c1", "name": "add", "arguments": {"a": float("inf")}},
    {"kind": "call", "id": BadStr("c1"), "name": "add", "arguments": {}},
    {"kind": "final", "text": {"\ud800": 1}},
    {"kind": "call", "id": "c9", "name": "add\ud800", "arguments": {"\udfff": 1}},
]
REPLIES = st.one_of(
    st.sampled_from(ODD),
    st.builds(lambda i: call(i, a=1, b=2), st.sampled_from(["c1", "c2", "c3"])),
    st.just(final()),
    st.sampled_from([ValueError("x"), Loud(), KeyboardInterrupt("k"), OSError("\ud800")]),
)
OUTCOMES = st.sampled_from(
    [
        {"status": "ok", "content": 1},
        {"status": "ok", "content": BadStr("x")},
        {"status": "ok", "content": {"\ud800": [1]}},
        {"status": "error", "content": "bad \udcff"},
        Shifty(),
        {"status": LiarStr("x"), "content": 1},
        None,
        ValueError("\ud800"),
        Loud(),
        KeyboardInterrupt(),
    ]
)


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replies=st.lists(REPLIES, max_size=6), outcomes=st.lists(OUTCOMES, max_size=6))
def test_hostile_code_never_wedges_a_run(
    driver: Driver, replies: list[object], outcomes: list[object]
) -> None:
    """Each step makes a transition or raises what user code raised, and the run always
    reaches a terminal state that saves and reloads as itself."""
    answers = iter(outcomes)

    class Tools:
        def dispatch(self, call: dict[str, Any]) -> Any:
            answer = next(answers, {"status": "ok", "content": 0})
            if isinstance(answer, BaseException):
                raise answer
            return answer

    run = driver.start(Loop(ScriptedModel(list(replies) + [final()] * 8), tools=Tools(),
                            max_steps=8, max_calls=4, max_concurrency=1), "go")  # fmt: skip
    for _ in range(40):
        if run.done:
            break
        before = len(run.events)
        try:
            run.step()
        except KeyboardInterrupt:
            assert run.done  # an interruption ends the run
        assert len(run.events) == before + 1 or run.done
        check(run)
    assert run.done
    assert run.state in TERMINAL
    result = run.result()
    check(result)
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result


# -- principle 3: an interrupt between any two bytecodes leaves no half transition ---------


def _alarm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt("alarm")


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs SIGALRM")
def test_a_keyboard_interrupt_at_a_random_moment_never_half_records() -> None:
    """SIGALRM raises KeyboardInterrupt at random moments in many runs (500, 1500 in the
    long tier): every run that was stopped is cancelled or ended, its calls paired, its
    transcript the input plus every event's appended, and it still saves and reloads."""
    import random

    rng = random.Random(7)
    previous = signal.signal(signal.SIGALRM, _alarm)
    stopped = 0
    gc.disable()  # an alarm inside a gc callback is not the run's to handle
    try:
        for _ in range(count(500, 1500) * SCALE):
            replies: list[object] = [*(call(f"c{i}", a=1, b=2) for i in range(3)), final()]
            loop = Loop(ScriptedModel(replies), tools={"add": lambda a, b: a + b}, max_calls=3)
            run = loop.start("go")
            try:
                try:
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 3e-4))
                    while not run.done:
                        run.step()
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                stopped += 1
            # Whatever was interrupted, the run is consistent and can go on or is over.
            check(run)
            if not run.done:
                while not run.done:
                    run.step()
            result = run.result()
            assert result.steps <= 8
            assert result.calls <= 3
            assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result
    finally:
        signal.signal(signal.SIGALRM, previous)
        gc.enable()
    assert stopped > 0  # the alarm did land inside runs


# -- principle 3 under asyncio: a task cancelled at any await, listeners included -----------


def _counting_add(ran: list[str]) -> Any:
    async def add(a: int, b: int) -> int:
        await asyncio.sleep(0)
        ran.append("add")
        return a + b

    return add


async def test_a_task_cancelled_at_a_random_await_always_ends_the_run() -> None:
    """Runs with async models, tools and listeners, their task cancelled after a random
    number of event-loop turns: every run is terminal (cancelled unless it had finished),
    its calls paired, its transcript the input plus every event's appended, and a tool ran
    exactly for each ok result. Cancelled between two steps, the run
    stopped between transitions and goes on when stepped again."""
    import random

    rng = random.Random(11)
    ended: dict[str, int] = {}
    for _ in range(300 * SCALE):
        ran: list[str] = []

        async def model(history: list[dict[str, Any]]) -> dict[str, Any]:
            await asyncio.sleep(0)
            done = sum(m["kind"] == "tool_result" for m in history)
            return call(f"c{done}", a=1, b=2) if done < 3 else final()

        add = _counting_add(ran)

        async def listener(transition: agentloop.Transition) -> None:
            await asyncio.sleep(0)

        loop = Loop(model, tools={"add": add}, listeners=[listener], max_calls=3, max_concurrency=1)
        run = loop.astart("go")

        async def drive(run: agentloop.AsyncRun = run) -> None:
            async for _ in run:
                pass

        task = asyncio.create_task(drive())
        for _ in range(rng.randrange(0, 40)):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # Cancelled between two steps (or before the first), the run stopped between
        # transitions: it is consistent and goes on when stepped again.
        check(run)
        while not run.done:
            await run.astep()
        ended[run.state.value] = ended.get(run.state.value, 0) + 1
        check(run)
        results = [m["status"] for m in run.transcript if m["kind"] == "tool_result"]
        assert len(ran) == results.count("ok")  # a tool ran exactly when its ok result is there
        assert len(results) <= run.calls  # a counted call cancelled before it ran has none
        assert (
            agentloop.review.run_from_json(agentloop.review.run_to_json(run.result()))
            == run.result()
        )
    assert ended.get("cancelled", 0) > 0
    assert ended.get("finished", 0) > 0


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        pytest.param({"kind": "final", "text": {"a\nb": float("nan")}},
                     "reply.text['a\\nb']: expected a finite number, got nan", id="path"),
        pytest.param({"kind": "final", "text": {"\ud800": 1}},
                     "reply.text: expected object keys that are valid Unicode, got '\\ud800'",
                     id="nested key"),
        pytest.param({"kind": "final", "\ud800": 1, "text": "x"},
                     "reply: expected object keys that are valid Unicode, got '\\ud800'", id="key"),
        pytest.param({"kind": "call", "id": "\ud800", "name": "x", "arguments": {}},
                     "reply.id: expected text that is valid Unicode, got a lone surrogate at "
                     "index 0", id="value"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_anywhere_in_a_reply_is_named_and_the_run_saves(
    reply: dict[str, Any], error: str
) -> None:
    """The error names where the surrogate is, escaped, so the run's record can be saved."""
    result = Loop(ScriptedModel([reply])).run("go")
    assert (result.status, result.error) == ("malformed", f"malformed reply: {error}")
    assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result
