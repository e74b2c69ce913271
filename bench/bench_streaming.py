"""Streaming: what a delta costs beyond the SDK's own stream, and the last chunk to acceptance.

For each adapter (OpenAI Chat Completions, OpenAI Responses, Anthropic
Messages, Gemini's streamGenerateContent), a reply of N = 2000 text pieces,
its events parsed beforehand by the SDK itself (over an
``httpx2.MockTransport``), measured side by side:

- SDK: iterating those events as the SDK's stream hands them out (the floor:
  what any consumer of the SDK's stream pays);
- run: a whole synchronous run whose model streams those events through the
  adapter (``stream=True``) and the driver, to a delta listener, less the same
  run with the whole reply returned at once; per delta.

The cost per delta is run - SDK; the target is at most 2 µs. Then the time
from the last chunk (the whole reply, yielded) to the accepted transition
(``validate``), beside the time from a whole reply's return to the same
transition, median of many runs. For scale, the SDK's own parsing of the
SSE bytes per event is printed too. Run with ``make bench``; best of
interleaved repeats, as the machine is shared.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import anthropic
import httpx2
import openai
from bench_providers import best  # the same timing as the adapters' bench
from google import genai
from google.genai import types

from agentloop import Loop
from agentloop.providers._anthropic_stream import amessages_stream, messages_stream
from agentloop.providers._gemini_stream import agenerate_stream, generate_stream
from agentloop.providers._openai_stream import (
    achat_stream,
    aresponses_stream,
    chat_stream,
    responses_stream,
)
from agentloop.providers._streaming import AsyncReplyStream, ReplyStream

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

Message = dict[str, Any]
N = 2000
TARGET = 2.0  # µs per delta over iterating the SDK's own stream


def sse(events: list[tuple[str | None, Any]]) -> bytes:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def chat_events() -> bytes:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}

    def chunk(delta: Message, finish: str | None = None) -> tuple[None, Message]:
        return None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    usage = {"prompt_tokens": 10, "completion_tokens": N, "total_tokens": 10 + N}
    return sse(
        [
            chunk({"role": "assistant", "content": ""}),
            *(chunk({"content": "abc"}) for _ in range(N)),
            chunk({}, "stop"),
            (None, {**base, "choices": [], "usage": usage}),
            (None, "[DONE]"),
        ]
    )


def responses_events() -> bytes:
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": N,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10 + N,
    }
    part = {"type": "output_text", "text": "abc" * N, "annotations": []}
    item = {"type": "message", "id": "m1", "status": "completed", "role": "assistant"}
    body = {
        "id": "r",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "m",
        "output": [{**item, "content": [part]}],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }
    where = {"item_id": "m1", "output_index": 0, "content_index": 0}
    return sse(
        [
            ("response.output_item.added", {"type": "response.output_item.added",
             "output_index": 0, "item": {**item, "content": []}, "sequence_number": 0}),
            *(
                ("response.output_text.delta", {"type": "response.output_text.delta",
                 **where, "delta": "abc", "logprobs": [], "sequence_number": i + 1})
                for i in range(N)
            ),
            ("response.completed", {"type": "response.completed", "response": body,
             "sequence_number": N + 1}),
        ]
    )  # fmt: skip


def messages_events() -> bytes:
    usage = {"input_tokens": 10, "output_tokens": 1}
    message: Message = {
        "id": "m",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    text = {"type": "text_delta", "text": "abc"}
    return sse(
        [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}}),
            *(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": text})
              for _ in range(N)),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn",
             "stop_sequence": None}, "usage": {"output_tokens": N}}),
            ("message_stop", {"type": "message_stop"}),
        ]
    )  # fmt: skip


def gemini_events() -> bytes:
    def chunk(text: str, finish: str | None = None) -> tuple[str | None, Any]:
        candidate: Message = {"index": 0, "content": {"role": "model", "parts": [{"text": text}]}}
        if finish is not None:
            candidate["finishReason"] = finish
        used = {"promptTokenCount": 10, "candidatesTokenCount": 1}
        return None, {"candidates": [candidate], "responseId": "r1", "usageMetadata": used}

    return sse([chunk("tok ") for _ in range(N)] + [chunk("", "STOP")])


def transport(body: bytes) -> httpx2.MockTransport:
    headers = {"content-type": "text/event-stream"}
    return httpx2.MockTransport(lambda request: httpx2.Response(200, content=body, headers=headers))


def sdk_stream(name: str, body: bytes) -> Any:
    """The SDK's own stream over the mock transport (a fresh request each time)."""
    http = httpx2.Client(transport=transport(body))
    if name == "gemini":
        options = types.HttpOptions(base_url="http://mock", httpx_client=http)
        gemini = genai.Client(api_key="k", http_options=options)
        return gemini.models.generate_content_stream(model="m", contents="go")
    if name == "anthropic":
        client: Any = anthropic.Anthropic(api_key="k", http_client=http)
        return client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "go"}], stream=True
        )
    client = openai.OpenAI(api_key="k", http_client=http)
    if name == "chat":
        return client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], stream=True
        )
    return client.responses.create(model="m", input="go", stream=True)


class Events:
    """The SDK's events, parsed beforehand, handed out as its stream does (with ``close``)."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    def __iter__(self) -> Iterator[Any]:
        return iter(self.events)

    def close(self) -> None:
        pass


class AEvents(Events):
    """``Events`` as the async SDK stream."""

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._each()

    async def _each(self) -> AsyncIterator[Any]:
        for event in self.events:
            yield event

    async def close(self) -> None:  # type: ignore[override]
        pass


def _unmarked(exc: Exception) -> Exception | None:
    return None


ADAPTERS: dict[str, tuple[Callable[[], bytes], Any, Any]] = {
    "chat": (chat_events, chat_stream, achat_stream),
    "responses": (responses_events, responses_stream, aresponses_stream),
    "anthropic": (messages_events, messages_stream, amessages_stream),
    # No marking of errors here (the adapter passes its own): none is raised.
    "gemini": (
        gemini_events,
        partial(generate_stream, errors=_unmarked),
        partial(agenerate_stream, errors=_unmarked),
    ),
}


def latency(streams: bool, runs: int = 300) -> float:
    """Median µs from the model's last chunk (or its return) to the ``validate`` transition."""
    marks: list[int] = []
    took: list[float] = []
    reply = {"kind": "final", "text": "done"}

    def whole(history: list[Message]) -> Message:
        marks.append(time.perf_counter_ns())
        return reply

    def streamed(history: list[Message]) -> Iterator[object]:
        marks.append(time.perf_counter_ns())
        yield reply

    def accepted(transition: Any) -> None:
        if transition.trigger == "validate":
            took.append((time.perf_counter_ns() - marks[-1]) / 1000)

    loop = Loop(streamed if streams else whole, listeners=(accepted,))
    for _ in range(runs):
        loop.run("go")
    return statistics.median(took)


def measure(name: str, repeats: int) -> list[tuple[str, float, float, float, float]]:
    """One adapter's row per driver: SDK parse, SDK iteration, run, cost (µs per delta)."""
    make, convert, aconvert = ADAPTERS[name]
    body = make()
    events = list(sdk_stream(name, body))
    parse = best(lambda: list(sdk_stream(name, body)), 1, 3) / len(events)
    final = next(item for item in ReplyStream(Events(events), convert) if type(item) is dict)
    heard: list[object] = []

    def whole(history: list[Message]) -> Message:
        return final

    def streamed(history: list[Message]) -> ReplyStream:
        return ReplyStream(Events(events), convert)

    async def astreamed(history: list[Message]) -> AsyncReplyStream:
        return AsyncReplyStream(AEvents(events), aconvert)

    def iterate() -> None:
        for _ in Events(events):
            pass

    async def aiterate() -> None:
        async for _ in AEvents(events):
            pass

    def run(model: Any) -> None:
        live = Loop(model).start("go")
        live.subscribe_deltas(heard.append)
        live.finish()
        heard.clear()

    async def arun(model: Any) -> None:
        live = Loop(model).astart("go")
        live.subscribe_deltas(heard.append)
        await live.afinish()
        heard.clear()

    rows = []
    with asyncio.Runner() as runner:
        own = best(iterate, 5, repeats) / len(events)
        base = best(lambda: run(whole), 20, repeats)
        total = best(lambda: run(streamed), 5, repeats)
        rows.append(("sync", parse, own, (total - base) / N, (total - base) / N - own))
        own = best(lambda: runner.run(aiterate()), 5, repeats) / len(events)
        base = best(lambda: runner.run(arun(whole)), 20, repeats)
        total = best(lambda: runner.run(arun(astreamed)), 5, repeats)
        rows.append(("async", parse, own, (total - base) / N, (total - base) / N - own))
    return rows


def main() -> int:
    """Print the table; exit 1 if a target is missed."""
    repeats = 15
    misses = []
    print(f"a reply of N = {N} text deltas, µs per delta (best of {repeats}), no network")
    print(f"{'adapter':<10} {'driver':<6} {'SDK parse':>9} {'SDK iter':>8} {'run':>7} {'cost':>6}")
    for name in ADAPTERS:
        for driver, parse, own, per_delta, cost in measure(name, repeats):
            print(
                f"{name:<10} {driver:<6} {parse:>9.2f} {own:>8.3f} {per_delta:>7.3f} {cost:>6.3f}"
            )
            if cost > TARGET:
                misses.append(f"{name} {driver}: {cost:.2f} µs per delta > {TARGET}")
    print("\nlast chunk to the accepted transition (validate), median µs, sync driver")
    whole_us, streamed_us = latency(False), latency(True)
    print(f"  whole reply returned: {whole_us:.1f}   streamed, last chunk: {streamed_us:.1f}")
    print("\nall targets met" if not misses else f"\nmissed: {'; '.join(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
