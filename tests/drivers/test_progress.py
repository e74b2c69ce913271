"""report_progress: a running call's progress, heard by the delta listeners beside the transitions.

The MCP side (a server's progress forwarded, a served handler's sent) is in test_mcp.py.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import weakref
from typing import TYPE_CHECKING, Any

import pytest

import agentloop
from agentloop import Loop, State, ToolRegistry, Transition, report_progress
from agentloop._drivers.run_context import RUN_CONTEXT
from agentloop.streaming import ToolProgress
from agentloop.testing import ScriptedModel, batch
from tests.support.helpers import SyncDriver, call, drive, final

if TYPE_CHECKING:
    from tests.support.helpers import Driver


def counting() -> ToolRegistry:
    """``count(n)`` reports 1..n of n, plain; ``acount`` the same, ``async def``."""
    registry = ToolRegistry()

    @registry.tool
    def count(n: int) -> int:
        """Count to n."""
        for step in range(1, n + 1):
            report_progress(step, n, f"step {step}")
        return n

    @registry.tool
    async def acount(n: int) -> int:
        """Count to n, awaiting between steps."""
        for step in range(1, n + 1):
            report_progress(step / n)
            await asyncio.sleep(0)
        return n

    return registry


def test_each_report_is_heard_beside_the_transitions_on_both_drivers(driver: Driver) -> None:
    """A plain and an async tool report: the delta listeners hear each, in order, before
    the call's own transition; nothing of it enters the transcript."""
    script = ScriptedModel([call("a", "count", n=2), call("b", "acount", n=2), final("done")])
    run = driver.start(Loop(script, tools=counting()), "go")
    heard: list[object] = []
    run.subscribe_deltas(heard.append)
    run.subscribe(heard.append)
    drive(run)
    assert run.result().status == "finished"
    progress = [
        (item.call_id, item.progress, item.total, item.message)
        for item in heard
        if isinstance(item, ToolProgress)
    ]
    assert progress == [
        ("a", 1, 2, "step 1"),
        ("a", 2, 2, "step 2"),
        ("b", 0.5, None, None),
        ("b", 1.0, None, None),
    ]
    finished = [
        index
        for index, item in enumerate(heard)
        if isinstance(item, Transition) and item.trigger == "tool_returned"
    ]
    reported = [index for index, item in enumerate(heard) if isinstance(item, ToolProgress)]
    assert reported[1] < finished[0] < reported[2] < finished[1]
    assert all("progress" not in str(m) for m in run.result().transcript)


def test_under_asyncio_a_worker_threads_reports_reach_async_listeners_before_the_outcome() -> None:
    """``to_thread=True``: a plain tool reports from a worker thread; an async listener hears
    each report on the run's loop, in a task of its own, all before the call's transition."""
    heard: list[Any] = []

    async def listener(item: object) -> None:
        await asyncio.sleep(0.005)  # still hearing when the call has returned
        heard.append(item)

    async def main() -> agentloop.RunResult:
        model = ScriptedModel([batch(call("a", "count", n=3), call("b", "count", n=1)), final()])
        run = Loop(model, tools=counting(), to_thread=True, max_concurrency=2).astart("go")
        run.subscribe_deltas(listener)
        run.subscribe(heard.append)
        return await run.afinish()

    assert asyncio.run(main()).status == "finished"
    steps = [(item.call_id, item.progress) for item in heard if isinstance(item, ToolProgress)]
    assert sorted(steps) == [("a", 1), ("a", 2), ("a", 3), ("b", 1)]
    assert [step for step in steps if step[0] == "a"] == [("a", 1), ("a", 2), ("a", 3)]
    for call_id in ("a", "b"):
        last = max(
            i
            for i, item in enumerate(heard)
            if isinstance(item, ToolProgress) and item.call_id == call_id
        )
        returned = next(
            i
            for i, item in enumerate(heard)
            if isinstance(item, Transition) and item.call_id == call_id
        )
        assert last < returned


def test_a_listener_that_raises_on_progress_changes_nothing_of_the_call(
    driver: Driver, caplog: pytest.LogCaptureFixture
) -> None:
    """Progress is advice: a listener's exception is logged, the other listeners still hear,
    and the call's outcome is the tool's own."""

    def broken(item: object) -> None:
        if isinstance(item, ToolProgress):
            raise RuntimeError("the progress bar broke")

    run = driver.start(
        Loop(ScriptedModel([call("a", "count", n=2), final()]), tools=counting()), "go"
    )
    heard: list[object] = []
    run.subscribe_deltas(broken)
    run.subscribe_deltas(heard.append)
    with caplog.at_level(logging.ERROR, logger="agentloop"):
        drive(run)
    results = [m for m in run.result().transcript if m["kind"] == "tool_result"]
    assert [(m["status"], m["content"]) for m in results] == [("ok", 2)]
    assert len(heard) == 2
    assert caplog.text.count("a listener raised on hearing the progress of call 'a'") == 2


def test_a_report_that_is_wrong_is_refused_and_outside_a_call_nothing_happens() -> None:
    """Numbers must be finite, progress must increase within a call; outside one, a no-op."""
    report_progress(1, 2, "nobody listens")  # outside any call: nothing, no error
    for bad, expected in (
        ((True,), TypeError),
        ((float("nan"),), TypeError),
        (("1",), TypeError),
        ((1, "2"), TypeError),
        ((1, None, 3), TypeError),
    ):
        with pytest.raises(expected):
            report_progress(*bad)
    registry = ToolRegistry()

    @registry.tool
    def backwards() -> str:
        """Report 2, then 1."""
        report_progress(2)
        report_progress(1)
        return "reported"

    outcome = registry.dispatch({"id": "1", "name": "backwards", "arguments": {}})
    assert outcome["status"] == "ok"  # no run around it: progress goes nowhere, unchecked
    result = Loop(ScriptedModel([call("a", "backwards"), final()]), tools=registry).run("go")
    (message,) = [m for m in result.transcript if m["kind"] == "tool_result"]
    assert message["status"] == "error"
    assert message["content"]["type"] == "ValueError"
    assert (
        "expected progress to increase with each report, got 1 after 2"
        in message["content"]["message"]
    )


def test_a_run_dropped_is_freed_at_once() -> None:
    """The reporters hold the run's listeners, not the run: no cycle keeps a dropped run (and
    a durable run's claim on its id) alive until the garbage collector comes by."""
    loop = Loop(ScriptedModel([final()]), tools=counting())
    for start in (loop.start, loop.astart):
        gone = weakref.ref(start("go"))
        assert gone() is None


def _interrupt_right_after_the_reporter_is_set(frame: object, event: str, arg: Any) -> None:
    """A profiler: KeyboardInterrupt as ``RUN_CONTEXT.set`` returns, as a signal may land there.

    The call's context holds its reporter: set with it, gone with it."""
    if event == "c_return" and getattr(arg, "__self__", None) is RUN_CONTEXT:
        sys.setprofile(None)
        raise KeyboardInterrupt("right after the reporter was set")


def test_an_interrupt_right_after_a_call_sets_its_reporter_leaves_none_behind(
    driver: Driver,
) -> None:
    """Ctrl-C landing just after the dispatch set the call's reporter ends the run, and the
    reporter is gone with it: a later call outside any run reports to nobody."""
    run = driver.start(
        Loop(ScriptedModel([call("a", "count", n=1), final()]), tools=counting()), "go"
    )
    run.step()  # the model asked for the call
    run.step()  # which is valid
    sys.setprofile(_interrupt_right_after_the_reporter_is_set)
    try:
        with pytest.raises(KeyboardInterrupt):
            run.step()
    finally:
        sys.setprofile(None)
    assert run.state is State.CANCELLED
    if isinstance(driver, SyncDriver):
        assert RUN_CONTEXT.get() is None
    else:  # the run's task ran in the runner's context: read it there

        async def reporter() -> object:
            return RUN_CONTEXT.get()

        assert driver.runner.run(reporter()) is None
