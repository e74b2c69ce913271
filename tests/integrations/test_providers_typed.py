"""Typed output and the wrap-up step through the real SDKs over the loopback wire (no network).

Each API is asked for structured output natively (Chat Completions'
``response_format``, Responses' ``text.format``, Anthropic's
``output_config``, or its final-answer tool on an SDK without it, Gemini's
``responseJsonSchema``), and sends ``tool_choice`` none in the wrap-up step
(Gemini: function calling mode ``NONE``); an invalid then a valid final runs
through the loop.
"""

from __future__ import annotations

from typing import Any

import attrs
import pydantic
import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from agentloop import Loop, ToolRegistry
from agentloop.providers import anthropic as anthropic_adapter
from tests.integrations import test_providers_anthropic as anth
from tests.integrations import test_providers_gemini as gem
from tests.integrations import test_providers_openai as oai
from tests.support.helpers import add
from tests.support.wire import FLAVOURS, Wire, conforms, run

Message = dict[str, Any]
CHAT_PARAMS = pydantic.TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming)
RESPONSES_PARAMS = pydantic.TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming)
MESSAGES_PARAMS = pydantic.TypeAdapter(message_create_params.MessageCreateParamsNonStreaming)


@attrs.frozen
class Sum:
    """A sum and how it was found."""

    total: int
    how: str


SCHEMA = {
    "type": "object",
    "description": "A sum and how it was found.",
    "properties": {"total": {"type": "integer"}, "how": {"type": "string"}},
    "required": ["total", "how"],
    "additionalProperties": False,
}
BAD, GOOD = '{"total": "five"}', '{"total": 5, "how": "added"}'


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def without_defs(schema: Message) -> Message:
    return {key: value for key, value in schema.items() if key != "$defs"}


@pytest.mark.parametrize("api", [oai.CHAT, oai.RESPONSES], ids=str)
async def test_openai_asks_for_the_schema_and_an_invalid_final_goes_back(
    api: oai.Api, flavour: str
) -> None:
    """Strict json_schema on both APIs; the invalid final is retried, the valid one is a Sum."""
    wire = Wire([(200, api.answer(text=BAD)), (200, api.answer(text=GOOD))])
    loop = Loop(oai.model_for(api, flavour, wire), output=Sum)
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.output, result.steps) == ("finished", Sum(5, "added"), 2)
    params = CHAT_PARAMS if api is oai.CHAT else RESPONSES_PARAMS
    for body in wire.requests:
        conforms(body, params)
        if api is oai.CHAT:
            asked = body["response_format"]
            assert asked["type"] == "json_schema"
            inner = asked["json_schema"]
            assert (inner["name"], inner["strict"]) == ("Sum", True)
        else:
            inner = body["text"]["format"]
            assert (inner["type"], inner["name"], inner["strict"]) == ("json_schema", "Sum", True)
        assert without_defs(inner["schema"]) == SCHEMA
    told = wire.requests[1][api.turns][-1]
    assert told["role"] == "user"
    assert "does not match the output schema" in told["content"]


async def test_anthropic_asks_natively_and_an_invalid_final_goes_back(flavour: str) -> None:
    """output_config json_schema on every request; the invalid final is retried."""
    wire = Wire([(200, anth.message(text=BAD)), (200, anth.message(text=GOOD))])
    loop = Loop(anth.model_for(flavour, wire), output=Sum)
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.output, result.steps) == ("finished", Sum(5, "added"), 2)
    for body in wire.requests:
        conforms(body, MESSAGES_PARAMS)
        assert body["output_config"]["format"]["type"] == "json_schema"
        assert without_defs(body["output_config"]["format"]["schema"]) == SCHEMA
    told = wire.requests[1]["messages"][-1]
    assert told["role"] == "user"
    assert "does not match the output schema" in told["content"][0]["text"]


async def test_anthropic_without_structured_output_asks_through_a_final_answer_tool(
    flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An SDK without output_config: the output is a final_answer tool, its input the final."""
    wire = Wire(
        [
            (200, anth.message(calls=[("toolu_1", "final_answer", {"total": "x"})])),
            (200, anth.message(calls=[("toolu_2", "final_answer", {"total": 5, "how": "added"})])),
        ]
    )
    client = anth.client(wire, flavour)
    create = client.messages.create

    def older(**params: Any) -> Any:  # the signature of an SDK before output_config
        return create(**params)

    async def aolder(**params: Any) -> Any:
        return await create(**params)

    monkeypatch.setattr(client.messages, "create", older if flavour == "sync" else aolder)
    loop = Loop(anthropic_adapter.anthropic_messages(client, anth.MODEL), output=Sum)
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.output) == ("finished", Sum(5, "added"))
    assert result.transcript[1] == {"kind": "final", "text": '{"total":"x"}'}
    for body in wire.requests:
        assert "output_config" not in body
        (tool,) = body["tools"]
        assert tool["name"] == "final_answer"
        assert without_defs(tool["input_schema"]) == SCHEMA


def look_registry() -> ToolRegistry:
    return ToolRegistry([add])


@pytest.mark.parametrize("api", [oai.CHAT, oai.RESPONSES], ids=str)
async def test_openai_wrap_up_sends_tool_choice_none(api: oai.Api, flavour: str) -> None:
    """on_exhausted='answer': the last request has tool_choice 'none', the others none at all."""
    wire = Wire(
        [
            (200, api.answer(calls=[("call_1", "add", '{"a": 2, "b": 3}')])),
            (200, api.answer(text="5, I think.")),
        ]
    )
    registry = look_registry()
    model = oai.model_for(api, flavour, wire)
    loop = Loop(model, tools=registry, max_steps=1, on_exhausted="answer")
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.output, result.reason) == ("finished", "5, I think.", "max_steps")
    first, last = wire.requests
    assert "tool_choice" not in first
    assert last["tool_choice"] == "none"
    assert last["tools"] == registry.specs(api.specs)


async def test_anthropic_wrap_up_sends_tool_choice_none(flavour: str) -> None:
    """The Messages API's wrap-up request has tool_choice {'type': 'none'}, tools still listed."""
    wire = Wire(
        [
            (200, anth.message(calls=[("toolu_1", "add", {"a": 2, "b": 3})])),
            (200, anth.message(text="5.")),
        ]
    )
    registry = look_registry()
    loop = Loop(anth.model_for(flavour, wire), tools=registry, max_steps=1, on_exhausted="answer")
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.reason) == ("finished", "max_steps")
    first, last = wire.requests
    assert "tool_choice" not in first
    assert last["tool_choice"] == {"type": "none"}
    conforms(last, MESSAGES_PARAMS)


async def test_gemini_asks_for_a_response_schema_and_an_invalid_final_goes_back(
    flavour: str,
) -> None:
    """responseMimeType application/json and the schema as JSON Schema on every request; the
    invalid final is retried, the valid one is a Sum."""
    wire = Wire(
        [
            (200, gem.response(gem.text(BAD))),
            (200, gem.response(gem.text(GOOD), response_id="resp-2")),
        ]
    )
    loop = Loop(gem.model_for(flavour, wire), output=Sum)
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.output, result.steps) == ("finished", Sum(5, "added"), 2)
    for body in gem.sent(wire):
        asked = body["generationConfig"]
        assert asked["responseMimeType"] == "application/json"
        assert without_defs(asked["responseJsonSchema"]) == SCHEMA
    told = wire.requests[1]["contents"][-1]
    assert told["role"] == "user"
    assert "does not match the output schema" in told["parts"][0]["text"]


async def test_gemini_wrap_up_sends_function_calling_mode_none(flavour: str) -> None:
    """The wrap-up request sets functionCallingConfig mode NONE, the tools still declared."""
    wire = Wire(
        [
            (200, gem.response(gem.function_call("add", {"a": 2, "b": 3}, signature="c2ln"))),
            (200, gem.response(gem.text("5."), response_id="resp-2")),
        ]
    )
    registry = look_registry()
    loop = Loop(gem.model_for(flavour, wire), tools=registry, max_steps=1, on_exhausted="answer")
    result = await run(loop, flavour, "2+3?")
    assert (result.status, result.reason) == ("finished", "max_steps")
    first, last = gem.sent(wire, registry)
    assert "toolConfig" not in first
    assert last["toolConfig"] == {"functionCallingConfig": {"mode": "NONE"}}
