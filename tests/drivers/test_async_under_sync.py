"""The synchronous driver awaits async models, tools and policies on an event loop of its own.

``loop.run`` runs an awaitable to completion on a private event loop, in the
calling thread; timeouts bite there and the ``CancelToken`` interrupts it, as
under asyncio. Inside a running event loop it refuses: ``arun`` is the way.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
import threading
import time
import warnings
from typing import Any

import pytest

import agentloop
from agentloop import CancelToken, Loop, Tool, ToolRegistry, allow, approve, ask, deny
from agentloop.testing import (
    AsyncScriptedModel,
    ScriptedModel,
    assert_contract,
    batch,
    call,
    final,
)

Message = dict[str, Any]


class Sleeper:
    """An async tool that sleeps ``seconds``; it notes its loop, its thread and how it ended."""

    def __init__(self) -> None:
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.threads: list[int] = []
        self.ended: list[str] = []
        self.started = threading.Event()

    async def __call__(self, seconds: float) -> float:
        self.loops.append(asyncio.get_running_loop())
        self.threads.append(threading.get_ident())
        self.started.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        self.ended.append("returned")
        return seconds

    def registry(self) -> ToolRegistry:
        return ToolRegistry([Tool(self, name="sleep")])


def shape(result: agentloop.RunResult) -> list[tuple[str, str, str]]:
    """Each transition's source, trigger and destination."""
    return [(t.source.value, t.trigger.value, t.dest.value) for t in result.events]


# -- async models, tools and policies under loop.run -----------------------------------------------


def test_an_async_tool_under_loop_run() -> None:
    """The tool is awaited on an event loop in the caller's thread; the run keeps the contract."""
    sleeper = Sleeper()
    script = [call("c1", "sleep", seconds=0), final("slept")]
    loop = Loop(ScriptedModel(script), tools=sleeper.registry())
    result = loop.run("go")
    assert (result.status, result.output) == ("finished", "slept")
    assert result.transcript[2]["content"] == 0
    assert sleeper.threads == [threading.get_ident()]
    assert_contract(result, "go")


def test_an_async_model_under_loop_run_makes_the_transitions_arun_makes() -> None:
    """The same script, awaited by either driver, takes the same path."""

    def plus(a: int, b: int) -> int:
        return a + b

    script = [call("c1", "plus", a=2, b=3), batch(call("c2", "plus", a=1, b=1)), final("5")]
    by_run = Loop(AsyncScriptedModel(list(script)), tools=[plus]).run("go")
    by_arun = asyncio.run(Loop(AsyncScriptedModel(list(script)), tools=[plus]).arun("go"))
    assert (by_run.status, by_run.output, by_run.steps, by_run.calls) == ("finished", "5", 3, 2)
    assert shape(by_run) == shape(by_arun)
    assert by_run.transcript == by_arun.transcript
    assert_contract(by_run, "go")


def test_async_and_plain_tools_in_one_batch() -> None:
    """A plain tool beside an async one is called as always: in place, with no event loop."""
    seen: list[bool] = []
    sleeper = Sleeper()

    def plain(n: int) -> int:
        seen.append(asyncio._get_running_loop() is None)
        return n

    registry = sleeper.registry()
    registry.add(plain)
    replies = [batch(call("a", "sleep", seconds=0), call("b", "plain", n=7)), final("ok")]
    result = Loop(ScriptedModel(replies), tools=registry).run("go")
    assert [m["content"] for m in result.transcript[2:4]] == [0, 7]
    assert seen == [True]


def test_async_policies_under_loop_run() -> None:
    """An async policy is awaited before its batch runs: deny and allow take effect, and an ask
    stops the run for run.decide, as under asyncio."""
    ran: list[int] = []

    async def registry_policy(c: Message) -> agentloop.Decision:
        await asyncio.sleep(0)
        n = c["arguments"]["n"]
        return deny("odd") if n % 2 else ask("even: sure?") if n > 2 else allow()

    def record(n: int) -> int:
        ran.append(n)
        return n

    tools = ToolRegistry([Tool(record, name="f")], policy=registry_policy)
    replies = [batch(call("a", "f", n=1), call("b", "f", n=2)), batch(call("c", "f", n=4))]
    run = Loop(ScriptedModel([*replies, final("x")]), tools=tools).start("go")
    paused = run.finish()
    assert paused.status == "awaiting_approval"
    assert [(m["status"], m["content"]) for m in paused.transcript[2:4]] == [
        ("denied", "odd"),
        ("ok", 2),
    ]
    assert [p.call_id for p in run.pending] == ["c"]
    run.decide({"c": approve()})
    assert run.finish().output == "x"
    assert ran == [2, 4]


@pytest.mark.parametrize("start", ["run", "arun"])
def test_a_registry_denial_settles_the_call_before_the_tool_policy_is_asked(start: str) -> None:
    """Under both drivers, async policies are asked in the same order as plain ones: the
    registry's first, and its denial is the answer, the tool's policy never asked."""
    asked: list[str] = []

    async def registry_policy(c: Message) -> agentloop.Decision:
        asked.append(f"registry {c['id']}")
        return deny("read-only") if c["arguments"]["n"] > 1 else allow()

    async def tool_policy(c: Message) -> agentloop.Decision:
        asked.append(f"tool {c['id']}")
        return allow()

    tools = ToolRegistry([Tool(lambda n: n, name="f", policy=tool_policy)], policy=registry_policy)
    loop = Loop(
        ScriptedModel([batch(call("a", "f", n=1), call("b", "f", n=2)), final("x")]), tools=tools
    )
    result = loop.run("go") if start == "run" else asyncio.run(loop.arun("go"))
    assert [(m["status"], m["content"]) for m in result.transcript[2:4]] == [
        ("ok", 1),
        ("denied", "read-only"),
    ]
    assert asked == ["registry a", "tool a", "registry b"]


def test_a_custom_dispatcher_may_answer_with_an_awaitable() -> None:
    """Its awaitable outcome is awaited, as the asyncio driver awaits it."""

    class Later:
        async def answer(self, call: Message) -> Message:
            await asyncio.sleep(0)
            return {"status": "ok", "content": call["arguments"]["n"] * 2}

        def dispatch(self, call: Message) -> Any:
            return self.answer(call)

    result = Loop(ScriptedModel([call("c1", "any", n=21), final("x")]), tools=Later()).run("go")
    assert result.transcript[2]["content"] == 42


# -- timeouts --------------------------------------------------------------------------------------


def test_tool_timeout_bites_on_an_async_tool_under_loop_run() -> None:
    """The tool's coroutine is cancelled at the deadline; its call gets an error result, and the
    loop goes on."""
    sleeper = Sleeper()
    script = [call("c1", "sleep", seconds=30), final("gave up")]
    loop = Loop(ScriptedModel(script), tools=sleeper.registry(), tool_timeout=0.05)
    started = time.monotonic()
    result = loop.run("go")
    assert time.monotonic() - started < 5
    assert (result.status, result.output) == ("finished", "gave up")
    assert result.transcript[2]["status"] == "error"
    assert result.transcript[2]["content"] == {
        "type": "TimeoutError",
        "message": "the tool did not finish within tool_timeout=0.05 s",
    }
    assert sleeper.ended == ["cancelled"]


def test_model_timeout_bites_on_an_async_model_under_loop_run() -> None:
    """A model that does not answer in time is a failed step, said as under asyncio."""

    async def slow(history: list[Message]) -> Message:
        await asyncio.sleep(30)
        return final("late")

    result = Loop(slow, model_timeout=0.05).run("go")
    assert (result.status, result.steps) == ("failed", 1)
    assert result.error == "the model raised TimeoutError: no reply within model_timeout=0.05 s"


# -- cancellation ----------------------------------------------------------------------------------


def cancel_once(started: threading.Event, token: CancelToken) -> None:
    """From another thread: cancel ``token`` once the awaited call has started."""
    started.wait(5)
    token.cancel()


def test_cancel_from_another_thread_interrupts_an_awaited_tool() -> None:
    """token.cancel() cancels the tool's coroutine at once; its call is recorded cancelled."""
    sleeper = Sleeper()
    token = CancelToken()
    threading.Thread(target=cancel_once, args=(sleeper.started, token)).start()
    loop = Loop(ScriptedModel([call("c1", "sleep", seconds=30)]), tools=sleeper.registry())
    started = time.monotonic()
    result = loop.run("go", cancel=token)
    assert time.monotonic() - started < 5
    assert (result.status, result.calls) == ("cancelled", 1)
    assert result.transcript[2]["status"] == "cancelled"
    assert result.transcript[2]["content"] == {
        "type": "TokenCancelled",
        "message": "cancelled by the run's CancelToken",
    }
    assert sleeper.ended == ["cancelled"]
    assert_contract(result, "go")


def test_cancel_from_another_thread_interrupts_an_awaited_model() -> None:
    """The model's step counts, nothing is appended, and the run ends cancelled."""
    token = CancelToken()
    asked = threading.Event()

    async def slow(history: list[Message]) -> Message:
        asked.set()
        await asyncio.sleep(30)
        return final("late")

    threading.Thread(target=cancel_once, args=(asked, token)).start()
    started = time.monotonic()
    result = Loop(slow).run("go", cancel=token)
    assert time.monotonic() - started < 5
    assert (result.status, result.steps, result.transcript) == (
        "cancelled",
        1,
        [{"kind": "user", "text": "go"}],
    )


def test_a_keyboard_interrupt_in_an_async_tool_ends_the_run_cancelled() -> None:
    """It propagates out of run.finish(), and the run has ended cancelled, its call paired."""

    async def interrupted() -> None:
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    run = Loop(ScriptedModel([call("c1", "interrupted")]), tools=[interrupted]).start("go")
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    assert (run.state.value, run.transcript[2]["status"]) == ("cancelled", "cancelled")


@pytest.mark.skipif(sys.platform == "win32", reason="pthread_kill is POSIX")
def test_ctrl_c_while_an_async_tool_awaits_cancels_it_and_ends_the_run() -> None:
    """SIGINT cancels the awaited tool (its cleanup runs), then KeyboardInterrupt propagates."""
    # Python's own Ctrl-C handler, whatever this process was started with: a job started in
    # the background of a shell without job control (CI's, say) inherits SIGINT ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sleeper = Sleeper()
    main = threading.main_thread().ident
    assert main == threading.get_ident(), "signals reach the main thread"

    def interrupt() -> None:
        sleeper.started.wait(5)
        # Once the loop waits in select(): a signal handled just before it blocks is seen
        # only when it wakes (as with asyncio.run, whose Ctrl-C handling this is).
        time.sleep(0.5)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt).start()
    run = Loop(ScriptedModel([call("c1", "sleep", seconds=30)]), tools=sleeper.registry())
    live = run.start("go")
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            live.finish()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 5
    assert live.state.value == "cancelled"
    assert sleeper.ended == ["cancelled"]


# -- the run's own event loop ----------------------------------------------------------------------


def test_one_event_loop_per_run_closed_when_it_ends() -> None:
    """Calls of one run share its loop; another run has its own; each is closed at the end."""
    sleeper = Sleeper()
    script = [call("c1", "sleep", seconds=0), call("c2", "sleep", seconds=0), final("x")]
    loop = Loop(ScriptedModel(script * 2), tools=sleeper.registry())
    loop.run("go")
    loop.run("again")
    first, second, third, fourth = sleeper.loops
    assert first is second
    assert third is fourth
    assert first is not third
    assert first.is_closed()
    assert third.is_closed()


def test_a_run_dropped_before_its_end_closes_its_loop() -> None:
    """A run paused for approval and then dropped closes its loop when collected."""
    sleeper = Sleeper()

    async def careful(c: Message) -> agentloop.Decision:
        return ask("?")

    registry = sleeper.registry()
    registry.add(Tool(lambda: 1, name="gated", policy=careful))
    script = [call("c1", "sleep", seconds=0), call("c2", "gated")]
    run = Loop(ScriptedModel(script), tools=registry).start("go")
    assert run.finish().status == "awaiting_approval"
    (used,) = sleeper.loops
    assert not used.is_closed()
    del run
    gc.collect()
    assert used.is_closed()


def test_a_run_collected_inside_another_running_loop_closes_its_loop_quietly() -> None:
    """Collected where another loop runs (a thread's, an MCP connection's): closed, no warning.

    Its loop cannot run there to shut its async generators down; it used to
    try, leaving that coroutine never awaited (an unraisable RuntimeWarning)."""
    sleeper = Sleeper()

    async def careful(c: Message) -> agentloop.Decision:
        return ask("?")

    registry = sleeper.registry()
    registry.add(Tool(lambda: 1, name="gated", policy=careful))
    script = [call("c1", "sleep", seconds=0), call("c2", "gated")]
    run: Any = Loop(ScriptedModel(script), tools=registry).start("go")
    assert run.finish().status == "awaiting_approval"
    (used,) = sleeper.loops

    async def drop() -> None:
        nonlocal run
        run = None
        gc.collect()

    unraisable: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        asyncio.run(drop())
    finally:
        sys.unraisablehook = hook
    assert used.is_closed()
    assert unraisable == []


async def test_loop_run_inside_a_running_event_loop_is_refused() -> None:
    """Awaiting there would stall the caller's loop: run() refuses before any step and says to
    use arun; a plain model's coroutine met there fails its step, saying the same."""
    sleeper = Sleeper()
    model = ScriptedModel([call("c1", "sleep", seconds=0), final("x")])
    loop = Loop(model, tools=sleeper.registry())
    with pytest.raises(
        RuntimeError,
        match=r"^the async tool 'sleep' cannot be awaited by a synchronous run inside a running "
        r"event loop \(its thread's loop would stall\): in async code, use loop.arun or "
        r"loop.astart$",
    ):
        loop.run("go")
    assert model.seen == []
    assert (await loop.arun("go")).output == "x"

    async def reply() -> Message:
        return final("x")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the coroutine is closed, never left unawaited
        result = Loop(lambda history: reply()).run("go")
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith(
        "the model raised RuntimeError: a synchronous run cannot await an async model, tool or "
        "policy inside a running event loop"
    )


def test_to_thread_and_concurrency_stay_asyncio_only() -> None:
    """What a synchronous run cannot do is still refused at start, naming arun."""
    for options in ({"to_thread": True}, {"max_concurrency": 2}):
        with pytest.raises(ValueError, match=r"needs the asyncio driver \(loop.arun or loop"):
            Loop(AsyncScriptedModel([final("x")]), **options).run("go")


def test_an_async_model_is_awaited_by_the_sync_driver() -> None:
    """An async def model runs under loop.run too (it was refused at start): it is awaited on
    the run's own event loop."""

    async def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return final("awaited")

    assert Loop(model).run("go").output == "awaited"


def test_a_coroutine_returned_by_a_plain_model_is_awaited_without_a_warning() -> None:
    """Either driver awaits it, as it would an async def model's (the sync one made the run
    malformed); nothing warns of a coroutine never awaited."""

    async def reply() -> dict[str, Any]:
        return final("awaited")

    loop = Loop(lambda history: reply())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        results = [loop.run("go"), asyncio.run(loop.arun("go"))]
    for result in results:
        assert (result.status, result.output) == ("finished", "awaited")
        assert agentloop.review.run_from_json(agentloop.review.run_to_json(result)) == result
