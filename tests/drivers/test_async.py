"""What only the asyncio driver has: awaits, task cancellation, timeouts, concurrency."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import TYPE_CHECKING, Any

import pytest

import agentloop
from agentloop import (
    CancelToken,
    Decision,
    InvalidStateError,
    Loop,
    State,
    Tool,
    ToolRegistry,
    Transition,
    allow,
)
from agentloop.ledger import SQLiteLedger
from agentloop.testing import ScriptedModel, batch
from tests.support.helpers import Recorder, call, final, kinds
from tests.support.payments import two

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

Message = dict[str, Any]


class AsyncTools:
    """An async dispatcher whose tool waits on an event, and logs what happened to it."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.log: list[str] = []

    async def adispatch(self, call: Message, *, to_thread: bool = False) -> Message:
        self.log.append("started")
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.log.append("cancelled")
            raise
        self.log.append("finished")
        return {"status": "ok", "content": call["arguments"]}

    def dispatch(self, call: Message) -> Message:
        raise AssertionError("the async driver prefers adispatch")


class WaitingModel:
    """An async model that waits for a release before answering with its script."""

    def __init__(self, *replies: Message) -> None:
        self.replies = list(replies)
        self.asked = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def __call__(self, history: list[Message]) -> Message:
        self.calls += 1
        self.asked.set()
        await self.release.wait()
        self.release.clear()
        return self.replies.pop(0)


async def test_async_model_and_async_tool() -> None:
    """An async model and an async dispatcher run to a final answer."""
    tools = AsyncTools()
    tools.release.set()

    async def model(history: list[Message]) -> Message:
        await asyncio.sleep(0)
        return final("done") if len(history) > 1 else call("c1", x=1)

    result = await Loop(model, tools=tools).arun("go")
    assert (result.status, result.steps, result.calls) == ("finished", 2, 1)
    assert kinds(result.transcript) == ["user", "call", "tool_result:ok", "final"]
    assert tools.log == ["started", "finished"]


async def test_async_for_yields_each_transition() -> None:
    """``async for`` over a run yields every transition until it is done."""
    run = Loop(
        ScriptedModel([call("c1", name="add", a=1, b=2), final()]),
        tools={"add": lambda a, b: a + b},
    ).astart("go")
    seen = [t.dest async for t in run]
    assert seen == ["validating", "dispatching", "awaiting_model", "validating", "finished"]
    assert run.done


async def test_token_cancelled_from_another_task_before_the_request() -> None:
    """A token cancelled before the step stops the run without asking the model."""
    model = WaitingModel(final())
    token = CancelToken()
    run = Loop(model).astart("go", cancel=token)
    await asyncio.create_task(asyncio.to_thread(token.cancel))
    t = await run.astep()
    assert (t.dest, t.trigger, run.steps, model.calls) == ("cancelled", "ask_model", 0, 0)


async def test_token_cancelled_during_the_model_call() -> None:
    """Cancelled while the model is awaited: it is interrupted at once; the step counts."""
    model = WaitingModel(call("c1", x=1))
    token = CancelToken()
    run = Loop(model, tools=AsyncTools()).astart("go", cancel=token)
    step = asyncio.create_task(run.astep())
    await model.asked.wait()
    token.cancel()  # the model is never released: the token alone ends the wait
    t = await step
    assert not step.cancelled()  # the task goes on: only the awaited model was cancelled
    assert (t.source, t.dest, t.trigger, t.guard) == (
        "awaiting_model",
        "cancelled",
        "model_interrupted",
        None,
    )
    assert (run.steps, run.calls, kinds(run.transcript)) == (1, 0, ["user"])
    assert run.result().rejected is None


async def test_token_cancelled_right_after_the_reply() -> None:
    """Cancelled between the reply and validation: nothing runs, nothing counted."""
    tools = AsyncTools()
    token = CancelToken()
    run = Loop(ScriptedModel([call("c1", x=1)]), tools=tools).astart("go", cancel=token)
    await run.astep()
    token.cancel()
    t = await run.astep()
    assert (t.source, t.dest, run.calls, tools.log) == ("validating", "cancelled", 0, [])


async def test_token_cancelled_during_a_tool() -> None:
    """Cancelled while a tool is awaited: the tool is interrupted, its call paired as cancelled."""
    tools = AsyncTools()
    token = CancelToken()
    run = Loop(ScriptedModel([call("c1", x=1), final()]), tools=tools).astart("go", cancel=token)
    await run.astep()
    await run.astep()
    step = asyncio.create_task(run.astep())
    await tools.started.wait()
    await asyncio.to_thread(token.cancel)  # from another thread; the tool is never released
    t = await step
    assert (t.dest, t.trigger, t.result_status) == ("cancelled", "tool_interrupted", "cancelled")
    assert tools.log == ["started", "cancelled"]
    assert kinds(run.transcript) == ["user", "call", "tool_result:cancelled"]
    assert (run.steps, run.calls, run.done) == (1, 1, True)


async def test_task_cancelled_while_awaiting_the_model() -> None:
    """Cancelling the task ends the run cancelled (step counted) and CancelledError propagates."""
    model = WaitingModel(final())
    run = Loop(model).astart("go")
    step = asyncio.create_task(run.astep())
    await model.asked.wait()
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    assert (run.state, run.steps, run.calls, run.done) == ("cancelled", 1, 0, True)
    assert kinds(run.transcript) == ["user"]
    event = run.events[-1]
    assert (event.trigger, event.guard) == ("model_interrupted", None)
    assert isinstance(event.exception, asyncio.CancelledError)
    assert run.result().status == "cancelled"


async def test_task_cancelled_while_awaiting_a_tool() -> None:
    """The tool is cancelled too; the call is recorded with a cancelled result; no call unpaired."""
    tools = AsyncTools()
    run = Loop(ScriptedModel([call("c1", x=1), final()]), tools=tools).astart("go")
    await run.astep()
    await run.astep()
    step = asyncio.create_task(run.astep())
    await tools.started.wait()
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    assert tools.log == ["started", "cancelled"]
    assert (run.state, run.steps, run.calls) == ("cancelled", 1, 1)
    assert kinds(run.transcript) == ["user", "call", "tool_result:cancelled"]
    assert run.transcript[-1]["content"]["type"] == "CancelledError"
    event = run.events[-1]
    assert (event.trigger, event.result_status, event.call_id) == (
        "tool_interrupted",
        "cancelled",
        "c1",
    )


async def test_model_timeout_is_a_failed_step() -> None:
    """A model that does not answer in time fails the run; the error says it timed out."""
    model = WaitingModel(final())
    result = await Loop(model, model_timeout=0.01).arun("go")
    assert (result.status, result.steps) == ("failed", 1)
    assert result.error == "the model raised TimeoutError: no reply within model_timeout=0.01 s"


async def test_tool_timeout_is_an_error_result_and_the_loop_goes_on() -> None:
    """A tool that does not finish in time gets an error result; the model sees it and answers."""
    tools = AsyncTools()
    result = await Loop(
        ScriptedModel([call("c1", x=1), final("gave up")]), tools=tools, tool_timeout=0.01
    ).arun("go")
    assert (result.status, result.output, result.calls) == ("finished", "gave up", 1)
    assert kinds(result.transcript) == ["user", "call", "tool_result:error", "final"]
    assert result.transcript[2]["content"] == {
        "type": "TimeoutError",
        "message": "the tool did not finish within tool_timeout=0.01 s",
    }
    assert tools.log == ["started", "cancelled"]


async def test_plain_callables_can_run_in_a_worker_thread() -> None:
    """With to_thread=True a blocking model runs off the event loop, which stays responsive."""
    threads: list[threading.Thread] = []
    ticked = threading.Event()
    seen: list[bool] = []

    def blocking(history: list[Message]) -> Message:
        threads.append(threading.current_thread())
        # Blocks until the event loop has ticked three times: it never would, were the
        # model blocking the loop's own thread (then the wait times out, and says so).
        seen.append(ticked.wait(timeout=10))
        return final()

    async def ticker() -> None:
        ticks = 0
        while True:
            ticks += 1
            if ticks == 3:
                ticked.set()
            await asyncio.sleep(0.001)

    background = asyncio.create_task(ticker())
    result = await Loop(blocking, to_thread=True).arun("go")
    background.cancel()
    assert result.status == "finished"
    assert threads[0] is not threading.current_thread()
    assert seen == [True]  # the loop kept running while the model blocked its thread


async def test_plain_callables_run_on_the_loop_by_default() -> None:
    """Without to_thread, a plain model is called directly, in the event loop's thread."""
    threads: list[threading.Thread] = []

    def plain(history: list[Message]) -> Message:
        threads.append(threading.current_thread())
        return final()

    await Loop(plain).arun("go")
    assert threads == [threading.current_thread()]


async def test_sync_and_async_listeners_both_see_every_transition() -> None:
    """A plain and an async listener are called, in order, for each transition."""
    seen: list[tuple[str, str]] = []

    async def async_listener(t: Transition) -> None:
        await asyncio.sleep(0)
        seen.append(("async", t.dest))

    loop = Loop(ScriptedModel([final()]), listeners=(lambda t: seen.append(("sync", t.dest)),))
    run = loop.astart("go")
    run.subscribe(async_listener)
    async for _ in run:
        pass
    assert seen == [
        ("sync", "validating"),
        ("async", "validating"),
        ("sync", "finished"),
        ("async", "finished"),
    ]


def test_async_listener_is_refused_by_the_sync_driver() -> None:
    """A synchronous run cannot await a listener; it says to use astart."""

    async def listener(t: Transition) -> None:
        return None

    with pytest.raises(TypeError, match=r"async listeners need loop.astart\(\) or loop.arun\(\)"):
        Loop(ScriptedModel([]), listeners=(listener,)).start("go")


@pytest.mark.parametrize(
    ("value", "error", "given"),
    [
        (0, ValueError, "0"),
        (-1, ValueError, "-1"),
        ("1", TypeError, "str"),
        (True, TypeError, "bool"),
    ],
)
def test_timeouts_must_be_positive_numbers(
    value: object, error: type[Exception], given: str
) -> None:
    """A timeout that is not a positive number of seconds is refused when the Loop is built."""
    with pytest.raises(
        error, match=f"model_timeout must be a positive number of seconds or None, got {given}"
    ):
        Loop(ScriptedModel([]), model_timeout=value)  # type: ignore[call-overload]


async def test_a_thousand_concurrent_runs() -> None:
    """1,000 runs on one event loop all end correctly, each with its own transcript."""

    async def model(history: list[Message]) -> Message:
        await asyncio.sleep(0)
        name = history[0]["text"]
        results = [m for m in history if m["kind"] == "tool_result"]
        if len(results) < 2:
            return call(f"{name}-{len(results)}", name="echo", value=f"{name}:{len(results)}")
        return final(",".join(r["content"] for r in results))

    async def echo(value: str) -> str:
        await asyncio.sleep(0)
        return value

    loop = Loop(model, tools={"echo": echo}, max_steps=3, max_calls=2)
    results = await asyncio.gather(*(loop.arun(f"run{i}") for i in range(1000)))
    assert all(r.status == "finished" for r in results)
    assert [r.output for r in results] == [f"run{i}:0,run{i}:1" for i in range(1000)]
    assert all(r.transcript[1]["id"] == f"run{i}-0" for i, r in enumerate(results))
    assert {(r.steps, r.calls) for r in results} == {(3, 2)}


async def test_plain_tools_run_in_a_worker_thread_with_to_thread() -> None:
    """to_thread=True reaches the registry: a plain handler runs off the event loop's thread."""
    threads: list[threading.Thread] = []

    def where(x: int) -> int:
        threads.append(threading.current_thread())
        return x

    model = ScriptedModel([call("c1", name="where", x=1), final()])
    result = await Loop(model, tools={"where": where}, to_thread=True).arun("go")
    assert (result.status, result.transcript[2]["content"]) == ("finished", 1)
    assert threads[0] is not threading.current_thread()


def test_an_async_tool_is_awaited_by_the_sync_driver_too() -> None:
    """The sync driver awaits an async handler on the run's own event loop (once refused at
    start), also for a tool added to the registry after the Loop was made; registry.dispatch
    called by hand, with no run to await it, answers an error saying so."""

    async def slow(x: int) -> int:
        await asyncio.sleep(0)
        return x

    async def slower(x: int) -> int:
        await asyncio.sleep(0)
        return x + 1

    registry = ToolRegistry({"slow": slow})
    result = Loop(ScriptedModel([call("c1", name="slow", x=1), final()]), tools=registry).run("go")
    assert (result.status, result.transcript[2]["content"]) == ("finished", 1)
    loop = Loop(ScriptedModel([call("c1", name="slower", x=1), final()]), tools=registry)
    registry.add(slower)
    assert loop.run("go").transcript[2]["content"] == 2
    again = Loop(ScriptedModel([call("c1", name="slower", x=1), final()]), tools=registry)
    assert asyncio.run(again.arun("go")).transcript[2]["content"] == 2  # the asyncio driver too
    outcome = registry.dispatch({"id": "c2", "name": "slow", "arguments": {"x": 1}})
    assert outcome["status"] == "error"
    assert "run the loop with the async driver" in outcome["content"]["message"]


async def test_a_second_concurrent_astep_is_refused() -> None:
    """While one astep() awaits the model, another on the same run raises; the first goes on."""
    model = WaitingModel(final("once"))
    run = Loop(model).astart("go")
    first = asyncio.create_task(run.astep())
    await model.asked.wait()
    with pytest.raises(InvalidStateError, match="ask_model is outstanding"):
        await run.astep()
    model.release.set()
    assert (await first).dest == "validating"
    assert (model.calls, run.steps) == (1, 1)


async def test_a_models_own_timeout_error_is_a_failed_step() -> None:
    """A TimeoutError the model raises itself (no model_timeout set) fails the run, as raised."""

    async def model(history: list[Message]) -> Message:
        raise TimeoutError("provider slow")

    result = await Loop(model, tool_timeout=5).arun("go")
    assert (result.status, result.error) == (
        "failed",
        "the model raised TimeoutError: provider slow",
    )


async def test_a_tools_own_timeout_error_is_an_error_result() -> None:
    """A dispatcher's own TimeoutError, within tool_timeout, is the call's error result."""

    class Slow:
        async def adispatch(self, call: Message, *, to_thread: bool = False) -> Message:
            raise TimeoutError("upstream slow")

        def dispatch(self, call: Message) -> Message:
            raise AssertionError("the async driver prefers adispatch")

    model = ScriptedModel([call("c1", name="slow", x=1), final()])
    result = await Loop(model, tools=Slow(), tool_timeout=5).arun("go")
    assert result.transcript[2]["content"] == {"type": "TimeoutError", "message": "upstream slow"}


async def test_afinish_steps_to_the_end_like_finish() -> None:
    """AsyncRun.afinish(): the sync driver's finish(), awaited."""
    run = Loop(ScriptedModel([call("c1", a=1, b=2), final("3")]), tools={"add": Recorder()}).astart(
        "go"
    )
    await run.astep()
    result = await run.afinish()
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "3", 2, 1)
    assert await run.afinish() == result  # done: the same result again


# -- an interruption in a task the driver made ends the run ------------------------------


async def boom() -> str:
    await asyncio.sleep(0)
    raise KeyboardInterrupt


async def fine(cents: int) -> str:
    await asyncio.sleep(0)
    return f"paid {cents}"


def interrupted_loop(where: str, ledger: SQLiteLedger | None = None) -> Loop:
    """A loop whose tool (under ``max_concurrency=2``) or async policy raises KeyboardInterrupt."""
    if where == "tool":
        tools = ToolRegistry([Tool(boom, name="boom"), Tool(fine, name="pay")])
        reply = batch(call("c1", "boom"), call("c2", "pay", cents=1))
    else:

        async def policy(call: Message) -> Decision:
            await asyncio.sleep(0)
            if call["id"] == "c2":
                raise KeyboardInterrupt
            return allow()

        tools = ToolRegistry([Tool(fine, name="pay")], policy=policy)
        reply = two()
    model = ScriptedModel([reply, final("done")])
    return Loop(model, tools=tools, max_concurrency=2, ledger=ledger)


@pytest.mark.parametrize("how", ["run_until_complete", "asyncio.run"])
@pytest.mark.parametrize("where", ["tool", "policy"])
def test_an_interrupt_in_a_task_the_driver_made_ends_the_run(
    where: str, how: str, tmp_path: Path
) -> None:
    """One rule for both drivers: the run ends ``cancelled``, the interruption recorded."""
    ledger = SQLiteLedger(tmp_path / "runs.db")
    run = interrupted_loop(where, ledger).astart("pay", run_id="r1")
    loop = asyncio.new_event_loop()
    drive = asyncio.run if how == "asyncio.run" else loop.run_until_complete
    try:
        with pytest.raises(KeyboardInterrupt):
            drive(run.afinish())
    finally:
        loop.close()
    assert run.state is State.CANCELLED
    assert isinstance(run.events[-1].exception, KeyboardInterrupt)
    agentloop.testing.assert_contract(run, "pay")
    recorded = asyncio.run(interrupted_loop(where, ledger).aresume("r1"))
    assert recorded.status is State.CANCELLED
    assert getattr(recorded.events[-1].exception, "type_name", None) == "KeyboardInterrupt"


#: GC-tracked objects a run in flight under ``arun`` holds beyond what a bare task waiting
#: the same way holds, at most (docs/performance.md): the cyclic collector's full collections
#: walk each of them for every run at once, so what one run holds sets how CPU per run grows
#: with the number of runs in flight. Counted beside the bare task, so that an interpreter
#: whose tasks and coroutines hold a different count moves both alike.
HELD_AT_THE_MODEL = 24
HELD_AT_A_TOOL = 37


async def held_per_task(
    runs: int,
    start: Callable[[], Awaitable[Any]],
    arrived: list[str],
    waiting: asyncio.Event,
    go: asyncio.Event,
) -> tuple[float, list[Any]]:
    """The tracked objects each of ``runs`` tasks holds while it waits at ``go``; their results."""
    go.clear()
    arrived.clear()
    waiting.clear()
    gc.collect()
    before = len(gc.get_objects())
    gathered = asyncio.gather(*(start() for _ in range(runs)))
    await waiting.wait()
    gc.collect()
    held = (len(gc.get_objects()) - before) / runs
    go.set()
    return held, await gathered


@pytest.mark.parametrize(
    ("held_at", "most"), [("model", HELD_AT_THE_MODEL), ("tool", HELD_AT_A_TOOL)]
)
async def test_a_run_in_flight_holds_few_objects_the_collector_walks(
    held_at: str, most: int
) -> None:
    """Runs held at their model (or tool) each hold at most ``most`` objects over a bare task."""
    runs = 50
    waiting = asyncio.Event()
    go = asyncio.Event()
    arrived: list[str] = []

    async def wait_here(where: str) -> None:
        if where == held_at and not go.is_set():
            arrived.append(where)
            if len(arrived) == runs:
                waiting.set()
            await go.wait()

    async def model(history: list[Message]) -> Message:
        if len(history) == 1:
            await wait_here("model")
            return call("c0", name="echo", value="x")
        return final("ok")

    async def echo(value: str) -> str:
        await wait_here("tool")
        return value

    async def bare() -> str:
        await wait_here(held_at)
        return "ok"

    loop = Loop(model, tools={"echo": echo}, max_steps=2, max_calls=1)
    go.set()
    await asyncio.gather(*(loop.arun("go") for _ in range(3)))  # first-call caches, not held
    await asyncio.gather(*(bare() for _ in range(3)))
    baseline, _ = await held_per_task(runs, bare, arrived, waiting, go)
    held, results = await held_per_task(runs, lambda: loop.arun("go"), arrived, waiting, go)
    assert [(r.status, r.steps, r.calls) for r in results] == [("finished", 2, 1)] * runs
    extra = held - baseline
    assert extra <= most, (
        f"a run in flight holds {held:.1f} tracked objects, {extra:.1f} more than a bare task"
        f" waiting the same way ({baseline:.1f}); at most {most} more"
    )
