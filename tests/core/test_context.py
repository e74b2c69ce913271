"""Long conversations: requests fitted to a context window in whole turns (agentloop.context)."""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from hypothesis import event as note_case
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import CancelToken, Loop, State, Tool, ToolRegistry
from agentloop.context import Seen, approx_tokens, keep_last, summarise, tiktoken_tokens
from agentloop.review import run_from_json, run_to_json
from agentloop.testing import (
    ContractViolation,
    ScriptedModel,
    assert_contract,
    assert_requests_fit,
    call,
    final,
)
from agentloop.testing.strategies import oversized_results
from tests.support.helpers import DRIVERS, Driver

if TYPE_CHECKING:
    from collections.abc import Callable

Message = dict[str, Any]
BIG = "y" * 120  # about 30 tokens by the default counter


def tokens_of(history: list[Message]) -> int:
    """What the default counter makes of a request, message by message."""
    return sum(approx_tokens(orjson.dumps(message)) for message in history)


def paired(history: list[Message]) -> bool:
    """Every call sent has its result, and every result its call."""
    calls = {c["id"] for m in history for c in ([m] if m["kind"] == "call" else m.get("calls", []))}
    results = {m["id"] for m in history if m["kind"] == "tool_result"}
    return calls == results


class Chatty:
    """A model that calls ``echo`` with a long argument ``turns`` times, then answers."""

    def __init__(self, turns: int, size: int = 120, prefix: str = "c") -> None:
        self.turns, self.size, self.prefix = turns, size, prefix
        self.seen: list[list[Message]] = []

    def __call__(self, history: list[Message]) -> Message:
        self.seen.append(history)
        n = len(self.seen)
        if n > self.turns:
            return {"kind": "final", "text": "done"}
        return {
            "kind": "call",
            "id": f"{self.prefix}{n}",
            "name": "echo",
            "arguments": {"x": "y" * self.size},
        }


def echo(x: str) -> str:
    """Return x."""
    return x


def summary_writer(text: str = "the story so far") -> Callable[[list[Message]], Message]:
    """A summariser that answers ``text`` and keeps what it was asked."""

    def write(history: list[Message]) -> Message:
        write.asked.append(history)  # type: ignore[attr-defined]
        return {"kind": "final", "text": text}

    write.asked = []  # type: ignore[attr-defined]
    return write


# -- keep_last ------------------------------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_keep_last_sends_the_head_and_the_newest_whole_turns(driver: Driver) -> None:
    """Old turns leave the request in whole batches; the system and first user message stay."""
    model = Chatty(8)
    loop = Loop(model, tools=[echo], system="be brief", context=keep_last(tokens=250))
    result = driver.run(loop, "hello")
    assert result.status == "finished"
    for history in model.seen:
        assert history[:2] == [
            {"kind": "system", "text": "be brief"},
            {"kind": "user", "text": "hello"},
        ]
        assert paired(history)
        assert tokens_of(history) <= 250
    assert len(model.seen[-1]) < len(result.transcript) - 1  # some turns were left out
    # The newest turn is always sent: each request ends with the history's last message.
    for event, history in zip(
        [e for e in result.events if e.trigger == "model_replied"], model.seen, strict=True
    ):
        assert event.context is not None
        assert history[-1] == result.transcript[event.context.kept[-1][1] - 1]
    assert_contract(
        result, [{"kind": "system", "text": "be brief"}, {"kind": "user", "text": "hello"}]
    )


def test_the_record_keeps_the_whole_history_and_what_each_request_saw() -> None:
    """The transcript is whole; each model event's context names the messages it was sent."""
    model = Chatty(6)
    result = Loop(model, tools=[echo], context=keep_last(tokens=200)).run("hi")
    assert len(result.transcript) == 1 + 2 * 6 + 1
    asked = [e.context for e in result.events if e.trigger == "model_replied"]
    assert all(isinstance(seen, Seen) for seen in asked)
    for seen, history in zip(asked, model.seen, strict=True):
        assert seen is not None
        rebuilt = [result.transcript[i] for a, b in seen.kept for i in range(a, b)]
        assert rebuilt == history
        assert seen.tokens == tokens_of(history)
    assert asked[-1] is not None
    assert asked[-1].kept[0] == (0, 1)
    assert "messages 0, " in asked[-1].describe()


def test_off_by_default_nothing_changes() -> None:
    """Without a policy the model gets the whole history and events carry no context."""
    model = Chatty(3)
    result = Loop(model, tools=[echo]).run("hi")
    assert [len(h) for h in model.seen] == [1, 3, 5, 7]
    assert all(event.context is None for event in result.events)
    assert result.context is None
    assert "context" not in orjson.loads(run_to_json(result))


@pytest.mark.row("awaiting_model --ask_model [context_overflows]--> exhausted")
def test_a_turn_that_cannot_fit_ends_the_run_exhausted_before_any_request() -> None:
    """When even the newest turn is over budget, nothing is sent: exhausted, reason 'context'."""
    model = Chatty(3, size=2000)
    result = Loop(model, tools=[echo], context=keep_last(tokens=300)).run("hi")
    assert result.status == "exhausted"
    assert result.reason == "context"
    assert result.error is not None
    assert "newest turn" in result.error
    assert len(model.seen) == 1  # the long result never went out
    assert result.events[-1].guard == "context_overflows"
    assert result.steps == 1  # no step was spent on a request that was not sent


def test_a_first_message_over_budget_is_refused_the_same_way() -> None:
    """An input whose head alone is too long never reaches the model."""
    model = Chatty(0)
    result = Loop(model, context=keep_last(tokens=10)).run("x" * 400)
    assert (result.status, result.reason, result.steps, model.seen) == (
        "exhausted",
        "context",
        0,
        [],
    )
    assert result.error is not None
    assert "head" in result.error


def test_a_batch_is_never_separated_from_its_results() -> None:
    """A batch of three calls with their results leaves or stays whole."""
    script = iter(
        [
            {
                "kind": "calls",
                "calls": [
                    {"id": f"b{i}{j}", "name": "echo", "arguments": {"x": BIG}} for j in range(3)
                ],
            }
            for i in range(5)
        ]
    )
    seen: list[list[Message]] = []

    def model(history: list[Message]) -> Message:
        seen.append(history)
        return next(script, {"kind": "final", "text": "ok"})

    result = Loop(model, tools=[echo], context=keep_last(tokens=500)).run("go")
    assert result.status == "finished"
    for history in seen:
        assert paired(history)
        assert tokens_of(history) <= 500
    assert len(seen[-1]) == 1 + 4  # the user message and the newest batch of three with results


# -- summarise ------------------------------------------------------------------------


@pytest.mark.row(
    "awaiting_model --ask_model [summary_due]--> summarising",
    "summarising --summarise--> (stays)",
    "summarising --summary_written--> awaiting_model",
)
@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_summarise_folds_the_oldest_turns_on_a_row_and_a_step_of_its_own(driver: Driver) -> None:
    """The summary is its own model call: a step, recorded, and sent after the head."""
    model, writer = Chatty(10), summary_writer()
    loop = Loop(model, tools=[echo], context=summarise(writer, tokens=300), max_steps=40)
    result = driver.run(loop, "hello")
    assert result.status == "finished"
    written = [e for e in result.events if e.trigger == "summary_written"]
    assert written
    assert all(e.source == "summarising" for e in written)
    assert result.steps == len(model.seen) + len(writer.asked)  # type: ignore[attr-defined]
    later = model.seen[-1]
    assert later[0] == {"kind": "user", "text": "hello"}
    assert later[1]["kind"] == "user"
    assert "the story so far" in later[1]["text"]
    for history in model.seen:
        assert paired(history)
        assert tokens_of(history) <= 300
    assert_contract(result, "hello")
    # The summariser saw the folded turns, and the summary so far once there was one.
    assert "The conversation to fold in" in writer.asked[0][1]["text"]  # type: ignore[attr-defined]
    assert "The summary so far" in writer.asked[-1][1]["text"]  # type: ignore[attr-defined]


def read(page: int, size: int) -> str:
    """Read ``size`` characters of a page."""
    return "x" * size


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_summary_too_big_to_send_is_left_out_and_never_written_again(driver: Driver) -> None:
    """The head and the newest turn fit, but not with the summary: the request goes without
    it, and the turns it stands for are not folded again; a summary is written only with a
    model request since the last one. The run finishes, as keep_last's does."""
    model = ScriptedModel(
        [call(f"c{page}", "read", page=page, size=10) for page in range(5)] + [final("read")]
    )
    writer = summary_writer("summary " * 20)  # about 60 tokens: never fits beside a turn
    loop = Loop(model, tools=[read], context=summarise(writer, tokens=150), max_steps=60)
    run = driver.start(loop, "read five pages")
    asks = []
    for transition in run:
        if transition.trigger in ("model_replied", "summary_written"):
            asks.append(transition.trigger.value)
            assert asks[-2:] != ["summary_written"] * 2  # never two summaries in a row
    result = run.result()
    assert (result.status, result.steps) == ("finished", 6 + len(writer.asked))  # type: ignore[attr-defined]
    assert asks.count("model_replied") == 6
    assert 1 <= asks.count("summary_written") <= 2
    sent = [e.context for e in result.events if e.trigger == "model_replied"]
    assert all(seen is not None and seen.summary is None for seen in sent)  # never fitted
    # A later fold takes in only the turns no summary stood for: "the summary so far" and
    # the newer turns, never the first fold's turns again.
    first, *later = writer.asked  # type: ignore[attr-defined]
    for asked in later:
        assert "The summary so far" in asked[1]["text"]
        assert '"id":"c0"' not in asked[1]["text"]
    assert '"id":"c0"' in first[1]["text"]
    assert_contract(result, "read five pages")


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
def test_a_model_request_follows_every_summary_even_when_kept_turns_must_go(
    driver: Driver,
) -> None:
    """``keep_tokens`` near ``tokens``: the turns a fold keeps do not all fit beside its summary.
    The model request goes next all the same, without the oldest of them (recorded so), and
    a later fold takes them in: never two summaries in a row."""
    model = ScriptedModel(
        [call(f"c{page}", "read", page=page, size=10) for page in range(6)] + [final("read")]
    )
    writer = summary_writer("s")
    policy = summarise(writer, tokens=150, keep_tokens=120)
    result = driver.run(Loop(model, tools=[read], context=policy, max_steps=40), "read pages")
    asks = [e.trigger.value for e in result.events if e.trigger in _REQUESTS]
    assert ("summary_written", "summary_written") not in set(itertools.pairwise(asks))
    assert (result.status, asks.count("model_replied")) == ("finished", 7)
    assert asks.count("summary_written") >= 2
    assert_contract(result, "read pages")


_REQUESTS = ("model_replied", "summary_written")


def test_assert_contract_catches_two_summaries_in_a_row() -> None:
    """A summary written with no model request since the one before fails the contract."""
    writer = summary_writer()
    result = Loop(Chatty(10), tools=[echo], context=summarise(writer, tokens=300)).run("a")
    events = list(result.events)
    index = next(i for i, e in enumerate(events) if e.trigger == "summary_written")
    events.insert(index + 1, events[index])
    with pytest.raises(ContractViolation, match="a model request since the last summary"):
        assert_requests_fit(result._replace(events=tuple(events)))


def test_a_summary_counts_against_max_steps() -> None:
    """max_steps bounds summaries too: a run out of steps ends exhausted in summarising."""
    model, writer = Chatty(10), summary_writer()
    result = Loop(model, tools=[echo], context=summarise(writer, tokens=300), max_steps=4).run("a")
    assert result.status == "exhausted"
    assert result.reason == "max_steps"
    assert result.steps == 4


def test_a_summariser_usage_counts_toward_max_total_tokens() -> None:
    """The summary's reported usage is the run's, as a model reply's is."""
    model = Chatty(10)

    def writer(history: list[Message]) -> Message:
        usage = {"input_tokens": 500, "output_tokens": 10, "cached_tokens": 0}
        return {"kind": "final", "text": "s", "usage": usage}

    loop = Loop(model, tools=[echo], context=summarise(writer, tokens=300), max_total_tokens=400)
    result = loop.run("a")
    assert result.status == "exhausted"
    assert result.reason == "max_total_tokens"
    assert result.usage.total == 510


@pytest.mark.row("summarising --summary_raised--> failed")
def test_a_summariser_that_raises_fails_the_run() -> None:
    """A failing summary call ends the run failed, saying the summariser raised."""

    def writer(history: list[Message]) -> Message:
        raise ConnectionError("down")

    result = Loop(Chatty(10), tools=[echo], context=summarise(writer, tokens=300)).run("a")
    assert result.status == "failed"
    assert result.error == "the summariser raised ConnectionError: down"
    assert result.events[-1].trigger == "summary_raised"


@pytest.mark.row("summarising --summary_written [summary_malformed]--> malformed")
def test_a_summary_that_is_not_a_final_is_malformed() -> None:
    """The summariser must answer a final answer; a call is refused, nothing is kept."""

    def writer(history: list[Message]) -> Message:
        return {"kind": "call", "id": "s", "name": "echo", "arguments": {}}

    result = Loop(Chatty(10), tools=[echo], context=summarise(writer, tokens=300)).run("a")
    assert result.status == "malformed"
    assert result.error is not None
    assert result.error.startswith("malformed summary:")


def test_a_summary_that_is_not_json_is_kept_as_rejected_and_replays() -> None:
    """A summariser's reply that is not JSON ends the run malformed; the run file replays."""

    def writer(history: list[Message]) -> object:
        return object()

    result = Loop(Chatty(10), tools=[echo], context=summarise(writer, tokens=300)).run("a")
    assert result.status == "malformed"
    assert result.error is not None
    assert "malformed summary: " in result.error
    assert isinstance(result.rejected, agentloop.review.NotJSON)
    assert run_from_json(run_to_json(result)).events == result.events


@pytest.mark.row("summarising --summary_written [cancel_requested]--> cancelled")
def test_a_summary_cancelled_while_written_is_dropped() -> None:
    """Cancelled while the summariser worked: the run ends cancelled, nothing kept."""
    token = CancelToken()

    def writer(history: list[Message]) -> Message:
        token.cancel()
        return {"kind": "final", "text": "late"}

    loop = Loop(Chatty(10), tools=[echo], context=summarise(writer, tokens=300))
    result = loop.run("a", cancel=token)
    assert result.status == "cancelled"
    assert result.events[-1].trigger == "summary_written"
    assert result.events[-1].guard == "cancel_requested"


@pytest.mark.row("summarising --summary_interrupted--> cancelled")
def test_a_summary_interrupted_ends_the_run_cancelled() -> None:
    """A KeyboardInterrupt in the summariser ends the run cancelled, its step spent."""

    def writer(history: list[Message]) -> Message:
        raise KeyboardInterrupt

    run = Loop(Chatty(10), tools=[echo], context=summarise(writer, tokens=300)).start("a")
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    result = run.result()
    assert result.status == "cancelled"
    assert result.events[-1].trigger == "summary_interrupted"
    assert result.events[-1].context is not None
    assert_requests_fit(result)


def test_an_async_summary_cancelled_by_the_token_is_interrupted() -> None:
    """Under asyncio the token interrupts an awaited summariser at once."""
    token = CancelToken()

    async def writer(history: list[Message]) -> Message:
        token.cancel()
        await asyncio.sleep(10)
        return {"kind": "final", "text": "never"}

    loop = Loop(Chatty(10), tools=[echo], context=summarise(writer, tokens=300))
    result = asyncio.run(loop.arun("a", cancel=token))
    assert result.status == "cancelled"
    assert result.events[-1].trigger == "summary_interrupted"


# -- run files, replay, resume and fork ----------------------------------------------------


def test_a_run_file_keeps_the_policy_and_replays_the_same_requests() -> None:
    """Saved and loaded, the run replays under its recorded policy to the same references."""
    writer = summary_writer()
    loop = Loop(Chatty(10), tools=[echo], context=summarise(writer, tokens=300), max_steps=40)
    result = loop.run("a")
    text = run_to_json(result)
    document = orjson.loads(text)
    assert document["context"] == {
        "policy": "summarise",
        "tokens": 300,
        "counter": "approx",
        "keep_tokens": 150,
    }
    loaded = run_from_json(text)
    assert [e.context for e in loaded.events] == [e.context for e in result.events]
    assert loaded.events == result.events


def test_a_run_file_keeps_no_references_the_replay_makes_them() -> None:
    """The replay makes each reference again under the file's policy: none is written."""
    result = Loop(Chatty(6), tools=[echo], context=keep_last(tokens=200)).run("a")
    assert any(e.context is not None and e.context.kept for e in result.events)
    document = orjson.loads(run_to_json(result))
    assert not any("context" in e for e in document["events"])
    loaded = run_from_json(orjson.dumps(document))
    assert [e.context for e in loaded.events] == [e.context for e in result.events]


def test_resume_and_fork_go_on_under_the_policy() -> None:
    """A fork of a fitted run keeps fitting its requests; a result resumed needs the same policy."""
    loop = Loop(Chatty(6), tools=[echo], context=keep_last(tokens=200))
    result = loop.run("a")
    model = Chatty(3, prefix="f")
    forked = Loop(model, tools=[echo], context=keep_last(tokens=200)).fork(result, at=12)
    assert forked.finish().status == "finished"
    assert all(tokens_of(h) <= 200 for h in model.seen)
    other = Loop(Chatty(1), tools=[echo], context=keep_last(tokens=300))
    with pytest.raises(agentloop.ConfigurationMismatchError, match="context"):
        other.resume(result)


def test_show_names_what_each_request_saw(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's text view (show, and the report's rows) says what each request was sent."""
    from agentloop._cli.main import main

    writer = summary_writer("the gist")
    loop = Loop(Chatty(8), tools=[echo], context=summarise(writer, tokens=300), max_steps=40)
    result = loop.run("a")
    path = tmp_path / "run.json"
    agentloop.review.save_run(result, path)
    main(["show", str(path)])
    shown = capsys.readouterr().out
    assert "sent messages 0, 3-4 (" in shown or "sent messages 0, " in shown
    assert "summary: the gist; sent messages " in shown
    assert "summary of 1-" in shown
    assert "summary of 1-" in agentloop.review.report_html(result)


# -- bad input ----------------------------------------------------------------------------


def test_bad_policies_are_refused_with_what_was_expected() -> None:
    """keep_last, summarise and Loop(context=) name what they expected."""
    with pytest.raises(
        ValueError, match=r"expected tokens to be an int from 1 to 2\*\*63 - 1, got 0"
    ):
        keep_last(tokens=0)
    with pytest.raises(ValueError, match=r"from 1 to 2\*\*63 - 1, got 9223372036854775808"):
        keep_last(tokens=2**63)  # more than a run file or a ledger can keep
    with pytest.raises(TypeError, match=r"expected tokens to be an int from 1 to 2\*\*63 - 1"):
        keep_last(tokens="10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected model to be a model callback"):
        summarise("gpt", tokens=10)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected counter to be a callable"):
        keep_last(tokens=10, counter=len)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected keep_tokens to be less than tokens=400, got 4"):
        summarise(Chatty(1), tokens=400, keep_tokens=400)
    assert summarise(Chatty(1), tokens=400, keep_tokens=399).keep_tokens == 399
    with pytest.raises(TypeError, match=r"expected context to be agentloop\.context\.keep_last"):
        Loop(Chatty(1), context=1000)  # type: ignore[call-overload]


def test_tiktoken_tokens_counts_with_an_encoding_given() -> None:
    """An encoding object (tiktoken's API) counts a message's JSON text, plus its framing."""

    class Words:
        name = "words"

        def encode(self, text: str, disallowed_special: object = ()) -> list[str]:
            return text.split()

    counter = tiktoken_tokens(Words())
    assert counter.name == "tiktoken:words"
    assert counter(b"one two three") == 3 + 4
    with pytest.raises(TypeError, match="expected encoding to be an encoding's name"):
        tiktoken_tokens(3)


# -- large tool results -----------------------------------------------------------------------


def test_max_result_chars_cuts_a_result_with_a_marker() -> None:
    """A tool's limit (or the registry's) cuts its result before the history gets it."""
    registry = ToolRegistry(
        [
            Tool(lambda: "x" * 500, name="big", max_result_chars=100),
            Tool(lambda: "z" * 50, name="small"),
        ],
        max_result_chars=20,
    )
    script = iter(
        [
            {"kind": "call", "id": "1", "name": "big", "arguments": {}},
            {"kind": "call", "id": "2", "name": "small", "arguments": {}},
            {"kind": "final", "text": "ok"},
        ]
    )
    result = Loop(lambda history: next(script), tools=registry).run("go")
    big, small = (m for m in result.transcript if m["kind"] == "tool_result")
    assert big["content"] == "x" * 100 + (
        "\n[... cut: 400 of 500 characters; the result was longer than max_result_chars=100]"
    )
    assert small["content"].startswith("z" * 20 + "\n[... cut: 30 of 50 characters")


@settings(max_examples=25, deadline=None)
@given(result=oversized_results(40))
def test_an_oversized_result_always_enters_the_history_cut(result: object) -> None:
    """Whatever the kit's oversized results hold, the history gets at most the limit, marked."""
    registry = ToolRegistry([Tool(lambda: result, name="big", max_result_chars=40)])
    outcome = registry.dispatch({"id": "1", "name": "big", "arguments": {}})
    content = outcome["content"]
    assert isinstance(content, str)
    kept, marker = content.split("\n[... cut: ", 1)
    assert len(kept) == 40
    text = result if isinstance(result, str) else orjson.dumps(result).decode()
    assert marker.startswith(f"{len(text) - 40} of {len(text)} characters")


def test_bad_limits_are_refused() -> None:
    """max_result_chars takes an int of 1 or more, or None."""
    with pytest.raises(ValueError, match="max_result_chars: expected an int of 1 or more"):
        Tool(echo, max_result_chars=0)
    with pytest.raises(TypeError, match="max_result_chars: expected an int of 1 or more"):
        ToolRegistry(max_result_chars=1.5)  # type: ignore[arg-type]


# -- the testing kit ------------------------------------------------------------------------


def test_assert_contract_catches_a_request_that_did_not_fit() -> None:
    """A reference naming more tokens than the policy allows fails the contract."""
    result = Loop(Chatty(4), tools=[echo], context=keep_last(tokens=200)).run("a")
    events = list(result.events)
    index = next(i for i, e in enumerate(events) if e.trigger == "model_replied" and i > 5)
    seen = events[index].context
    assert seen is not None
    events[index] = events[index]._replace(context=seen._replace(kept=((0, seen.kept[-1][1]),)))
    doctored = result._replace(events=tuple(events))
    with pytest.raises(ContractViolation, match="tokens"):
        assert_requests_fit(doctored)


def test_assert_contract_catches_an_orphaned_result() -> None:
    """A reference that sends a result without its call fails the contract."""
    result = Loop(Chatty(4), tools=[echo], context=keep_last(tokens=200)).run("a")
    events = list(result.events)
    index = max(i for i, e in enumerate(events) if e.trigger == "model_replied")
    seen = events[index].context
    assert seen is not None
    last = seen.kept[-1]
    events[index] = events[index]._replace(
        context=seen._replace(kept=(*seen.kept[:-1], (last[0] + 1, last[1])))
    )
    with pytest.raises(ContractViolation, match="sent alone"):
        assert_requests_fit(result._replace(events=tuple(events)))


# -- properties -------------------------------------------------------------------------------

SIZES = st.integers(0, 400)


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """An input history: a system message maybe, a user message, then earlier turns."""
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append({"kind": "system", "text": "s" * draw(st.integers(0, 60))})
    messages.append({"kind": "user", "text": "u" * draw(st.integers(1, 80))})
    for turn in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["batch", "batch", "final", "user", "system"]))
        if kind == "batch":
            ids = [f"p{turn}_{j}" for j in range(draw(st.integers(1, 3)))]
            messages.append(
                {
                    "kind": "calls",
                    "calls": [{"id": i, "name": "echo", "arguments": {"x": "a"}} for i in ids],
                }
            )
            for i in ids:
                content = "r" * draw(SIZES)
                messages.append(
                    {
                        "kind": "tool_result",
                        "id": i,
                        "name": "echo",
                        "status": "ok",
                        "content": content,
                    }
                )
        else:
            least = 1 if kind == "user" else 0  # a user message is never blank
            messages.append({"kind": kind, "text": "t" * draw(st.integers(least, 200))})
    return messages


@st.composite
def replies(draw: st.DrawFn) -> list[object]:
    """A script: calls and batches to echo (some gated by a person), finals, and failures."""
    script: list[object] = []
    for step in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["call", "call", "batch", "gated", "final", "raise"]))
        if kind == "final":
            script.append({"kind": "final", "text": "f"})
        elif kind == "raise":
            script.append(RuntimeError("model down"))
        else:
            count = draw(st.integers(2, 3)) if kind == "batch" else 1
            name = "gated" if kind == "gated" else "echo"
            calls = [
                {"id": f"m{step}_{j}", "name": name, "arguments": {"x": "z" * draw(SIZES)}}
                for j in range(count)
            ]
            script.append(
                {"kind": "calls", "calls": calls} if count > 1 else {"kind": "call", **calls[0]}
            )
    return script


class Scripted:
    """The drawn script as a model, recording each request; cancels on an invocation if told."""

    def __init__(self, script: list[object], token: CancelToken, cancel_at: int | None) -> None:
        self.script, self.token, self.cancel_at = list(script), token, cancel_at
        self.seen: list[list[Message]] = []

    def __call__(self, history: list[Message]) -> object:
        self.seen.append(history)
        if len(self.seen) == self.cancel_at:
            self.token.cancel()
        reply = self.script.pop(0) if self.script else {"kind": "final", "text": "end"}
        if isinstance(reply, Exception):
            raise reply
        return reply


def gated(x: str) -> str:
    """Return x, once a person allowed it."""
    return x


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.name)
@settings(max_examples=300, deadline=None)
@given(
    history=histories(),
    script=replies(),
    tokens=st.integers(30, 900),
    summarising=st.sampled_from([None, "writes", "raises"]),
    summary=st.tuples(st.integers(1, 400), st.none() | st.integers(0, 899)),
    cancel_at=st.none() | st.integers(1, 6),
    budget=st.tuples(st.integers(0, 12), st.integers(0, 8)),
    allow=st.lists(st.booleans(), max_size=6),
)
def test_every_request_sent_is_paired_fits_and_keeps_the_newest_turn(
    driver: Driver,
    history: list[Message],
    script: list[object],
    tokens: int,
    summarising: str | None,
    summary: tuple[int, int | None],
    cancel_at: int | None,
    budget: tuple[int, int],
    allow: list[bool],
) -> None:
    """Random histories, batches, approvals, cancellations and budgets: each request fits.

    Every history the model is handed is paired, within the budget (by the
    policy's counter), starts with the head and ends with the history's last
    message; or nothing is sent and the run ends exhausted for 'context'.
    Summaries of any length (some too big to send) and any ``keep_tokens``: a
    model request follows each one. The run keeps the whole contract, and its
    run file replays to the same requests.
    """
    token = CancelToken()
    model = Scripted(script, token, cancel_at)
    length, keep = summary
    writes = summary_writer("s" * length)

    def failing(history: list[Message]) -> Message:
        raise RuntimeError("no summary")

    policy = (
        keep_last(tokens=tokens)
        if summarising is None
        else summarise(
            writes if summarising == "writes" else failing,
            tokens=tokens,
            keep_tokens=None if keep is None else min(keep, tokens - 1),
        )
    )
    registry = ToolRegistry([echo, Tool(gated, policy=lambda call: agentloop.ask("check"))])
    loop = Loop(
        model,
        tools=registry,
        context=policy,
        max_steps=budget[0],
        max_calls=budget[1],
        max_concurrency=1,
    )
    run = driver.start(loop, history, cancel=token)
    decisions = iter(allow)
    for _ in range(200):
        if run.done:
            break
        if run.state is State.AWAITING_APPROVAL:
            pending = run.pending
            made = {
                c.call_id: (c.approve() if next(decisions, True) else c.deny("no")) for c in pending
            }
            if isinstance(run, agentloop.Run):
                run.decide(made)
            else:
                driver.runner.run(run.run.adecide(made))  # type: ignore[union-attr]
            continue
        run.step()
    assert run.done
    result = run.result()
    head = next(i for i, m in enumerate(history) if m["kind"] == "user") + 1
    asked = [
        e
        for e in result.events
        if e.trigger in ("model_replied", "model_raised", "model_interrupted")
    ]
    assert len(asked) == len(model.seen)
    for event, sent in zip(asked, model.seen, strict=True):
        assert paired(sent)
        assert tokens_of(sent) <= tokens
        assert sent[:head] == history[:head]
        assert all(m in sent for m in history if m["kind"] == "system")
        assert event.context is not None
        assert sent[-1] == result.transcript[event.context.kept[-1][1] - 1]
        assert event.context.kept[-1][1] == len(result.transcript) - sum(
            len(e.appended_json) for e in result.events[result.events.index(event) :]
        )
    if result.reason == "context":
        assert result.events[-1].guard == "context_overflows"
    note_case(f"{result.status.value} {result.reason or ''}")
    note_case(f"summaries: {min(sum(e.trigger == 'summary_written' for e in result.events), 2)}")
    asks = [e.trigger.value for e in result.events if e.trigger in _REQUESTS]
    note_case(f"summaries in a row: {('summary_written',) * 2 in set(itertools.pairwise(asks))}")
    note_case(f"left out: {any(len(s) < len(result.transcript) for s in model.seen)}")
    assert_contract(result, history)
    assert run_from_json(run_to_json(result)).events == result.events


def test_an_input_without_a_user_message_keeps_its_input_as_the_head() -> None:
    """With no user message in the input, the input is the head and later turns can leave."""
    model = Chatty(6)
    loop = Loop(model, tools=[echo], context=keep_last(tokens=200))
    result = loop.run([{"kind": "system", "text": "Work alone."}])
    assert result.status == "finished"
    assert all(h[0] == {"kind": "system", "text": "Work alone."} for h in model.seen)
    assert len(model.seen[-1]) < len(result.transcript) - 1
    assert_contract(result, [{"kind": "system", "text": "Work alone."}])


# -- durable runs --------------------------------------------------------------------------------


def test_a_durable_run_is_fitted_and_resumed_under_its_recorded_policy(tmp_path: Any) -> None:
    """With a ledger, keep_last fits every request; the header records the policy, and a
    resume under another policy is refused while a reader without a Loop replays it."""
    from agentloop.ledger import view_run

    db = str(tmp_path / "runs.db")
    registry = ToolRegistry([echo, Tool(gated, policy=lambda call: agentloop.ask("check"))])
    script = [
        *(
            {"kind": "call", "id": f"c{i}", "name": "echo", "arguments": {"x": BIG}}
            for i in range(5)
        ),
        {"kind": "call", "id": "g", "name": "gated", "arguments": {"x": "ok"}},
        {"kind": "final", "text": "done"},
    ]
    seen: list[list[Message]] = []

    def model(history: list[Message]) -> object:
        seen.append(history)
        return script[len(seen) - 1]

    def loop(tokens: int) -> Loop:
        return Loop(
            model,
            tools=registry,
            context=keep_last(tokens=tokens),
            ledger=agentloop.ledger.SQLiteLedger(db),
        )

    paused = loop(300).run("go", run_id="r1")
    assert paused.status == "awaiting_approval"
    with pytest.raises(agentloop.ConfigurationMismatchError, match="context"):
        loop(400).resume("r1", decisions={"g": agentloop.approve()})
    viewed = view_run(agentloop.ledger.SQLiteLedger(db), "r1")
    assert [e.context for e in viewed.events] == [e.context for e in paused.events]
    result = loop(300).resume("r1", decisions={"g": agentloop.approve()})
    assert result.status == "finished"
    assert all(paired(h) and tokens_of(h) <= 300 for h in seen)
    assert result.context == keep_last(tokens=300)
    assert_contract(result, "go")


def test_a_durable_run_journals_its_summaries_and_resumes_without_asking_again(
    tmp_path: Any,
) -> None:
    """With a ledger, each summary is recorded as a model reply is: a resume replays it,
    never asks the summariser again, and goes on to summarise live."""
    db = str(tmp_path / "runs.db")
    registry = ToolRegistry([echo, Tool(gated, policy=lambda call: agentloop.ask("check"))])
    script = [
        *(
            {"kind": "call", "id": f"c{i}", "name": "echo", "arguments": {"x": BIG}}
            for i in range(5)
        ),
        {"kind": "call", "id": "g", "name": "gated", "arguments": {"x": "ok"}},
        *(
            {"kind": "call", "id": f"d{i}", "name": "echo", "arguments": {"x": BIG}}
            for i in range(4)
        ),
        {"kind": "final", "text": "done"},
    ]
    seen: list[list[Message]] = []

    def model(history: list[Message]) -> object:
        seen.append(history)
        return script[len(seen) - 1]

    writer = summary_writer("so far, so good")

    def loop() -> Loop:
        return Loop(
            model,
            tools=registry,
            context=summarise(writer, tokens=300),
            ledger=agentloop.ledger.SQLiteLedger(db),
            max_steps=40,
        )

    paused = loop().run("go", run_id="r1")
    assert paused.status == "awaiting_approval"
    written = len(writer.asked)  # type: ignore[attr-defined]
    assert written >= 1
    result = loop().resume("r1", decisions={"g": agentloop.approve()})
    assert result.status == "finished"
    assert result.events[: len(paused.events)] == paused.events
    summaries = sum(e.trigger == "summary_written" for e in result.events)
    assert summaries == len(writer.asked) > written  # type: ignore[attr-defined]
    assert all(paired(h) and tokens_of(h) <= 300 for h in seen)
    assert loop().resume("r1").events == result.events  # ended: only read, the same
    assert_contract(result, "go")


def test_a_durable_summary_interrupted_is_recorded_as_the_run_s_end(tmp_path: Any) -> None:
    """A Ctrl-C in the summariser ends the durable run cancelled; resume reads that end."""
    db = str(tmp_path / "runs.db")

    def writer(history: list[Message]) -> Message:
        raise KeyboardInterrupt

    def loop() -> Loop:
        return Loop(
            Chatty(10),
            tools=[echo],
            context=summarise(writer, tokens=300),
            ledger=agentloop.ledger.SQLiteLedger(db),
        )

    run = loop().start("a", run_id="r1")
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    ended = loop().resume("r1")
    assert ended.status == "cancelled"
    assert ended.events[-1].trigger == "summary_interrupted"
    assert ended.events == run.result().events
