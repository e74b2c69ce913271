"""agentloop.otel: the span tree of runs, on both drivers, read back from the SDK's exporter."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

import opentelemetry.trace
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import agentloop
from agentloop import CancelToken, Loop
from agentloop.otel import OtelListener
from agentloop.testing import (
    AsyncScriptedModel,
    ScriptedModel,
    assert_contract,
    batch,
    call,
    cancel,
    final,
)
from tests.support import ROOT
from tests.support.helpers import add, import_error

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path


class Exported:
    """A tracer provider whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        """Finished spans, in the order they started (a parent before a child started with it)."""
        return sorted(
            self.exporter.get_finished_spans(),
            key=lambda s: (s.start_time or 0, -(s.end_time or 0), s.parent is not None),
        )

    def listener(self, **options: Any) -> OtelListener:
        return OtelListener(self.provider, **options)


@pytest.fixture
def otel() -> Iterator[Exported]:
    exported = Exported()
    yield exported
    exported.provider.shutdown()


def boom(text: str) -> str:
    """A tool that raises."""
    raise ValueError(f"bad {text}")


TOOLS = {"add": add, "boom": boom}


def tree(spans: list[ReadableSpan]) -> list[tuple[str, str | None]]:
    """(name, parent's name) for each span, in start order."""
    names = {s.context.span_id: s.name for s in spans if s.context is not None}
    return [(s.name, names.get(s.parent.span_id) if s.parent else None) for s in spans]


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def times(span: ReadableSpan) -> tuple[int, int]:
    """(start, end) of a finished span."""
    assert span.start_time is not None
    assert span.end_time is not None
    return span.start_time, span.end_time


def run_both(
    otel: Exported,
    replies: Sequence[object],
    *,
    driver: str,
    cancel_with: Any = None,
    **options: Any,
) -> agentloop.RunResult:
    """Run ``replies`` on the named driver with a fresh listener on the loop."""
    token = cancel_with
    if driver == "sync":
        model = ScriptedModel(replies)
        loop = Loop(model, tools=TOOLS, listeners=[otel.listener(**options)])
        return loop.run("hi", cancel=token)
    amodel = AsyncScriptedModel(replies)
    aloop = Loop(amodel, tools=TOOLS, listeners=[otel.listener(**options)])
    return asyncio.run(aloop.arun("hi", cancel=token))


both = pytest.mark.parametrize("driver", ["sync", "async"])


@both
def test_a_finished_run_is_one_tree(otel: Exported, driver: str) -> None:
    """invoke_agent, with chat, execute_tool, chat beneath it, attributed by the conventions."""
    result = run_both(
        otel,
        [call("c1", "add", a=2, b=2), final("4")],
        driver=driver,
        agent_name="adder",
        model_name="scripted-1",
        provider_name="agentloop.testing",
    )
    assert result.status == "finished"
    spans = otel.spans()
    assert tree(spans) == [
        ("invoke_agent adder", None),
        ("chat scripted-1", "invoke_agent adder"),
        ("execute_tool add", "invoke_agent adder"),
        ("chat scripted-1", "invoke_agent adder"),
    ]
    run, chat1, tool, chat2 = spans
    assert len({s.context.trace_id for s in spans if s.context}) == 1
    assert (run.kind, chat1.kind, tool.kind) == (
        SpanKind.INTERNAL,
        SpanKind.CLIENT,
        SpanKind.INTERNAL,
    )
    assert attrs_of(run) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "adder",
        "gen_ai.provider.name": "agentloop.testing",
        "gen_ai.request.model": "scripted-1",
        "agentloop.status": "finished",
        "agentloop.steps": 2,
        "agentloop.calls": 1,
    }
    assert attrs_of(chat1) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "agentloop.testing",
        "gen_ai.request.model": "scripted-1",
        "agentloop.trigger": "model_replied",
        "agentloop.steps": 1,
        "agentloop.calls": 0,
    }
    assert attrs_of(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "agentloop.result_status": "ok",
        "agentloop.steps": 1,
        "agentloop.calls": 1,
    }
    assert attrs_of(chat2)["agentloop.steps"] == 2
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)
    # Times: each child within the run, in the order things happened.
    begin, end = times(run)
    assert all(begin <= times(s)[0] <= times(s)[1] <= end for s in (chat1, tool, chat2))
    assert times(chat1)[1] <= times(tool)[0] <= times(tool)[1] <= times(chat2)[0]


def test_the_names_fall_back_without_names(otel: Exported) -> None:
    """No agent or model name: the spans are called by their operation alone."""
    run_both(otel, [final("x")], driver="sync")
    assert tree(otel.spans()) == [("invoke_agent", None), ("chat", "invoke_agent")]
    assert "gen_ai.agent.name" not in attrs_of(otel.spans()[0])


@both
def test_a_failed_run_is_an_error_with_the_model_exception(otel: Exported, driver: str) -> None:
    """The run span is an error typed 'failed'; the chat span records what the model raised."""
    result = run_both(otel, [ValueError("no provider")], driver=driver)
    assert result.status == "failed"
    run, chat = otel.spans()
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "the model raised ValueError: no provider"
    assert attrs_of(run)["error.type"] == "failed"
    assert attrs_of(run)["agentloop.status"] == "failed"
    assert chat.status.status_code is StatusCode.ERROR
    assert attrs_of(chat)["error.type"] == "ValueError"
    assert attrs_of(chat)["agentloop.trigger"] == "model_raised"
    (event,) = chat.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.message"] == "no provider"


@both
@pytest.mark.parametrize(
    ("replies", "status", "error"),
    [
        ([{"kind": "call"}], "malformed", "malformed reply"),
        ([call("c1", "add", a=1, b=1), call("c1", "add", a=1, b=1)], "repeated_call", "c1"),
    ],
)
def test_malformed_and_repeated_runs_are_errors(
    otel: Exported, driver: str, replies: list[object], status: str, error: str
) -> None:
    """Both end the run span with an error typed by the state, saying what was wrong."""
    assert run_both(otel, replies, driver=driver).status == status
    run = otel.spans()[0]
    assert run.name == "invoke_agent"
    assert run.status.status_code is StatusCode.ERROR
    assert error in (run.status.description or "")
    assert attrs_of(run)["error.type"] == status


@both
def test_a_cancelled_run_is_not_an_error(otel: Exported, driver: str) -> None:
    """Cancelled while the model worked: the chat span is ordinary, the run says cancelled."""
    token = CancelToken()
    result = run_both(
        otel, [call("c1", "add", a=1, b=1), cancel(token), final("late")],
        driver=driver, cancel_with=token,
    )  # fmt: skip
    assert result.status == "cancelled"
    spans = otel.spans()
    assert [s.name for s in spans] == ["invoke_agent", "chat", "execute_tool add", "chat"]
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)
    assert attrs_of(spans[0])["agentloop.status"] == "cancelled"
    assert attrs_of(spans[0])["agentloop.steps"] == 2


def test_a_tool_cancelled_while_it_runs_under_asyncio(otel: Exported) -> None:
    """token.cancel() during an awaited tool: its span ends with result status cancelled."""
    token = CancelToken()

    async def slow(seconds: float) -> str:
        token.cancel()
        await asyncio.sleep(seconds)
        return "never"

    loop = Loop(
        AsyncScriptedModel([call("c1", "slow", seconds=10)]),
        tools={"slow": slow},
        listeners=[otel.listener()],
    )
    result = asyncio.run(loop.arun("hi", cancel=token))
    assert result.status == "cancelled"
    run, _, tool = otel.spans()
    assert attrs_of(tool)["agentloop.result_status"] == "cancelled"
    assert attrs_of(tool)["gen_ai.tool.call.id"] == "c1"
    assert attrs_of(run)["agentloop.status"] == "cancelled"
    assert times(tool)[1] <= times(run)[1]


def test_a_tool_that_raises_is_an_error_span(otel: Exported) -> None:
    """An error result: the tool span is an error typed by the exception; the run goes on."""
    result = run_both(otel, [call("c1", "boom", text="x"), final("sorry")], driver="sync")
    assert result.status == "finished"
    run, _, tool, _ = otel.spans()
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description == "ValueError: bad x"
    assert attrs_of(tool)["error.type"] == "ValueError"
    assert attrs_of(tool)["agentloop.result_status"] == "error"
    assert [e.name for e in tool.events] == ["exception"]
    assert run.status.status_code is StatusCode.UNSET


@both
def test_a_batch_gives_one_tool_span_per_call(otel: Exported, driver: str) -> None:
    """Three calls in one reply: three tool spans under the run, the failing one an error."""
    reply = batch(
        call("c1", "add", a=1, b=2), call("c2", "boom", text="y"), call("c3", "add", a=0, b=0)
    )
    result = run_both(otel, [reply, final("ok")], driver=driver)
    assert result.status == "finished"
    spans = otel.spans()
    tools = [span for span in spans if span.name.startswith("execute_tool")]
    assert [attrs_of(span)["gen_ai.tool.call.id"] for span in tools] == ["c1", "c2", "c3"]
    assert [attrs_of(span)["agentloop.result_status"] for span in tools] == ["ok", "error", "ok"]
    assert tools[1].status.description == "ValueError: bad y"  # before the batch is appended
    assert {parent for name, parent in tree(spans) if name.startswith("execute_tool")} == {
        "invoke_agent"
    }


def test_refusals_are_recorded_but_not_errors(otel: Exported) -> None:
    """unknown_tool and invalid_arguments are outcomes the model is told of, not failures."""
    replies = [call("c1", "nope"), call("c2", "add", a="x", b=1), final("ok")]
    run_both(otel, replies, driver="sync")
    tools = [s for s in otel.spans() if s.name.startswith("execute_tool")]
    assert [(s.name, attrs_of(s)["agentloop.result_status"]) for s in tools] == [
        ("execute_tool nope", "unknown_tool"),
        ("execute_tool add", "invalid_arguments"),
    ]
    assert all(s.status.status_code is StatusCode.UNSET for s in tools)


def test_an_exhausted_run_says_why(otel: Exported) -> None:
    """The reason goes on the run span; running out of budget is not an error."""
    loop = Loop(ScriptedModel([call("c1", "add", a=1, b=1)]), tools=TOOLS, max_steps=1,
                listeners=[otel.listener()])  # fmt: skip
    assert loop.run("hi").status == "exhausted"
    run = otel.spans()[0]
    assert attrs_of(run)["agentloop.reason"] == "max_steps"
    assert run.status.status_code is StatusCode.UNSET


def test_a_cancelled_tool_that_never_ran_has_no_span(otel: Exported) -> None:
    """Cancelled between validation and the tool: no execute_tool span, since nothing ran."""
    token = CancelToken()
    listener = otel.listener()
    loop = Loop(ScriptedModel([call("c1", "add", a=1, b=1)]), tools=TOOLS)
    run = loop.start("hi", cancel=token)
    run.subscribe(listener)
    run.step()
    run.step()
    assert run.state == "dispatching"
    token.cancel()
    run.step()
    assert run.state == "cancelled"
    assert [s.name for s in otel.spans()] == ["invoke_agent", "chat"]


def test_usage_goes_on_chat_spans_and_sums_on_the_run(otel: Exported) -> None:
    """The usage hook's counts, per call and in total."""
    counts = {1: {"input_tokens": 10, "output_tokens": 3}, 2: {"input_tokens": 25}}
    listener = otel.listener(usage=lambda t: counts.get(t.steps))
    loop = Loop(ScriptedModel([call("c1", "add", a=1, b=1), final("2")]), tools=TOOLS)
    run = loop.start("hi")
    run.subscribe(listener)
    for _ in run:
        pass
    run_span, chat1, _, chat2 = otel.spans()
    assert attrs_of(chat1)["gen_ai.usage.input_tokens"] == 10
    assert attrs_of(chat1)["gen_ai.usage.output_tokens"] == 3
    assert "gen_ai.usage.output_tokens" not in attrs_of(chat2)
    assert attrs_of(run_span)["gen_ai.usage.input_tokens"] == 35
    assert attrs_of(run_span)["gen_ai.usage.output_tokens"] == 3


def test_a_run_nests_under_the_callers_span(otel: Exported) -> None:
    """The run span's parent is whatever span is current where the run is driven."""
    tracer = otel.provider.get_tracer("app")
    loop = Loop(ScriptedModel([final("x")]), listeners=[otel.listener()])
    with tracer.start_as_current_span("request"):
        loop.run("hi")
    assert tree(otel.spans()) == [
        ("request", None),
        ("invoke_agent", "request"),
        ("chat", "invoke_agent"),
    ]


def test_one_listener_follows_runs_one_after_another(otel: Exported) -> None:
    """Two runs of one loop in a row: two traces."""
    loop = Loop(ScriptedModel([final("a"), final("b")]), listeners=[otel.listener()])
    loop.run("one")
    loop.run("two")
    runs = [s for s in otel.spans() if s.name == "invoke_agent"]
    assert len(runs) == 2
    assert len({s.context.trace_id for s in runs if s.context}) == 2


async def test_one_listener_follows_concurrent_runs(otel: Exported) -> None:
    """Ten aruns at once on a shared listener: ten trees, each child under its own run."""

    async def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        await asyncio.sleep(0)
        if history[-1]["kind"] == "user":
            return call("c1", "add", a=len(history[-1]["text"]), b=0)
        return final(str(history[-1]["content"]))

    loop = Loop(model, tools=TOOLS, listeners=[otel.listener()])
    results = await asyncio.gather(*(loop.arun("x" * n) for n in range(1, 11)))
    assert [r.output for r in results] == [str(n) for n in range(1, 11)]
    spans = otel.spans()
    runs = {s.context.span_id: s for s in spans if s.name == "invoke_agent" and s.context}
    assert len(runs) == 10
    assert len({s.context.trace_id for s in runs.values() if s.context}) == 10
    children: dict[int, list[str]] = {span_id: [] for span_id in runs}
    for span in spans:
        if span.parent is not None:
            children[span.parent.span_id].append(span.name)
            assert span.context is not None
            assert span.context.trace_id == span.parent.trace_id
    assert all(names == ["chat", "execute_tool add", "chat"] for names in children.values())


def test_the_listener_keeps_the_contract_of_the_run(otel: Exported) -> None:
    """A listener only watches: the run is what it would be without it."""
    replies = [call("c1", "add", a=1, b=1), final("2")]
    watched = Loop(ScriptedModel(replies), tools=TOOLS, listeners=[otel.listener()]).run("hi")
    plain = Loop(ScriptedModel(replies), tools=TOOLS).run("hi")
    assert watched.events == plain.events
    assert_contract(watched, "hi")


def test_a_run_whose_end_went_unheard_is_ended_by_the_next(otel: Exported) -> None:
    """A run abandoned part-way (its end never comes), then another run: the first is closed."""
    listener = otel.listener()
    run = Loop(ScriptedModel([call("c1", "add", a=1, b=1)]), tools=TOOLS,
               listeners=[listener]).start("hi")  # fmt: skip
    for _ in range(3):  # the call is made and answered; the model is never asked again
        run.step()
    assert [s.name for s in otel.spans()] == ["chat", "execute_tool add"]  # the run is open
    Loop(ScriptedModel([final("x")]), listeners=[listener]).run("again")
    first, *_ = [s for s in otel.spans() if s.name == "invoke_agent"]
    assert attrs_of(first)["agentloop.end_unseen"] is True
    assert attrs_of(first)["agentloop.steps"] == 1
    assert "agentloop.status" not in attrs_of(first)


def test_an_interrupted_run_span_ends_cancelled(otel: Exported) -> None:
    """Listeners hear the transition an interruption makes: the run span ends cancelled."""

    def interrupting(history: list[dict[str, Any]]) -> dict[str, Any]:
        raise KeyboardInterrupt

    loop = Loop(interrupting, listeners=[otel.listener()])
    with pytest.raises(KeyboardInterrupt):
        loop.run("hi")
    (run, chat) = otel.spans()
    assert attrs_of(run)["agentloop.status"] == "cancelled"
    assert attrs_of(chat)["agentloop.trigger"] == "model_interrupted"


def test_importing_without_opentelemetry_names_the_extra() -> None:
    """With opentelemetry missing, the ImportError says which extra to install."""
    assert import_error("opentelemetry", "agentloop.otel") == (
        "agentloop.otel needs the OpenTelemetry API: pip install 'agentloop-fsm[otel]'"
    )


def test_a_script_named_like_opentelemetry_is_not_told_to_install_it(tmp_path: Path) -> None:
    """A user's opentelemetry.py shadows the package: its own ImportError, not the extra's."""
    script = tmp_path / "opentelemetry.py"
    script.write_text("from agentloop.otel import OtelListener\n")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("ImportError: ")
    assert "agentloop-fsm[otel]" not in done.stderr


def test_the_docs_example_traces_a_run(otel: Exported, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs page's block, run after its first one, makes the tree its comment shows."""
    readme = (ROOT / "docs" / "opentelemetry.md").read_text()
    marker = "<!-- tests/integrations/test_otel.py runs this block after the page's first one -->"
    found = re.search(re.escape(marker) + r"\n```python\n(.*?)```", readme, re.S)
    assert found, f"expected a ```python block after {marker!r} in docs/opentelemetry.md"
    embedding = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    # The block uses the global tracer provider; this test's stands in for it.
    real = opentelemetry.trace.get_tracer
    monkeypatch.setattr(
        opentelemetry.trace,
        "get_tracer",
        lambda name, *args, tracer_provider=None, **kw: real(name, tracer_provider=otel.provider),
    )
    namespace: dict[str, Any] = {}
    exec(embedding, namespace)
    exec(found.group(1), namespace)
    assert tree(otel.spans()) == [
        ("invoke_agent adder", None),
        ("chat", "invoke_agent adder"),
        ("execute_tool add", "invoke_agent adder"),
        ("chat", "invoke_agent adder"),
    ]


def test_a_run_waiting_for_a_person_ends_its_span_and_goes_on_in_another(otel: Exported) -> None:
    """awaiting_approval ends the run's span; the decided batch's tools are a new run span."""
    tools = agentloop.ToolRegistry({"add": add}, policy=lambda call: agentloop.ask("check the sum"))
    loop = Loop(
        ScriptedModel([call("c1", "add", a=1, b=2), final("ok")]),
        tools=tools,
        listeners=[otel.listener()],
    )
    run = loop.start("hi")
    assert run.finish().status == "awaiting_approval"
    (paused,) = [s for s in otel.spans() if s.name == "invoke_agent"]
    assert attrs_of(paused)["agentloop.status"] == "awaiting_approval"
    assert paused.status.status_code is StatusCode.UNSET
    decided_at = time.time_ns()
    run.decide({"c1": agentloop.approve()})
    assert run.finish().status == "finished"
    runs = [s for s in otel.spans() if s.name == "invoke_agent"]
    assert [attrs_of(s)["agentloop.status"] for s in runs] == ["awaiting_approval", "finished"]
    (tool,) = [s for s in otel.spans() if s.name == "execute_tool add"]
    assert times(tool)[0] >= decided_at  # the wait is not the tool's time
    assert tree(otel.spans())[-2:] == [
        ("execute_tool add", "invoke_agent"),
        ("chat", "invoke_agent"),
    ]


def test_calls_run_at_once_each_keep_their_own_time(otel: Exported) -> None:
    """Spans start ``took`` before the transition that answers them: three tools run
    together under max_concurrency each span the time their own sleep took, and the first
    model call of a run has its duration (the run span starts with it)."""

    async def nap(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    async def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        if len(history) == 1:
            return batch(call("c1", "nap", seconds=0.1), call("c2", "nap", seconds=0.2))
        return final("rested")

    loop = Loop(model, tools={"nap": nap}, listeners=[otel.listener()], max_concurrency=2)
    assert asyncio.run(loop.arun("hi")).status == "finished"
    spans = {s.name + str(attrs_of(s).get("gen_ai.tool.call.id", "")): s for s in otel.spans()}
    took = {name: (end - start) / 1e9 for name, (start, end) in
            ((name, times(span)) for name, span in spans.items())}  # fmt: skip
    assert 0.1 <= took["execute_tool napc1"] < took["execute_tool napc2"]
    assert took["execute_tool napc2"] >= 0.2
    chats = sorted((s for s in otel.spans() if s.name == "chat"), key=lambda s: times(s)[0])
    assert all(times(chat)[1] - times(chat)[0] >= 0.05e9 for chat in chats)
    assert times(spans["invoke_agent"])[0] == times(chats[0])[0]


def test_each_retry_and_each_fallback_model_is_a_chat_span(otel: Exported) -> None:
    """A failed attempt is an error chat span; a fallback model names its own spans."""
    from agentloop.models import RetryPolicy, fallback

    primary = ScriptedModel([TimeoutError("slow"), ValueError("gone")])
    secondary = ScriptedModel([final("ok")])
    loop = Loop(
        fallback(primary, secondary, names=["big", "small"]),
        retry=RetryPolicy(sleep=lambda seconds, token: None),
        listeners=[otel.listener(model_name="configured")],
    )
    assert loop.run("hi").output == "ok"
    chats = [span for span in otel.spans() if span.name.startswith("chat")]
    assert [span.name for span in chats] == ["chat big", "chat big", "chat small"]
    assert [attrs_of(span)["gen_ai.request.model"] for span in chats] == ["big", "big", "small"]
    assert [span.status.status_code.name for span in chats] == ["ERROR", "ERROR", "UNSET"]


def test_a_summary_is_a_chat_span_of_its_own(otel: Exported) -> None:
    """Under summarise, each summary's model call is a chat span (its trigger says so), and
    one that raised is an error span; the run's tokens count it."""
    from agentloop.context import summarise
    from tests.core.test_context import Chatty, echo, summary_writer

    loop = Loop(
        Chatty(6),
        tools=[echo],
        context=summarise(summary_writer(), tokens=400),
        listeners=[otel.listener()],
    )
    result = loop.run("hello")
    summaries = [e for e in result.events if e.trigger == "summary_written"]
    assert result.status == "finished"
    assert summaries
    chats = [attrs_of(span)["agentloop.trigger"] for span in otel.spans() if span.name == "chat"]
    assert chats.count("summary_written") == len(summaries)
    assert chats.count("model_replied") == len(
        [e for e in result.events if e.trigger == "model_replied"]
    )
    otel.exporter.clear()

    def failing(history: list[dict[str, Any]]) -> dict[str, Any]:
        raise ConnectionError("the summariser is down")

    failed = Loop(
        Chatty(6), tools=[echo], context=summarise(failing, tokens=400), listeners=[otel.listener()]
    ).run("hello")
    assert failed.events[-1].trigger == "summary_raised"
    (error,) = [span for span in otel.spans() if span.status.status_code.name == "ERROR"
                and span.name == "chat"]  # fmt: skip
    assert attrs_of(error)["agentloop.trigger"] == "summary_raised"
    assert attrs_of(error)["error.type"] == "ConnectionError"


@both
def test_a_turns_run_span_names_its_conversation(otel: Exported, driver: str) -> None:
    """gen_ai.conversation.id on the invoke_agent span of each turn, and of no other run."""
    listener = otel.listener()
    replies = [final("one"), final("two")]
    if driver == "sync":
        loop = Loop(ScriptedModel(replies), listeners=[listener])
        first = loop.run("hi")
        second = loop.run("again", after=first)
    else:
        aloop = Loop(AsyncScriptedModel(replies), listeners=[listener])
        first = asyncio.run(aloop.arun("hi"))
        second = asyncio.run(aloop.arun("again", after=first))
    runs = [s for s in otel.spans() if s.name == "invoke_agent"]
    assert [attrs_of(s).get("gen_ai.conversation.id") for s in runs] == [
        None,
        second.conversation_id,
    ]


def test_each_chat_span_names_the_agent_asked(otel: Exported) -> None:
    """With handoffs, each chat span's gen_ai.agent.name is the agent that was asked."""
    billing = Loop(ScriptedModel([final("refunded")]), name="billing")
    triage = Loop(
        ScriptedModel([call("c1", "transfer_to_billing")]),
        name="triage",
        handoffs=[agentloop.handoff(billing)],
        listeners=[otel.listener()],
    )
    assert triage.run("hi").agent == "billing"
    chats = [s for s in otel.spans() if attrs_of(s).get("gen_ai.operation.name") == "chat"]
    assert [attrs_of(s).get("gen_ai.agent.name") for s in chats] == ["triage", "billing"]
