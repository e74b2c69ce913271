"""The adapters' ``stream=True`` through the real SDKs, over SSE on a mock transport.

Each canned response of the adapters' own tests is also sent as its
provider's Server-Sent Events (text and arguments in small pieces, the bytes
in 7-byte chunks, so events and arguments are split across chunks). The
reply the adapter builds from the stream must equal the one it builds from
the whole response, error for error; the deltas must add up to it.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import anthropic
import attrs
import openai
import pydantic
import pytest
from anthropic.types import message_create_params
from google.genai import errors as genai_errors
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from agentloop import CancelToken, Loop, ToolRegistry, Transition
from agentloop.models import RetryPolicy, transient
from agentloop.providers import IncompleteReply, UnreadableResponse
from agentloop.providers.anthropic import anthropic_messages
from agentloop.providers.google import gemini_generate_content
from agentloop.providers.openai import openai_chat, openai_responses
from agentloop.streaming import ArgumentsDelta, Discard, TextDelta, ToolCallStart, UsageDelta
from tests.integrations import test_providers_gemini as gem
from tests.integrations.test_providers_anthropic import message
from tests.integrations.test_providers_openai import HTML, completion, response
from tests.support.helpers import add, mul
from tests.support.wire import FLAVOURS, Streamed, Wire, conforms, sse

Message = dict[str, Any]
USER = [{"kind": "user", "text": "What is 2+3, and 2*3?"}]


def pieces(text: str, size: int = 3) -> list[str]:
    """``text`` in pieces of ``size`` characters."""
    return [text[at : at + size] for at in range(0, len(text), size)]


# -- each provider's stream of a canned response -------------------------------------------------


def chat_events(body: Message) -> list[tuple[str | None, Any]]:
    """A chat completion as ``stream=True`` chunks, usage last (``include_usage``), then DONE."""
    keep = ("id", "created", "model", "service_tier", "system_fingerprint")
    base = {**{key: body[key] for key in keep}, "object": "chat.completion.chunk"}

    def chunk(delta: Message, finish: str | None = None) -> tuple[None, Message]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return None, {**base, "choices": [choice]}

    events = []
    choice = body["choices"][0]
    said = choice["message"]
    events.append(chunk({"role": "assistant", "content": "", "refusal": None}))
    events += [chunk({"content": piece}) for piece in pieces(said["content"] or "")]
    events += [chunk({"refusal": piece}) for piece in pieces(said["refusal"] or "")]
    for index, call in enumerate(said.get("tool_calls") or ()):
        function = {"name": call["function"]["name"], "arguments": ""}
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "id": call["id"], "type": "function", "function": function}
                    ]
                }
            )
        )
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in pieces(call["function"]["arguments"])
        ]
    events.append(chunk({}, choice["finish_reason"]))
    if "usage" in body:
        events.append((None, {**base, "choices": [], "usage": body["usage"]}))
    return [*events, (None, "[DONE]")]


def responses_events(body: Message) -> list[tuple[str | None, Any]]:
    """A Responses API response as its stream events, the whole response last."""
    numbers = itertools.count()
    events: list[tuple[str | None, Any]] = []

    def event(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": next(numbers), **fields}))

    started = {**body, "status": "in_progress", "output": [], "usage": None}
    event("response.created", response=started)
    event("response.in_progress", response=started)
    for at, item in enumerate(body["output"]):
        if item["type"] == "message":
            event("response.output_item.added", output_index=at, item={**item, "content": []})
            for index, part in enumerate(item["content"]):
                where = {"item_id": item["id"], "output_index": at, "content_index": index}
                if part["type"] == "output_text":
                    event("response.content_part.added", **where, part={**part, "text": ""})
                    for piece in pieces(part["text"]):
                        event("response.output_text.delta", **where, delta=piece, logprobs=[])
                    event("response.output_text.done", **where, text=part["text"], logprobs=[])
                else:
                    event("response.content_part.added", **where, part={**part, "refusal": ""})
                    for piece in pieces(part["refusal"]):
                        event("response.refusal.delta", **where, delta=piece)
                    event("response.refusal.done", **where, refusal=part["refusal"])
                event("response.content_part.done", **where, part=part)
        else:
            event("response.output_item.added", output_index=at, item={**item, "arguments": ""})
            for piece in pieces(item["arguments"]):
                event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=at,
                    delta=piece,
                )
        event("response.output_item.done", output_index=at, item=item)
    last = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
    event(last, response=body)
    return events


def messages_events(body: Message) -> list[tuple[str | None, Any]]:
    """A Messages API message as its stream events, with a ping among them."""
    events: list[tuple[str | None, Any]] = []

    def event(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, **fields}))

    usage = {**body["usage"], "output_tokens": 1}
    event("message_start", message={**body, "content": [], "stop_reason": None, "usage": usage})
    event("ping")
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            event("content_block_start", index=index, content_block={**block, "text": ""})
            for piece in pieces(block["text"]):
                event(
                    "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
                )
        elif block["type"] == "tool_use":
            event("content_block_start", index=index, content_block={**block, "input": {}})
            for piece in pieces(json.dumps(block["input"])):
                delta = {"type": "input_json_delta", "partial_json": piece}
                event("content_block_delta", index=index, delta=delta)
        else:
            event("content_block_start", index=index, content_block=block)
        event("content_block_stop", index=index)
    stop = {"stop_reason": body["stop_reason"], "stop_sequence": None}
    event("message_delta", delta=stop, usage={"output_tokens": body["usage"]["output_tokens"]})
    event("message_stop")
    return events


def gemini_events(body: Message) -> list[tuple[str | None, Any]]:
    """A generateContent response as streamGenerateContent's chunks: each text part in
    pieces, each call whole in a chunk of its own, usage a running total on every chunk (the
    last one's is the response's), the finish reason on the last."""
    if "candidates" not in body:  # a blocked prompt: one chunk says so
        return [(None, body)]
    candidate = body["candidates"][0]
    base = {key: value for key, value in body.items() if key not in ("candidates", "usageMetadata")}
    used = body.get("usageMetadata")
    chunks: list[Message] = []

    def chunk(parts: list[Message]) -> None:
        chunks.append(
            {**base, "candidates": [{"index": 0, "content": {"role": "model", "parts": parts}}]}
        )

    for part in candidate.get("content", {}).get("parts", ()):
        if "text" in part:
            said = pieces(part["text"]) or [""]
            for piece in said[:-1]:
                chunk([{**part, "text": piece, "thoughtSignature": None}])
            chunk([{**part, "text": said[-1]}])  # a signature comes with the last piece
        else:
            chunk([part])
    last = {key: value for key, value in candidate.items() if key != "content"}
    chunks.append({**base, "candidates": [last]})
    for number, each in enumerate(chunks, start=1):
        if used is not None:  # the output so far; the prompt's counts from the first chunk on
            share = {
                **used,
                "candidatesTokenCount": used["candidatesTokenCount"] * number // len(chunks),
            }
            each["usageMetadata"] = share
        for part in each["candidates"][0].get("content", {}).get("parts", ()):
            if part.get("thoughtSignature", "") is None:
                del part["thoughtSignature"]
    return [(None, each) for each in chunks]


def _gemini_conforms(body: Message) -> None:
    gem.conforms(body)
    gem.answered_next(body["contents"])


@attrs.frozen
class Api:
    """One provider API, as these tests use it."""

    name: str
    adapter: Callable[..., Any]
    events: Callable[[Message], list[tuple[str | None, Any]]]
    conforms: Callable[[Message], None]  # a request body is one the API takes
    cases: dict[str, Message]  # a case's name: the canned body

    def __str__(self) -> str:
        return self.name

    def client(self, wire: Wire, flavour: str) -> Any:
        """The SDK's own client, talking to ``wire``, with no retries."""
        if self.name == "gemini":
            return gem.client(wire, flavour)
        http = wire.sync_client() if flavour == "sync" else wire.async_client()
        if self.name == "anthropic":
            kind: Any = anthropic.Anthropic if flavour == "sync" else anthropic.AsyncAnthropic
            return kind(api_key="k", base_url="https://api.anthropic.test", http_client=http)
        kind = openai.OpenAI if flavour == "sync" else openai.AsyncOpenAI
        return kind(api_key="k", base_url="https://api.openai.test/v1", http_client=http)

    def model(self, wire: Wire, flavour: str, *, stream: bool) -> Any:
        return self.adapter(self.client(wire, flavour), "m-1", stream=stream)


def _openai_cases(answer: Callable[..., Message], cut_off: str) -> dict[str, Message]:
    return {
        "one call": answer(calls=[("call_1", "add", '{"a": 2, "b": 3}')]),
        "parallel calls": answer(
            calls=[("call_1", "add", '{"a": 2, "b": 3}'), ("call_2", "mul", '{"a": 2}')]
        ),
        "text beside a call": answer(text="Adding first.", calls=[("call_1", "add", "{}")]),
        "a final": answer(text="2+3 is 5, and 2*3 is 6."),
        "no usage": answer(text="5", usage=False),
        "cut off": answer(text="5 and", finish=cut_off),
        "content filter": answer(text="5", finish="content_filter"),
        "a refusal": answer(refusal="I can't help with that."),
        "empty": answer(text=""),
        "invalid arguments": answer(calls=[("call_1", "add", '{"a": 2,')]),
    }


def _conforms_to(params: Any) -> Callable[[Message], None]:
    """A request body is valid as the SDK's own request params (``wire.conforms``)."""
    adapter = pydantic.TypeAdapter(params)
    return lambda body: conforms(body, adapter)


APIS = [
    Api(
        "chat",
        openai_chat,
        chat_events,
        _conforms_to(completion_create_params.CompletionCreateParamsStreaming),
        _openai_cases(completion, "length"),
    ),
    Api(
        "responses",
        openai_responses,
        responses_events,
        _conforms_to(response_create_params.ResponseCreateParamsStreaming),
        _openai_cases(response, "max_output_tokens"),
    ),
    Api(
        "anthropic",
        anthropic_messages,
        messages_events,
        _conforms_to(message_create_params.MessageCreateParamsStreaming),
        {
            "one call": message(calls=[("toolu_1", "add", {"a": 2, "b": 3})]),
            "parallel calls": message(
                calls=[("toolu_1", "add", {"a": 2, "b": 3}), ("toolu_2", "mul", {})]
            ),
            "text beside a call": message(text="Adding first.", calls=[("toolu_1", "add", {})]),
            "a final": message(text="2+3 is 5, and 2*3 is 6."),
            "cut off": message(text="5 and", stop="max_tokens"),
            "a refusal": message(content=[], stop="refusal"),
            "paused": message(text="Working", stop="pause_turn"),
            "empty": message(content=[]),
            "thinking first": message(
                content=[
                    {"type": "thinking", "thinking": "Hm.", "signature": "c2ln"},
                    {"type": "text", "text": "5"},
                ]
            ),
        },
    ),
    Api(
        "gemini",
        gemini_generate_content,
        gemini_events,
        _gemini_conforms,
        {
            "one call": gem.response(gem.function_call("add", {"a": 2, "b": 3}, signature="c2ln")),
            "parallel calls": gem.response(
                gem.function_call("add", {"a": 2, "b": 3}, signature="c2ln"),
                gem.function_call("mul", {}, call_id="fc-2"),
            ),
            "text beside a call": gem.response(
                gem.text("Adding first."), gem.function_call("add", {})
            ),
            "a final": gem.response(gem.text("2+3 is 5, and 2*3 is 6.")),
            "no usage": gem.response(gem.text("5"), usage=False),
            "cut off": gem.response(gem.text("5 and"), finish="MAX_TOKENS"),
            "safety": gem.response(finish="SAFETY", content=False),
            "blocked": {"promptFeedback": {"blockReason": "SAFETY"}, "responseId": "r"},
            "empty": gem.response(),
            "thought first": gem.response(
                {"text": "Hm.", "thought": True}, {"text": "5", "thoughtSignature": "c2ln"}
            ),
        },
    ),
]
CASES = [pytest.param(api, case, id=f"{api}-{case}") for api in APIS for case in api.cases]


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


async def answer(model: Any, tools: ToolRegistry | None = None) -> Any:
    """The model's answer to ``USER``, awaited if async."""
    got = model(USER, tools=(tools or ToolRegistry([add, mul])).specs())
    return await got if inspect.isawaitable(got) else got


async def read(stream: Any) -> list[Any]:
    """Every item of ``stream`` (sync or async), in order."""
    if hasattr(stream, "__aiter__"):
        return [item async for item in stream]
    return list(stream)


async def outcome(run: Callable[[], Any]) -> Any:
    """What ``run()`` ends with: its value, or the error's type, message and usage."""
    try:
        return await run()
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return (type(exc).__name__, str(exc), getattr(exc, "usage", None))


async def finished_hearing(loop: Loop, flavour: str) -> tuple[Any, list[object]]:
    """``USER``'s run to its end, by flavour; its result, and every delta its listener heard."""
    heard: list[object] = []
    if flavour == "sync":
        run: Any = loop.start(USER)
        run.subscribe_deltas(heard.append)
        return run.finish(), heard
    run = loop.astart(USER)
    run.subscribe_deltas(heard.append)
    return await run.afinish(), heard


# -- the streamed reply is the whole reply -------------------------------------------------------


@pytest.mark.parametrize(("api", "case"), CASES)
async def test_the_streamed_reply_is_the_unstreamed_one(api: Api, case: str, flavour: str) -> None:
    """Streamed or whole, one response gives one reply, or one error with one usage."""
    body = api.cases[case]
    whole = Wire([(200, body)])
    streamed = Wire([(200, Streamed(sse(api.events(body))))])

    async def unstreamed() -> Any:
        return await answer(api.model(whole, flavour, stream=False))

    async def streaming() -> Any:
        items = await read(await answer(api.model(streamed, flavour, stream=True)))
        assert all(type(item) is not dict for item in items[:-1])
        return items[-1]

    assert await outcome(streaming) == await outcome(unstreamed)
    (request,) = streamed.requests
    if api.name == "gemini":  # the streaming method is its own: streamGenerateContent?alt=sse
        assert streamed.paths == ["/v1/models/m-1:streamGenerateContent"]
        assert [r.url.query for r in streamed.sent] == [b"alt=sse"]
    else:
        assert request["stream"] is True
    if api.name == "chat":
        assert request["stream_options"] == {"include_usage": True}
    api.conforms(request)


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_the_deltas_add_up_to_the_reply(api: Api, flavour: str) -> None:
    """Text deltas make the text, each call starts once, its fragments make its arguments."""
    body = api.cases["parallel calls"]
    text_body = api.cases["text beside a call"]
    for canned in (body, text_body):
        wire = Wire([(200, Streamed(sse(api.events(canned)), size=5))])
        items = await read(await answer(api.model(wire, flavour, stream=True)))
        reply = items[-1]
        deltas = items[:-1]
        calls = [reply] if reply["kind"] == "call" else reply["calls"]
        starts = [d for d in deltas if type(d) is ToolCallStart]
        assert [(s.index, s.id, s.name) for s in starts] == [
            (i, c["id"], c["name"]) for i, c in enumerate(calls)
        ]
        for index, call in enumerate(calls):
            text = "".join(d.text for d in deltas if type(d) is ArgumentsDelta and d.index == index)
            assert json.loads(text) == call["arguments"]
        assert "".join(d.text for d in deltas if type(d) is TextDelta) == reply.get("text", "")
        used = [d for d in deltas if type(d) is UsageDelta]
        assert used[-1] == UsageDelta(**reply["usage"])
        # each call's fragments come after its start
        for start in starts:
            first = next(
                i
                for i, d in enumerate(deltas)
                if type(d) is ArgumentsDelta and d.index == start.index
            )
            assert deltas.index(start) < first


# -- faults mid-stream ---------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_a_stream_cut_off_mid_reply_is_a_failed_call(api: Api, flavour: str) -> None:
    """A stream that stops before its last event raises, never a half reply; the response is
    closed."""
    events = api.events(api.cases["a final"])
    body = Streamed(sse(events[: len(events) // 2]))
    wire = Wire([(200, body)])
    got = await outcome(lambda: _read_last(api.model(wire, flavour, stream=True)))
    assert got[0] == "IncompleteReply"
    assert "the stream ended before the reply did" in got[1]
    assert body.closed_at is not None


#: A streamed request answered with something else: (body, content type, how the error says it).
NOT_A_STREAM = [
    pytest.param(HTML * 200, "text/html", "content-type text/html", id="a page"),
    pytest.param(b'{"id": "x"}', "application/json", "content-type application/json", id="json"),
    pytest.param(b"", None, "", id="no content type"),
]


#: The APIs whose SDK hands over its stream with its HTTP response (Gemini's hides it: its own
#: tests check what its first chunk's content type says).
SSE_STREAMS = [api for api in APIS if api.name != "gemini"]


@pytest.mark.parametrize(("page", "kind", "said"), NOT_A_STREAM)
@pytest.mark.parametrize("api", SSE_STREAMS, ids=str)
async def test_a_response_that_is_not_an_event_stream_fails_the_run_saying_so(
    api: Api, flavour: str, page: bytes, kind: str | None, said: str
) -> None:
    """A 200 that is not an event stream (a proxy's page, JSON from a server that ignored
    ``stream=True``, a body of no content type): the run fails saying so, with its status,
    content type, URL and start, as an unstreamed request's body that is not JSON does. It
    is asked once (nothing says it will pass), nothing streamed, and only the start of the
    body is read before the response is closed."""
    body = Streamed(page, size=100, content_type=kind)
    wire = Wire([(200, body)])
    loop = Loop(api.model(wire, flavour, stream=True), retry=NO_WAIT)
    result, heard = await finished_hearing(loop, flavour)

    assert (result.status, result.steps, len(wire.requests), heard) == ("failed", 1, 1, [])
    where = f"{said}, from" if said else "from"
    assert result.error == (
        "the model raised UnreadableResponse: the provider's response was not an event stream "
        f"(HTTP 200, {where} {wire.sent[0].url}): {page.decode()[:200]!r}; "
        "check that the client's base_url is the provider's API"
    )
    unread = result.events[0].exception
    assert isinstance(unread, UnreadableResponse)
    assert transient(unread) is None
    assert (unread.status, unread.url) == (200, str(wire.sent[0].url))
    assert body.closed_at is not None
    assert body.sent * body.size <= 1000  # the start (800 bytes at most, read in chunks)


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_an_event_stream_s_content_type_is_read_whatever_its_parameters(
    api: Api, flavour: str
) -> None:
    """``text/event-stream`` is a stream in any case and with parameters (a charset)."""
    body = api.cases["a final"]
    streamed = Streamed(sse(api.events(body)), content_type="Text/Event-Stream; charset=utf-8")
    items = await read(await answer(api.model(Wire([(200, streamed)]), flavour, stream=True)))
    assert items[-1]["text"] == "2+3 is 5, and 2*3 is 6."


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_a_dropped_connection_mid_stream_is_a_failed_call(api: Api, flavour: str) -> None:
    """A connection that drops after some events raises the transport's error: a failed call,
    never a half reply."""
    events = api.events(api.cases["a final"])
    body = Streamed(sse(events), stall=len(sse(events[: len(events) // 2])), drop=True)
    got = await outcome(lambda: _read_last(api.model(Wire([(200, body)]), flavour, stream=True)))
    assert isinstance(got, tuple)
    # The transport's error itself (anthropic), or the openai SDK's wrapping of it.
    assert got[0] in {"ReadError", "APIConnectionError"}, got
    assert body.sent > 0  # it broke mid-stream, after some events had arrived


async def _read_last(model: Any) -> Any:
    return (await read(await answer(model)))[-1]


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_an_error_event_mid_stream_is_a_failed_call(api: Api, flavour: str) -> None:
    """An error event after some deltas raises what the adapter's docstring says: OpenAI's,
    ``IncompleteReply`` (whether the SDK raised its own error for it or handed the event
    on); Anthropic's, the SDK's ``APIStatusError``; Gemini's error chunk, the SDK's
    ``ServerError`` for its 503, as for a 503 before the stream began."""
    events = api.events(api.cases["a final"])[:4]
    if api.name == "chat":
        error: tuple[str | None, Any] = (
            None,
            {"error": {"message": "overloaded", "type": "server_error"}},
        )
    elif api.name == "responses":
        error = (
            "error",
            {
                "type": "error",
                "code": "server_error",
                "message": "overloaded",
                "param": None,
                "sequence_number": 99,
            },
        )
    elif api.name == "gemini":  # an error chunk, as Google's servers send one mid-stream
        error = (None, {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})
    else:
        error = (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}},
        )
    body = Streamed(sse([*events, error]))
    got = await outcome(lambda: _read_last(api.model(Wire([(200, body)]), flavour, stream=True)))
    assert isinstance(got, tuple)
    raised = {"anthropic": "APIStatusError", "gemini": "ServerError"}
    assert got[0] == raised.get(api.name, "IncompleteReply")
    assert "overloaded" in got[1]
    assert body.closed_at is not None


@pytest.mark.parametrize(
    "error",
    [
        {"type": "error", "code": "server_error", "message": "overloaded", "param": None},
        {
            "type": "error",
            "error": {"type": "server_error", "code": "server_error", "message": "overloaded"},
        },
    ],
    ids=["as documented", "nested, which the SDK raises itself"],
)
async def test_a_responses_error_event_is_an_incomplete_reply_in_either_shape(
    flavour: str, error: Message
) -> None:
    """``openai_responses(stream=True)``: an error event, in the shape the API reference gives
    or nested under ``error`` (which the SDK raises as its own ``APIError``), is the
    ``IncompleteReply`` its docstring names, with the code and the message, marked passing."""
    api = APIS[1]
    events = api.events(api.cases["a final"])[:4]
    body = Streamed(sse([*events, ("error", {**error, "sequence_number": 99})]))
    wire = Wire([(200, body)])
    try:
        await read(await answer(api.model(wire, flavour, stream=True)))
    except IncompleteReply as exc:
        raised: IncompleteReply = exc
    else:
        raise AssertionError("no error")
    assert str(raised) == "the stream broke off with an error event: server_error: overloaded"
    assert transient(raised) is not None
    assert body.closed_at is not None


# -- through the loop ----------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_a_streamed_run_records_what_an_unstreamed_run_does(api: Api, flavour: str) -> None:
    """A run over the streaming adapter ends as the same run unstreamed, event for event."""
    first, last = api.cases["one call"], api.cases["a final"]

    async def run(stream: bool) -> Any:
        answers = [(200, Streamed(sse(api.events(b))) if stream else b) for b in (first, last)]
        loop = Loop(
            api.model(Wire(answers), flavour, stream=stream), tools=ToolRegistry([add, mul])
        )
        return loop.run(USER) if flavour == "sync" else await loop.arun(USER)

    streamed, whole = await run(True), await run(False)
    assert streamed.status == "finished"
    assert streamed.events == whole.events
    assert streamed.transcript == whole.transcript


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_the_token_closes_the_http_stream_within_100_ms(api: Api) -> None:
    """Under asyncio, ``token.cancel()`` while a chunk is awaited closes the response at once;
    the run ends cancelled with the text seen so far on its event."""
    events = api.events(api.cases["a final"])
    body = Streamed(sse(events), stall=len(sse(events[: len(events) // 2])))  # text, then stalls
    token = CancelToken()
    run = Loop(api.model(Wire([(200, body)]), "async", stream=True)).astart(USER, cancel=token)
    seen: list[object] = []
    run.subscribe_deltas(seen.append)
    task = asyncio.ensure_future(run.afinish())
    for _ in range(2000):  # until the first delta (at most 2 s)
        if seen:
            break
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.02)
    cancelled_at = time.monotonic()
    token.cancel()
    await task
    assert run.state == "cancelled"
    assert body.closed_at is not None
    assert body.closed_at - cancelled_at < 0.1
    last: Transition = run.events[-1]
    assert last.partial_text == "".join(d.text for d in seen if type(d) is TextDelta)
    assert run.transcript == USER


@pytest.mark.parametrize("api", APIS, ids=str)
def test_the_sync_driver_closes_the_http_stream_at_the_next_chunk(api: Api) -> None:
    """Under the synchronous driver, a cancel is seen at the next chunk, and the response closed."""
    events = api.events(api.cases["a final"])
    body = Streamed(sse(events))
    token = CancelToken()
    run = Loop(api.model(Wire([(200, body)]), "sync", stream=True)).start(USER, cancel=token)
    run.subscribe_deltas(lambda delta: token.cancel())
    result = run.finish()
    assert result.status == "cancelled"
    assert body.closed_at is not None
    assert result.events[-1].partial_text == pieces("2+3 is 5, and 2*3 is 6.")[0]


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_a_stream_closed_between_chunks_closes_its_response_at_once(
    api: Api, flavour: str
) -> None:
    """``close()`` (``aclose()``) after a delta, with no read waiting, closes the response then:
    the server stops streaming."""
    events = api.events(api.cases["a final"])
    body = Streamed(sse(events), stall=len(sse(events[: len(events) // 2])))  # text, then waits
    stream = await answer(api.model(Wire([(200, body)]), flavour, stream=True))
    if flavour == "sync":
        next(stream)
        stream.close()
    else:
        await stream.__anext__()
        await stream.aclose()
    assert body.closed_at is not None


# -- an output whose schema's root is not an object ---------------------------------------------

_FINALS: dict[str, Callable[..., Message]] = {
    "chat": completion,
    "responses": response,
    "anthropic": message,
    "gemini": lambda text: gem.response(gem.text(text)),
}
_ASKED: dict[str, Callable[[Message], Message]] = {
    "chat": lambda request: request["response_format"]["json_schema"]["schema"],
    "responses": lambda request: request["text"]["format"]["schema"],
    "anthropic": lambda request: request["output_config"]["format"]["schema"],
    "gemini": lambda request: request["generationConfig"]["responseJsonSchema"],
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", APIS, ids=str)
async def test_an_output_not_rooted_in_an_object_is_asked_for_wrapped(
    api: Api, flavour: str, stream: bool
) -> None:
    """The providers take an object at a schema's root: list[int] is asked for as
    {"response": [...]}, and the answer is taken out of it, streamed or whole."""
    body = _FINALS[api.name](text='{"response": [2, 3]}')
    wire = Wire([(200, Streamed(sse(api.events(body))) if stream else body)])
    loop = Loop(api.model(wire, flavour, stream=stream), output=list[int])
    result = loop.run(USER) if flavour == "sync" else await loop.arun(USER)
    assert (result.status, result.output) == ("finished", [2, 3])
    assert result.transcript[-1] == {"kind": "final", "text": "[2,3]"}
    (request,) = wire.requests
    assert _ASKED[api.name](request) == {
        "type": "object",
        "properties": {"response": {"type": "array", "items": {"type": "integer"}}},
        "required": ["response"],
        "additionalProperties": False,
    }
    if stream:
        api.conforms(request)


def test_a_wrapped_output_in_a_markdown_fence_is_taken_out_too() -> None:
    """```json {"response": ...}``` is unwrapped as the engine reads a final: fence first."""
    api = APIS[0]  # chat: the wrapper is the adapters' own, whichever API
    fenced = '```json\n{"response": [2, 3]}\n```'
    wire = Wire([(200, _FINALS[api.name](text=fenced))])
    result = Loop(api.model(wire, "sync", stream=False), output=list[int]).run(USER)
    assert (result.status, result.output, result.steps) == ("finished", [2, 3], 1)


# -- a stream that breaks mid-reply is retried; the deltas it had delivered are discarded ---------

NO_WAIT = RetryPolicy(sleep=lambda seconds, token: None)  # the default policy, waiting no time


def broken(api: Api, how: str) -> Streamed:
    """A canned final's stream that breaks after its first half: ``drop`` (the connection is
    lost), ``cut`` (the server ends it early) or an ``error`` event saying the server failed."""
    events = api.events(api.cases["a final"])
    half = events[: len(events) // 2]
    if how == "drop":
        return Streamed(sse(events), stall=len(sse(half)), drop=True)
    if how == "cut":
        return Streamed(sse(half))
    return Streamed(sse([*half, ERROR_EVENTS[api.name]("server_error")]))


def _chat_error(kind: str) -> tuple[str | None, Any]:
    return None, {"error": {"message": "overloaded", "type": kind, "code": kind}}


def _responses_error(kind: str) -> tuple[str | None, Any]:
    fields = {"code": kind, "message": "overloaded", "param": None, "sequence_number": 99}
    return "error", {"type": "error", **fields}


def _messages_error(kind: str) -> tuple[str | None, Any]:
    kind = {"server_error": "overloaded_error"}.get(kind, kind)
    return "error", {"type": "error", "error": {"type": kind, "message": "overloaded"}}


def _gemini_error(kind: str) -> tuple[str | None, Any]:
    """Gemini's error chunk: Google's error JSON, whose code is an HTTP status."""
    code, status = {"server_error": (503, "UNAVAILABLE")}.get(kind, (400, "INVALID_ARGUMENT"))
    return None, {"error": {"code": code, "message": "overloaded", "status": status}}


#: Each API's error event mid-stream, of an error type or code.
ERROR_EVENTS: dict[str, Callable[[str], tuple[str | None, Any]]] = {
    "chat": _chat_error,
    "responses": _responses_error,
    "anthropic": _messages_error,
    "gemini": _gemini_error,
}


@pytest.mark.parametrize("how", ["drop", "cut", "error"])
@pytest.mark.parametrize("api", APIS, ids=str)
async def test_a_stream_broken_mid_reply_is_retried(api: Api, flavour: str, how: str) -> None:
    """A lost connection, a stream the server ended early, a server error event: each after
    some text had streamed. The Loop's retry policy asks again, a Discard tells the listener to
    drop the text it had, and only the retry's whole reply is recorded."""
    body = api.cases["a final"]
    wire = Wire([(200, broken(api, how)), (200, Streamed(sse(api.events(body))))])
    loop = Loop(api.model(wire, flavour, stream=True), retry=NO_WAIT)
    result, heard = await finished_hearing(loop, flavour)

    assert (result.status, result.steps, len(wire.requests)) == ("finished", 2, 2)
    assert [e.trigger for e in result.events[:3]] == ["model_raised", "waited", "model_replied"]
    failure = result.events[0].exception
    assert failure is not None
    assert transient(failure) is not None
    assert transient(failure).kind == ("server" if how == "error" else "connection")  # type: ignore[union-attr]
    cut = next(i for i, item in enumerate(heard) if type(item) is Discard)
    assert all(type(item) is TextDelta for item in heard[:cut])  # the text the Discard voids
    assert heard[:cut]
    retried = "".join(d.text for d in heard[cut + 1 :] if type(d) is TextDelta)
    assert retried == result.output == "2+3 is 5, and 2*3 is 6."
    assert result.transcript == [*USER, {"kind": "final", "text": result.output}]


@pytest.mark.parametrize("api", APIS, ids=str)
async def test_an_error_event_that_will_not_pass_fails_the_run(api: Api, flavour: str) -> None:
    """An error event of any other type fails the run, not retried: OpenAI's as an
    IncompleteReply naming its code and message, Anthropic's as the SDK's error, Gemini's
    (a 400 chunk) as the SDK's ClientError with that code."""
    events = api.events(api.cases["a final"])[:4]
    body = Streamed(sse([*events, ERROR_EVENTS[api.name]("invalid_request_error")]))
    wire = Wire([(200, body)])
    loop = Loop(api.model(wire, flavour, stream=True), retry=NO_WAIT)
    result = loop.run(USER) if flavour == "sync" else await loop.arun(USER)
    assert (result.status, len(wire.requests)) == ("failed", 1)
    failure = result.events[-1].exception
    assert failure is not None
    assert transient(failure) is None
    if api.name == "anthropic":
        assert isinstance(failure, anthropic.APIStatusError)
    elif api.name == "gemini":
        assert isinstance(failure, genai_errors.ClientError)
        assert failure.code == 400
    else:
        assert isinstance(failure, IncompleteReply)
        assert result.error == (
            "the model raised IncompleteReply: the stream broke off with an error event: "
            "invalid_request_error: overloaded"
        )


# -- the sync driver reads the token at every event, those that carry no delta included ----------


def quiet(api: Api, n: int) -> list[tuple[str | None, Any]]:
    """A final's events with ``n`` events that carry no delta early on: a chat's empty chunks,
    a Responses reasoning summary, a Messages thinking block's deltas, Gemini's thought
    summaries."""
    events = api.events(api.cases["a final"])
    if api.name == "chat":
        silent = [events[0]] * n  # the opening chunk: a role and no content
    elif api.name == "responses":
        where = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
        silent = [
            (
                "response.reasoning_summary_text.delta",
                {
                    "type": "response.reasoning_summary_text.delta",
                    **where,
                    "delta": "Hm. ",
                    "sequence_number": 1000 + i,
                },
            )
            for i in range(n)
        ]
    elif api.name == "gemini":  # its first chunk already has text: the thoughts come before
        thought = {"role": "model", "parts": [{"text": "Hm. ", "thought": True}]}
        first = {**events[0][1], "candidates": [{"index": 0, "content": thought}]}
        return [(None, first)] * n + events
    else:
        delta = {"type": "thinking_delta", "thinking": "Hm. "}
        silent = [
            ("content_block_delta", {"type": "content_block_delta", "index": 9, "delta": delta})
        ] * n
    return [events[0], *silent, *events[1:]]


@pytest.mark.parametrize("api", APIS, ids=str)
def test_the_sync_driver_sees_a_cancel_at_the_next_event_without_a_delta(api: Api) -> None:
    """30 events that carry no delta open the reply; a cancel comes after two of them: the
    response is closed at the next event, long before the first delta, and the run ends
    cancelled with nothing streamed."""
    token = CancelToken()
    events = quiet(api, 30)
    body = Streamed(sse(events), then=(len(sse(events[:3])), token.cancel))
    run = Loop(api.model(Wire([(200, body)]), "sync", stream=True)).start(USER, cancel=token)
    heard: list[object] = []
    run.subscribe_deltas(heard.append)
    result = run.finish()

    assert result.status == "cancelled"
    assert result.events[-1].trigger == "model_interrupted"
    assert result.events[-1].partial_text is None
    assert heard == []
    assert body.closed_at is not None
    assert body.sent * body.size <= len(sse(events[:5]))  # read on by an event or so, no more
