"""A provider on the wire, with no network: the SDKs' own clients over an ``httpx2.MockTransport``.

The SDKs build, send, retry and parse for real; ``Wire`` answers each request
with the next canned ``(status, JSON body)`` and keeps every request body.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import struct
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import attrs
import httpx2

from agentloop._core.values import Usage
from agentloop.testing import assert_contract

if TYPE_CHECKING:
    import pydantic

    import agentloop

Message = dict[str, Any]
FLAVOURS = ("sync", "async")
#: What every canned response reports: 120 prompt tokens (100 of them cached), 30 output.
STEP_USAGE = Usage(input_tokens=120, output_tokens=30, cached_tokens=100)

#: Every kind, every status, a parallel call with text, a call whose arguments were raw text.
HISTORY: list[Message] = [
    {"kind": "system", "text": "Use the tools."},
    {"kind": "user", "text": "2+3, 2*3?"},
    {
        "kind": "calls",
        "text": "Both at once.",
        "calls": [
            {"id": "call_1", "name": "add", "arguments": {"a": 2, "b": 3}},
            {"id": "call_2", "name": "mul", "arguments": {"a": 2, "b": 3}},
        ],
    },
    {"kind": "tool_result", "id": "call_1", "name": "add", "status": "ok", "content": 5},
    {"kind": "tool_result", "id": "call_2", "name": "mul", "status": "denied", "content": "no"},
    {"kind": "call", "id": "call_3", "name": "mul", "arguments": '{"a": 2,'},
    {
        "kind": "tool_result",
        "id": "call_3",
        "name": "mul",
        "status": "invalid_arguments",
        "content": [{"path": "", "message": "not JSON"}],
    },
    {"kind": "calls", "calls": [{"id": "call_4", "name": "nope", "arguments": {}}]},
    {
        "kind": "tool_result",
        "id": "call_4",
        "name": "nope",
        "status": "unknown_tool",
        "content": "x",
    },
    {"kind": "call", "id": "call_5", "name": "add", "arguments": {"a": 1, "b": 1}},
    {
        "kind": "tool_result",
        "id": "call_5",
        "name": "add",
        "status": "error",
        "content": {"type": "ValueError", "message": "bad"},
    },
    {"kind": "call", "id": "call_6", "name": "add", "arguments": {"a": 1, "b": 1}},
    {"kind": "tool_result", "id": "call_6", "name": "add", "status": "cancelled", "content": "c"},
    {"kind": "final", "text": "5, and 6 was denied."},
    {"kind": "user", "text": "Thanks. Once more?"},
]


def sse(events: list[tuple[str | None, Any]]) -> bytes:
    """Server-Sent Events: ``event:`` when named, then ``data:`` (JSON unless a ``str``)."""
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def event_stream(events: list[Any], error: tuple[str, str] | None = None) -> bytes:
    """Bedrock's InvokeModelWithResponseStream body: AWS event-stream frames.

    Each event (a Messages API stream event) is a ``chunk`` frame whose JSON
    payload carries the event's JSON, base64-encoded, as ``bytes``; an
    ``error`` ``(exception type, message)`` ends the stream with an exception
    frame, as Bedrock sends a throttling or model error mid-stream.
    """
    out = [
        _frame(
            {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"},
            {"bytes": base64.b64encode(json.dumps(event).encode()).decode()},
        )
        for event in events
    ]
    if error is not None:
        kind, message = error
        headers = {
            ":exception-type": kind,
            ":content-type": "application/json",
            ":message-type": "exception",
        }
        out.append(_frame(headers, {"message": message}))
    return b"".join(out)


def _frame(headers: dict[str, str], payload: Message) -> bytes:
    """One event-stream message: a prelude (lengths and their CRC32), string headers, the JSON
    payload, and the CRC32 of all that."""
    head = b"".join(
        bytes([len(name)])
        + name.encode()
        + b"\x07"
        + struct.pack(">H", len(value))
        + value.encode()
        for name, value in headers.items()
    )
    body = json.dumps(payload).encode()
    prelude = struct.pack(">II", 12 + len(head) + len(body) + 4, len(head))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + head + body
    return message + struct.pack(">I", zlib.crc32(message))


@attrs.define
class Streamed(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """A response body sent ``size`` bytes at a time (an event split across chunks); after
    its first ``stall`` bytes it waits (up to 5 s) until closed. It records when it was closed."""

    body: bytes
    size: int = 7
    stall: int | None = None
    #: Instead of stalling, the connection drops (a read error) after ``stall`` bytes.
    drop: bool = False
    #: ``(n, call)``: once its first ``n`` bytes are sent, ``call()`` (a cancel from elsewhere).
    then: tuple[int, Callable[[], object]] | None = None
    #: Server-Sent Events unless said (Bedrock's are AWS event-stream frames); None: no header.
    content_type: str | None = "text/event-stream"
    sent: int = 0
    closed_at: float | None = None
    _closed: threading.Event = attrs.field(factory=threading.Event)

    def _chunks(self) -> Iterator[bytes]:
        body = self.body if self.stall is None else self.body[: self.stall]
        for at in range(0, len(body), self.size):
            self.sent += 1
            yield body[at : at + self.size]
            then = self.then
            if then is not None and at + self.size >= then[0]:
                self.then = None
                then[1]()

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks()
        if self.drop:
            raise httpx2.ReadError("the peer closed the connection")
        if self.stall is not None:
            self._closed.wait(5)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks():
            await asyncio.sleep(0)
            yield chunk
        if self.drop:
            raise httpx2.ReadError("the peer closed the connection")
        if self.stall is not None:
            for _ in range(5000):
                if self._closed.is_set():
                    break
                await asyncio.sleep(0.001)

    def close(self) -> None:
        if self.closed_at is None:
            self.closed_at = time.monotonic()
        self._closed.set()

    async def aclose(self) -> None:
        self.close()


@attrs.define
class Wire:
    """Canned answers, in order, and every request the SDK sent (path and JSON body; the
    request itself, headers and all, in ``sent``)."""

    #: ``(status, body)``, or ``(status, body, headers)`` to answer with these headers only;
    #: a body is JSON, ``Streamed`` (server-sent events), or ``bytes`` sent as they are. An
    #: answer may also be a function of the request's JSON body that returns one (a server
    #: with rules of its own).
    answers: list[Any]
    requests: list[Message] = attrs.field(factory=list)
    paths: list[str] = attrs.field(factory=list)
    sent: list[httpx2.Request] = attrs.field(factory=list)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.paths.append(request.url.path)
        self.sent.append(request)
        self.requests.append(json.loads(request.content))
        if not self.answers:
            raise AssertionError("the wire ran out of answers")
        answer = self.answers.pop(0)
        if callable(answer):
            answer = answer(self.requests[-1])
        status, body, *headers = answer
        if isinstance(body, Streamed):
            kind = body.content_type
            return httpx2.Response(
                status, stream=body, headers={"content-type": kind} if kind else {}
            )
        if isinstance(body, bytes):  # not JSON: an HTML page, say
            return httpx2.Response(status, content=body, headers=headers[0] if headers else {})
        # retry-after-ms: the SDK's retries run, without its half-second backoff.
        return httpx2.Response(
            status, json=body, headers=headers[0] if headers else {"retry-after-ms": "1"}
        )

    def sync_client(self) -> httpx2.Client:
        return httpx2.Client(transport=httpx2.MockTransport(self.handle))

    def async_client(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self.handle))


async def ask(
    model: Callable[..., Any], history: list[Message], tools: agentloop.ToolRegistry | None = None
) -> Message:
    """One model step, awaited when the model is async, given ``tools``' specs as a Loop
    with those tools gives them (none without: as a Loop without tools)."""
    reply = model(history) if tools is None else model(history, tools=tools.specs())
    if inspect.isawaitable(reply):
        reply = await reply
    return reply  # type: ignore[no-any-return]


async def run(loop: agentloop.Loop, flavour: str, messages: Any) -> agentloop.RunResult:
    """``loop.run`` or ``await loop.arun``, by flavour; the result keeps the contract."""
    result = loop.run(messages) if flavour == "sync" else await loop.arun(messages)
    assert_contract(result, messages)
    return result


def assert_usage(result: agentloop.RunResult, replies: int, failed: int = 0) -> None:
    """Each of ``replies`` model replies, and ``failed`` replies the adapter refused (cut off,
    refused, empty), recorded the canned usage on its event; the run sums them all."""
    recorded = [t.usage for t in result.events if t.trigger == "model_replied"]
    assert recorded == [STEP_USAGE] * replies
    refused = [t.usage for t in result.events if t.trigger == "model_raised" and t.usage]
    assert refused == [STEP_USAGE] * failed
    assert result.usage == Usage(*(count * (replies + failed) for count in STEP_USAGE))


def _drained(value: Any) -> Any:
    # pydantic checks an Iterable[...] field lazily, as it is iterated.
    if isinstance(value, Iterator | list):
        return [_drained(item) for item in value]
    if isinstance(value, dict):
        return {key: _drained(item) for key, item in value.items()}
    return value


def conforms(body: Message, params: pydantic.TypeAdapter[Any]) -> None:
    """``body`` is valid as the SDK's own request params, strictly, with no key they lack.

    A TypedDict drops keys it does not declare, so the validated copy equals
    the body only when every key is one the SDK knows.
    """
    assert _drained(params.validate_python(body, strict=True)) == body
