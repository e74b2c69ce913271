"""Long conversations through the real SDKs, against servers that refuse an orphaned call or result.

The loopback servers (``tests/support/wire.py``) check every request as the real APIs
do: a tool result that answers no call sent before it, or a call whose result
is missing, is answered ``400``. A run fitted by a context policy never sends one.
"""

from __future__ import annotations

from typing import Any

import attrs
import httpx2
import pytest

from agentloop import Loop, Tool, ToolRegistry
from agentloop.context import keep_last, summarise
from agentloop.providers.anthropic import anthropic_messages
from tests.integrations import test_providers_gemini as gem
from tests.integrations.test_providers_anthropic import MODEL, answered_first, message
from tests.integrations.test_providers_anthropic import client as anthropic_client
from tests.integrations.test_providers_openai import CHAT, RESPONSES, Api, answered_before_next_turn
from tests.integrations.test_providers_openai import client as openai_client
from tests.support.wire import FLAVOURS, Wire, run

Message = dict[str, Any]
TURNS = 8
LONG = "y" * 600  # each result about 150 tokens by the default counter


def echo(x: str) -> str:
    """Return x, padded: a long result."""
    return x + LONG


@attrs.define
class Refusing(Wire):
    """A loopback server that refuses, with a 400, a request holding an orphaned call or result."""

    check: Any = None
    refused: list[str] = attrs.field(factory=list)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        response = super().handle(request)
        try:
            self.check(self.requests[-1])
        except (AssertionError, IndexError) as exc:  # the checks assert, or find nothing to pop
            self.refused.append(str(exc))
            self.answers.insert(0, (response.status_code, response.json()))  # not consumed
            body = {
                "error": {
                    "message": f"orphaned tool call or result: {exc}",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            }
            return httpx2.Response(400, json=body)
        return response


def checker(api: Api) -> Any:
    """The server's check of a request's turns: every call answered before the next turn."""
    return lambda body: answered_before_next_turn(api, body[api.turns])


def openai_answers(api: Api) -> list[tuple[int, Message]]:
    calls = [(f"call_{i}", "echo", '{"x": "%s"}' % ("z" * 200)) for i in range(TURNS)]
    return [(200, api.answer(calls=[call])) for call in calls] + [(200, api.answer(text="done"))]


def anthropic_answers() -> list[tuple[int, Message]]:
    calls = [(f"toolu_{i}", "echo", {"x": "z" * 200}) for i in range(TURNS)]
    return [(200, message(calls=[call])) for call in calls] + [(200, message(text="done"))]


def gemini_answers() -> list[tuple[int, Message]]:
    calls = [
        gem.response(
            gem.function_call("echo", {"x": "z" * 200}, signature="c2ln"), response_id=f"r{i}"
        )
        for i in range(TURNS)
    ]
    return [(200, call) for call in calls] + [(200, gem.response(gem.text("done")))]


def summary_of(history: list[Message]) -> Message:
    """A summariser of our own: the folded turns, counted."""
    return {"kind": "final", "text": f"{history[1]['text'].count(chr(10))} messages folded"}


POLICIES = {
    "keep_last": lambda: keep_last(tokens=700),
    "summarise": lambda: summarise(summary_of, tokens=700),
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("api", [CHAT, RESPONSES], ids=str)
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_openai_never_gets_an_orphaned_call_or_result(
    api: Api, flavour: str, policy: str
) -> None:
    """Chat Completions and Responses: every request of a long run is accepted whole."""
    wire = Refusing(
        openai_answers(api), check=lambda body: answered_before_next_turn(api, body[api.turns])
    )
    model = api.adapter(openai_client(wire, flavour, 0), "gpt-4.1")
    loop = Loop(model, tools=[echo], context=POLICIES[policy](), max_steps=40)
    result = await run(loop, flavour, "Echo, many times.")
    assert result.status == "finished", result.error
    assert wire.refused == []
    # Turns were left out of the later requests: the history outgrew the budget.
    assert any(len(e.context.kept) > 1 for e in result.events if e.context is not None)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_anthropic_never_gets_an_orphaned_call_or_result(flavour: str, policy: str) -> None:
    """The Messages API: every request of a long run is accepted whole, roles alternating."""
    wire = Refusing(anthropic_answers(), check=lambda body: answered_first(body["messages"]))
    model = anthropic_messages(anthropic_client(wire, flavour, 0), MODEL)
    loop = Loop(model, tools=[echo], context=POLICIES[policy](), max_steps=40)
    result = await run(loop, flavour, "Echo, many times.")
    assert result.status == "finished", result.error
    assert wire.refused == []
    assert any(len(e.context.kept) > 1 for e in result.events if e.context is not None)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("flavour", FLAVOURS)
async def test_gemini_never_gets_an_orphaned_call_or_result(flavour: str, policy: str) -> None:
    """generateContent: every request of a long run is accepted whole, each model turn's calls
    answered by as many function responses, each step's first call signed."""

    def check(body: Message) -> None:
        gem.answered_next(body["contents"])
        gem.signed(body["contents"])

    wire = Refusing(gemini_answers(), check=check)
    loop = Loop(
        gem.model_for(flavour, wire), tools=[echo], context=POLICIES[policy](), max_steps=40
    )
    result = await run(loop, flavour, "Echo, many times.")
    assert result.status == "finished", result.error
    assert wire.refused == []
    assert any(len(e.context.kept) > 1 for e in result.events if e.context is not None)


@pytest.mark.parametrize("api", [CHAT, RESPONSES], ids=str)
async def test_the_servers_refuse_a_history_trimmed_by_message_count(api: Api) -> None:
    """The check bites: a naive trim (the last three messages) orphans a result, and is refused."""
    wire = Refusing(
        openai_answers(api), check=lambda body: answered_before_next_turn(api, body[api.turns])
    )
    model = api.adapter(openai_client(wire, "sync", 0), "gpt-4.1")

    def trimmed(history: list[Message], **kwargs: Any) -> object:
        return model([history[0], *history[-3:]] if len(history) > 4 else history, **kwargs)

    result = Loop(trimmed, tools=ToolRegistry([Tool(echo)]), max_steps=40).run("Echo.")
    assert result.status == "failed"
    assert "orphaned tool call or result" in (result.error or "")
    assert wire.refused
