"""agentloop.otel: spans current while the model and the tools run, so that others nest under them.

Read back from the SDK's in-memory exporter: the tree of a run whose tool makes an HTTP call
(httpx, instrumented, against a server on loopback) and whose other tool runs a ``Loop``, and
whose last reply streams; calls run at once under asyncio, each current in its own task; the
caller's code between two deltas, outside the model's span; message content, only on opt-in.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.trace import SpanKind

from agentloop import Loop, Transition
from agentloop.ledger import SQLiteLedger
from agentloop.otel import AGENTLOOP_RUN_ID
from agentloop.streaming import chunked
from agentloop.testing import AsyncScriptedModel, ScriptedModel, batch, call, final
from tests.integrations.test_otel import Exported, attrs_of, times
from tests.support.helpers import add

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from opentelemetry.sdk.trace import ReadableSpan

both = pytest.mark.parametrize("driver", ["sync", "async"])

#: What a span other than agentloop's stands for in a tree: the HTTP client's.
HTTP = "<http client>"


@pytest.fixture
def otel() -> Iterator[Exported]:
    exported = Exported()
    yield exported
    exported.provider.shutdown()


class Echoing(http.server.BaseHTTPRequestHandler):
    """Answers each GET with the ``traceparent`` header it was sent (``none`` without one)."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.headers.get("traceparent", "none").encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet


@pytest.fixture
def server() -> Iterator[str]:
    """A server on loopback, in a thread: its URL."""
    served = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echoing)
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{served.server_address[1]}/"
    served.shutdown()
    served.server_close()
    thread.join()


def shape(spans: list[ReadableSpan]) -> list[Any]:
    """The tree of ``spans`` as nested ``(name, [children])``, each level in start order.

    A span another instrumentation made is named ``HTTP``.
    """
    ids = {s.context.span_id for s in spans if s.context is not None}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
        children.setdefault(parent, []).append(span)

    def level(parent: int | None) -> list[Any]:
        ordered = sorted(
            children.get(parent, []),
            key=lambda s: (s.start_time or 0, -(s.end_time or 0)),
        )
        return [
            (
                s.name if s.instrumentation_scope and s.instrumentation_scope.name == "agentloop"
                else HTTP,
                level(s.context.span_id if s.context else None),
            )
            for s in ordered
        ]  # fmt: skip

    return level(None)


RUN_TREE = [
    (
        "invoke_agent",
        [
            ("chat", []),
            ("execute_tool fetch", [(HTTP, [])]),
            ("chat", []),
            (
                "execute_tool delegate",
                [
                    (
                        "invoke_agent",
                        [("chat", []), ("execute_tool add", []), ("chat", [])],
                    )
                ],
            ),
            ("chat", []),
        ],
    )
]


@both
def test_an_http_call_and_a_child_run_nest_under_their_tools(
    otel: Exported, server: str, driver: str
) -> None:
    """One trace: the HTTP client's span under the tool that made it, a Loop run inside a
    tool under that tool's span (the same listener on both, each run with its own spans), and
    the parent's last reply, streamed, one chat span."""
    listener = otel.listener()
    script = [
        call("c1", "fetch", path="ping"),
        call("c2", "delegate", question="2+2"),
        lambda history: chunked(final("done"), size=2),
    ]
    child_script = [call("k1", "add", a=2, b=2), final("4")]
    sent: list[str] = []
    if driver == "sync":

        def fetch(path: str) -> str:
            with httpx.Client() as client:
                HTTPXClientInstrumentor.instrument_client(client, tracer_provider=otel.provider)
                sent.append(client.get(server + path).text)
            return "pong"

        def delegate(question: str) -> str:
            child = Loop(ScriptedModel(child_script), tools={"add": add}, listeners=[listener])
            return str(child.run(question).output)

        loop = Loop(ScriptedModel(script), tools={"fetch": fetch, "delegate": delegate},
                    listeners=[listener])  # fmt: skip
        result = loop.run("hi")
    else:

        async def afetch(path: str) -> str:
            async with httpx.AsyncClient() as client:
                HTTPXClientInstrumentor.instrument_client(client, tracer_provider=otel.provider)
                sent.append((await client.get(server + path)).text)
            return "pong"

        async def adelegate(question: str) -> str:
            child = Loop(AsyncScriptedModel(child_script), tools={"add": add},
                         listeners=[listener])  # fmt: skip
            return str((await child.arun(question)).output)

        aloop = Loop(AsyncScriptedModel(script), tools={"fetch": afetch, "delegate": adelegate},
                     listeners=[listener])  # fmt: skip
        result = asyncio.run(aloop.arun("hi"))
    assert result.status == "finished"
    assert result.transcript[4]["content"] == "4"  # the child's answer, as the tool's result
    spans = otel.spans()
    assert shape(spans) == RUN_TREE
    assert len({s.context.trace_id for s in spans if s.context}) == 1
    (http_span,) = [s for s in spans if s.instrumentation_scope.name != "agentloop"]  # type: ignore[union-attr]
    assert http_span.kind is SpanKind.CLIENT
    assert http_span.context is not None
    # The server was told the HTTP span's context: the trace goes on across the wire.
    (traceparent,) = sent
    assert traceparent.split("-")[1:3] == [
        f"{http_span.context.trace_id:032x}",
        f"{http_span.context.span_id:016x}",
    ]
    assert not any("agentloop.end_unseen" in attrs_of(s) for s in spans)
    runs = [s for s in spans if s.name == "invoke_agent"]
    assert [attrs_of(s)["agentloop.status"] for s in runs] == ["finished", "finished"]
    last_chat = max((s for s in spans if s.name == "chat"), key=lambda s: s.start_time or 0)
    assert attrs_of(last_chat)["gen_ai.request.stream"] is True
    assert all("gen_ai.request.stream" not in attrs_of(s) for s in spans if s is not last_chat
               and s.name == "chat")  # fmt: skip
    # Each child within its parent's time.
    by_id = {s.context.span_id: s for s in spans if s.context}
    for span in spans:
        if span.parent is not None:
            start, end = times(span)
            parent_start, parent_end = times(by_id[span.parent.span_id])
            assert parent_start <= start <= end <= parent_end, span.name


class Watched:
    """A streaming model that notes which span is current as each chunk is made."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.last_chunk_at = 0

    def reply(self, history: list[dict[str, Any]]) -> Iterator[object]:
        for item in chunked(final("hello world"), size=3):
            self.seen.append(trace.get_current_span().get_span_context().span_id)
            self.last_chunk_at = time.time_ns()
            yield item

    async def areply(self, history: list[dict[str, Any]]) -> Any:
        async def stream() -> Any:
            for item in self.reply(history):
                await asyncio.sleep(0)
                yield item

        return stream()


@both
def test_a_stream_is_read_inside_its_span_and_the_caller_runs_outside_it(
    otel: Exported, driver: str
) -> None:
    """Each chunk is made with the chat span current; the caller's code between two deltas
    runs under the caller's own span; the chat span ends with the stream's last chunk."""
    tracer = otel.provider.get_tracer("app")
    watched = Watched()
    between: list[int] = []
    ended_at: list[int] = []

    def note(item: object) -> None:
        if isinstance(item, Transition):
            ended_at.append(time.time_ns())
        else:
            between.append(trace.get_current_span().get_span_context().span_id)

    with tracer.start_as_current_span("caller") as caller:
        if driver == "sync":
            run = Loop(watched.reply, listeners=[otel.listener()]).start("hi")
            for item in run.stream():
                note(item)
        else:

            async def consume() -> None:
                arun = Loop(watched.areply, listeners=[otel.listener()]).astart("hi")
                async for item in arun.astream():
                    note(item)

            asyncio.run(consume())
    caller_id = caller.get_span_context().span_id
    (chat,) = [s for s in otel.spans() if s.name == "chat"]
    assert chat.context is not None
    assert len(watched.seen) == 5  # four pieces of text, then the reply
    assert set(watched.seen) == {chat.context.span_id}
    assert between
    assert set(between) == {caller_id}
    _, end = times(chat)
    assert watched.last_chunk_at <= end <= ended_at[0]


def test_calls_run_at_once_each_have_their_own_span_current(otel: Exported) -> None:
    """Under asyncio with max_concurrency, each call's span is current in its own task: a
    span each tool opens after the other one started is its own call's child."""
    tracer = otel.provider.get_tracer("app")
    both_started = asyncio.Event()
    started: list[str] = []

    async def work(name: str) -> str:
        started.append(name)
        if len(started) == 2:
            both_started.set()
        await both_started.wait()
        with tracer.start_as_current_span(f"inside {name}"):
            await asyncio.sleep(0)
        return name

    model = AsyncScriptedModel([batch(call("c1", "work", name="a"), call("c2", "work", name="b")),
                                final("ok")])  # fmt: skip
    loop = Loop(model, tools={"work": work}, listeners=[otel.listener()], max_concurrency=2)
    assert asyncio.run(loop.arun("hi")).status == "finished"
    spans = otel.spans()
    by_id = {s.context.span_id: s for s in spans if s.context}
    for name, call_id in (("a", "c1"), ("b", "c2")):
        (inner,) = [s for s in spans if s.name == f"inside {name}"]
        assert inner.parent is not None
        parent = by_id[inner.parent.span_id]
        assert parent.name == "execute_tool work"
        assert attrs_of(parent)["gen_ai.tool.call.id"] == call_id


CONTENT = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)


@both
@pytest.mark.parametrize(
    ("setting", "variable", "captured"),
    [
        (None, None, False),
        (None, "SPAN_ONLY", True),
        (None, "span_and_event", True),
        (None, "true", True),
        (None, "EVENT_ONLY", False),
        (None, "NO_CONTENT", False),
        (True, None, True),
        (False, "true", False),
    ],
)
def test_content_is_captured_only_when_the_user_opts_in(
    otel: Exported,
    monkeypatch: pytest.MonkeyPatch,
    driver: str,
    setting: bool | None,
    variable: str | None,
    captured: bool,
) -> None:
    """Messages, arguments and results go on the spans, in the conventions' shape, with
    capture_content=True or the conventions' variable; never by default."""
    if variable is None:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    else:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", variable)
    listener = otel.listener(capture_content=setting)
    script = [call("c1", "add", a=2, b=2), final("2+2 is 4")]
    if driver == "sync":
        Loop(ScriptedModel(script), tools={"add": add}, listeners=[listener]).run("What is 2+2?")
    else:
        aloop = Loop(AsyncScriptedModel(script), tools={"add": add}, listeners=[listener])
        asyncio.run(aloop.arun("What is 2+2?"))
    _, chat1, tool, chat2 = otel.spans()
    found = {key for span in (chat1, tool, chat2) for key in attrs_of(span) if key in CONTENT}
    if not captured:
        assert found == set()
        return
    assert json.loads(attrs_of(chat1)["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "What is 2+2?"}]}
    ]
    assert json.loads(attrs_of(chat1)["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2, "b": 2}}
            ],
            "finish_reason": "tool_call",
        }
    ]
    assert json.loads(attrs_of(tool)["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 2}
    assert json.loads(attrs_of(tool)["gen_ai.tool.call.result"]) == 4
    assert json.loads(attrs_of(chat2)["gen_ai.input.messages"])[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "c1", "response": 4}],
    }
    assert json.loads(attrs_of(chat2)["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "2+2 is 4"}],
            "finish_reason": "stop",
        }
    ]


def test_capture_content_must_be_a_bool_or_none(otel: Exported) -> None:
    """Anything else is refused, naming what was expected."""
    with pytest.raises(TypeError, match="expected capture_content to be True, False or None"):
        otel.listener(capture_content="yes")


def test_a_listener_called_by_hand_makes_the_spans_after_the_fact(otel: Exported) -> None:
    """Given a finished run's events one by one, the listener makes the same tree, with the
    content the events carry (not the requests': a model's input is in none of them)."""
    script = [call("c1", "add", a=2, b=2), final("4")]
    result = Loop(ScriptedModel(script), tools={"add": add}).run("hi")
    listener = otel.listener(capture_content=True)
    for event in result.events:
        listener(event)
    spans = otel.spans()
    # Heard at once, each span ends as it is heard and starts its event's ``took`` before: under
    # load a tool's span may start before its chat's, so the tree is compared as sets.
    ((root, children),) = shape(spans)
    assert (root, sorted(children)) == (
        "invoke_agent",
        [("chat", []), ("chat", []), ("execute_tool add", [])],
    )
    _, chat1, tool, _ = spans
    assert "gen_ai.input.messages" not in attrs_of(chat1)
    assert "gen_ai.output.messages" in attrs_of(chat1)
    assert json.loads(attrs_of(tool)["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 2}
    assert attrs_of(spans[0])["agentloop.status"] == "finished"


def test_a_durable_run_names_its_run_id(otel: Exported, tmp_path: Path) -> None:
    """A run with a ledger: its span carries the run's id, to find it in the ledger."""
    loop = Loop(ScriptedModel([final("ok")]), ledger=SQLiteLedger(tmp_path / "runs.db"),
                listeners=[otel.listener()])  # fmt: skip
    result = loop.run("hi", run_id="r1")
    assert result.run_id == "r1"
    assert attrs_of(otel.spans()[0])[AGENTLOOP_RUN_ID] == "r1"


@both
def test_two_tracing_listeners_on_one_run_each_make_the_whole_tree(driver: str) -> None:
    """Each listener's spans are current around the same requests, the first subscribed
    outermost: each backend gets the whole tree, a streamed reply one chat span each, and a
    span a tool opens nests under the innermost listener's execute_tool."""
    outer, inner = Exported(), Exported()  # two backends
    tracer = inner.provider.get_tracer("app")

    def work() -> str:
        with tracer.start_as_current_span("inside"):
            return "done"

    async def awork() -> str:
        return work()

    script = [call("c1", "work"), lambda history: chunked(final("ok"), size=1)]
    # Content: what a request sent is known only live, so each listener's is there.
    listeners = [outer.listener(capture_content=True), inner.listener(capture_content=True)]
    if driver == "sync":
        run = Loop(ScriptedModel(script), tools={"work": work}, listeners=listeners).start("hi")
        deltas: list[object] = [item for item in run.stream() if not isinstance(item, Transition)]
    else:

        async def consume() -> list[object]:
            aloop = Loop(AsyncScriptedModel(script), tools={"work": awork}, listeners=listeners)
            arun = aloop.astart("hi")
            return [item async for item in arun.astream() if not isinstance(item, Transition)]

        deltas = asyncio.run(consume())
    assert deltas
    tree: list[Any] = [("invoke_agent", [("chat", []), ("execute_tool work", []), ("chat", [])])]
    assert shape(outer.spans()) == tree
    inside, *_ = [s for s in inner.spans() if s.name == "inside"]
    (tool_span,) = [s for s in inner.spans() if s.name == "execute_tool work"]
    assert inside.parent is not None
    assert tool_span.context is not None
    assert inside.parent.span_id == tool_span.context.span_id
    assert shape([s for s in inner.spans() if s.name != "inside"]) == tree
    for exported in (outer, inner):
        chats = [s for s in exported.spans() if s.name == "chat"]
        assert all("gen_ai.input.messages" in attrs_of(chat) for chat in chats)
    for exported in (outer, inner):
        exported.provider.shutdown()
