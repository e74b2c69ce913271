"""Provider adapter overhead per model step, beside the engine's and the SDK's own.

For each adapter (OpenAI Chat Completions, OpenAI Responses, Anthropic
Messages, Gemini's generateContent), at a history of K = 10 and K = 100
tool calls (the last step of a K-call run, 2K + 1 messages):

- adapter: one model step through the adapter over a stand-in client whose
  ``create`` hands back a response the SDK parsed beforehand: the history to
  the request (tool specs included) and the response to the reply, no HTTP;
- engine: the engine's own cost per model step over the same K-call run, with
  a scripted model (what ``bench_core`` measures);
- SDK: what the official client adds to that step on its own (building and
  checking the request, parsing the response) over an ``httpx2.MockTransport``,
  for scale: a provider round trip adds its network time on top.

The target: the adapter costs at most a quarter of what the SDK's own request
building and parsing cost, so it is never what makes a step slow. Run with
``make bench``; best of interleaved repeats, as the machine is shared.
"""

from __future__ import annotations

import sys
import time
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

import anthropic
import httpx2
import openai
import orjson
from anthropic.types import Message as AnthropicMessage
from engine_step import scripted  # the same model as the core bench: k calls, then a final
from google import genai
from google.genai import types
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from agentloop import Loop, ToolRegistry
from agentloop.providers.anthropic import anthropic_messages
from agentloop.providers.google import gemini_generate_content
from agentloop.providers.openai import openai_chat, openai_responses

if TYPE_CHECKING:
    from collections.abc import Callable

Message = dict[str, Any]
TARGET = 0.25  # the adapter's µs per step / the SDK's own


def echo(n: int) -> int:
    """The tool: as cheap as a tool can be."""
    return n


# The response to a step: one call of echo, as each API sends it.


def chat_body(step: int) -> Message:
    arguments = f'{{"n": {step}}}'
    call = {
        "id": f"c{step}",
        "type": "function",
        "function": {"name": "echo", "arguments": arguments},
    }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4.1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def responses_body(step: int) -> Message:
    call = {
        "type": "function_call",
        "id": f"fc_{step}",
        "call_id": f"c{step}",
        "name": "echo",
        "arguments": f'{{"n": {step}}}',
        "status": "completed",
    }
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "gpt-4.1",
        "output": [call],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110,
        },
    }


def anthropic_body(step: int) -> Message:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5",
        "content": [{"type": "tool_use", "id": f"c{step}", "name": "echo", "input": {"n": step}}],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


def gemini_body(step: int) -> Message:
    call = {"functionCall": {"name": "echo", "args": {"n": step}}, "thoughtSignature": "c2ln"}
    return {
        "candidates": [
            {"index": 0, "finishReason": "STOP", "content": {"role": "model", "parts": [call]}}
        ],
        "responseId": f"r{step}",
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10},
    }


class Adapter(NamedTuple):
    """An adapter and how to feed it: its SDK's response model, a canned body, a real client."""

    name: str
    make: Any
    parsed: Any
    body: Callable[[int], Message]
    client: Callable[[bytes], Any]


def mock(response: bytes) -> httpx2.Client:
    """An HTTP client whose every request is answered ``response``, with no network."""
    headers = {"content-type": "application/json"}
    return httpx2.Client(
        transport=httpx2.MockTransport(
            lambda _: httpx2.Response(200, content=response, headers=headers)
        )
    )


ADAPTERS = [
    Adapter(
        "openai_chat",
        openai_chat,
        ChatCompletion,
        chat_body,
        lambda body: openai.OpenAI(api_key="-", base_url="http://mock/v1", http_client=mock(body)),
    ),
    Adapter(
        "openai_responses",
        openai_responses,
        Response,
        responses_body,
        lambda body: openai.OpenAI(api_key="-", base_url="http://mock/v1", http_client=mock(body)),
    ),
    Adapter(
        "anthropic_messages",
        anthropic_messages,
        AnthropicMessage,
        anthropic_body,
        lambda body: anthropic.Anthropic(
            api_key="-", base_url="http://mock", http_client=mock(body)
        ),
    ),
    Adapter(
        "gemini_generate_content",
        gemini_generate_content,
        types.GenerateContentResponse,
        gemini_body,
        lambda body: genai.Client(
            api_key="-",
            http_options=types.HttpOptions(base_url="http://mock", httpx_client=mock(body)),
        ),
    ),
]


def best(fn: Callable[[], object], number: int, repeats: int) -> float:
    """Best µs per call of ``fn`` over ``repeats`` rounds of ``number`` calls."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(number):
            fn()
        times.append((time.perf_counter_ns() - start) / number / 1000)
    return min(times)


def main() -> int:
    """Print the table; exit 1 if a target is missed."""
    repeats = 3 if "--quick" in sys.argv else 9
    registry = ToolRegistry([echo])
    misses = []
    print("one model step at a K-call history, µs (best of repeats), no network")
    print(
        f"  {'adapter':<24} {'K':>4} {'adapter':>8} {'engine':>8} {'SDK':>9} "
        f"{'adapter/SDK':>12}  target"
    )
    for k in (10, 100):
        engine_loop = Loop(scripted(k), tools=registry, max_steps=k + 1, max_calls=k)
        history = engine_loop.run("go").transcript[:-1]  # what the run's last step sees
        engine = best(partial(engine_loop.run, "go"), max(1, 400 // (k + 1)), repeats) / (k + 1)
        for adapter in ADAPTERS:
            body = adapter.body(k)
            parsed = adapter.parsed.model_validate(body)
            answer = partial(lambda _parsed, **_: _parsed, parsed)
            canned = SimpleNamespace(create=answer, generate_content=answer)
            client = SimpleNamespace(
                chat=SimpleNamespace(completions=canned),
                responses=canned,
                messages=canned,
                models=canned,
            )
            # Given the tools' specs with each request, as the Loop gives them.
            alone = partial(adapter.make(client, "m"), tools=registry.specs())
            sdk = partial(
                adapter.make(adapter.client(orjson.dumps(body)), "m"), tools=registry.specs()
            )
            assert alone(history) == sdk(history)
            own = best(partial(alone, history), max(20, 2000 // (k + 1)), repeats)
            sdk_own = best(partial(sdk, history), max(3, 100 // (k + 1)), repeats) - own
            ratio = own / sdk_own
            verdict = f"<= {TARGET:g}: {'met' if ratio <= TARGET else 'MISSED'}"
            if ratio > TARGET:
                misses.append(f"{adapter.name} K={k} adapter/SDK {ratio:.2f}")
            print(
                f"  {adapter.name:<24} {k:>4} {own:>8.1f} {engine:>8.1f} {sdk_own:>9.1f} "
                f"{ratio:>12.3f}  {verdict}"
            )
    print("\nall targets met" if not misses else f"\nmissed: {'; '.join(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
