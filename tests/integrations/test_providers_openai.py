"""agentloop.providers.openai through the real openai SDK over a mock transport (no network).

Both APIs (Chat Completions, Responses), both clients (sync, async). The
canned responses are OpenAI's documented wire format, checked against the
SDK's own response models; every request the SDK sends is kept and checked
against its own request types.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from collections.abc import Callable
from typing import Any

import attrs
import hypothesis
import openai
import pydantic
import pytest
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, completion_create_params
from openai.types.responses import Response, response_create_params

from agentloop import Loop, Tool, ToolRegistry
from agentloop.engine import SpecFormat
from agentloop.providers import IncompleteReply, UnreadableResponse
from agentloop.providers.openai import openai_chat, openai_responses
from tests.support.helpers import add, adding_after_a_tool, mul
from tests.support.wire import FLAVOURS, HISTORY, Wire, ask, assert_usage, conforms, run

Message = dict[str, Any]
Call = tuple[str, str, str]  # id, name, the arguments as the model wrote them


# -- OpenAI's wire format ------------------------------------------------------------------------

# prompt tokens, of which cached, and output tokens
USAGE = {"input_tokens": 120, "output_tokens": 30, "cached_tokens": 100}
ERROR = {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}}


def completion(
    *,
    text: str | None = None,
    calls: list[Call] = (),  # type: ignore[assignment]
    finish: str | None = None,
    refusal: str | None = None,
    usage: bool = True,
) -> Message:
    """A Chat Completions response body."""
    message: Message = {"role": "assistant", "content": text, "refusal": refusal, "annotations": []}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    body: Message = {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1_741_569_952,
        "model": "gpt-4.1-2025-04-14",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish or ("tool_calls" if calls else "stop"),
            }
        ],
        "service_tier": "default",
        "system_fingerprint": None,
    }
    if usage:
        body["usage"] = {
            "prompt_tokens": 120,
            "completion_tokens": 30,
            "total_tokens": 150,
            "prompt_tokens_details": {"cached_tokens": 100, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
    return body


def response(
    *,
    text: str | None = None,
    calls: list[Call] = (),  # type: ignore[assignment]
    finish: str | None = None,
    refusal: str | None = None,
    usage: bool = True,
) -> Message:
    """A Responses API response body; ``finish`` is an ``incomplete_details.reason``."""
    output: list[Message] = []
    if text is not None or refusal is not None:
        part: Message = (
            {"type": "refusal", "refusal": refusal}
            if refusal is not None
            else {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        )
        output.append(
            {
                "type": "message",
                "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c4b8bbb4",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    output.extend(
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": i,
            "name": n,
            "arguments": a,
            "status": "completed",
        }
        for i, n, a in calls
    )
    body: Message = {
        "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c4b8bbb4",
        "object": "response",
        "created_at": 1_741_476_777,
        "status": "incomplete" if finish else "completed",
        "error": None,
        "incomplete_details": {"reason": finish} if finish else None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "gpt-4.1-2025-04-14",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "user": None,
        "metadata": {},
    }
    if usage:
        body["usage"] = {
            "input_tokens": 120,
            "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 0},
            "output_tokens": 30,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 150,
        }
    return body


@attrs.frozen
class Api:
    """One of the two OpenAI APIs, as the tests use it."""

    name: str
    adapter: Callable[..., Any]
    answer: Callable[..., Message]
    parsed: type[pydantic.BaseModel]
    params: pydantic.TypeAdapter[Any]
    specs: SpecFormat
    path: str
    turns: str  # the request key that holds the history
    cut_off: str  # the finish that means the output limit was reached
    cut_off_error: str

    def __str__(self) -> str:
        return self.name


CHAT = Api(
    "chat",
    openai_chat,
    completion,
    ChatCompletion,
    pydantic.TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming),
    "openai",
    "/v1/chat/completions",
    "messages",
    "length",
    "the reply was cut off at the output limit (finish_reason 'length')",
)
RESPONSES = Api(
    "responses",
    openai_responses,
    response,
    Response,
    pydantic.TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming),
    "openai-responses",
    "/v1/responses",
    "input",
    "max_output_tokens",
    "the reply was cut off at max_output_tokens",
)


@pytest.fixture(params=[CHAT, RESPONSES], ids=str)
def api(request: pytest.FixtureRequest) -> Api:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def client(wire: Wire, flavour: str, max_retries: int = 2) -> Any:
    """The SDK's own client, talking to ``wire``."""
    settings: Any = {"api_key": "sk-test", "base_url": "https://api.openai.test/v1"}
    if flavour == "sync":
        return openai.OpenAI(**settings, max_retries=max_retries, http_client=wire.sync_client())
    return openai.AsyncOpenAI(**settings, max_retries=max_retries, http_client=wire.async_client())


def model_for(api: Api, flavour: str, wire: Wire, **params: Any) -> Any:
    retries = params.pop("max_retries", 2)
    return api.adapter(client(wire, flavour, retries), "gpt-4.1", **params)


def tools() -> ToolRegistry:
    return ToolRegistry([add, mul])


def answered_before_next_turn(api: Api, turns: list[Message]) -> None:
    """Every tool call in a request is answered, by id, before the next turn of anything else."""
    pending: list[str] = []
    for turn in turns:
        if api is CHAT:
            called = [c["id"] for c in turn.get("tool_calls", ())]
            answered = turn.get("tool_call_id") if turn["role"] == "tool" else None
        else:
            called = [turn["call_id"]] if turn.get("type") == "function_call" else []
            answered = turn["call_id"] if turn.get("type") == "function_call_output" else None
        if answered is not None:
            assert answered == pending.pop(0), turns
        elif called and api is RESPONSES:
            pending += called
        else:
            assert pending == [], f"{pending} unanswered before {turn}"
            pending = called
    assert pending == []


def sent(api: Api, wire: Wire, registry: ToolRegistry | None = None) -> list[list[Message]]:
    """Check every request the SDK sent; return each one's turns."""
    for body in wire.requests:
        conforms(body, api.params)
        answered_before_next_turn(api, body[api.turns])
        assert body["model"] == "gpt-4.1"
        if registry is not None:
            assert body["tools"] == registry.specs(api.specs)
    assert wire.paths == [api.path] * len(wire.requests)
    return [body[api.turns] for body in wire.requests]


USER = [{"kind": "user", "text": "What is 2+3, and 2*3?"}]


# -- the canned bodies are what the SDK parses ---------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"calls": [("call_1", "add", "{}")]},
        {"text": "I'll add.", "calls": [("call_1", "add", "{}"), ("call_2", "mul", "{}")]},
        {"text": "5"},
        {"text": "5", "finish": "length"},
        {"refusal": "I can't help with that."},
        {"text": "", "usage": False},
    ],
)
def test_canned_bodies_are_valid_responses(api: Api, kwargs: Message) -> None:
    """Each canned body validates as the SDK's response model, strictly parsed."""
    if api is RESPONSES and kwargs.get("finish"):
        kwargs = {**kwargs, "finish": "max_output_tokens"}
    api.parsed.model_validate(api.answer(**kwargs))


# -- response to reply ---------------------------------------------------------------------------


async def test_a_single_call(api: Api, flavour: str) -> None:
    """One tool call is a ``call`` with its id unchanged, parsed arguments and the usage."""
    wire = Wire([(200, api.answer(calls=[("call_1", "add", '{"a": 2, "b": 3}')]))])
    registry = tools()
    reply = await ask(model_for(api, flavour, wire), USER, registry)
    assert reply == {
        "kind": "call",
        "id": "call_1",
        "name": "add",
        "arguments": {"a": 2, "b": 3},
        "usage": USAGE,
    }
    (turns,) = sent(api, wire, registry)
    assert turns == [{"role": "user", "content": "What is 2+3, and 2*3?"}]


async def test_parallel_calls(api: Api, flavour: str) -> None:
    """Several tool calls are one ``calls`` batch, in the model's order, with no text."""
    calls = [("call_1", "add", '{"a": 2, "b": 3}'), ("call_2", "mul", '{"a": 2, "b": 3}')]
    wire = Wire([(200, api.answer(calls=calls))])
    reply = await ask(model_for(api, flavour, wire), USER, tools())
    assert reply == {
        "kind": "calls",
        "calls": [
            {"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}},
            {"id": "call_2", "name": "mul", "arguments": {"a": 2, "b": 3}},
        ],
        "usage": USAGE,
    }


async def test_text_beside_a_call(api: Api, flavour: str) -> None:
    """Text beside even one call makes a ``calls`` batch that keeps the text."""
    wire = Wire([(200, api.answer(text="Adding first.", calls=[("call_1", "add", '{"a": 1}')]))])
    reply = await ask(model_for(api, flavour, wire), USER, tools())
    assert reply == {
        "kind": "calls",
        "calls": [{"id": "call_1", "name": "add", "arguments": {"a": 1}}],
        "text": "Adding first.",
        "usage": USAGE,
    }


async def test_a_final(api: Api, flavour: str) -> None:
    """Text alone is a ``final``."""
    wire = Wire([(200, api.answer(text="5 and 6."))])
    reply = await ask(model_for(api, flavour, wire), USER, tools())
    assert reply == {"kind": "final", "text": "5 and 6.", "usage": USAGE}


async def test_no_usage_in_the_response_means_none_in_the_reply(api: Api, flavour: str) -> None:
    """``usage`` is optional on the wire (compatible servers leave it out): then no key."""
    body = api.answer(text="5")
    del body["usage"]
    reply = await ask(model_for(api, flavour, Wire([(200, body)])), USER)
    assert reply == {"kind": "final", "text": "5"}


async def test_chat_usage_without_cache_details(flavour: str) -> None:
    """No ``prompt_tokens_details`` (older models, compatible servers): nothing was cached."""
    body = completion(text="5")
    body["usage"]["prompt_tokens_details"] = None
    reply = await ask(model_for(CHAT, flavour, Wire([(200, body)])), USER)
    assert reply["usage"] == {"input_tokens": 120, "output_tokens": 30, "cached_tokens": 0}


@pytest.mark.parametrize(
    "raw",
    ['{"a": 2, "b":', '{"a": 2 "b": 3}', "[2, 3]", "null"],
    ids=["truncated", "invalid", "array", "null"],
)
async def test_arguments_that_are_not_an_object_then_the_corrected_call(
    api: Api, flavour: str, raw: str
) -> None:
    """Arguments that are not a JSON object arrive as the raw text; the registry answers
    invalid_arguments with the parse error; the raw text goes back unchanged with that result,
    and the model's corrected call is a plain call."""
    registry = tools()
    wire = Wire(
        [
            (200, api.answer(calls=[("call_1", "add", raw)])),
            (200, api.answer(calls=[("call_2", "add", '{"a": 2, "b": 3}')])),
        ]
    )
    model = model_for(api, flavour, wire)
    first = await ask(model, USER, registry)
    assert first["arguments"] == raw
    del first["usage"]
    outcome = registry.dispatch(first)
    assert outcome["status"] == "invalid_arguments"
    assert "expected the arguments to be a JSON object" in outcome["content"][0]["message"]
    result = {"kind": "tool_result", "id": "call_1", "name": "add", **outcome}
    second = await ask(model, [*USER, first, result], registry)
    assert second["arguments"] == {"a": 2, "b": 3}
    _, turns = sent(api, wire, registry)
    if api is CHAT:
        assert turns[1]["tool_calls"][0]["function"]["arguments"] == raw
        answer = turns[2]["content"]
    else:
        assert turns[1]["arguments"] == raw
        answer = turns[2]["output"]
    assert answer.startswith("status: invalid_arguments\n[")
    assert "expected the arguments to be a JSON object" in answer


async def test_empty_arguments_are_no_arguments(flavour: str) -> None:
    """``""`` (what some compatible servers send for a tool without parameters) is ``{}``."""
    wire = Wire([(200, completion(calls=[("call_1", "ping", "")]))])
    reply = await ask(model_for(CHAT, flavour, wire), USER)
    assert reply["arguments"] == {}


async def test_a_reply_cut_off_at_the_output_limit(api: Api, flavour: str) -> None:
    """Cut off by the output limit, even with a call in it: never a reply."""
    body = api.answer(text="The answer is", calls=[("call_1", "add", '{"a"')], finish=api.cut_off)
    with pytest.raises(IncompleteReply) as caught:
        await ask(model_for(api, flavour, Wire([(200, body)])), USER)
    assert str(caught.value) == api.cut_off_error


async def test_a_reply_withheld_by_the_content_filter(api: Api, flavour: str) -> None:
    finish = "content_filter"
    with pytest.raises(IncompleteReply, match="content filter"):
        await ask(model_for(api, flavour, Wire([(200, api.answer(text="", finish=finish))])), USER)


async def test_a_refusal(api: Api, flavour: str) -> None:
    """A refusal is never a final answer: it names the refusal."""
    body = api.answer(refusal="I can't help with that.")
    with pytest.raises(IncompleteReply) as caught:
        await ask(model_for(api, flavour, Wire([(200, body)])), USER)
    assert str(caught.value) == "the model refused: I can't help with that."


async def test_an_empty_reply(api: Api, flavour: str) -> None:
    """No text and no calls is never an empty final."""
    with pytest.raises(IncompleteReply) as caught:
        await ask(model_for(api, flavour, Wire([(200, api.answer(text=""))])), USER)
    assert str(caught.value) == "the reply was empty: no text and no tool calls"


async def test_a_failed_response(flavour: str) -> None:
    """A Responses API response that is not completed (nor incomplete) names its status."""
    body = response(text="")
    body["status"] = "failed"
    body["error"] = {"code": "server_error", "message": "The model failed."}
    with pytest.raises(IncompleteReply) as caught:
        await ask(model_for(RESPONSES, flavour, Wire([(200, body)])), USER)
    assert str(caught.value) == "the response is failed: server_error: The model failed."


# -- errors and retries --------------------------------------------------------------------------


async def test_a_429_is_retried_by_the_sdk(api: Api, flavour: str) -> None:
    """The SDK's own retry answers a rate limit; the same request is sent again."""
    wire = Wire([(429, ERROR), (200, api.answer(text="5"))])
    reply = await ask(model_for(api, flavour, wire), USER, tools())
    assert reply["kind"] == "final"
    first, second = sent(api, wire)
    assert first == second


async def test_a_500_after_the_retries_propagates(api: Api, flavour: str) -> None:
    """A server error that outlasts the SDK's retries is the SDK's own exception."""
    wire = Wire([(500, ERROR)] * 3)
    with pytest.raises(openai.InternalServerError):
        await ask(model_for(api, flavour, wire, max_retries=2), USER)
    assert len(wire.requests) == 3


async def test_a_401_is_not_retried(api: Api, flavour: str) -> None:
    error = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
    wire = Wire([(401, error)])
    with pytest.raises(openai.AuthenticationError):
        await ask(model_for(api, flavour, wire), USER)
    assert len(wire.requests) == 1


HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
NOT_JSON = [
    (HTML, {"content-type": "text/html"}, "content-type text/html", repr(HTML.decode())),
    (HTML, {"content-type": "application/json"}, "content-type application/json", "'<html>"),
    (b"", {}, "", "''"),
    (b"x" * 500, {"content-type": "text/plain"}, "content-type text/plain", repr("x" * 200)),
]


@pytest.mark.parametrize(("body", "headers", "kind", "quoted"), NOT_JSON)
async def test_a_body_that_is_not_json_fails_the_run_saying_so(
    api: Api, flavour: str, body: bytes, headers: dict[str, str], kind: str, quoted: str
) -> None:
    """A 200 whose body is not JSON (a proxy's page at a wrong base_url): the run fails
    with what came, its status, content type, URL and start (200 characters at most), not a
    parser's "Expecting value"; it is asked once, not retried (nothing says it will pass)."""
    wire = Wire([(200, body, headers)])
    result = await run(Loop(model_for(api, flavour, wire)), flavour, "2+3?")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 1, 1)
    said = f"HTTP 200, {kind}, from" if kind else "HTTP 200, from"
    assert result.error is not None
    assert result.error.startswith(
        "the model raised UnreadableResponse: the provider's response was not JSON "
        f"({said} https://api.openai.test{api.path}): {quoted}"
    )
    assert result.error.endswith("; check that the client's base_url is the provider's API")
    unread = result.events[0].exception
    assert isinstance(unread, UnreadableResponse)
    assert (unread.status, unread.url) == (200, f"https://api.openai.test{api.path}")


async def test_json_of_another_shape_is_not_called_not_json(api: Api, flavour: str) -> None:
    """A body that is JSON, but not a response, fails otherwise: "not JSON" only when so."""
    wire = Wire([(200, b'{"detail": "not here"}', {"content-type": "application/json"})])
    result = await run(Loop(model_for(api, flavour, wire)), flavour, "2+3?")
    assert result.status == "failed"
    assert result.error is not None
    assert "UnreadableResponse" not in result.error


# -- history to request --------------------------------------------------------------------------


async def test_a_system_message(api: Api, flavour: str) -> None:
    """``system`` is a system message, in its place."""
    wire = Wire([(200, api.answer(text="Hi."))])
    history = [{"kind": "system", "text": "Be brief."}, {"kind": "user", "text": "Hello"}]
    await ask(model_for(api, flavour, wire), history)
    ((system, user),) = sent(api, wire)
    assert system == {"role": "system", "content": "Be brief."}
    assert user == {"role": "user", "content": "Hello"}


def chat_call(call_id: str, name: str, arguments: str) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CHAT_TURNS: list[Message] = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "2+3, 2*3?"},
    {
        "role": "assistant",
        "content": "Both at once.",
        "tool_calls": [
            chat_call("call_1", "add", '{"a":2,"b":3}'),
            chat_call("call_2", "mul", '{"a":2,"b":3}'),
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    {"role": "tool", "tool_call_id": "call_2", "content": "status: denied\nno"},
    {"role": "assistant", "tool_calls": [chat_call("call_3", "mul", '{"a": 2,')]},
    {
        "role": "tool",
        "tool_call_id": "call_3",
        "content": 'status: invalid_arguments\n[{"path":"","message":"not JSON"}]',
    },
    {"role": "assistant", "tool_calls": [chat_call("call_4", "nope", "{}")]},
    {"role": "tool", "tool_call_id": "call_4", "content": "status: unknown_tool\nx"},
    {"role": "assistant", "tool_calls": [chat_call("call_5", "add", '{"a":1,"b":1}')]},
    {
        "role": "tool",
        "tool_call_id": "call_5",
        "content": 'status: error\n{"type":"ValueError","message":"bad"}',
    },
    {"role": "assistant", "tool_calls": [chat_call("call_6", "add", '{"a":1,"b":1}')]},
    {"role": "tool", "tool_call_id": "call_6", "content": "status: cancelled\nc"},
    {"role": "assistant", "content": "5, and 6 was denied."},
    {"role": "user", "content": "Thanks. Once more?"},
]


def function_call(call_id: str, name: str, arguments: str) -> Message:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output(call_id: str, text: str) -> Message:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


RESPONSES_TURNS: list[Message] = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "2+3, 2*3?"},
    {"role": "assistant", "content": "Both at once."},
    function_call("call_1", "add", '{"a":2,"b":3}'),
    function_call("call_2", "mul", '{"a":2,"b":3}'),
    output("call_1", "5"),
    output("call_2", "status: denied\nno"),
    function_call("call_3", "mul", '{"a": 2,'),
    output("call_3", 'status: invalid_arguments\n[{"path":"","message":"not JSON"}]'),
    function_call("call_4", "nope", "{}"),
    output("call_4", "status: unknown_tool\nx"),
    function_call("call_5", "add", '{"a":1,"b":1}'),
    output("call_5", 'status: error\n{"type":"ValueError","message":"bad"}'),
    function_call("call_6", "add", '{"a":1,"b":1}'),
    output("call_6", "status: cancelled\nc"),
    {"role": "assistant", "content": "5, and 6 was denied."},
    {"role": "user", "content": "Thanks. Once more?"},
]


async def test_a_multi_turn_history_passed_back_in(api: Api, flavour: str) -> None:
    """A whole history, every kind and status, becomes the request message by message."""
    wire = Wire([(200, api.answer(text="Sure."))])
    await ask(model_for(api, flavour, wire), HISTORY, tools())
    (turns,) = sent(api, wire, tools())
    assert turns == (CHAT_TURNS if api is CHAT else RESPONSES_TURNS)


async def test_an_unknown_kind_is_named(api: Api, flavour: str) -> None:
    wire = Wire([])
    with pytest.raises(ValueError, match=r"history\[1\]: expected kind to be one of .*got 'note'"):
        await ask(model_for(api, flavour, wire), [*USER, {"kind": "note", "text": "x"}])
    assert wire.requests == []


# -- the adapter ---------------------------------------------------------------------------------


async def test_parameters_pass_through_and_tools_are_the_specs_given(
    api: Api, flavour: str
) -> None:
    """Extra parameters go into every request; the neutral specs given with a request go out in
    OpenAI's format, as the registry makes it; no specs, or none at all, send no ``tools``."""
    registry = ToolRegistry([add, mul])
    wire = Wire([(200, api.answer(text="ok"))] * 3)
    model = model_for(api, flavour, wire, temperature=0, parallel_tool_calls=False)
    await ask(model, USER, registry)
    await ask(model, USER, ToolRegistry())
    await ask(model, USER)
    given, empty, bare = wire.requests
    assert given["temperature"] == 0
    assert given["parallel_tool_calls"] is False
    assert given["tools"] == registry.specs(api.specs)
    assert "tools" not in empty
    assert "tools" not in bare
    sent(api, wire)


async def test_a_run_sends_the_loops_tools_and_a_run_without_tools_none(
    api: Api, flavour: str
) -> None:
    """The Loop passes its registry's specs with every request, a tool added between requests
    included; a Loop without tools sends no ``tools``."""
    registry = ToolRegistry([add])
    wire = Wire(
        [
            (200, api.answer(calls=[("call_1", "add", '{"a": 2, "b": 3}')])),
            (200, api.answer(text="5")),
            (200, api.answer(text="bare")),
        ]
    )
    model = model_for(api, flavour, wire)

    with_tools = Loop(model, tools=registry, listeners=[adding_after_a_tool(registry, mul)])
    assert (await run(with_tools, flavour, "2+3?")).output == "5"
    assert (await run(Loop(model), flavour, "hi")).output == "bare"
    first, second, bare = wire.requests
    assert first["tools"] == ToolRegistry([add]).specs(api.specs)
    assert second["tools"] == ToolRegistry([add, mul]).specs(api.specs)
    assert "tools" not in bare
    sent(api, wire)


def test_the_adapter_refuses_what_it_sets_itself(api: Api) -> None:
    key = "messages" if api is CHAT else "input"
    with pytest.raises(TypeError, match=f"sets '{key}' itself; it is the history"):
        api.adapter(client(Wire([]), "sync"), "gpt-4.1", **{key: []})
    with pytest.raises(TypeError, match="expected stream to be True or False, got 'yes'"):
        api.adapter(client(Wire([]), "sync"), "gpt-4.1", stream="yes")
    if api is not CHAT:  # server-side state would repeat the history the adapter sends
        for name in ("previous_response_id", "conversation", "instructions"):
            with pytest.raises(TypeError, match=f"sets '{name}' itself; "):
                api.adapter(client(Wire([]), "sync"), "gpt-4.1", **{name: "x"})


def test_the_adapter_checks_its_client_and_model_name(api: Api) -> None:
    """A client without the method the adapter calls (another SDK's), or no model name,
    fails when the adapter is made; Azure's client, which has the method, is taken."""
    name = f"openai_{api.name}"
    create = "chat.completions.create" if api is CHAT else "responses.create"
    wrongs: list[Any] = ["not a client", pytest.importorskip("anthropic").Anthropic(api_key="x")]
    for wrong in wrongs:
        with pytest.raises(
            TypeError,
            match=rf"^{name}\(\) expected client to be an OpenAI client \(with client.{create}\), "
            f"got {type(wrong).__name__}$",
        ):
            api.adapter(wrong, "gpt-4.1")
    for model in (None, ""):
        with pytest.raises(TypeError, match=rf"^{name}\(\) expected model to be the provider's"):
            api.adapter(client(Wire([]), "sync"), model)
    azure = openai.AzureOpenAI(
        api_key="x", api_version="2024-06-01", azure_endpoint="https://x.openai.azure.com"
    )
    assert callable(api.adapter(azure, "gpt-4.1"))


def test_the_adapter_takes_no_tools(api: Api) -> None:
    """tools= given to the adapter is refused: they come from the Loop."""
    name = f"openai_{api.name}"
    for given in (tools(), {"add": add}):
        with pytest.raises(
            TypeError,
            match=rf"^{name}\(\) takes no tools=: the tools come from the Loop, which passes "
            r"its registry's specs with every request \(Loop\(model, tools=registry\)\)$",
        ):
            api.adapter(client(Wire([]), "sync"), "gpt-4.1", tools=given)


def test_a_parameter_the_sdk_lacks_fails_when_the_adapter_is_made(api: Api) -> None:
    with pytest.raises(TypeError, match=f"openai_{api.name}\\(\\): .*'temprature'"):
        api.adapter(client(Wire([]), "sync"), "gpt-4.1", temprature=0)


OPENAI_RULE = (
    r"OpenAI refuses it as a tool name: a name must match \^\[a-zA-Z0-9_-\]\{1,64\}\$ "
    r"\(letters, digits, '_' and '-', 1 to 64 of them\); give the tool a name= that does"
)


@pytest.mark.parametrize(
    ("tools", "named"),
    [
        ([lambda a: a], "tool '<lambda>': "),
        ({"get weather": add}, "tool 'get weather': "),
        ({"x" * 65: add}, "tool 'x{65}': "),
    ],
)
def test_a_tool_name_openai_refuses_is_refused_when_the_loop_is_made(
    api: Api, flavour: str, tools: Any, named: str
) -> None:
    """``Loop(adapter, tools=...)`` refuses a name OpenAI would refuse, naming the tool and
    the provider's rule, rather than a run failing at its first step as the model's fault."""
    wire = Wire([])
    with pytest.raises(ValueError, match=f"^{named}{OPENAI_RULE}"):
        Loop(model_for(api, flavour, wire), tools=tools)
    assert wire.requests == []


NAMES = st.text(st.sampled_from("aZ09_- .<>/é"), max_size=70) | st.from_regex(
    r"[a-zA-Z0-9_-]{1,64}", fullmatch=True
)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(name=NAMES.filter(bool))  # a Tool refuses an empty name itself
def test_the_loop_refuses_exactly_the_names_openai_refuses(name: str) -> None:
    """For any name: the Loop refuses it exactly when OpenAI's rule does (naming the tool), and
    a name it takes is one each API's specs are made with, as they go on the wire."""
    wire, tool = Wire([]), Tool(add, name=name)
    fits = re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) is not None
    for api in (CHAT, RESPONSES):
        if fits:
            Loop(model_for(api, "sync", wire), tools=[tool])
            assert ToolRegistry([tool]).specs(api.specs)  # made for the request as it is
            continue
        refused = f"^tool {re.escape(repr(name))}: OpenAI refuses it as a tool name"
        with pytest.raises(ValueError, match=refused):
            Loop(model_for(api, "sync", wire), tools=[tool])
    assert wire.requests == []


async def test_a_tool_added_since_the_loop_was_made_is_refused_when_a_run_begins(
    api: Api, flavour: str
) -> None:
    """A registry the Loop holds may gain tools (an MCP server's, on ``with loop:``): a run
    begun with one OpenAI refuses is refused as it begins, before any request."""
    wire = Wire([])
    registry = tools()
    loop = Loop(model_for(api, flavour, wire), tools=registry)
    registry.add(Tool(mul, name="mul two"))
    with pytest.raises(ValueError, match=f"^tool 'mul two': {OPENAI_RULE}, say name='mul_two'$"):
        await run(loop, flavour, "2*3?")
    assert wire.requests == []


async def test_a_dispatcher_s_name_openai_refuses_fails_the_step_before_a_request(
    api: Api, flavour: str
) -> None:
    """A dispatcher of one's own lists its tools with each request (``specs()``): a name OpenAI
    would refuse fails that step, saying what to do, and nothing is sent."""

    class Desk:
        def specs(self) -> list[Message]:
            return [{"name": "not a name", "description": "", "parameters": {"type": "object"}}]

        def dispatch(self, call: Message) -> Message:
            return {"status": "ok", "content": 1}

    wire = Wire([])
    result = await run(Loop(model_for(api, flavour, wire), tools=Desk()), flavour, "2+3?")
    assert result.status == "failed"
    assert result.error is not None
    assert re.fullmatch(
        f"the model raised ValueError: tool 'not a name': {OPENAI_RULE}, say name='not_a_name'",
        result.error,
    )
    assert wire.requests == []


async def test_specs_not_in_the_neutral_format_are_named(api: Api, flavour: str) -> None:
    """Specs that are not {'name', 'description', 'parameters'} fail the step, naming which."""
    wire = Wire([])
    with pytest.raises(TypeError, match=r"^tools\[2\]: expected a spec \{'name', 'description', "):
        await ask_with(model_for(api, flavour, wire), [*tools().specs(), {"name": "x"}])
    assert wire.requests == []


async def ask_with(model: Any, specs: list[Message]) -> Any:
    """One step given ``specs`` as they are."""
    reply = model(USER, tools=specs)
    return await reply if inspect.isawaitable(reply) else reply


def test_an_async_client_under_the_synchronous_driver() -> None:
    """loop.run awaits an async client's model on the run's own event loop, tools and all."""
    registry = tools()
    wire = Wire(
        [
            (200, completion(calls=[("call_1", "add", '{"a": 2, "b": 3}')])),
            (200, completion(text="5")),
        ]
    )
    result = Loop(model_for(CHAT, "async", wire), tools=registry).run("2+3?")
    assert (result.status, result.output) == ("finished", "5")
    sent(CHAT, wire, registry)


def test_sync_client_sync_model_async_client_async_model(api: Api) -> None:
    """The async client gives an ``async def`` model, which either driver awaits."""
    assert not inspect.iscoroutinefunction(api.adapter(client(Wire([]), "sync"), "m"))
    assert inspect.iscoroutinefunction(api.adapter(client(Wire([]), "async"), "m"))


def test_without_the_sdk_the_import_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.delitem(sys.modules, "agentloop.providers.openai")
    with pytest.raises(ImportError, match=r"pip install 'agentloop-fsm\[openai\]'"):
        importlib.import_module("agentloop.providers.openai")


# -- end to end, through the engine --------------------------------------------------------------


async def test_a_call_then_a_final_through_the_loop(api: Api, flavour: str) -> None:
    """The real registry runs the call; its result goes back; the final ends the run."""
    registry = tools()
    wire = Wire(
        [
            (200, api.answer(calls=[("call_1", "add", '{"a": 2, "b": 3}')])),
            (200, api.answer(text="2+3 is 5.")),
        ]
    )
    loop = Loop(model_for(api, flavour, wire), tools=registry)
    result = await run(loop, flavour, "What is 2+3?")
    assert (result.status, result.output, result.steps, result.calls) == (
        "finished",
        "2+3 is 5.",
        2,
        1,
    )
    assert result.transcript == [
        {"kind": "user", "text": "What is 2+3?"},
        {"kind": "call", "id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}},
        {"kind": "tool_result", "id": "call_1", "name": "add", "status": "ok", "content": 5},
        {"kind": "final", "text": "2+3 is 5."},
    ]
    assert_usage(result, 2)
    _, turns = sent(api, wire, registry)
    assert turns[-1] == (
        {"role": "tool", "tool_call_id": "call_1", "content": "5"}
        if api is CHAT
        else output("call_1", "5")
    )


async def test_a_cut_off_reply_fails_the_run(api: Api, flavour: str) -> None:
    registry = tools()
    wire = Wire([(200, api.answer(text="The answer", finish=api.cut_off))])
    loop = Loop(model_for(api, flavour, wire), tools=registry)
    result = await run(loop, flavour, "What is 2+3?")
    assert (result.status, result.steps, result.calls) == ("failed", 1, 0)
    assert result.error == f"the model raised IncompleteReply: {api.cut_off_error}"
    assert result.transcript == [{"kind": "user", "text": "What is 2+3?"}]
    assert_usage(result, 0, failed=1)  # the cut-off reply was billed


async def test_a_500_after_retries_fails_the_run(api: Api, flavour: str) -> None:
    registry = tools()
    wire = Wire([(500, ERROR)] * 2)
    # retry=None: only the SDK's own retries (the Loop's are on by default for adapters).
    loop = Loop(model_for(api, flavour, wire, max_retries=1), tools=registry, retry=None)
    result = await run(loop, flavour, "What is 2+3?")
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("the model raised InternalServerError: ")
    assert len(wire.requests) == 2  # the 500, and the SDK's one retry of it


async def test_parallel_calls_with_text_through_the_loop(api: Api, flavour: str) -> None:
    """A batch with text runs both calls; the batch and both results are in the transcript,
    and the next request answers both calls, in order, before anything else."""
    registry = tools()
    calls = [("call_1", "add", '{"a": 2, "b": 3}'), ("call_2", "mul", '{"a": 2, "b": 3}')]
    wire = Wire(
        [(200, api.answer(text="Both at once.", calls=calls)), (200, api.answer(text="5, 6."))]
    )
    loop = Loop(model_for(api, flavour, wire), tools=registry)
    result = await run(loop, flavour, "2+3, 2*3?")
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "5, 6.", 2, 2)
    assert result.transcript == [
        {"kind": "user", "text": "2+3, 2*3?"},
        {
            "kind": "calls",
            "calls": [
                {"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}},
                {"id": "call_2", "name": "mul", "arguments": {"a": 2, "b": 3}},
            ],
            "text": "Both at once.",
        },
        {"kind": "tool_result", "id": "call_1", "name": "add", "status": "ok", "content": 5},
        {"kind": "tool_result", "id": "call_2", "name": "mul", "status": "ok", "content": 6},
        {"kind": "final", "text": "5, 6."},
    ]
    assert_usage(result, 2)
    _, turns = sent(api, wire, registry)
    if api is CHAT:
        assert [t.get("tool_call_id") for t in turns[2:]] == ["call_1", "call_2"]
    else:
        assert [t.get("call_id") for t in turns[4:]] == ["call_1", "call_2"]
        assert [t["type"] for t in turns[4:]] == ["function_call_output"] * 2


async def test_invalid_arguments_then_the_corrected_call_through_the_loop(
    api: Api, flavour: str
) -> None:
    """Truncated argument JSON is an accepted, counted call answered invalid_arguments; the
    model sees why and corrects itself; the run finishes."""
    registry = tools()
    wire = Wire(
        [
            (200, api.answer(calls=[("call_1", "add", '{"a": 2, "b":')])),
            (200, api.answer(calls=[("call_2", "add", '{"a": 2, "b": 3}')])),
            (200, api.answer(text="5.")),
        ]
    )
    loop = Loop(model_for(api, flavour, wire), tools=registry)
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.steps, result.calls) == ("finished", 3, 2)
    assert [m["kind"] for m in result.transcript] == [
        "user",
        "call",
        "tool_result",
        "call",
        "tool_result",
        "final",
    ]
    assert result.transcript[1]["arguments"] == '{"a": 2, "b":'
    assert result.transcript[2]["status"] == "invalid_arguments"
    assert result.transcript[4] == {
        "kind": "tool_result",
        "id": "call_2",
        "name": "add",
        "status": "ok",
        "content": 5,
    }
    assert_usage(result, 3)
    sent(api, wire, registry)


async def test_usage_reaching_max_total_tokens_through_the_loop(api: Api, flavour: str) -> None:
    """Each reply reports 150 tokens; at 300 the run ends exhausted before a third request."""
    registry = tools()
    wire = Wire(
        [
            (200, api.answer(calls=[("call_1", "add", '{"a": 1, "b": 1}')])),
            (200, api.answer(calls=[("call_2", "add", '{"a": 2, "b": 2}')])),
        ]
    )
    loop = Loop(model_for(api, flavour, wire), tools=registry, max_total_tokens=300)
    result = await run(loop, flavour, "Count.")
    assert (result.status, result.reason, result.steps, result.calls) == (
        "exhausted",
        "max_total_tokens",
        2,
        2,
    )
    assert [m["kind"] for m in result.transcript] == ["user", *["call", "tool_result"] * 2]
    assert_usage(result, 2)
    assert len(sent(api, wire, registry)) == 2


def test_the_public_names_are_documented() -> None:
    """What ``agentloop.providers`` and its OpenAI module export exists and has a docstring."""
    import agentloop.providers
    import agentloop.providers.openai

    for module in (agentloop.providers, agentloop.providers.openai):
        for name in module.__all__:
            assert inspect.getdoc(getattr(module, name)), name
    assert issubclass(IncompleteReply, agentloop.AgentloopError)
