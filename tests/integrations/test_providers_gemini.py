"""agentloop.providers.google through the real google-genai SDK over a mock transport (no network).

Both clients (``genai.Client`` and its ``.aio``). The canned responses are
Gemini's REST format (``generateContent``'s JSON), checked against the SDK's
own response model; every request the SDK sends is kept and checked as
Gemini's API checks it (``sent``): its parts against the SDK's own types, each
model turn's calls answered in the next user turn by as many function
responses, and a thought signature on the first call of each step of the
current turn.
"""

from __future__ import annotations

import base64
import importlib
import inspect
import re
import ssl
import sys
from typing import Any

import attrs
import httpx2
import pytest
from google import genai
from google.genai import errors, types

import agentloop
from agentloop import Loop, ToolRegistry
from agentloop.models import RetryPolicy, Transient, transient
from agentloop.providers import IncompleteReply, UnreadableResponse
from agentloop.providers.google import SKIP_SIGNATURE, gemini_generate_content
from tests.support.helpers import add, adding_after_a_tool, mul
from tests.support.wire import FLAVOURS, HISTORY, Streamed, Wire, ask, assert_usage, run, sse

Message = dict[str, Any]

MODEL = "gemini-3-flash"
BASE_URL = "https://generativelanguage.test"
PATH = f"/v1/models/{MODEL}:generateContent"
#: 120 prompt tokens (100 of them cached), 20 output and 10 thinking tokens: wire.STEP_USAGE.
USAGE = {"input_tokens": 120, "output_tokens": 30, "cached_tokens": 100}
SIGNATURE = base64.b64encode(b"\x8a\x01opaque thought state").decode()
USER = [{"kind": "user", "text": "What is 2+3, and 2*3?"}]
USER_PART = {"text": "What is 2+3, and 2*3?"}


# -- Gemini's wire format ------------------------------------------------------------------------


def function_call(
    name: str, args: Message, *, call_id: str | None = None, signature: str | None = None
) -> Message:
    """A ``functionCall`` part; Gemini gives no ``id`` on most paths."""
    call: Message = {"name": name, "args": args}
    if call_id is not None:
        call["id"] = call_id
    part: Message = {"functionCall": call}
    if signature is not None:
        part["thoughtSignature"] = signature
    return part


def response(
    *parts: Message,
    finish: str | None = "STOP",
    response_id: str = "resp-1",
    usage: bool = True,
    content: bool = True,
) -> Message:
    """A ``generateContent`` response body with one candidate made of ``parts``."""
    candidate: Message = {"index": 0}
    if content:
        candidate["content"] = {"role": "model", "parts": list(parts)}
    if finish is not None:
        candidate["finishReason"] = finish
    body: Message = {
        "candidates": [candidate],
        "modelVersion": MODEL,
        "responseId": response_id,
    }
    if usage:
        body["usageMetadata"] = {
            "promptTokenCount": 120,
            "cachedContentTokenCount": 100,
            "candidatesTokenCount": 20,
            "thoughtsTokenCount": 10,
            "totalTokenCount": 150,
        }
    return body


def text(said: str) -> Message:
    return {"text": said}


def error(code: int, status: str, message: str, *details: Message) -> Message:
    """A Google API error body."""
    return {"error": {"code": code, "message": message, "status": status, "details": list(details)}}


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


# The SDK makes TLS contexts for clients it is not given (tens of ms a client): one will do.
TLS = ssl.create_default_context()


def http_options(wire: Wire) -> types.HttpOptions:
    """``wire`` as the SDK's transport, sync and async, and no TLS context of its own making."""
    return types.HttpOptions(
        base_url=BASE_URL,
        httpx_client=wire.sync_client(),
        httpx_async_client=wire.async_client(),
        client_args={"verify": TLS},
        async_client_args={"verify": TLS, "ssl": TLS},
    )


def client(wire: Wire, flavour: str) -> Any:
    """The SDK's own client, talking to ``wire``: ``genai.Client``, or its ``.aio``."""
    made = genai.Client(api_key="AIza-test", http_options=http_options(wire))
    return made if flavour == "sync" else made.aio


def model_for(flavour: str, wire: Wire, **config: Any) -> Any:
    return gemini_generate_content(client(wire, flavour), MODEL, **config)


def tools() -> ToolRegistry:
    return ToolRegistry([add, mul])


# -- what Gemini's API checks in a request -------------------------------------------------------

_REQUEST: dict[str, Any] = {
    "contents": types.Content,
    "systemInstruction": types.Content,
    "toolConfig": types.ToolConfig,
    "generationConfig": types.GenerationConfig,
}


def conforms(body: Message) -> None:
    """Every key is one of ``generateContent``'s, each value valid as the SDK's own type (which
    refuses a key it does not know)."""
    for key, value in body.items():
        if key == "contents":
            for content in value:
                types.Content.model_validate(content)
        elif key == "tools":
            for tool in value:
                types.Tool.model_validate(tool)
        else:
            _REQUEST[key].model_validate(value)


def answered_next(contents: list[Message]) -> None:
    """Roles alternate, from a user turn, none empty; each model turn's calls are answered at
    the head of the next user turn, one function response per call, in order, by name and
    (where the call had one) by id; no other function response is sent."""
    assert contents[0]["role"] == "user", contents
    for before, content in zip([None, *contents], contents, strict=False):
        assert content["parts"], contents
        assert before is None or before["role"] != content["role"], contents
        calls = (
            [p["functionCall"] for p in before["parts"] if "functionCall" in p] if before else []
        )
        answers = [p["functionResponse"] for p in content["parts"] if "functionResponse" in p]
        assert [(a["name"], a.get("id")) for a in answers] == [
            (c["name"], c.get("id")) for c in calls
        ], contents
        assert all("functionResponse" in p for p in content["parts"][: len(answers)]), content


def signed(contents: list[Message]) -> None:
    """The first call of each model turn after the last user text has a thought signature, as
    Gemini 3 wants (it refuses the request otherwise)."""
    starts = [
        i
        for i, c in enumerate(contents)
        if c["role"] == "user" and any("text" in p for p in c["parts"])
    ]
    for content in contents[starts[-1] :]:
        calls = [p for p in content["parts"] if "functionCall" in p]
        if content["role"] == "model" and calls:
            assert calls[0].get("thoughtSignature"), content


def sent(wire: Wire, registry: ToolRegistry | None = None) -> list[Message]:
    """Check every request the SDK sent, as Gemini would; return their bodies."""
    for body in wire.requests:
        conforms(body)
        answered_next(body["contents"])
        signed(body["contents"])
        if registry is not None:
            assert body["tools"] == [{"functionDeclarations": registry.specs("gemini")}]
    assert wire.paths == [PATH] * len(wire.requests)
    return wire.requests


def test_the_checks_of_the_stand_in_server_bite() -> None:
    """What Gemini refuses, ``sent``'s checks refuse: a call answered by no function response,
    a response for no call, an unsigned step of the current turn."""
    asked: Message = {"role": "user", "parts": [USER_PART]}
    called: Message = {"role": "model", "parts": [call_part("add", {}), call_part("mul", {})]}
    one: Message = {"role": "user", "parts": [response_part("add", {"output": 1})]}
    both: Message = {"role": "user", "parts": [*one["parts"], response_part("mul", {"output": 2})]}
    with pytest.raises(AssertionError):
        answered_next([asked, called, one])
    with pytest.raises(AssertionError):
        answered_next([asked, both])
    answered_next([asked, called, both])
    with pytest.raises(AssertionError):
        signed([asked, called, both])
    signed([asked, {**called, "parts": [{**called["parts"][0], "thoughtSignature": "c2ln"}]}])


@pytest.mark.parametrize(
    "body",
    [
        response(function_call("add", {"a": 2}, signature=SIGNATURE)),
        response(text("Both."), function_call("add", {}, call_id="fc-1"), function_call("mul", {})),
        response(text("5")),
        response(text("5 and"), finish="MAX_TOKENS"),
        response(finish="SAFETY", content=False),
        {"promptFeedback": {"blockReason": "SAFETY"}, "responseId": "r"},
    ],
)
def test_canned_bodies_are_valid_responses(body: Message) -> None:
    """Each canned body validates as the SDK's response model."""
    types.GenerateContentResponse.model_validate(body)


# -- response to reply ---------------------------------------------------------------------------


async def test_a_single_call_gets_an_id_made_from_its_response_and_keeps_its_signature(
    flavour: str,
) -> None:
    """A call without an id gets ``gemini_<responseId>_<n>``; its thought signature is kept as
    the call's ``signature``, base64 as on the wire; usage counts thinking tokens as output.
    The SDK runs no tool: one request, declarations only."""
    registry = tools()
    body = response(function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE))
    wire = Wire([(200, body)])
    reply = await ask(model_for(flavour, wire), USER, registry)
    assert reply == {
        "kind": "call",
        "id": "gemini_resp-1_0",
        "name": "add",
        "arguments": {"a": 2, "b": 3},
        "signature": SIGNATURE,
        "usage": USAGE,
    }
    (request,) = sent(wire, registry)
    assert request["contents"] == [{"role": "user", "parts": [{"text": "What is 2+3, and 2*3?"}]}]
    assert "systemInstruction" not in request
    assert not request.get("generationConfig")  # the SDK sends {}: nothing asked


async def test_gemini_s_own_ids_are_kept(flavour: str) -> None:
    """Where Gemini gives a call an id, it is the call's id."""
    body = response(function_call("add", {"a": 1}, call_id="fc-7Qx"))
    reply = await ask(model_for(flavour, Wire([(200, body)])), USER, tools())
    assert (reply["id"], reply["arguments"]) == ("fc-7Qx", {"a": 1})
    assert "signature" not in reply


async def test_parallel_calls(flavour: str) -> None:
    """Several calls are a batch in their order; the signature stays on the first, where it came,
    and the made ids number the calls."""
    body = response(
        function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE),
        function_call("mul", {"a": 2, "b": 3}),
        response_id="Gx5fZ4aTNq",
    )
    reply = await ask(model_for(flavour, Wire([(200, body)])), USER, tools())
    assert reply == {
        "kind": "calls",
        "calls": [
            {
                "id": "gemini_Gx5fZ4aTNq_0",
                "name": "add",
                "arguments": {"a": 2, "b": 3},
                "signature": SIGNATURE,
            },
            {"id": "gemini_Gx5fZ4aTNq_1", "name": "mul", "arguments": {"a": 2, "b": 3}},
        ],
        "usage": USAGE,
    }


async def test_made_ids_fit_what_every_provider_takes(flavour: str) -> None:
    """A made id is at most 40 of [A-Za-z0-9_-] (OpenAI's length, Anthropic's characters),
    whatever the response's id holds; responses without a usable one get ids of their own."""
    odd = response(function_call("add", {}), response_id="Gx5f/Z4a+TNq=eP1sQP0Zy2mAY.long.tail")
    bare = response(function_call("add", {}))
    del bare["responseId"]
    unsafe = response(function_call("add", {}), response_id="/+=.")
    wire = Wire([(200, odd), (200, bare), (200, bare), (200, unsafe), (200, unsafe)])
    model = model_for(flavour, wire)
    ids = [(await ask(model, USER, tools()))["id"] for _ in range(5)]
    assert ids[0] == "gemini_Gx5fZ4aTNqeP1sQP0Zy2mAYl_0"
    assert len(set(ids)) == 5  # no id, or none of it usable: a random one each time
    for made in ids:
        assert re.fullmatch(r"gemini_[A-Za-z0-9_-]{1,24}_0", made), made


async def test_text_beside_a_call(flavour: str) -> None:
    body = response(text("Adding "), text("first."), function_call("add", {"a": 1}))
    reply = await ask(model_for(flavour, Wire([(200, body)])), USER, tools())
    assert reply == {
        "kind": "calls",
        "calls": [{"id": "gemini_resp-1_0", "name": "add", "arguments": {"a": 1}}],
        "text": "Adding first.",
        "usage": USAGE,
    }


async def test_a_final(flavour: str) -> None:
    reply = await ask(model_for(flavour, Wire([(200, response(text("5 and 6.")))])), USER)
    assert reply == {"kind": "final", "text": "5 and 6.", "usage": USAGE}


async def test_thoughts_are_left_out(flavour: str) -> None:
    """Thought summaries (``include_thoughts``) are not the answer; a text part's signature
    (which Gemini does not check) is not kept."""
    body = response(
        {"text": "Add them, then multiply.", "thought": True},
        {"text": "5.", "thoughtSignature": SIGNATURE},
    )
    reply = await ask(model_for(flavour, Wire([(200, body)])), USER)
    assert reply == {"kind": "final", "text": "5.", "usage": USAGE}


async def test_usage_counts_thinking_and_tool_prompt_tokens(flavour: str) -> None:
    """Input: the prompt (cached tokens included) and what built-in tools added to it; output:
    the candidates' tokens and the thinking ones. Without usage, none."""
    body = response(text("5"))
    body["usageMetadata"] = {
        "promptTokenCount": 50,
        "toolUsePromptTokenCount": 7,
        "cachedContentTokenCount": 40,
        "candidatesTokenCount": 3,
        "thoughtsTokenCount": 200,
        "totalTokenCount": 260,
    }
    bare = response(text("5"), usage=False)
    wire = Wire([(200, body), (200, bare)])
    model = model_for(flavour, wire)
    reply = await ask(model, USER)
    assert reply["usage"] == {"input_tokens": 57, "output_tokens": 203, "cached_tokens": 40}
    assert "usage" not in await ask(model, USER)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            response(text("The answer"), function_call("add", {}), finish="MAX_TOKENS"),
            "the reply was cut off at max_output_tokens",
        ),
        (response(finish="MAX_TOKENS"), "the reply was cut off at max_output_tokens"),
        (response(finish="SAFETY", content=False), "the reply ended with finish_reason 'SAFETY'"),
        (
            response(finish="MALFORMED_FUNCTION_CALL", content=False),
            "the model made a function call that does not parse "
            "(finish_reason 'MALFORMED_FUNCTION_CALL')",
        ),
        (response(text("As the song"), finish="RECITATION"), "finish_reason 'RECITATION'"),
        (
            {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "responseId": "r"},
            "the prompt was blocked (block_reason 'PROHIBITED_CONTENT')",
        ),
        (response(), "the reply was empty: no text and no tool calls"),
        ({"responseId": "r"}, "the reply was empty: the response has no candidates"),
        (
            response(
                {
                    "functionCall": {
                        "name": "add",
                        "willContinue": True,
                        "partialArgs": [{"jsonPath": "$.a", "numberValue": 2}],
                    }
                }
            ),
            "(stream_function_call_arguments), which agentloop does not assemble",
        ),
    ],
    ids=[
        "cut off",
        "cut off empty",
        "safety",
        "malformed",
        "recitation",
        "blocked",
        "empty",
        "none",
        "arguments in pieces",
    ],
)
async def test_a_reply_cut_off_stopped_blocked_or_empty(
    flavour: str, body: Message, said: str
) -> None:
    """Anything but STOP, even with a call in it, a blocked prompt, no content: never a reply;
    the usage it was billed goes with the error."""
    with pytest.raises(IncompleteReply) as caught:
        await ask(model_for(flavour, Wire([(200, body)])), USER, tools())
    assert said in str(caught.value)
    assert caught.value.usage == (USAGE if "usageMetadata" in body else None)


async def test_arguments_that_are_not_an_object_go_back_as_an_empty_object(flavour: str) -> None:
    """A call whose arguments arrived as text (from another provider's history) goes back with
    ``args: {}``; its invalid_arguments result goes back as the function's error."""
    registry = tools()
    bad = {"kind": "call", "id": "call_1", "name": "add", "arguments": '{"a": 2, "b":'}
    result = {"kind": "tool_result", "id": "call_1", "name": "add", **registry.dispatch(bad)}
    wire = Wire([(200, response(text("5")))])
    await ask(model_for(flavour, wire), [*USER, bad, result, *USER], registry)
    (request,) = sent(wire, registry)
    _, called, answered = request["contents"]
    assert called["parts"][0]["functionCall"] == {"id": "call_1", "name": "add", "args": {}}
    failed, said = answered["parts"]
    assert failed["functionResponse"]["response"]["error"].startswith(
        "status: invalid_arguments\n["
    )
    assert said == USER_PART


# -- errors: what the retry policy sees -----------------------------------------------------------

RETRY_INFO = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}
QUOTA = {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []}
BAD_KEY = error(
    400,
    "INVALID_ARGUMENT",
    "API key not valid. Please pass a valid API key.",
    {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"},
)


@attrs.define
class Failing(Wire):
    """A wire whose transport fails every request with ``fail``'s error."""

    fail: Any = None

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        return self.fail(request)  # type: ignore[no-any-return]


async def caught(model: Any) -> Exception:
    """What one step of ``model`` raised."""
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the SDK's or the transport's own
        await ask(model, USER)
    return raised.value


@pytest.mark.parametrize(
    ("answer", "kind", "wait"),
    [
        ((429, error(429, "RESOURCE_EXHAUSTED", "quota", QUOTA, RETRY_INFO), {}), "rate_limit", 37),
        ((429, error(429, "RESOURCE_EXHAUSTED", "quota"), {"retry-after": "3"}), "rate_limit", 3),
        ((503, error(503, "UNAVAILABLE", "overloaded"), {}), "server", None),
        (
            (500, error(500, "INTERNAL", "boom", {**RETRY_INFO, "retryDelay": "0.5s"}), {}),
            "server",
            0.5,
        ),
        ((408, error(408, "DEADLINE_EXCEEDED", "slow"), {}), "timeout", None),
        ((400, BAD_KEY, {}), None, None),
        ((404, error(404, "NOT_FOUND", "no such model"), {}), None, None),
    ],
    ids=["429 RetryInfo", "429 Retry-After", "503", "500 RetryInfo", "408", "400 bad key", "404"],
)
async def test_the_sdks_errors_are_classified_with_the_wait_they_ask_for(
    flavour: str, answer: tuple[int, Message, dict[str, str]], kind: str | None, wait: float | None
) -> None:
    """ClientError and ServerError by their status code; a 429's wait from its RetryInfo, which
    the SDK ignores, else from Retry-After. A bad key is a 400: not marked. The SDK itself does
    not retry (one request)."""
    wire = Wire([answer])
    exc = await caught(model_for(flavour, wire))
    assert isinstance(exc, errors.ClientError if answer[0] < 500 else errors.ServerError)
    assert exc.code == answer[0]
    found = transient(exc)
    assert (found and found.kind, found and found.retry_after) == (kind, wait)
    assert len(wire.requests) == 1


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        (httpx2.ReadTimeout, "timeout"),
        (httpx2.ConnectTimeout, "timeout"),
        (httpx2.RemoteProtocolError, "connection"),
        (httpx2.ConnectError, "connection"),
        (httpx2.ReadError, "connection"),
    ],
)
async def test_timeouts_and_lost_connections_are_marked(
    flavour: str, error_type: type[httpx2.TransportError], kind: str
) -> None:
    """The SDK does not wrap the transport's errors: they are marked by their own types."""

    def fail(request: httpx2.Request) -> httpx2.Response:
        raise error_type("no answer", request=request)

    exc = await caught(model_for(flavour, Failing([], fail=fail)))
    assert type(exc) is error_type
    assert transient(exc) is not None
    assert transient(exc).kind == kind  # type: ignore[union-attr]


async def test_a_streamed_requests_http_error_is_raised_and_marked_by_the_call(
    flavour: str,
) -> None:
    """The SDK sends a stream's request when the stream is first read: the adapter reads it in
    the call, so a 429 is raised there, marked with its RetryInfo's wait, as unstreamed."""
    wire = Wire([(429, error(429, "RESOURCE_EXHAUSTED", "quota", RETRY_INFO), {})])
    model = gemini_generate_content(client(wire, flavour), MODEL, stream=True)
    exc = await caught(model)
    assert isinstance(exc, errors.ClientError)
    assert transient(exc) == Transient(kind="rate_limit", retry_after=37.0)
    assert wire.paths == [f"/v1/models/{MODEL}:streamGenerateContent"]


async def test_a_stream_whose_first_chunk_is_an_error_is_raised_by_the_call(flavour: str) -> None:
    """An error chunk (a 200 whose stream says 503) raises the SDK's ServerError from the model
    call, marked as a server error, and its response is closed."""
    chunk = {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}
    body = Streamed(sse([(None, chunk)]), stall=len(sse([(None, chunk)])))  # then waits
    model = gemini_generate_content(client(Wire([(200, body)]), flavour), MODEL, stream=True)
    exc = await caught(model)
    assert isinstance(exc, errors.ServerError)
    assert transient(exc) == Transient(kind="server")
    assert body.closed_at is not None


async def test_an_error_chunk_mid_stream_is_retried_after_its_retry_info(flavour: str) -> None:
    """A 429 chunk after some text: the SDK's ClientError, marked as the same 429 before the
    stream began is, with its RetryInfo's wait. The Loop waits that, asks again, and records
    only the retry's reply; the text that had streamed is discarded."""
    quota = error(429, "RESOURCE_EXHAUSTED", "quota", RETRY_INFO)
    broke = Streamed(sse([(None, response(text("Let"), finish=None)), (None, quota)]))
    wire = Wire([(200, broke), (200, Streamed(sse([(None, response(text("5")))])))])
    waits: list[float] = []
    policy = RetryPolicy(cap=60.0, sleep=lambda seconds, token: waits.append(seconds))
    loop = Loop(model_for(flavour, wire, stream=True), retry=policy)
    run_: Any = loop.start(USER) if flavour == "sync" else loop.astart(USER)
    heard: list[object] = []
    run_.subscribe_deltas(heard.append)
    result = run_.finish() if flavour == "sync" else await run_.afinish()
    assert (result.status, result.output, result.steps, len(wire.requests)) == (
        "finished",
        "5",
        2,
        2,
    )
    failure = result.events[0].exception
    assert isinstance(failure, errors.ClientError)
    assert failure.code == 429
    assert transient(failure) == Transient(kind="rate_limit", retry_after=37.0)
    assert waits == [37.0]
    assert [type(item).__name__ for item in heard] == [
        "TextDelta",
        "Discard",
        "TextDelta",
        "UsageDelta",
    ]
    assert broke.closed_at is not None


async def test_a_chunk_that_is_not_json_mid_stream_is_unreadable(flavour: str) -> None:
    """A chunk that is not JSON after some text fails the call as a body that is not JSON does:
    ``UnreadableResponse``, quoting it, not the SDK's parser error; it is not retried."""
    body = Streamed(sse([(None, response(text("Let"), finish=None)), (None, "<html>oops")]))
    wire = Wire([(200, body)])
    result = await run(Loop(model_for(flavour, wire, stream=True)), flavour, "2+3?")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 1, 1)
    assert isinstance(result.events[0].exception, UnreadableResponse)
    assert result.error is not None
    assert result.error.startswith(
        "the model raised UnreadableResponse: the provider's response was not JSON "
        f"(HTTP 200, from models/{MODEL}:streamGenerateContent): '<html>oops"
    )
    assert body.closed_at is not None


HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_body_that_is_not_json_fails_the_run_saying_so(flavour: str, stream: bool) -> None:
    """A 200 whose body is an HTML page (a base_url that is not Gemini's): the run fails saying
    the response was not JSON, with its start and what was asked, not a parser's "Expecting
    value"; asked once. Streamed, the first chunk says the same."""
    wire = Wire([(200, HTML, {"content-type": "text/html"})])
    result = await run(Loop(model_for(flavour, wire, stream=stream)), flavour, "2+3?")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 1, 1)
    method = "streamGenerateContent" if stream else "generateContent"
    assert result.error is not None
    assert result.error.startswith(
        "the model raised UnreadableResponse: the provider's response was not JSON "
        f"(HTTP 200, from models/{MODEL}:{method}): '<html>"
    )
    assert result.error.endswith("; check that the client's base_url is the provider's API")
    assert isinstance(result.events[0].exception, UnreadableResponse)


@pytest.mark.parametrize("kind", ["application/json", None])
async def test_json_in_place_of_a_stream_fails_the_run_saying_so(
    flavour: str, kind: str | None
) -> None:
    """A streamed request answered with JSON (a server that ignored ``alt=sse``), or with no
    content type: the run fails saying the response was not an event stream, with the
    content type, what was asked, and the chunk as the SDK read it; asked once, not as a
    stream cut short (which is retried)."""
    body = Streamed(b'{"candidates": []}', content_type=kind)
    wire = Wire([(200, body)])
    loop = Loop(model_for(flavour, wire, stream=True), retry=RetryPolicy(sleep=lambda s, t: None))
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 1, 1)
    said = f", content-type {kind}" if kind else ""
    assert result.error == (
        "the model raised UnreadableResponse: the provider's response was not an event stream "
        f"(HTTP 200{said}, from models/{MODEL}:streamGenerateContent): "
        """'{"candidates":[]}'; """
        "check that the client's base_url is the provider's API"
    )
    unread = result.events[0].exception
    assert isinstance(unread, UnreadableResponse)
    assert transient(unread) is None
    assert body.closed_at is not None


async def test_an_error_status_with_a_page_is_the_sdks_error(flavour: str) -> None:
    """A 502 whose body is a proxy's page is the SDK's ServerError, marked as a server error:
    the status says what happened."""
    wire = Wire([(502, HTML, {"content-type": "text/html"})])
    exc = await caught(model_for(flavour, wire))
    assert isinstance(exc, errors.ServerError)
    assert exc.code == 502
    assert transient(exc) == Transient(kind="server")


# -- history to request --------------------------------------------------------------------------


async def test_system_messages_are_the_system_instruction(flavour: str) -> None:
    """``system`` messages, wherever they are, join as the system instruction."""
    wire = Wire([(200, response(text("Hi.")))])
    history = [
        {"kind": "system", "text": "Be brief."},
        {"kind": "user", "text": "Hello"},
        {"kind": "system", "text": "Answer in French."},
    ]
    await ask(model_for(flavour, wire), history)
    (body,) = sent(wire)
    assert body["systemInstruction"] == {
        "role": "user",
        "parts": [{"text": "Be brief.\n\nAnswer in French."}],
    }
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Hello"}]}]


def call_part(name: str, args: Message, call_id: str | None = None) -> Message:
    call: Message = {"name": name, "args": args}
    if call_id is not None:
        call["id"] = call_id
    return {"functionCall": call}


def response_part(name: str, response: Message, call_id: str | None = None) -> Message:
    answer: Message = {"name": name, "response": response}
    if call_id is not None:
        answer["id"] = call_id
    return {"functionResponse": answer}


async def test_a_multi_turn_history_passed_back_in(flavour: str) -> None:
    """A whole history, every kind and status: each result is its function's output, or its
    error led by the status; ids that Gemini did not make (another provider's) go back as
    they are."""
    wire = Wire([(200, response(text("Sure.")))])
    await ask(model_for(flavour, wire), HISTORY, tools())
    (body,) = sent(wire, tools())
    assert body["systemInstruction"]["parts"] == [{"text": "Use the tools."}]
    assert body["contents"] == [
        {"role": "user", "parts": [text("2+3, 2*3?")]},
        {
            "role": "model",
            "parts": [
                text("Both at once."),
                call_part("add", {"a": 2, "b": 3}, "call_1"),
                call_part("mul", {"a": 2, "b": 3}, "call_2"),
            ],
        },
        {
            "role": "user",
            "parts": [
                response_part("add", {"output": 5}, "call_1"),
                response_part("mul", {"error": "status: denied\nno"}, "call_2"),
            ],
        },
        {"role": "model", "parts": [call_part("mul", {}, "call_3")]},
        {
            "role": "user",
            "parts": [
                response_part(
                    "mul",
                    {"error": 'status: invalid_arguments\n[{"path":"","message":"not JSON"}]'},
                    "call_3",
                )
            ],
        },
        {"role": "model", "parts": [call_part("nope", {}, "call_4")]},
        {
            "role": "user",
            "parts": [response_part("nope", {"error": "status: unknown_tool\nx"}, "call_4")],
        },
        {"role": "model", "parts": [call_part("add", {"a": 1, "b": 1}, "call_5")]},
        {
            "role": "user",
            "parts": [
                response_part(
                    "add",
                    {"error": 'status: error\n{"type":"ValueError","message":"bad"}'},
                    "call_5",
                )
            ],
        },
        {"role": "model", "parts": [call_part("add", {"a": 1, "b": 1}, "call_6")]},
        {
            "role": "user",
            "parts": [response_part("add", {"error": "status: cancelled\nc"}, "call_6")],
        },
        {"role": "model", "parts": [text("5, and 6 was denied.")]},
        {"role": "user", "parts": [text("Thanks. Once more?")]},
    ]


async def test_results_come_first_in_their_user_turn(flavour: str) -> None:
    """Results and the user text next to them are one turn, results first, even when the text
    came before a result; empty text is left out; a made id is never sent."""
    history: list[Message] = [
        *USER,
        {
            "kind": "calls",
            "calls": [
                {"id": "gemini_r_0", "name": "add", "arguments": {}, "signature": SIGNATURE},
                {"id": "gemini_r_1", "name": "add", "arguments": {}},
            ],
            "text": "",
        },
        {"kind": "tool_result", "id": "gemini_r_0", "name": "add", "status": "ok", "content": "1"},
        {"kind": "user", "text": "Also: hurry."},
        {"kind": "tool_result", "id": "gemini_r_1", "name": "add", "status": "ok", "content": "2"},
        {"kind": "user", "text": ""},
    ]
    wire = Wire([(200, response(text("ok")))])
    await ask(model_for(flavour, wire), history)
    (body,) = sent(wire)
    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {**call_part("add", {}), "thoughtSignature": SIGNATURE},
                call_part("add", {}),
            ],
        },
        {
            "role": "user",
            "parts": [
                response_part("add", {"output": "1"}),
                response_part("add", {"output": "2"}),
                text("Also: hurry."),
            ],
        },
    ]


async def test_another_providers_calls_in_the_current_turn_get_the_documented_signature(
    flavour: str,
) -> None:
    """Gemini 3 refuses a step of the current turn (since the last user text) whose first call
    has no thought signature: a call Gemini did not make (another provider's, after a
    fallback) goes with the one Google documents for it; earlier turns go as they are."""
    history: list[Message] = [
        *USER,
        {"kind": "call", "id": "call_a", "name": "add", "arguments": {"a": 1, "b": 1}},
        {"kind": "tool_result", "id": "call_a", "name": "add", "status": "ok", "content": 2},
        {"kind": "final", "text": "2"},
        {"kind": "user", "text": "And 2*3?"},
        {
            "kind": "calls",
            "calls": [
                {"id": "call_b", "name": "mul", "arguments": {"a": 2, "b": 3}},
                {"id": "call_c", "name": "mul", "arguments": {"a": 3, "b": 2}},
            ],
        },
        {"kind": "tool_result", "id": "call_b", "name": "mul", "status": "ok", "content": 6},
        {"kind": "tool_result", "id": "call_c", "name": "mul", "status": "ok", "content": 6},
    ]
    wire = Wire([(200, response(text("6")))])
    await ask(model_for(flavour, wire), history)
    (body,) = sent(wire)
    earlier, current = body["contents"][1], body["contents"][5]
    assert "thoughtSignature" not in earlier["parts"][0]
    first, second = current["parts"]
    assert first["thoughtSignature"] == SKIP_SIGNATURE  # on the wire as Google documents it
    assert "thoughtSignature" not in second


async def test_a_signature_that_is_not_base64_is_named(flavour: str) -> None:
    """A call's signature is what a Gemini reply gave (base64); anything else is refused, naming
    the message, before any request."""
    history: list[Message] = [
        *USER,
        {"kind": "call", "id": "c1", "name": "add", "arguments": {}, "signature": "a b"},
    ]
    wire = Wire([])
    with pytest.raises(
        ValueError, match=r"^history\[1\]: expected a call's signature to be base64"
    ):
        await ask(model_for(flavour, wire), history)
    assert wire.requests == []


async def test_an_image_in_a_result_goes_as_the_responses_parts(flavour: str) -> None:
    """An MCP tool's result with an image: the image goes as a part of the function response,
    the rest as its output."""
    png = base64.b64encode(b"\x89PNG-bytes").decode()
    history: list[Message] = [
        *USER,
        {"kind": "call", "id": "fc-1", "name": "shot", "arguments": {}, "signature": SIGNATURE},
        {
            "kind": "tool_result",
            "id": "fc-1",
            "name": "shot",
            "status": "ok",
            "content": [
                {"type": "text", "text": "the page"},
                {"type": "image", "data": png, "mimeType": "image/png"},
            ],
        },
    ]
    wire = Wire([(200, response(text("A page.")))])
    await ask(model_for(flavour, wire), history)
    (body,) = sent(wire)
    answer = body["contents"][2]["parts"][0]["functionResponse"]
    assert answer == {  # as the SDK writes it: the API takes either spelling of a field
        "id": "fc-1",
        "name": "shot",
        "response": {"output": ["the page"]},
        "parts": [{"inline_data": {"mime_type": "image/png", "data": png}}],
    }


async def test_an_unknown_kind_is_named(flavour: str) -> None:
    wire = Wire([])
    with pytest.raises(ValueError, match=r"history\[1\]: expected kind to be one of .*got None"):
        await ask(model_for(flavour, wire), [*USER, {"text": "no kind"}])
    assert wire.requests == []


# -- the adapter ---------------------------------------------------------------------------------


async def test_config_passes_through_and_tools_are_the_specs_given(flavour: str) -> None:
    """Config fields go into every request; the neutral specs given with a request go out as one
    Tool of function declarations (parameters_json_schema), as the registry makes them; no
    specs, or none at all, send no tools."""
    registry = ToolRegistry([add, mul])
    wire = Wire([(200, response(text("ok")))] * 3)
    model = model_for(
        flavour, wire, temperature=0, max_output_tokens=512, thinking_config={"thinking_budget": 0}
    )
    await ask(model, USER, registry)
    await ask(model, USER, ToolRegistry())
    await ask(model, USER)
    given, empty, bare = sent(wire)
    assert given["generationConfig"] == {  # as the SDK writes it: the API takes either spelling
        "temperature": 0.0,
        "maxOutputTokens": 512,
        "thinkingConfig": {"thinking_budget": 0},
    }
    assert given["tools"] == [{"functionDeclarations": registry.specs("gemini")}]
    declared = given["tools"][0]["functionDeclarations"][0]
    assert declared["parameters_json_schema"]["additionalProperties"] is False
    assert "tools" not in empty
    assert "tools" not in bare


def test_declarations_only_the_sdks_automatic_function_calling_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK is given the tools as declarations (dicts, never Python functions, which it would
    call itself) and automatic function calling turned off: the Loop runs the tools."""
    given: list[Message] = []
    genai_client = client(Wire([(200, response(text("ok")))]), "sync")
    create = genai_client.models.generate_content

    def spying(**request: Any) -> Any:
        given.append(request)
        return create(**request)

    monkeypatch.setattr(genai_client.models, "generate_content", spying)
    model = gemini_generate_content(genai_client, MODEL)
    model(USER, tools=tools().specs())
    (config,) = [request["config"] for request in given]
    assert config["automatic_function_calling"] == {"disable": True}
    assert config["tools"] == [{"function_declarations": tools().specs("gemini")}]


async def test_a_run_sends_the_loops_tools_and_a_run_without_tools_none(flavour: str) -> None:
    """The Loop passes its registry's specs with every request, a tool added between requests
    included; a Loop without tools sends none."""
    registry = ToolRegistry([add])
    wire = Wire(
        [
            (200, response(function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE))),
            (200, response(text("5"), response_id="resp-2")),
            (200, response(text("bare"), response_id="resp-3")),
        ]
    )
    model = model_for(flavour, wire)
    with_tools = Loop(model, tools=registry, listeners=[adding_after_a_tool(registry, mul)])
    assert (await run(with_tools, flavour, "2+3?")).output == "5"
    assert (await run(Loop(model), flavour, "hi")).output == "bare"
    first, second, bare = sent(wire)
    assert first["tools"] == [{"functionDeclarations": ToolRegistry([add]).specs("gemini")}]
    assert second["tools"] == [{"functionDeclarations": ToolRegistry([add, mul]).specs("gemini")}]
    assert "tools" not in bare


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("tools", "named"), [([lambda a: a], "<lambda>"), ({"1st": add}, "1st")])
def test_a_tool_name_gemini_refuses_is_refused_when_the_loop_is_made(
    flavour: str, stream: bool, tools: Any, named: str
) -> None:
    """``Loop(gemini_generate_content(...), tools=...)`` refuses a name Gemini would refuse,
    naming the tool and Gemini's rule, before any request; names Gemini takes and OpenAI does
    not (dots, colons) are taken."""
    wire = Wire([])
    with pytest.raises(
        ValueError,
        match=rf"^tool '{re.escape(named)}': Gemini refuses it as a tool name: a name must "
        r"match \^\[A-Za-z_\]\[A-Za-z0-9_\.:-\]\{0,127\}\$ ",
    ):
        Loop(model_for(flavour, wire, stream=stream), tools=tools)
    assert wire.requests == []
    assert Loop(model_for(flavour, wire, stream=stream), tools={"files.read:all": add})


def test_the_adapter_takes_no_tools() -> None:
    with pytest.raises(
        TypeError,
        match=r"^gemini_generate_content\(\) takes no tools=: the tools come from the Loop",
    ):
        gemini_generate_content(client(Wire([]), "sync"), MODEL, tools=[add])


@pytest.mark.parametrize("key", ["system_instruction", "automatic_function_calling"])
def test_the_adapter_refuses_what_it_sets_itself(key: str) -> None:
    with pytest.raises(TypeError, match=f"gemini_generate_content\\(\\) sets '{key}' itself"):
        gemini_generate_content(client(Wire([]), "sync"), MODEL, **{key: None})  # type: ignore[call-overload]


def test_a_config_field_the_sdk_lacks_fails_when_the_adapter_is_made() -> None:
    with pytest.raises(TypeError, match=r"gemini_generate_content\(\): .*'temprature'"):
        gemini_generate_content(client(Wire([]), "sync"), MODEL, temprature=0)


def test_the_adapter_refuses_a_stream_that_is_not_a_bool() -> None:
    with pytest.raises(TypeError, match="expected stream to be True or False, got None"):
        gemini_generate_content(client(Wire([]), "sync"), MODEL, stream=None)  # type: ignore[call-overload]


def test_the_adapter_checks_its_client_and_model_name() -> None:
    """Something without models.generate_content, or no model name, fails when the adapter is
    made; a Vertex AI client, which has it, is taken."""
    with pytest.raises(
        TypeError,
        match=r"^gemini_generate_content\(\) expected client to be a google-genai client "
        r"\(with client.models.generate_content\), got str$",
    ):
        gemini_generate_content("not a client", MODEL)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"expected model to be the provider's model name"):
        gemini_generate_content(client(Wire([]), "sync"), "")
    vertex = genai.Client(vertexai=True, api_key="AIza-test", http_options=http_options(Wire([])))
    assert callable(gemini_generate_content(vertex, MODEL))


def test_sync_client_sync_model_async_client_async_model() -> None:
    for stream in (False, True):
        sync = gemini_generate_content(client(Wire([]), "sync"), MODEL, stream=stream)
        asynchronous = gemini_generate_content(client(Wire([]), "async"), MODEL, stream=stream)
        assert not inspect.iscoroutinefunction(sync)
        assert inspect.iscoroutinefunction(asynchronous)


def test_without_the_sdk_the_import_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)
    monkeypatch.delitem(sys.modules, "agentloop.providers.google")
    with pytest.raises(ImportError, match=r"pip install 'agentloop-fsm\[google\]'"):
        importlib.import_module("agentloop.providers.google")


def test_an_async_client_under_the_synchronous_driver() -> None:
    """loop.run awaits an async client's model on the run's own event loop, tools and all."""
    registry = tools()
    wire = Wire(
        [
            (200, response(function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE))),
            (200, response(text("5"), response_id="resp-2")),
        ]
    )
    result = Loop(model_for("async", wire), tools=registry).run("2+3?")
    assert (result.status, result.output) == ("finished", "5")
    sent(wire, registry)


# -- end to end, through the engine --------------------------------------------------------------


async def test_a_call_then_a_final_through_the_loop(flavour: str) -> None:
    """The made id is the transcript's; the next request sends the call back with its
    signature and no id, answered by its function's output."""
    registry = tools()
    wire = Wire(
        [
            (200, response(function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE))),
            (200, response(text("2+3 is 5."), response_id="resp-2")),
        ]
    )
    result = await run(Loop(model_for(flavour, wire), tools=registry), flavour, "What is 2+3?")
    assert (result.status, result.output, result.steps, result.calls) == (
        "finished",
        "2+3 is 5.",
        2,
        1,
    )
    call = {
        "kind": "call",
        "id": "gemini_resp-1_0",
        "name": "add",
        "arguments": {"a": 2, "b": 3},
        "signature": SIGNATURE,
    }
    assert result.transcript == [
        {"kind": "user", "text": "What is 2+3?"},
        call,
        {
            "kind": "tool_result",
            "id": "gemini_resp-1_0",
            "name": "add",
            "status": "ok",
            "content": 5,
        },
        {"kind": "final", "text": "2+3 is 5."},
    ]
    assert_usage(result, 2)
    _, last = sent(wire, registry)
    assert last["contents"][1:] == [
        {
            "role": "model",
            "parts": [{**call_part("add", {"a": 2, "b": 3}), "thoughtSignature": SIGNATURE}],
        },
        {"role": "user", "parts": [response_part("add", {"output": 5})]},
    ]


async def test_parallel_calls_with_text_through_the_loop(flavour: str) -> None:
    """A batch with text runs both calls; the next request answers both in one user turn, in
    order, Gemini's own ids sent back where it gave them."""
    registry = tools()
    body = response(
        text("Both at once."),
        function_call("add", {"a": 2, "b": 3}, call_id="fc-1", signature=SIGNATURE),
        function_call("mul", {"a": 2, "b": 3}, call_id="fc-2"),
    )
    wire = Wire([(200, body), (200, response(text("5, 6."), response_id="resp-2"))])
    result = await run(Loop(model_for(flavour, wire), tools=registry), flavour, "2+3, 2*3?")
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "5, 6.", 2, 2)
    assert result.transcript[1] == {
        "kind": "calls",
        "calls": [
            {"id": "fc-1", "name": "add", "arguments": {"a": 2, "b": 3}, "signature": SIGNATURE},
            {"id": "fc-2", "name": "mul", "arguments": {"a": 2, "b": 3}},
        ],
        "text": "Both at once.",
    }
    assert_usage(result, 2)
    _, last = sent(wire, registry)
    assert last["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                text("Both at once."),
                {**call_part("add", {"a": 2, "b": 3}, "fc-1"), "thoughtSignature": SIGNATURE},
                call_part("mul", {"a": 2, "b": 3}, "fc-2"),
            ],
        },
        {
            "role": "user",
            "parts": [
                response_part("add", {"output": 5}, "fc-1"),
                response_part("mul", {"output": 6}, "fc-2"),
            ],
        },
    ]


async def test_a_denied_call_in_a_batch_through_the_loop(flavour: str) -> None:
    """One call of a batch denied by a policy: both are answered, the denial as an error."""
    registry = ToolRegistry(
        [add, mul],
        policy=lambda call: agentloop.deny("no") if call["name"] == "mul" else agentloop.allow(),
    )
    body = response(
        function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE),
        function_call("mul", {"a": 2, "b": 3}),
    )
    wire = Wire([(200, body), (200, response(text("5; mul was denied."), response_id="resp-2"))])
    result = await run(Loop(model_for(flavour, wire), tools=registry), flavour, "2+3, 2*3?")
    assert (result.status, result.steps, result.calls) == ("finished", 2, 2)
    assert [m.get("status") for m in result.transcript[2:4]] == ["ok", "denied"]
    _, last = sent(wire, registry)
    assert last["contents"][-1] == {
        "role": "user",
        "parts": [
            response_part("add", {"output": 5}),
            response_part("mul", {"error": "status: denied\nno"}),
        ],
    }


async def test_usage_reaching_max_total_tokens_through_the_loop(flavour: str) -> None:
    """Each reply reports 150 tokens; at 300 the run ends exhausted before a third request.
    Each response's own id makes its calls' ids: two calls, two ids."""
    registry = tools()
    wire = Wire(
        [
            (200, response(function_call("add", {"a": 1, "b": 1}, signature=SIGNATURE))),
            (200, response(function_call("add", {"a": 1, "b": 1}), response_id="resp-2")),
        ]
    )
    loop = Loop(model_for(flavour, wire), tools=registry, max_total_tokens=300)
    result = await run(loop, flavour, "Count.")
    assert (result.status, result.reason, result.steps, result.calls) == (
        "exhausted",
        "max_total_tokens",
        2,
        2,
    )
    assert [m.get("id") for m in result.transcript if m["kind"] == "call"] == [
        "gemini_resp-1_0",
        "gemini_resp-2_0",
    ]
    assert_usage(result, 2)
    assert len(sent(wire, registry)) == 2


async def test_a_cut_off_reply_fails_the_run(flavour: str) -> None:
    wire = Wire([(200, response(text("The answer"), finish="MAX_TOKENS"))])
    result = await run(Loop(model_for(flavour, wire), tools=tools()), flavour, "2+3?")
    assert (result.status, result.steps, result.calls) == ("failed", 1, 0)
    assert result.error == (
        "the model raised IncompleteReply: the reply was cut off at max_output_tokens"
    )
    assert_usage(result, 0, failed=1)  # the cut-off reply was billed


async def test_a_bad_key_fails_the_run_at_once(flavour: str) -> None:
    """A 400 is not retried by the Loop's default policy: one request, the SDK's error."""
    wire = Wire([(400, BAD_KEY)])
    result = await run(Loop(model_for(flavour, wire), tools=tools()), flavour, "2+3?")
    assert (result.status, result.steps) == ("failed", 1)
    assert result.error is not None
    assert result.error.startswith("the model raised ClientError: ")
    assert len(wire.requests) == 1


async def test_a_429_is_retried_after_its_retry_info_then_answered(flavour: str) -> None:
    """The Loop's policy waits what the RetryInfo asks for (within its cap), then the reply."""
    waits: list[float] = []
    wire = Wire(
        [
            (429, error(429, "RESOURCE_EXHAUSTED", "quota", RETRY_INFO), {}),
            (200, response(text("5"))),
        ]
    )
    policy = RetryPolicy(cap=60.0, sleep=lambda seconds, token: waits.append(seconds))
    result = await run(Loop(model_for(flavour, wire), retry=policy), flavour, "2+3?")
    assert (result.status, result.output, result.steps) == ("finished", "5", 2)
    assert (result.events[0].guard, result.events[0].wait) == ("retry_planned", 37.0)
    assert waits == [37.0]


async def test_a_vertex_ai_client_through_the_loop(flavour: str) -> None:
    """A Vertex AI client (express mode, an API key) is taken as it is: its own path, the same
    request and reply."""
    registry = tools()
    wire = Wire(
        [
            (200, response(function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE))),
            (200, response(text("5"), response_id="resp-2")),
        ]
    )
    vertex = genai.Client(vertexai=True, api_key="AIza-test", http_options=http_options(wire))
    model = gemini_generate_content(vertex if flavour == "sync" else vertex.aio, MODEL)
    result = await run(Loop(model, tools=registry), flavour, "2+3?")
    assert (result.status, result.output) == ("finished", "5")
    assert result.transcript[1]["signature"] == SIGNATURE
    for body in wire.requests:
        conforms(body)
        answered_next(body["contents"])
        signed(body["contents"])
    assert wire.paths == [f"/v1beta1/publishers/google/models/{MODEL}:generateContent"] * 2


# -- ids and signatures outlive the process: resume, replay, continue ----------------------------


def asking(call: Message) -> agentloop.Decision:
    return agentloop.ask("moves numbers") if call["name"] == "mul" else agentloop.allow()


def paused_wire() -> Wire:
    """A batch Gemini gave no ids (a person must approve ``mul``), then the final."""
    body = response(
        function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE),
        function_call("mul", {"a": 2, "b": 3}),
        response_id="Gx5f",
    )
    return Wire([(200, body)])


def after_the_pause() -> Wire:
    return Wire([(200, response(text("5 and 6."), response_id="Gx60"))])


MADE = ["gemini_Gx5f_0", "gemini_Gx5f_1"]


def resumed_request(wire: Wire) -> None:
    """The request after the pause: both calls as they came (the signature on the first), no id
    sent for either, both answered."""
    (body,) = sent(wire)
    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {**call_part("add", {"a": 2, "b": 3}), "thoughtSignature": SIGNATURE},
                call_part("mul", {"a": 2, "b": 3}),
            ],
        },
        {
            "role": "user",
            "parts": [response_part("add", {"output": 5}), response_part("mul", {"output": 6})],
        },
    ]


def made_ids(result: agentloop.RunResult) -> list[str]:
    return [c["id"] for m in result.transcript if m["kind"] == "calls" for c in m["calls"]]


async def test_made_ids_and_signatures_survive_a_saved_run_resumed_and_replayed(
    flavour: str, tmp_path: Any
) -> None:
    """A run paused for approval, saved and loaded (which replays its events), then resumed in
    a fresh Loop: the made ids and the signature are the record's, and the next request
    sends the signature and no id."""
    registry = ToolRegistry([add, mul], policy=asking)
    first = Loop(model_for(flavour, paused_wire()), tools=registry)
    paused = first.run("2+3, 2*3?") if flavour == "sync" else await first.arun("2+3, 2*3?")
    assert paused.status == "awaiting_approval"
    assert [p.call_id for p in paused.pending] == [MADE[1]]
    path = tmp_path / "run.json"
    agentloop.review.save_run(paused, path)
    loaded = agentloop.review.load_run(path)
    assert loaded == paused
    wire = after_the_pause()
    again = Loop(model_for(flavour, wire), tools=registry)
    decisions = {MADE[1]: loaded.pending[0].approve()}
    if flavour == "sync":
        done = again.resume(loaded, decisions=decisions)
    else:
        done = await again.aresume(loaded, decisions=decisions)
    assert (done.status, done.output) == ("finished", "5 and 6.")
    assert made_ids(done) == MADE
    assert done.transcript[1]["calls"][0]["signature"] == SIGNATURE
    resumed_request(wire)


async def test_made_ids_and_signatures_survive_a_durable_resume_in_a_new_loop(
    flavour: str, tmp_path: Any
) -> None:
    """The same through a ledger: a durable run pauses, a Loop made afresh resumes it by id."""
    registry = ToolRegistry([add, mul], policy=asking)
    with agentloop.ledger.SQLiteLedger(tmp_path / "runs.db") as ledger:
        first = Loop(model_for(flavour, paused_wire()), tools=registry, ledger=ledger)
        if flavour == "sync":
            paused = first.run("2+3, 2*3?", run_id="g-1")
        else:
            paused = await first.arun("2+3, 2*3?", run_id="g-1")
        assert paused.status == "awaiting_approval"
    with agentloop.ledger.SQLiteLedger(tmp_path / "runs.db") as ledger:
        wire = after_the_pause()
        again = Loop(model_for(flavour, wire), tools=registry, ledger=ledger)
        resume = again.resume if flavour == "sync" else again.aresume

        async def resumed(**decisions: Any) -> agentloop.RunResult:
            answer = resume("g-1", **decisions)
            return await answer if inspect.isawaitable(answer) else answer

        (pending,) = (await resumed()).pending
        done = await resumed(decisions={pending.call_id: pending.approve()})
        assert (done.status, made_ids(done)) == ("finished", MADE)
        assert await resumed() == done  # an ended run replays to itself
    resumed_request(wire)


async def test_a_run_continued_from_a_gemini_transcript_sends_no_made_id(flavour: str) -> None:
    """continue_run takes the old transcript as input: the calls keep their made ids and
    signatures, which the next request sends as they came."""
    registry = tools()
    wire = Wire([(200, response(function_call("add", {"a": 2, "b": 3}, signature=SIGNATURE)))])
    loop = Loop(model_for(flavour, wire), tools=registry, max_steps=1)
    cut = await run(loop, flavour, "2+3, then 2*3?")
    assert (cut.status, cut.reason) == ("exhausted", "max_steps")
    more = Wire([(200, response(text("5, 6."), response_id="resp-3"))])
    again = Loop(model_for(flavour, more), tools=registry)
    done = again.continue_run(cut) if flavour == "sync" else await again.acontinue_run(cut)
    assert (done.status, done.output) == ("finished", "5, 6.")
    assert done.transcript[: len(cut.transcript)] == cut.transcript
    (body,) = sent(more)
    assert body["contents"][1] == {
        "role": "model",
        "parts": [{**call_part("add", {"a": 2, "b": 3}), "thoughtSignature": SIGNATURE}],
    }


def test_the_public_names_are_documented() -> None:
    import agentloop.providers.google

    assert inspect.getdoc(agentloop.providers.google.gemini_generate_content)
    assert agentloop.providers.google.__all__ == ["SKIP_SIGNATURE", "gemini_generate_content"]
