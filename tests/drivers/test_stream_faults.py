"""A stream's faults: what it hands in is checked where it enters, and nothing it does wedges a run.

A wrong delta fails the model call there, naming the field, before any
listener hears it; the reply is taken before the stream is closed, so code
that runs at the close cannot change it; a stream that fails after its
deltas is followed by a ``Discard``, and a passing failure is retried. A
property: whatever a stream yields, on either driver, the run ends in a
named state, its record saves and loads, and a resume asks nothing again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import CancelToken, InvalidStateError, Loop, RunResult, ToolRegistry, Transition
from agentloop.engine import TERMINAL
from agentloop.ledger import view_run
from agentloop.models import RetryPolicy
from agentloop.review import load_run, save_run
from agentloop.streaming import (
    ArgumentsDelta,
    Discard,
    TextDelta,
    ToolCallStart,
    UsageDelta,
    chunked,
)
from tests.support.helpers import add, call, final
from tests.support.ledgers import MemoryLedger

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Generator, Iterator
    from pathlib import Path

Message = dict[str, Any]
USER = "What is 2+3?"
DRIVERS = ("sync", "async")
NO_WAIT = RetryPolicy(sleep=lambda seconds, token: None)


def finish(loop: Loop, driver: str, cancel: CancelToken | None = None, **start: Any) -> RunResult:
    """``loop``'s run of ``USER`` to its end on ``driver``; its delta listener fills ``HEARD``."""
    if driver == "sync":
        run = loop.start(USER, cancel=cancel, **start)
        run.subscribe_deltas(HEARD.append)
        return run.finish()

    async def drive() -> RunResult:
        run = loop.astart(USER, cancel=cancel, **start)
        run.subscribe_deltas(HEARD.append)
        return await run.afinish()

    return asyncio.run(drive())


#: What the delta listener of ``finish`` heard (cleared by the autouse fixture).
HEARD: list[object] = []


@pytest.fixture(autouse=True)
def _heard() -> Iterator[None]:
    HEARD.clear()
    yield
    HEARD.clear()


def streaming(*items: object, cancel: CancelToken | None = None, at: int = -1) -> Any:
    """A model streaming ``items``, then ``token.cancel()`` after the ``at``-th (if given)."""

    def model(history: list[Message]) -> Iterator[object]:
        for index, item in enumerate(items):
            yield item
            if index == at and cancel is not None:
                cancel.cancel()

    return model


# -- a wrong delta is refused where it enters ----------------------------------------------------


def made(kind: type[object], **fields: Any) -> object:
    """A delta made with fields of any type (its class checks none: the run does)."""
    return kind(**fields)


NOT_A_DELTA = "expected a stream to yield deltas (agentloop.streaming) and then the whole reply"
WRONG: list[tuple[object, type[Exception], str]] = [
    (made(TextDelta, text=None), TypeError, "TextDelta.text to be a str, got NoneType None"),
    (
        made(TextDelta, text="\ud83d"),
        TypeError,
        "a stream's TextDelta.text: expected text that is valid Unicode, got a lone surrogate",
    ),
    (made(TextDelta, text=b"Hel"), TypeError, "TextDelta.text to be a str, got bytes"),
    (made(ToolCallStart, index=-1, id="c1", name="add"), TypeError, "index to be an int of 0"),
    (made(ToolCallStart, index=True, id="c1", name="add"), TypeError, "got bool True"),
    (made(ToolCallStart, index=0, id=None, name="add"), TypeError, "ToolCallStart.id to be a str"),
    (made(ToolCallStart, index=0, id="c1", name=3), TypeError, "name to be a str, got int 3"),
    (made(ArgumentsDelta, index=0, text=["{"]), TypeError, "text to be a str, got list"),
    (made(ArgumentsDelta, index="0", text="{"), TypeError, "ArgumentsDelta.index to be an int"),
    (
        made(UsageDelta, input_tokens=-1, output_tokens=0),
        TypeError,
        "UsageDelta.input_tokens to be an int from 0 to 2**63 - 1, got int -1",
    ),
    (
        made(UsageDelta, input_tokens=1, output_tokens=2**64),
        TypeError,
        "UsageDelta.output_tokens to be an int from 0 to 2**63 - 1",
    ),
    (
        made(UsageDelta, input_tokens=1, output_tokens=1, cached_tokens=2),
        ValueError,
        "cached_tokens to be at most its input_tokens (cached tokens are input tokens), got 2 of 1",
    ),
    (Discard(error="x"), TypeError, NOT_A_DELTA),
]


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(("wrong", "kind", "said"), WRONG, ids=lambda x: repr(x)[:40])
def test_a_wrong_delta_fails_the_call_and_names_what_was_expected(
    driver: str, wrong: object, kind: type[Exception], said: str, tmp_path: Path
) -> None:
    """The call fails at the wrong delta (the listener never hears it), the error says what was
    expected and what came; the run is over, and it saves and loads."""
    result = finish(Loop(streaming(TextDelta(text="Hel"), wrong, final("Hello"))), driver)

    assert result.status == "failed"
    assert result.error is not None
    assert said in result.error
    assert isinstance(result.events[-1].exception, kind)
    assert result.transcript == [{"kind": "user", "text": USER}]
    said_by_the_event = result.error.removeprefix("the model raised ")
    assert [TextDelta(text="Hel"), Discard(error=said_by_the_event)] == HEARD
    save_run(result, tmp_path / "run.json")
    assert load_run(tmp_path / "run.json") == result


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize(
    "deltas",
    [
        (made(TextDelta, text=None),),
        (TextDelta(text="\ud83d"), TextDelta(text="\ude00")),  # a surrogate pair, split
    ],
    ids=["text None", "a split surrogate pair"],
)
def test_a_wrong_delta_then_a_cancel_ends_a_durable_run_that_resumes_asking_nothing(
    driver: str, deltas: tuple[object, ...], tmp_path: Path
) -> None:
    """The wrong delta ends the call before the cancel is read: the run is over and recorded
    as such; the ledger reads the same run back; a resume asks the model nothing; every later
    step says the run is over (never that an answer is outstanding)."""
    token = CancelToken()
    ledger = MemoryLedger()
    model = streaming(*deltas, TextDelta(text="x"), final("x"), cancel=token, at=len(deltas) - 1)
    result = finish(Loop(model, ledger=ledger), driver, cancel=token, run_id="r1")

    assert result.status == "failed"
    assert result.error is not None
    assert "TextDelta.text" in result.error
    assert view_run(ledger, "r1").result == result
    asked: list[int] = []

    def again(history: list[Message]) -> Message:
        asked.append(len(history))
        return final("again")

    assert Loop(again, ledger=ledger).resume("r1") == result
    assert asked == []
    run = Loop(streaming(*deltas)).start(USER)
    assert run.step().dest == "failed"
    with pytest.raises(InvalidStateError, match="the run ended in state 'failed'"):
        run.step()
    save_run(result, tmp_path / "run.json")
    assert load_run(tmp_path / "run.json") == result


# -- the reply is taken before its stream is closed ----------------------------------------------


def reusing(stream_kind: str) -> Any:
    """A model that yields a call from a buffer it reuses when closed: add(1, 2), then 1000."""

    def plain(history: list[Message]) -> Generator[object, None, None]:
        if any(m["kind"] == "tool_result" for m in history):
            yield final("done")
            return
        buffer = {"a": 1, "b": 2}
        try:
            yield TextDelta(text="Adding.")
            yield {"kind": "call", "id": "c1", "name": "add", "arguments": buffer}
        finally:
            buffer["a"] = 1000  # the buffer, made ready for the next reply

    async def asynchronous(history: list[Message]) -> AsyncIterator[object]:
        items = plain(history)
        try:
            for item in items:
                yield item
        finally:
            items.close()

    return plain if stream_kind == "generator" else asynchronous


@pytest.mark.parametrize("consumer", ["finish", "stream"])
@pytest.mark.parametrize("stream_kind", ["generator", "async generator"])
@pytest.mark.parametrize("driver", DRIVERS)
def test_code_a_stream_runs_at_its_close_cannot_change_its_reply(
    driver: str, stream_kind: str, consumer: str
) -> None:
    """add(1, 2) was yielded: add(1, 2) is recorded and run, though the stream's close rewrote
    its buffer; the stream was closed all the same."""
    ran: list[tuple[int, int]] = []

    def recorded_add(a: int, b: int) -> int:
        ran.append((a, b))
        return a + b

    loop = Loop(reusing(stream_kind), tools=ToolRegistry({"add": recorded_add}))
    if driver == "sync":
        run = loop.start(USER)
        if consumer == "stream":
            items = list(run.stream())
            assert [type(i).__name__ for i in items[:2]] == ["TextDelta", "Transition"]
        result = run.finish()
    else:

        async def drive() -> RunResult:
            run = loop.astart(USER)
            if consumer == "stream":
                async with contextlib.aclosing(run.astream()) as items:
                    async for _ in items:
                        pass
            return await run.afinish()

        result = asyncio.run(drive())
    assert result.status == "finished"
    assert ran == [(1, 2)]
    assert result.transcript[1] == {
        "kind": "call",
        "id": "c1",
        "name": "add",
        "arguments": {"a": 1, "b": 2},
    }
    assert result.transcript[2]["content"] == 3


# -- a stream that fails after its deltas: a Discard, then the failure (retried if passing) ------


def dropping(*replies: Message, drops: int = 1) -> Any:
    """A model whose first ``drops`` streams break off after two deltas (a lost connection),
    then stream each of ``replies`` whole."""
    asked: list[int] = []

    def model(history: list[Message]) -> Iterator[object]:
        asked.append(len(history))
        if len(asked) <= drops:
            yield TextDelta(text="2+3 ")
            yield TextDelta(text="is")
            raise ConnectionError("the peer closed the connection")
        yield from chunked(replies[len(asked) - drops - 1], size=4)

    model.asked = asked  # type: ignore[attr-defined]
    return model


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_dropped_stream_is_discarded_then_retried(driver: str) -> None:
    """The deltas of the broken stream are followed by a Discard, then the retry streams the
    reply afresh; the record holds only the whole reply, and the steps count both asks."""
    model = dropping(final("2+3 is 5"))
    result = finish(Loop(model, retry=NO_WAIT), driver)

    assert (result.status, result.output, result.steps) == ("finished", "2+3 is 5", 2)
    assert [e.trigger for e in result.events] == [
        "model_raised",
        "waited",
        "model_replied",
        "validate",
    ]
    dropped = "ConnectionError: the peer closed the connection"
    assert result.events[0].error == f"the model raised {dropped}"
    discard = Discard(error=dropped)
    assert HEARD[:3] == [TextDelta(text="2+3 "), TextDelta(text="is"), discard]
    after = HEARD[3:]
    assert "".join(d.text for d in after if type(d) is TextDelta) == "2+3 is 5"
    assert Discard not in map(type, after)
    assert result.transcript == [
        {"kind": "user", "text": USER},
        {"kind": "final", "text": "2+3 is 5"},
    ]


@pytest.mark.parametrize("driver", DRIVERS)
def test_stream_yields_the_discard_between_the_deltas_and_the_failure(driver: str) -> None:
    """``run.stream()``/``astream()``: the broken stream's deltas, its Discard, then the
    ``model_raised`` transition; the retry's deltas, then its ``model_replied``."""
    loop = Loop(dropping(final("5")), retry=NO_WAIT)
    if driver == "sync":
        items: list[object] = list(loop.start(USER).stream())
    else:

        async def drive() -> list[object]:
            run = loop.astart(USER)
            async with contextlib.aclosing(run.astream()) as stream:
                return [item async for item in stream]

        items = asyncio.run(drive())
    named = [
        item.trigger.value if isinstance(item, Transition) else type(item).__name__
        for item in items
    ]
    assert named == [
        "TextDelta",
        "TextDelta",
        "Discard",
        "model_raised",
        "waited",
        "TextDelta",
        "model_replied",
        "validate",
    ]


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_stream_that_fails_before_any_delta_has_nothing_to_discard(driver: str) -> None:
    """No delta was handed on: no Discard; the failure alone, retried."""
    replies = iter([iter(()), chunked(final("5"))])  # the first stream ends at once
    result = finish(Loop(lambda history: next(replies), retry=None), driver)
    assert result.status == "failed"
    assert HEARD == []


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_listener_that_raises_at_the_discard_fails_the_call_as_its_own(driver: str) -> None:
    """A delta listener that raises at the Discard is named as the call's failure (its bug is
    not retried away), with the stream's own error behind it."""

    def listener(delta: object) -> None:
        if type(delta) is Discard:
            raise RuntimeError("listener bug")

    loop = Loop(dropping(final("5")), retry=NO_WAIT)
    if driver == "sync":
        run = loop.start(USER)
        run.subscribe_deltas(listener)
        result = run.finish()
    else:

        async def drive() -> RunResult:
            run = loop.astart(USER)
            run.subscribe_deltas(listener)
            return await run.afinish()

        result = asyncio.run(drive())
    assert result.status == "failed"
    assert result.error == (
        "the model raised ListenerFailed: a delta listener raised RuntimeError: listener bug"
    )
    cause = result.events[-1].exception
    assert isinstance(cause, Exception)
    assert isinstance(cause.__cause__.__context__, ConnectionError)  # type: ignore[union-attr]


# -- a property: whatever a stream yields, the run is never wedged -------------------------------

_TEXT = st.one_of(st.text(max_size=4), st.sampled_from(["\ud83d", "\ude00", "a\udfff"]), st.none())
_INT = st.one_of(st.integers(min_value=-2, max_value=3), st.just(2**64), st.booleans(), st.none())
_DELTA = st.one_of(
    st.builds(TextDelta, text=_TEXT),
    st.builds(ToolCallStart, index=_INT, id=_TEXT, name=_TEXT),
    st.builds(ArgumentsDelta, index=_INT, text=_TEXT),
    st.builds(UsageDelta, input_tokens=_INT, output_tokens=_INT, cached_tokens=_INT),
    st.sampled_from(["text", 3, None, Discard(error="x")]),
)
_REPLY = st.one_of(
    st.just(final("5")),
    st.just(call("c1", a=2, b=3)),
    st.just({"kind": "final", "text": 5}),  # malformed: the engine refuses it
    st.just({"kind": "final", "text": "\ud83d"}),  # not JSON the record can keep
    st.none(),  # the stream ends without its reply
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    deltas=st.lists(_DELTA, max_size=5),
    reply=_REPLY,
    cancel_at=st.one_of(st.none(), st.integers(min_value=0, max_value=5)),
    raises=st.booleans(),
    driver=st.sampled_from(DRIVERS),
)
def test_whatever_a_stream_yields_the_run_ends_saves_and_resumes_asking_nothing(
    deltas: list[object],
    reply: Message | None,
    cancel_at: int | None,
    raises: bool,
    driver: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Any deltas, any last item, a cancel at any point, a break: the run ends in a named
    state (never wedged), its ledger reads it back, its run file saves and loads, and a resume
    asks the model nothing, after a recorded cancel too."""
    token = CancelToken()

    def model(history: list[Message]) -> Iterator[object]:
        if history[-1]["kind"] == "tool_result":
            yield final("5")
            return
        for index, item in enumerate(deltas):
            if index == cancel_at:
                token.cancel()
            yield item
        if cancel_at is not None and cancel_at >= len(deltas):
            token.cancel()
        if raises:
            raise ConnectionError("dropped")
        if reply is not None:
            yield reply

    ledger = MemoryLedger()
    loop = Loop(model, tools=ToolRegistry([add]), ledger=ledger, retry=None, max_steps=2)
    result = finish(loop, driver, cancel=token, run_id="r1")

    assert result.status in TERMINAL  # a named end, never a wedged step
    assert view_run(ledger, "r1").result == result
    path = tmp_path_factory.mktemp("run") / "run.json"
    save_run(result, path)
    assert load_run(path) == result
    asked: list[int] = []

    def again(history: list[Message]) -> Message:
        asked.append(len(history))
        return final("again")

    again_loop = Loop(again, tools=ToolRegistry([add]), ledger=ledger, max_steps=2)
    assert again_loop.resume("r1") == result
    assert asked == []
    partial = [e.partial_text for e in result.events if e.partial_text is not None]
    assert all(text.encode() for text in partial)  # kept text is always recordable
