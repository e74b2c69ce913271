"""agentloop.providers.anthropic through the real anthropic SDK over a mock transport (no network).

Both clients (sync, async). The canned responses are the Messages API's
documented wire format, checked against the SDK's own response model; every
request the SDK sends is kept and checked against its own request types.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import sys
from typing import Any

import anthropic
import pydantic
import pytest
from anthropic.types import Message as AnthropicMessage
from anthropic.types import message_create_params

import agentloop
from agentloop import Loop, ToolRegistry
from agentloop.providers import IncompleteReply, UnreadableResponse
from agentloop.providers.anthropic import DEFAULT_MAX_TOKENS, anthropic_messages
from agentloop.testing import final
from tests.integrations.test_providers_openai import HTML
from tests.support.helpers import add, adding_after_a_tool, mul
from tests.support.wire import FLAVOURS, HISTORY, Wire, ask, assert_usage, conforms, run

Message = dict[str, Any]
Call = tuple[str, str, Message]  # id, name, input

PARAMS = pydantic.TypeAdapter(message_create_params.MessageCreateParamsNonStreaming)
MODEL = "claude-sonnet-5"
USAGE = {"input_tokens": 120, "output_tokens": 30, "cached_tokens": 100}


def tools() -> ToolRegistry:
    return ToolRegistry([add, mul])


# -- the Messages API's wire format --------------------------------------------------------------


def message(
    *,
    text: str | None = None,
    calls: list[Call] = (),  # type: ignore[assignment]
    stop: str | None = None,
    content: list[Message] | None = None,
) -> Message:
    """A Messages API response body; 20 fresh input tokens and 100 read from the cache."""
    blocks: list[Message] = [] if text is None else [{"type": "text", "text": text}]
    blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": blocks if content is None else content,
        "stop_reason": stop or ("tool_use" if calls else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": 20,
            "output_tokens": 30,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 100,
        },
    }


def error(kind: str, text: str) -> Message:
    return {"type": "error", "error": {"type": kind, "message": text}}


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def client(wire: Wire, flavour: str, max_retries: int = 2) -> Any:
    """The SDK's own client, talking to ``wire``."""
    settings: Any = {"api_key": "sk-ant-test", "base_url": "https://api.anthropic.test"}
    if flavour == "sync":
        return anthropic.Anthropic(
            **settings, max_retries=max_retries, http_client=wire.sync_client()
        )
    return anthropic.AsyncAnthropic(
        **settings, max_retries=max_retries, http_client=wire.async_client()
    )


def model_for(flavour: str, wire: Wire, **params: Any) -> Any:
    retries = params.pop("max_retries", 2)
    return anthropic_messages(client(wire, flavour, retries), MODEL, **params)


def answered_first(turns: list[Message]) -> None:
    """Every ``tool_use`` is answered in the very next turn, a user turn whose ``tool_result``
    blocks come first, one per call, in order; the roles alternate; nothing is empty."""
    for before, turn in zip([None, *turns], turns, strict=False):
        assert turn["content"], turn
        assert before is None or before["role"] != turn["role"], turns
        called = [b["id"] for b in before["content"] if b["type"] == "tool_use"] if before else []
        kinds = [b["type"] for b in turn["content"]]
        answered = [b["tool_use_id"] for b in turn["content"] if b["type"] == "tool_result"]
        assert answered == called, turns
        assert kinds[: len(answered)] == ["tool_result"] * len(answered), turn
    assert turns[0]["role"] == "user"


def sent(wire: Wire, registry: ToolRegistry | None = None) -> list[Message]:
    """Check every request the SDK sent; return their bodies."""
    for body in wire.requests:
        conforms(body, PARAMS)
        answered_first(body["messages"])
        assert body["model"] == MODEL
        if registry is not None:
            assert body["tools"] == registry.specs("anthropic")
    assert wire.paths == ["/v1/messages"] * len(wire.requests)
    return wire.requests


USER = [{"kind": "user", "text": "What is 2+3, and 2*3?"}]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"calls": [("toolu_1", "add", {})]},
        {"text": "Both.", "calls": [("toolu_1", "add", {}), ("toolu_2", "mul", {})]},
        {"text": "5"},
        {"text": "5", "stop": "max_tokens"},
        {"content": [], "stop": "refusal"},
        {"content": [{"type": "thinking", "thinking": "Hm.", "signature": "c2ln"}]},
    ],
)
def test_canned_bodies_are_valid_responses(kwargs: Message) -> None:
    """Each canned body validates as the SDK's response model."""
    AnthropicMessage.model_validate(message(**kwargs))


# -- response to reply ---------------------------------------------------------------------------


async def test_a_single_call(flavour: str) -> None:
    """One ``tool_use`` is a ``call`` with its id unchanged; usage counts cached input too."""
    registry = tools()
    wire = Wire([(200, message(calls=[("toolu_01A", "add", {"a": 2, "b": 3})]))])
    reply = await ask(model_for(flavour, wire), USER, registry)
    assert reply == {
        "kind": "call",
        "id": "toolu_01A",
        "name": "add",
        "arguments": {"a": 2, "b": 3},
        "usage": USAGE,
    }
    (body,) = sent(wire, registry)
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS == 4096
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is 2+3, and 2*3?"}]}
    ]
    assert "system" not in body


async def test_parallel_calls(flavour: str) -> None:
    calls = [("toolu_1", "add", {"a": 2, "b": 3}), ("toolu_2", "mul", {"a": 2, "b": 3})]
    reply = await ask(model_for(flavour, Wire([(200, message(calls=calls))])), USER, tools())
    assert reply == {
        "kind": "calls",
        "calls": [
            {"id": "toolu_1", "name": "add", "arguments": {"a": 2, "b": 3}},
            {"id": "toolu_2", "name": "mul", "arguments": {"a": 2, "b": 3}},
        ],
        "usage": USAGE,
    }


async def test_text_beside_a_call(flavour: str) -> None:
    body = message(text="Adding first.", calls=[("toolu_1", "add", {"a": 1})])
    reply = await ask(model_for(flavour, Wire([(200, body)])), USER, tools())
    assert reply == {
        "kind": "calls",
        "calls": [{"id": "toolu_1", "name": "add", "arguments": {"a": 1}}],
        "text": "Adding first.",
        "usage": USAGE,
    }


async def test_a_final(flavour: str) -> None:
    reply = await ask(model_for(flavour, Wire([(200, message(text="5 and 6."))])), USER)
    assert reply == {"kind": "final", "text": "5 and 6.", "usage": USAGE}


async def test_thinking_blocks_are_left_out(flavour: str) -> None:
    content = [
        {"type": "thinking", "thinking": "Add them.", "signature": "c2ln"},
        {"type": "text", "text": "5."},
    ]
    reply = await ask(model_for(flavour, Wire([(200, message(content=content))])), USER)
    assert reply == {"kind": "final", "text": "5.", "usage": USAGE}


async def test_usage_counts_cache_writes_as_input(flavour: str) -> None:
    """The prompt's tokens are the fresh ones, those written to the cache and those read."""
    body = message(text="5")
    body["usage"] = {
        "input_tokens": 7,
        "output_tokens": 3,
        "cache_creation_input_tokens": 50,
        "cache_read_input_tokens": None,
    }
    reply = await ask(model_for(flavour, Wire([(200, body)])), USER)
    assert reply["usage"] == {"input_tokens": 57, "output_tokens": 3, "cached_tokens": 0}


async def test_arguments_that_are_not_an_object_then_the_corrected_call(flavour: str) -> None:
    """A call whose arguments arrived as text (from another provider's history) goes back with
    ``input: {}``; its invalid_arguments result, which quotes the text, is an error result."""
    registry = tools()
    raw = '{"a": 2, "b":'
    bad = {"kind": "call", "id": "call_1", "name": "add", "arguments": raw}
    outcome = registry.dispatch(bad)
    result = {"kind": "tool_result", "id": "call_1", "name": "add", **outcome}
    wire = Wire([(200, message(calls=[("toolu_2", "add", {"a": 2, "b": 3})]))])
    reply = await ask(model_for(flavour, wire), [*USER, bad, result], registry)
    assert reply["arguments"] == {"a": 2, "b": 3}
    (body,) = sent(wire, registry)
    _, called, answered = body["messages"]
    assert called["content"] == [{"type": "tool_use", "id": "call_1", "name": "add", "input": {}}]
    (block,) = answered["content"]
    assert block["is_error"] is True
    assert block["content"].startswith("status: invalid_arguments\n[")
    assert '\\"{\\\\\\"a\\\\\\": 2, \\\\\\"b\\\\\\":\\"' in block["content"]  # the text, quoted


@pytest.mark.parametrize(
    ("stop", "said"),
    [
        ("max_tokens", "the reply was cut off at max_tokens"),
        ("model_context_window_exceeded", "the reply was cut off: the context window is full"),
        ("refusal", "the model refused (stop_reason 'refusal')"),
        ("pause_turn", "the model paused its turn (stop_reason 'pause_turn')"),
    ],
)
async def test_a_reply_cut_off_or_refused(flavour: str, stop: str, said: str) -> None:
    """Cut off, refused or paused, even with a call in it: never a reply."""
    body = message(text="The answer", calls=[("toolu_1", "add", {"a": 1})], stop=stop)
    with pytest.raises(IncompleteReply) as caught:
        await ask(model_for(flavour, Wire([(200, body)])), USER)
    assert str(caught.value).startswith(said)


async def test_an_empty_reply(flavour: str) -> None:
    with pytest.raises(IncompleteReply) as caught:
        await ask(model_for(flavour, Wire([(200, message(content=[]))])), USER)
    assert str(caught.value) == "the reply was empty: no text and no tool calls"


# -- errors and retries --------------------------------------------------------------------------


async def test_a_429_is_retried_by_the_sdk(flavour: str) -> None:
    wire = Wire([(429, error("rate_limit_error", "slow down")), (200, message(text="5"))])
    reply = await ask(model_for(flavour, wire), USER, tools())
    assert reply["kind"] == "final"
    first, second = sent(wire)
    assert first == second


async def test_a_500_after_the_retries_propagates(flavour: str) -> None:
    wire = Wire([(500, error("api_error", "Internal server error"))] * 3)
    with pytest.raises(anthropic.InternalServerError):
        await ask(model_for(flavour, wire, max_retries=2), USER)
    assert len(wire.requests) == 3


async def test_a_401_is_not_retried(flavour: str) -> None:
    wire = Wire([(401, error("authentication_error", "invalid x-api-key"))])
    with pytest.raises(anthropic.AuthenticationError):
        await ask(model_for(flavour, wire), USER)
    assert len(wire.requests) == 1


# -- history to request --------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_body_that_is_not_json_fails_the_run_saying_so(flavour: str, stream: bool) -> None:
    """A 200 whose body is an HTML page: the run fails saying the response was not JSON (not
    an event stream, streamed), with its status, content type, URL and start, asked once."""
    wire = Wire([(200, HTML, {"content-type": "text/html"})])
    loop = Loop(model_for(flavour, wire, stream=stream))
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.steps, len(wire.requests)) == ("failed", 1, 1)
    expected = "an event stream" if stream else "JSON"
    assert result.error == (
        f"the model raised UnreadableResponse: the provider's response was not {expected} "
        "(HTTP 200, content-type text/html, from https://api.anthropic.test/v1/messages): "
        f"{HTML.decode()!r}; check that the client's base_url is the provider's API"
    )
    assert isinstance(result.events[0].exception, UnreadableResponse)


async def test_system_messages_are_the_top_level_system(flavour: str) -> None:
    """``system`` messages, wherever they are, join as the top-level ``system``."""
    wire = Wire([(200, message(text="Hi."))])
    history = [
        {"kind": "system", "text": "Be brief."},
        {"kind": "user", "text": "Hello"},
        {"kind": "system", "text": "Answer in French."},
    ]
    await ask(model_for(flavour, wire), history)
    (body,) = sent(wire)
    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]


def tool_use(call_id: str, name: str, arguments: Message) -> Message:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def tool_result(call_id: str, text: str, *, error: bool = False) -> Message:
    block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
    return {**block, "is_error": True} if error else block


def text(said: str) -> Message:
    return {"type": "text", "text": said}


async def test_a_multi_turn_history_passed_back_in(flavour: str) -> None:
    """A whole history, every kind and status: is_error on each result that is not ok."""
    wire = Wire([(200, message(text="Sure."))])
    await ask(model_for(flavour, wire), HISTORY, tools())
    (body,) = sent(wire, tools())
    assert body["system"] == "Use the tools."
    assert body["messages"] == [
        {"role": "user", "content": [text("2+3, 2*3?")]},
        {
            "role": "assistant",
            "content": [
                text("Both at once."),
                tool_use("call_1", "add", {"a": 2, "b": 3}),
                tool_use("call_2", "mul", {"a": 2, "b": 3}),
            ],
        },
        {
            "role": "user",
            "content": [
                tool_result("call_1", "5"),
                tool_result("call_2", "status: denied\nno", error=True),
            ],
        },
        {"role": "assistant", "content": [tool_use("call_3", "mul", {})]},
        {
            "role": "user",
            "content": [
                tool_result(
                    "call_3",
                    'status: invalid_arguments\n[{"path":"","message":"not JSON"}]',
                    error=True,
                )
            ],
        },
        {"role": "assistant", "content": [tool_use("call_4", "nope", {})]},
        {"role": "user", "content": [tool_result("call_4", "status: unknown_tool\nx", error=True)]},
        {"role": "assistant", "content": [tool_use("call_5", "add", {"a": 1, "b": 1})]},
        {
            "role": "user",
            "content": [
                tool_result(
                    "call_5", 'status: error\n{"type":"ValueError","message":"bad"}', error=True
                )
            ],
        },
        {"role": "assistant", "content": [tool_use("call_6", "add", {"a": 1, "b": 1})]},
        {"role": "user", "content": [tool_result("call_6", "status: cancelled\nc", error=True)]},
        {"role": "assistant", "content": [text("5, and 6 was denied.")]},
        {"role": "user", "content": [text("Thanks. Once more?")]},
    ]


async def test_results_come_first_in_their_user_turn(flavour: str) -> None:
    """Results and the user text next to them are one turn, results first, even when the
    text came before a result; empty text is left out."""
    history: list[Message] = [
        *USER,
        {
            "kind": "calls",
            "calls": [
                {"id": "c1", "name": "add", "arguments": {}},
                {"id": "c2", "name": "add", "arguments": {}},
            ],
            "text": "",
        },
        {"kind": "tool_result", "id": "c1", "name": "add", "status": "ok", "content": "1"},
        {"kind": "user", "text": "Also: hurry."},
        {"kind": "tool_result", "id": "c2", "name": "add", "status": "ok", "content": "2"},
        {"kind": "user", "text": ""},
    ]
    wire = Wire([(200, message(text="ok"))])
    await ask(model_for(flavour, wire), history)
    (body,) = sent(wire)
    assert body["messages"][1:] == [
        {"role": "assistant", "content": [tool_use("c1", "add", {}), tool_use("c2", "add", {})]},
        {
            "role": "user",
            "content": [tool_result("c1", "1"), tool_result("c2", "2"), text("Also: hurry.")],
        },
    ]


async def test_an_unknown_kind_is_named(flavour: str) -> None:
    wire = Wire([])
    with pytest.raises(ValueError, match=r"history\[1\]: expected kind to be one of .*got None"):
        await ask(model_for(flavour, wire), [*USER, {"text": "no kind"}])
    assert wire.requests == []


# -- the adapter ---------------------------------------------------------------------------------


async def test_parameters_pass_through_and_tools_are_the_specs_given(flavour: str) -> None:
    """Extra parameters go into every request; the neutral specs given with a request go out in
    Anthropic's format, as the registry makes it; no specs, or none at all, send no ``tools``."""
    registry = ToolRegistry([add, mul])
    wire = Wire([(200, message(text="ok"))] * 3)
    model = model_for(flavour, wire, max_tokens=512, stop_sequences=["END"])
    await ask(model, USER, registry)
    await ask(model, USER, ToolRegistry())
    await ask(model, USER)
    given, empty, bare = sent(wire)
    assert (given["max_tokens"], given["stop_sequences"]) == (512, ["END"])
    assert given["tools"] == registry.specs("anthropic")
    assert "tools" not in empty
    assert "tools" not in bare


async def test_a_run_sends_the_loops_tools_and_a_run_without_tools_none(flavour: str) -> None:
    """The Loop passes its registry's specs with every request, a tool added between requests
    included; a Loop without tools sends no ``tools``."""
    registry = ToolRegistry([add])
    wire = Wire(
        [
            (200, message(calls=[("toolu_1", "add", {"a": 2, "b": 3})])),
            (200, message(text="5")),
            (200, message(text="bare")),
        ]
    )
    model = model_for(flavour, wire)

    with_tools = Loop(model, tools=registry, listeners=[adding_after_a_tool(registry, mul)])
    assert (await run(with_tools, flavour, "2+3?")).output == "5"
    assert (await run(Loop(model), flavour, "hi")).output == "bare"
    first, second, bare = sent(wire)
    assert first["tools"] == ToolRegistry([add]).specs("anthropic")
    assert second["tools"] == ToolRegistry([add, mul]).specs("anthropic")
    assert "tools" not in bare


def test_the_adapter_takes_no_tools() -> None:
    """tools= given to the adapter is refused: they come from the Loop."""
    with pytest.raises(
        TypeError,
        match=r"^anthropic_messages\(\) takes no tools=: the tools come from the Loop",
    ):
        anthropic_messages(client(Wire([]), "sync"), MODEL, tools=tools())


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("tools", "named"), [([lambda a: a], "<lambda>"), ({"a.b": add}, "a.b")])
def test_a_tool_name_anthropic_refuses_is_refused_when_the_loop_is_made(
    flavour: str, stream: bool, tools: Any, named: str
) -> None:
    """``Loop(anthropic_messages(...), tools=...)`` refuses a name Anthropic would refuse,
    naming the tool and Anthropic's rule (streaming or not), before any request; the same
    tools with a model of one's own, which no provider's rule binds, are taken."""
    wire = Wire([])
    with pytest.raises(
        ValueError,
        match=rf"^tool '{re.escape(named)}': Anthropic refuses it as a tool name: a name must "
        r"match \^\[a-zA-Z0-9_-\]\{1,64\}\$ ",
    ):
        Loop(model_for(flavour, wire, stream=stream), tools=tools)
    assert wire.requests == []
    assert Loop(lambda history: final("ok"), tools=tools).run("hi").status == "finished"


def test_an_async_client_under_the_synchronous_driver() -> None:
    """loop.run awaits an async client's model on the run's own event loop, tools and all."""
    registry = tools()
    wire = Wire(
        [(200, message(calls=[("toolu_1", "add", {"a": 2, "b": 3})])), (200, message(text="5"))]
    )
    result = Loop(model_for("async", wire), tools=registry).run("2+3?")
    assert (result.status, result.output) == ("finished", "5")
    sent(wire, registry)


@pytest.mark.parametrize("key", ["messages", "system"])
def test_the_adapter_refuses_what_it_sets_itself(key: str) -> None:
    """What the adapter sets itself is refused, saying where it goes instead."""
    params: dict[str, Any] = {key: None}
    with pytest.raises(TypeError, match=f"anthropic_messages\\(\\) sets '{key}' itself"):
        anthropic_messages(client(Wire([]), "sync"), MODEL, **params)


def test_the_adapter_refuses_a_stream_that_is_not_a_bool() -> None:
    """``stream`` is True or False; anything else is refused when the adapter is made."""
    with pytest.raises(TypeError, match="expected stream to be True or False, got None"):
        anthropic_messages(client(Wire([]), "sync"), MODEL, stream=None)  # type: ignore[call-overload]


def test_the_adapter_checks_its_client_and_model_name() -> None:
    """A client without messages.create (another SDK's), or no model name, fails when the
    adapter is made; Bedrock's and Vertex's clients, which have it, are taken."""
    wrongs: list[Any] = ["not a client"]
    if importlib.util.find_spec("openai") is not None:
        wrongs.append(importlib.import_module("openai").OpenAI(api_key="x"))
    for wrong in wrongs:
        with pytest.raises(
            TypeError,
            match=r"^anthropic_messages\(\) expected client to be an Anthropic client "
            rf"\(with client.messages.create\), got {type(wrong).__name__}$",
        ):
            anthropic_messages(wrong, MODEL)
    with pytest.raises(TypeError, match=r"expected model to be the provider's model name"):
        anthropic_messages(client(Wire([]), "sync"), None)  # type: ignore[call-overload]
    for other in (
        anthropic.AnthropicBedrock(aws_region="us-east-1", aws_access_key="a", aws_secret_key="b"),
        anthropic.AnthropicVertex(region="us-east5", project_id="p", access_token="t"),
    ):
        assert callable(anthropic_messages(other, MODEL))  # type: ignore[call-overload]


def test_a_parameter_the_sdk_lacks_fails_when_the_adapter_is_made() -> None:
    with pytest.raises(TypeError, match=r"anthropic_messages\(\): .*'temprature'"):
        anthropic_messages(client(Wire([]), "sync"), MODEL, temprature=0)


def test_sync_client_sync_model_async_client_async_model() -> None:
    assert not inspect.iscoroutinefunction(anthropic_messages(client(Wire([]), "sync"), MODEL))
    assert inspect.iscoroutinefunction(anthropic_messages(client(Wire([]), "async"), MODEL))


def test_without_the_sdk_the_import_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.delitem(sys.modules, "agentloop.providers.anthropic")
    with pytest.raises(ImportError, match=r"pip install 'agentloop-fsm\[anthropic\]'"):
        importlib.import_module("agentloop.providers.anthropic")


# -- end to end, through the engine --------------------------------------------------------------


async def test_a_call_then_a_final_through_the_loop(flavour: str) -> None:
    registry = tools()
    wire = Wire(
        [
            (200, message(calls=[("toolu_1", "add", {"a": 2, "b": 3})])),
            (200, message(text="2+3 is 5.")),
        ]
    )
    loop = Loop(model_for(flavour, wire), tools=registry)
    result = await run(loop, flavour, "What is 2+3?")
    assert (result.status, result.output, result.steps, result.calls) == (
        "finished",
        "2+3 is 5.",
        2,
        1,
    )
    assert result.transcript == [
        {"kind": "user", "text": "What is 2+3?"},
        {"kind": "call", "id": "toolu_1", "name": "add", "arguments": {"a": 2, "b": 3}},
        {"kind": "tool_result", "id": "toolu_1", "name": "add", "status": "ok", "content": 5},
        {"kind": "final", "text": "2+3 is 5."},
    ]
    assert_usage(result, 2)
    _, last = sent(wire, registry)
    assert last["messages"][-1] == {"role": "user", "content": [tool_result("toolu_1", "5")]}


async def test_a_cut_off_reply_fails_the_run(flavour: str) -> None:
    registry = tools()
    wire = Wire([(200, message(text="The answer", stop="max_tokens"))])
    result = await run(Loop(model_for(flavour, wire), tools=registry), flavour, "2+3?")
    assert (result.status, result.steps, result.calls) == ("failed", 1, 0)
    assert result.error == "the model raised IncompleteReply: the reply was cut off at max_tokens"
    assert_usage(result, 0, failed=1)  # the cut-off reply was billed


async def test_a_401_fails_the_run(flavour: str) -> None:
    """A 401 is the SDK's AuthenticationError, asked once: never retried, by the SDK or the
    Loop. (The SDK's own wording of the error is its own, and changes between releases.)"""
    registry = tools()
    wire = Wire([(401, error("authentication_error", "invalid x-api-key"))])
    result = await run(Loop(model_for(flavour, wire), tools=registry), flavour, "2+3?")
    assert (result.status, result.steps) == ("failed", 1)
    assert result.error is not None
    assert result.error.startswith("the model raised AuthenticationError: ")
    assert len(wire.requests) == 1


async def test_parallel_calls_with_text_through_the_loop(flavour: str) -> None:
    """A batch with text runs both calls; the batch and both results are in the transcript,
    and the next request answers both in one user turn, results first, in order."""
    registry = tools()
    calls = [("toolu_1", "add", {"a": 2, "b": 3}), ("toolu_2", "mul", {"a": 2, "b": 3})]
    wire = Wire([(200, message(text="Both at once.", calls=calls)), (200, message(text="5, 6."))])
    loop = Loop(model_for(flavour, wire), tools=registry)
    result = await run(loop, flavour, "2+3, 2*3?")
    assert (result.status, result.output, result.steps, result.calls) == ("finished", "5, 6.", 2, 2)
    assert result.transcript == [
        {"kind": "user", "text": "2+3, 2*3?"},
        {
            "kind": "calls",
            "calls": [
                {"id": "toolu_1", "name": "add", "arguments": {"a": 2, "b": 3}},
                {"id": "toolu_2", "name": "mul", "arguments": {"a": 2, "b": 3}},
            ],
            "text": "Both at once.",
        },
        {"kind": "tool_result", "id": "toolu_1", "name": "add", "status": "ok", "content": 5},
        {"kind": "tool_result", "id": "toolu_2", "name": "mul", "status": "ok", "content": 6},
        {"kind": "final", "text": "5, 6."},
    ]
    assert_usage(result, 2)
    _, last = sent(wire, registry)
    assert last["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                text("Both at once."),
                tool_use("toolu_1", "add", {"a": 2, "b": 3}),
                tool_use("toolu_2", "mul", {"a": 2, "b": 3}),
            ],
        },
        {"role": "user", "content": [tool_result("toolu_1", "5"), tool_result("toolu_2", "6")]},
    ]


async def test_a_denied_call_in_a_batch_through_the_loop(flavour: str) -> None:
    """One call of a batch denied by a policy: both are answered, the denial as an error."""
    registry = ToolRegistry(
        [add, mul],
        policy=lambda call: agentloop.deny("no") if call["name"] == "mul" else agentloop.allow(),
    )
    calls = [("toolu_1", "add", {"a": 2, "b": 3}), ("toolu_2", "mul", {"a": 2, "b": 3})]
    wire = Wire([(200, message(calls=calls)), (200, message(text="5; mul was denied."))])
    loop = Loop(model_for(flavour, wire), tools=registry)
    result = await run(loop, flavour, "2+3, 2*3?")
    assert (result.status, result.steps, result.calls) == ("finished", 2, 2)
    assert [m.get("status") for m in result.transcript[2:4]] == ["ok", "denied"]
    assert_usage(result, 2)
    _, last = sent(wire, registry)
    assert last["messages"][-1] == {
        "role": "user",
        "content": [
            tool_result("toolu_1", "5"),
            tool_result("toolu_2", "status: denied\nno", error=True),
        ],
    }


async def test_usage_reaching_max_total_tokens_through_the_loop(flavour: str) -> None:
    """Each reply reports 150 tokens (cache reads included); at 300 the run ends exhausted
    before a third request."""
    registry = tools()
    wire = Wire(
        [
            (200, message(calls=[("toolu_1", "add", {"a": 1, "b": 1})])),
            (200, message(calls=[("toolu_2", "add", {"a": 2, "b": 2})])),
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
    assert [m["kind"] for m in result.transcript] == ["user", *["call", "tool_result"] * 2]
    assert_usage(result, 2)
    assert len(sent(wire, registry)) == 2


def test_the_public_names_are_documented() -> None:
    import agentloop.providers.anthropic

    assert inspect.getdoc(agentloop.providers.anthropic.anthropic_messages)
    assert agentloop.providers.anthropic.__all__ == ["DEFAULT_MAX_TOKENS", "anthropic_messages"]
