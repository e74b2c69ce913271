"""Streaming models: deltas beside the transitions, the whole reply to the engine, and faults.

A streaming model answers with an iterator (or async iterator) of deltas
ending in the whole reply. The run must look exactly as if the model had
returned that reply; the deltas reach ``run.stream()``, ``run.astream()`` and
delta listeners in order; a cut-off stream is closed at once, and only a
whole reply ever enters the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import attrs
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop import CancelToken, Loop, RunResult, ToolRegistry, Transition, report_progress
from agentloop._cli.main import main
from agentloop._review.report import report_html
from agentloop.ledger import SQLiteLedger
from agentloop.providers import IncompleteReply
from agentloop.review import load_run, run_from_json, run_to_json, save_run
from agentloop.streaming import (
    ArgumentsDelta,
    TextDelta,
    ToolCallStart,
    UsageDelta,
    chunked,
    is_stream,
)
from agentloop.testing import assert_contract, with_usage
from tests.support.helpers import add, call, final

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator, Sequence
    from pathlib import Path

Message = dict[str, Any]
USER = "What is 2+3?"


@attrs.define
class Tracked:
    """A stream over ``items`` that records being closed; ``hang`` waits forever at its end.

    It yields ``items`` one at a time and says when it was closed (``closed_at``).
    """

    items: list[object]
    hang: bool = False
    raises: BaseException | None = None
    given: int = 0
    closed_at: float | None = None

    def __iter__(self) -> Iterator[object]:
        return self

    def __next__(self) -> object:
        if self.closed_at is not None:
            raise AssertionError("read after close")
        if self.given < len(self.items):
            self.given += 1
            return self.items[self.given - 1]
        if self.raises is not None:
            raise self.raises
        if self.hang:
            raise AssertionError("a sync stream cannot hang here")
        raise StopIteration

    def close(self) -> None:
        self.closed_at = time.monotonic()


@attrs.define
class ATracked:
    """``Tracked`` as an async iterator; ``hang`` awaits forever at its end (until closed)."""

    items: list[object]
    hang: bool = False
    raises: BaseException | None = None
    given: int = 0
    closed_at: float | None = None

    def __aiter__(self) -> AsyncIterator[object]:
        return self

    async def __anext__(self) -> object:
        await asyncio.sleep(0)
        if self.given < len(self.items):
            self.given += 1
            return self.items[self.given - 1]
        if self.raises is not None:
            raise self.raises
        if self.hang:
            await asyncio.Event().wait()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.closed_at = time.monotonic()


def streams(*replies: Message) -> Any:
    """A streaming model answering each request with the next reply, chunked."""
    script = list(replies)

    def model(history: list[Message]) -> Iterator[object]:
        return chunked(script.pop(0), size=3)

    return model


def plain(*replies: Message) -> Any:
    """The same script, answered whole."""
    script = list(replies)

    def model(history: list[Message]) -> Message:
        return script.pop(0)

    return model


SCRIPT = (
    with_usage(call("c1", a=2, b=3), 100, 7),
    with_usage(final("2+3 is 5."), 120, 9),
)


def items_of(seq: Sequence[object]) -> list[str]:
    """Each delta's type name, and each transition as ``trigger``."""
    return [x.trigger.value if isinstance(x, Transition) else type(x).__name__ for x in seq]


# -- the delta values ----------------------------------------------------------------------------


def test_deltas_are_small_frozen_values() -> None:
    """Deltas are frozen, keyword-only and compare by value."""
    delta = ToolCallStart(index=0, id="c1", name="add")
    assert delta == ToolCallStart(index=0, id="c1", name="add")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delta.name = "mul"  # type: ignore[misc]
    with pytest.raises(TypeError):
        TextDelta("positional")  # type: ignore[call-arg]


def test_chunked_splits_text_arguments_and_usage() -> None:
    """``chunked`` yields the text and arguments in pieces, the usage, then the reply itself."""
    reply = with_usage(call("c1", a=2), 10, 3)
    items = list(chunked(reply, size=4))
    assert items[0] == ToolCallStart(index=0, id="c1", name="add")
    fragments = [x.text for x in items if isinstance(x, ArgumentsDelta)]
    assert "".join(fragments) == '{"a":2}'
    assert all(len(f) <= 4 for f in fragments)
    assert items[-2] == UsageDelta(input_tokens=10, output_tokens=3, cached_tokens=0)
    assert items[-1] is reply


def test_chunked_refuses_a_bad_size() -> None:
    """A size that is not a positive int is refused, naming what was given."""
    with pytest.raises(ValueError, match="expected size to be a positive int, got 0"):
        chunked(final(), size=0)


def test_is_stream_tells_iterators_from_replies() -> None:
    """An iterator or async iterator is a stream; a reply, a list or a coroutine is not."""
    assert is_stream(iter([]))
    assert is_stream(ATracked([]))
    assert not is_stream(final())
    assert not is_stream([final()])


# -- the synchronous driver ----------------------------------------------------------------------


def test_stream_yields_deltas_before_the_transition_they_make() -> None:
    """``run.stream()`` yields each reply's deltas, then its ``model_replied``, in order."""
    loop = Loop(streams(*SCRIPT), tools=ToolRegistry([add]))
    run = loop.start(USER)
    seen = list(run.stream())
    assert items_of(seen) == [
        "ToolCallStart",
        *["ArgumentsDelta"] * 5,  # '{"a":2,"b":3}' in threes
        "UsageDelta",
        "model_replied",
        "validate",
        "tool_returned",
        *["TextDelta"] * 3,
        "UsageDelta",
        "model_replied",
        "validate",
    ]
    assert "".join(x.text for x in seen if isinstance(x, TextDelta)) == "2+3 is 5."
    assert run.result().output == "2+3 is 5."


def test_a_streamed_run_equals_the_same_run_unstreamed() -> None:
    """A caller that ignores deltas sees exactly the run a non-streaming model makes."""
    streamed = Loop(streams(*SCRIPT), tools=ToolRegistry([add])).run(USER)
    whole = Loop(plain(*SCRIPT), tools=ToolRegistry([add])).run(USER)
    assert_contract(streamed, USER)
    assert streamed.events == whole.events
    assert streamed.transcript == whole.transcript
    assert streamed.usage == whole.usage


def test_a_delta_listener_hears_every_delta() -> None:
    """``subscribe_deltas`` is called with each delta, in order, under ``finish()``."""
    heard: list[object] = []
    run = Loop(streams(final("Hello there"))).start(USER)
    run.subscribe_deltas(heard.append)
    assert run.finish().output == "Hello there"
    assert heard == [TextDelta(text="Hel"), TextDelta(text="lo "), *heard[2:]]
    assert "".join(x.text for x in heard) == "Hello there"  # type: ignore[attr-defined]


def test_an_async_delta_listener_is_refused_by_a_sync_run() -> None:
    """A synchronous run refuses an ``async def`` delta listener, saying why."""

    async def listener(delta: object) -> None:
        return None

    run = Loop(streams(final())).start(USER)
    with pytest.raises(TypeError, match="expected a plain function as a delta listener"):
        run.subscribe_deltas(listener)


def _broken_listener(delta: object) -> None:
    raise RuntimeError("listener bug")


async def _broken_async_listener(delta: object) -> None:
    raise RuntimeError("listener bug")


@pytest.mark.parametrize("how", ["sync", "async, plain listener", "async, async listener"], ids=str)
def test_a_delta_listener_that_raises_fails_the_call_and_is_named(how: str) -> None:
    """The call fails as a broken stream would, and the error says it was a delta listener's,
    not the model's; the stream is closed and nothing is appended."""
    stream = Tracked([TextDelta(text="Hel"), final("Hello")])
    loop = Loop(lambda history: stream)
    if how == "sync":
        run = loop.start(USER)
        run.subscribe_deltas(_broken_listener)
        result = run.finish()
    else:

        async def drive() -> RunResult:
            run = loop.astart(USER)
            is_async = how == "async, async listener"
            run.subscribe_deltas(_broken_async_listener if is_async else _broken_listener)
            return await run.afinish()

        result = asyncio.run(drive())
    assert result.status == "failed"
    assert result.error is not None
    assert "a delta listener raised RuntimeError: listener bug" in result.error
    assert result.transcript == [{"kind": "user", "text": USER}]
    assert stream.closed_at is not None


def test_a_stream_that_ends_without_its_reply_fails_the_step() -> None:
    """A stream that ends before its whole reply is a failed call; nothing is appended."""
    stream = Tracked([TextDelta(text="Hel")])
    result = Loop(lambda history: stream).run(USER)
    assert result.status == "failed"
    assert result.error is not None
    assert "the stream ended before the whole reply arrived" in result.error
    assert isinstance(result.events[-1].exception, IncompleteReply)
    assert result.transcript == [{"kind": "user", "text": USER}]
    assert stream.closed_at is not None


def test_a_stream_that_breaks_fails_the_step_and_is_closed() -> None:
    """An error mid-stream (a dropped connection) is a model failure, never half a reply."""
    stream = Tracked([TextDelta(text="Hel")], raises=ConnectionError("peer closed"))
    result = Loop(lambda history: stream).run(USER)
    assert result.status == "failed"
    assert result.error is not None
    assert "peer closed" in result.error
    assert result.transcript == [{"kind": "user", "text": USER}]
    assert stream.closed_at is not None


def test_a_stream_that_yields_something_else_fails_the_step() -> None:
    """An item that is neither a delta nor a dict fails the step, naming what it was."""
    stream = Tracked(["Hel"])
    result = Loop(lambda history: stream).run(USER)
    assert result.status == "failed"
    assert result.error is not None
    assert "expected a stream to yield deltas" in result.error
    assert "got str" in result.error
    assert stream.closed_at is not None


def test_the_token_is_read_between_chunks() -> None:
    """A cancel between chunks closes the stream: cancelled, partial text kept, none appended."""
    token = CancelToken()

    def model(history: list[Message]) -> Iterator[object]:
        yield TextDelta(text="Hel")
        token.cancel()  # as another thread would, while the reply streams
        yield TextDelta(text="lo")
        raise AssertionError("read after the cancel")

    result = Loop(model).run(USER, cancel=token)
    assert result.status == "cancelled"
    last = result.events[-1]
    assert last.trigger == "model_interrupted"
    assert last.partial_text == "Hel"  # the chunk read after the cancel is not handed on
    assert result.transcript == [{"kind": "user", "text": USER}]


def test_an_async_stream_under_the_sync_driver_is_interrupted_by_the_token() -> None:
    """A sync run reads an async stream chunk by chunk; a cancel from a thread interrupts
    the awaited chunk and closes the stream within 100 ms."""
    stream = ATracked([TextDelta(text="Hel")], hang=True)
    token = CancelToken()
    cancelled_at: list[float] = []

    def cancel_soon() -> None:
        time.sleep(0.05)
        cancelled_at.append(time.monotonic())
        token.cancel()

    threading.Thread(target=cancel_soon).start()
    result = Loop(lambda history: stream).run(USER, cancel=token)
    assert result.status == "cancelled"
    assert result.events[-1].partial_text == "Hel"
    assert stream.closed_at is not None
    assert stream.closed_at - cancelled_at[0] < 0.1


def test_leaving_stream_mid_reply_closes_it_and_cancels_the_run() -> None:
    """Breaking out of ``run.stream()`` while a reply streams ends the run cancelled."""
    stream = Tracked([TextDelta(text="Hel"), TextDelta(text="lo"), final("Hello")])
    run = Loop(lambda history: stream).start(USER)
    items = run.stream()
    for item in items:
        if isinstance(item, TextDelta):
            break
    items.close()
    assert run.state == "cancelled"
    assert stream.closed_at is not None
    assert run.events[-1].partial_text == "Hel"
    assert run.transcript == [{"kind": "user", "text": USER}]


def test_ctrl_c_in_a_delta_listener_ends_the_run_cancelled() -> None:
    """A ``KeyboardInterrupt`` while a reply streams closes the stream, ends the run, propagates."""
    stream = Tracked([TextDelta(text="Hel"), TextDelta(text="lo"), final("Hello")])
    run = Loop(lambda history: stream).start(USER)

    def interrupt(delta: object) -> None:
        raise KeyboardInterrupt

    run.subscribe_deltas(interrupt)
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    assert run.state == "cancelled"
    assert stream.closed_at is not None
    assert run.events[-1].partial_text == "Hel"


def test_ctrl_c_between_two_deltas_of_a_drained_step_ends_the_run_cancelled() -> None:
    """``finish()`` drains a stream's deltas where the pump reads them: a ``KeyboardInterrupt``
    that lands in the drain itself, between two deltas, closes the stream at once and ends the
    run before it propagates (the lock let go, so the run can be read and saved)."""
    stream = Tracked([TextDelta(text="Hel"), TextDelta(text="lo"), final("Hello")])
    run = Loop(lambda history: stream).start(USER)

    def interrupt_in_the_drain(frame: Any, event: str, arg: Any) -> None:
        if event == "c_return" and arg is next and frame.f_code.co_name == "drain":
            sys.setprofile(None)
            raise KeyboardInterrupt("between two deltas")

    sys.setprofile(interrupt_in_the_drain)
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            run.finish()
    finally:
        sys.setprofile(None)
    assert raised.value.args == ("between two deltas",)  # held: its frames keep the step alive
    assert run.state == "cancelled"
    assert stream.closed_at is not None
    assert run.events[-1].partial_text == "Hel"
    assert run_from_json(run_to_json(run.result())) == run.result()


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("stream_kind", ["generator", "async generator"])
def test_a_stream_is_not_resumed_once_the_token_is_cancelled(driver: str, stream_kind: str) -> None:
    """A listener cancels at the first delta: the stream's code runs no further (no next chunk
    is even asked for), the run ends cancelled with that delta's text, nothing appended."""
    token = CancelToken()
    resumed: list[str] = []

    def plain_model(history: list[Message]) -> Iterator[object]:
        yield TextDelta(text="Hel")
        resumed.append("after the cancel")  # the read of the next chunk (a request, say)
        yield TextDelta(text="lo")
        yield final("Hello")

    async def async_model(history: list[Message]) -> AsyncIterator[object]:
        for item in plain_model(history):
            yield item

    model = plain_model if stream_kind == "generator" else async_model
    loop = Loop(model)
    if driver == "sync":
        run = loop.start(USER, cancel=token)
        run.subscribe_deltas(lambda delta: token.cancel())
        result = run.finish()
    else:

        async def drive() -> RunResult:
            run = loop.astart(USER, cancel=token)
            run.subscribe_deltas(lambda delta: token.cancel())
            return await run.afinish()

        result = asyncio.run(drive())
    assert resumed == []
    assert result.status == "cancelled"
    assert result.events[-1].partial_text == "Hel"
    assert result.transcript == [{"kind": "user", "text": USER}]


def test_the_model_timeout_bounds_a_stream() -> None:
    """A stream still going at ``model_timeout`` fails the step and is closed."""

    def model(history: list[Message]) -> Iterator[object]:
        yield TextDelta(text="Hel")
        time.sleep(0.03)
        yield TextDelta(text="lo")
        raise AssertionError("read after the deadline")

    result = Loop(model, model_timeout=0.01).run(USER)
    assert result.status == "failed"
    assert result.error is not None
    assert "model_timeout=0.01" in result.error


# -- the asyncio driver --------------------------------------------------------------------------


def astreams(*replies: Message) -> Any:
    """An ``async`` generator model answering each request with the next reply, chunked."""
    script = list(replies)

    async def model(history: list[Message]) -> AsyncIterator[object]:
        for item in chunked(script.pop(0), size=3):
            await asyncio.sleep(0)
            yield item

    return model


async def test_astream_yields_deltas_and_transitions_in_order() -> None:
    """``run.astream()`` yields deltas before the transition they make, as ``stream()`` does."""
    sync_items = list(Loop(streams(*SCRIPT), tools=ToolRegistry([add])).start(USER).stream())
    run = Loop(astreams(*SCRIPT), tools=ToolRegistry([add])).astart(USER)
    async_items = [item async for item in run.astream()]
    assert items_of(async_items) == items_of(sync_items)
    assert [x for x in async_items if not isinstance(x, Transition)] == [
        x for x in sync_items if not isinstance(x, Transition)
    ]


async def test_an_async_streamed_run_equals_the_same_run_unstreamed() -> None:
    """``arun`` over a streaming model records what a non-streaming one does."""
    streamed = await Loop(astreams(*SCRIPT), tools=ToolRegistry([add])).arun(USER)
    whole = await Loop(plain(*SCRIPT), tools=ToolRegistry([add])).arun(USER)
    assert_contract(streamed, USER)
    assert streamed.events == whole.events
    assert streamed.transcript == whole.transcript


@pytest.mark.parametrize("to_thread", [False, True])
async def test_a_sync_stream_under_asyncio(to_thread: bool) -> None:
    """A plain model's sync stream is read under asyncio, in place or in a worker thread."""
    heard: list[object] = []
    run = Loop(streams(final("Hello there")), to_thread=to_thread).astart(USER)
    run.subscribe_deltas(heard.append)
    assert (await run.afinish()).output == "Hello there"
    assert "".join(x.text for x in heard) == "Hello there"  # type: ignore[attr-defined]


async def test_an_async_delta_listener_is_awaited() -> None:
    """An ``async def`` delta listener is awaited with each delta."""
    heard: list[object] = []

    async def listener(delta: object) -> None:
        await asyncio.sleep(0)
        heard.append(delta)

    run = Loop(astreams(final("Hello there"))).astart(USER)
    run.subscribe_deltas(listener)
    await run.afinish()
    assert "".join(x.text for x in heard) == "Hello there"  # type: ignore[attr-defined]


async def test_the_token_closes_an_async_stream_within_100_ms() -> None:
    """``token.cancel()`` while a chunk is awaited interrupts it: the stream is closed at once."""
    for streamed in (False, True):
        stream = ATracked([TextDelta(text="Hel")], hang=True)
        token = CancelToken()
        run = Loop(lambda history, s=stream: s).astart(USER, cancel=token)  # type: ignore[misc]

        async def drive(run: Any = run, streamed: bool = streamed) -> None:
            if streamed:
                async with contextlib.aclosing(run.astream()) as items:
                    async for _ in items:
                        pass
            else:
                await run.afinish()

        task = asyncio.ensure_future(drive())
        while stream.given == 0:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)
        cancelled_at = time.monotonic()
        token.cancel()
        await task
        assert run.state == "cancelled"
        assert run.events[-1].partial_text == "Hel"
        assert stream.closed_at is not None
        assert stream.closed_at - cancelled_at < 0.1
        assert run.transcript == [{"kind": "user", "text": USER}]


async def test_a_cancelled_task_closes_the_stream() -> None:
    """Cancelling the task that awaits the run mid-stream ends it cancelled and closes it."""
    stream = ATracked([TextDelta(text="Hel")], hang=True)
    run = Loop(lambda history: stream).astart(USER)
    task = asyncio.ensure_future(run.afinish())
    while stream.given == 0:
        await asyncio.sleep(0.001)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert run.state == "cancelled"
    assert stream.closed_at is not None
    assert run.events[-1].partial_text == "Hel"


async def test_leaving_astream_mid_reply_cancels_the_run() -> None:
    """Closing ``run.astream()`` while a reply streams ends the run cancelled."""
    stream = ATracked([TextDelta(text="Hel"), TextDelta(text="lo"), final("Hello")])
    run = Loop(lambda history: stream).astart(USER)
    async with contextlib.aclosing(run.astream()) as items:
        async for item in items:
            if isinstance(item, TextDelta):
                break
    assert run.state == "cancelled"
    assert stream.closed_at is not None
    assert run.transcript == [{"kind": "user", "text": USER}]


async def test_an_async_stream_that_breaks_fails_the_step() -> None:
    """An error mid-stream under asyncio fails the step; the stream is closed."""
    stream = ATracked([TextDelta(text="Hel")], raises=ConnectionError("peer closed"))
    result = await Loop(lambda history: stream).arun(USER)
    assert result.status == "failed"
    assert result.error is not None
    assert "peer closed" in result.error
    assert stream.closed_at is not None


async def test_an_async_model_timeout_bounds_a_stream() -> None:
    """A stream still awaited at ``model_timeout`` fails the step and is closed."""
    stream = ATracked([TextDelta(text="Hel")], hang=True)
    result = await Loop(lambda history: stream, model_timeout=0.02).arun(USER)
    assert result.status == "failed"
    assert result.error is not None
    assert "model_timeout=0.02" in result.error
    assert stream.closed_at is not None


async def test_an_async_model_timeout_bounds_a_stream_whose_chunks_never_wait() -> None:
    """Chunks that come without the stream ever suspending are read past no deadline either.

    The event loop's timer never runs while each ``__anext__`` completes at
    once, so the deadline is read between chunks too, as the synchronous driver does.
    """

    async def model(history: list[Message]) -> AsyncIterator[object]:
        yield TextDelta(text="Hel")
        time.sleep(0.03)
        yield TextDelta(text="lo")
        raise AssertionError("read after the deadline")

    result = await asyncio.wait_for(Loop(model, model_timeout=0.01).arun(USER), 1)
    assert result.status == "failed"
    assert result.error is not None
    assert "model_timeout=0.01" in result.error
    assert result.transcript == [{"kind": "user", "text": USER}]


# -- the record: what had streamed before a cut, for review ---------------------------------------


def cut_run() -> RunResult:
    """A run cancelled while its reply streamed, after some text (with markup in it)."""
    token = CancelToken()

    def model(history: list[Message]) -> Iterator[object]:
        yield TextDelta(text="The answer ")
        yield TextDelta(text="is <b>4")
        token.cancel()
        yield TextDelta(text="2")

    return Loop(model).run(USER, cancel=token)


def test_the_text_before_a_cut_survives_a_run_file(tmp_path: Path) -> None:
    """``partial_text`` is saved as an optional event field and loaded back."""
    result = cut_run()
    save_run(result, tmp_path / "run.json")
    saved = orjson.loads((tmp_path / "run.json").read_bytes())
    assert saved["events"][-1]["partial_text"] == "The answer is <b>4"
    loaded = load_run(tmp_path / "run.json")
    assert loaded.events[-1].partial_text == "The answer is <b>4"
    assert loaded.events == result.events


def test_a_run_without_a_stream_writes_no_partial_text(tmp_path: Path) -> None:
    """A run that never streamed writes its events exactly as before (no new field)."""
    save_run(Loop(plain(final())).run(USER), tmp_path / "run.json")
    saved = orjson.loads((tmp_path / "run.json").read_bytes())
    assert all("partial_text" not in event for event in saved["events"])


def test_show_and_the_report_give_the_text_before_the_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentloop show`` prints what had streamed; the report shows it, escaped."""
    save_run(cut_run(), tmp_path / "run.json")
    assert main(["show", str(tmp_path / "run.json")]) == 0
    assert "streamed before the cut: 'The answer is <b>4'" in capsys.readouterr().out
    html = report_html(load_run(tmp_path / "run.json"), svg=False)
    assert "streamed before the cut: &#x27;The answer is &lt;b&gt;4&#x27;" in html


# -- durability: a run killed mid-stream never recorded that reply -------------------------------

KILLED_MID_STREAM = """
import os, signal, sys
import agentloop
from agentloop.streaming import TextDelta

def model(history):
    yield TextDelta(text="2+2 ")
    os.kill(os.getpid(), signal.SIGKILL)  # the process dies while the reply streams

loop = agentloop.Loop(model, ledger=agentloop.ledger.SQLiteLedger(sys.argv[1]))
loop.run("What is 2+2?", run_id="r1")
"""


def test_a_durable_run_killed_mid_stream_resumes_by_asking_again(tmp_path: Path) -> None:
    """A process killed while a reply streams left no reply in the ledger: resuming asks the
    model again, and only the whole reply of that new ask is recorded."""
    db = tmp_path / "runs.db"
    child = subprocess.run(
        [sys.executable, "-c", KILLED_MID_STREAM, str(db)], check=False, capture_output=True
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    asked: list[int] = []

    def model(history: list[Message]) -> Iterator[object]:
        asked.append(len(history))
        yield from chunked(final("2+2 is 4"), size=3)

    result = Loop(model, ledger=SQLiteLedger(db)).resume("r1")
    assert asked == [1]  # asked again, with the history as it was
    assert result.status == "finished"
    assert result.transcript == [
        {"kind": "user", "text": "What is 2+2?"},
        {"kind": "final", "text": "2+2 is 4"},
    ]


# -- OpenTelemetry: the time to the first token on the chat span ----------------------------------


def test_the_chat_span_carries_the_time_to_first_token() -> None:
    """``OtelListener.delta`` marks a streamed call's first delta: its chat span says how long
    after the call's start it came; a call that did not stream has no such attribute."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    from agentloop.otel import AGENTLOOP_TIME_TO_FIRST_TOKEN, OtelListener

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    listener = OtelListener(provider)
    replies = iter([chunked(call("c1", a=1, b=1)), final("2")])

    def adding(a: int, b: int) -> int:
        """Add, reporting progress: heard by the same listener, and no token of the next call."""
        report_progress(1, 1)
        return a + b

    run = Loop(lambda history: next(replies), tools=ToolRegistry({"add": adding})).start(USER)
    run.subscribe(listener)
    run.subscribe_deltas(listener.delta)
    run.finish()
    chats = sorted(
        (s for s in exporter.get_finished_spans() if s.name == "chat"),
        key=lambda s: s.start_time or 0,
    )
    streamed, whole = (dict(span.attributes or {}) for span in chats)
    first = streamed[AGENTLOOP_TIME_TO_FIRST_TOKEN]
    assert isinstance(first, float)
    span = chats[0]
    assert span.end_time is not None
    assert span.start_time is not None
    assert 0 <= first <= (span.end_time - span.start_time) / 1e9
    assert AGENTLOOP_TIME_TO_FIRST_TOKEN not in whole
    provider.shutdown()


# -- a property: however a reply is cut into deltas, the run is the same -------------------------


@given(size=st.integers(min_value=1, max_value=12), driver=st.sampled_from(["sync", "async"]))
def test_any_chunking_makes_the_unstreamed_run(size: int, driver: str) -> None:
    """Whatever the pieces' size, on either driver, a streamed run records the plain one."""
    script = [
        with_usage(call("c1", a=2, b=3), 100, 7),
        with_usage(final("2+3 is 5, and that is all."), 120, 9),
    ]

    def streaming(history: list[Message]) -> Iterator[object]:
        return chunked(script[sum(m["kind"] == "tool_result" for m in history)], size=size)

    loop = Loop(streaming, tools=ToolRegistry([add]))
    streamed = loop.run(USER) if driver == "sync" else asyncio.run(loop.arun(USER))
    whole = Loop(plain(*script), tools=ToolRegistry([add])).run(USER)
    assert streamed.events == whole.events
    assert streamed.transcript == whole.transcript
