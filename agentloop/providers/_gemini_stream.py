"""A Gemini stream (``streamGenerateContent?alt=sse``) as deltas, then its reply.

The SDK sends the request when its stream is first read, so ``open_stream``
(``aopen_stream`` for an async client) reads the first chunk at once: an
HTTP error is then raised by the model call itself, as the other adapters'
are, and marked for the retry policy; so is a response that is no event
stream (``_unstreamed``). ``generate_stream`` (``agenerate_stream``)
reads the chunks through the fold loop every adapter's stream goes through
(``folded``): a call arrives whole in one chunk (its start, then its
arguments in one piece), usage is a running total (the last chunk's counts),
and the reply is the one the same response unstreamed gives. What breaks the
stream is marked as it would be at the call (``classify_gemini``): an error
chunk is the SDK's ``ServerError`` or ``ClientError``, by its code.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import orjson
from google.genai import errors

from agentloop._drivers.deltas import ArgumentsDelta, TextDelta, ToolCallStart, UsageDelta
from agentloop.providers._errors import is_event_stream, unreadable
from agentloop.providers._gemini_reply import GeminiParts
from agentloop.providers._streaming import afolded, folded

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator

    from google.genai import types

    from agentloop._drivers.deltas import Delta
    from agentloop._errors import UnreadableResponse
    from agentloop.providers._convert import Message
    from agentloop.providers._streaming import Errors

__all__ = ["agenerate_stream", "aopen_stream", "generate_stream", "open_stream"]


class _Opened:
    """The SDK's stream with its first chunk already read (``None``: it had none)."""

    __slots__ = ("first", "rest")

    def __init__(self, first: Any, rest: Iterator[Any]) -> None:
        self.first = first
        self.rest = rest

    def __iter__(self) -> Iterator[types.GenerateContentResponse]:
        if self.first is not None:
            yield self.first
        yield from self.rest

    def close(self) -> None:
        """Close the SDK's stream, and so its HTTP response."""
        self.rest.close()  # type: ignore[attr-defined]


class _AOpened:
    """``_Opened`` for an async client."""

    __slots__ = ("failed", "first", "rest")

    def __init__(self, first: Any, rest: AsyncIterator[Any]) -> None:
        self.first = first
        self.rest = rest
        self.failed: Any = None  # the response an error chunk came in, left open by the SDK

    async def __aiter__(self) -> AsyncIterator[types.GenerateContentResponse]:
        if self.first is not None:
            yield self.first
        try:
            async for chunk in self.rest:
                yield chunk
        except errors.APIError as exc:
            self.failed = exc.response
            raise

    async def close(self) -> None:
        """Close the SDK's stream and its HTTP response, now."""
        await _aclose(self.rest)
        if self.failed is not None:
            await _aclose_response(self.failed)


def open_stream(create: Callable[..., Iterator[Any]], url: str) -> Callable[..., _Opened]:
    """``create`` (the SDK's ``generate_content_stream``), its request sent by the call.

    A first chunk that came in a response that is no event stream is
    ``_unstreamed``'s ``UnreadableResponse`` (``url``: what was asked).
    """

    def open_and_peek(**request: Any) -> _Opened:
        rest = create(**request)
        try:
            first = next(rest, None)
            page = _unstreamed(first, url)
            if page is not None:
                raise page
        except BaseException:
            rest.close()  # type: ignore[attr-defined]
            raise
        return _Opened(first, rest)

    return open_and_peek


def aopen_stream(create: Callable[..., Any], url: str) -> Callable[..., Any]:
    """``open_stream`` for an async client's ``generate_content_stream``."""

    async def open_and_peek(**request: Any) -> _AOpened:
        rest = await create(**request)
        try:
            first = await anext(rest, None)
            page = _unstreamed(first, url)
            if page is not None:
                raise page
        except BaseException as exc:
            await _aclose(rest)
            if isinstance(exc, errors.APIError):  # an error chunk first
                await _aclose_response(exc.response)
            raise
        return _AOpened(first, rest)

    return open_and_peek


def _unstreamed(first: Any, url: str) -> UnreadableResponse | None:
    """The error for a stream whose first chunk came in a response that is no event stream.

    The SDK asks for Server-Sent Events (``alt=sse``), reads JSON lines too,
    and hides its HTTP response: the content type is the one its first chunk
    carries (``sdk_http_response``), and the quote is that chunk as the SDK
    read it. A body that is not JSON at all never makes a chunk: the SDK's
    parser error is ``classify_gemini``'s ``UnreadableResponse``. None for no
    chunk, or one without the response's headers (a stand-in's).
    """
    headers = getattr(getattr(first, "sdk_http_response", None), "headers", None)
    if headers is None:
        return None
    kind = next((value for key, value in headers.items() if key.lower() == "content-type"), None)
    if is_event_stream(kind):
        return None
    said = first.model_dump_json(exclude={"sdk_http_response"}, exclude_none=True)
    return unreadable(200, said, url, kind, "an event stream")


async def _aclose_response(response: Any) -> None:
    """Close the HTTP response an error chunk came in: the SDK raises the error without it.

    The error holds the SDK's response, which holds the transport's (httpx's,
    or aiohttp's) as its ``response_stream``.
    """
    response = getattr(response, "response_stream", response)
    with contextlib.suppress(Exception):
        if hasattr(response, "aclose"):
            await response.aclose()
        elif hasattr(response, "release"):  # aiohttp's
            response.release()


async def _aclose(rest: Any) -> None:
    """Close the SDK's async stream and its HTTP response now.

    The SDK closes the response when a read it awaits is cancelled; its
    ``aclose()`` alone leaves the response to the garbage collector. So the
    stream is read on to its next wait, and that read cancelled.
    """
    while True:
        reading = asyncio.ensure_future(anext(rest))
        try:
            await asyncio.sleep(0)  # the read runs up to its first wait, or to its end
        finally:
            waiting = not reading.done()
            if waiting:
                reading.cancel()
        if waiting:
            with contextlib.suppress(BaseException):
                await reading
            break
        if reading.exception() is not None:
            break  # the stream ended, or broke: its response is closed already
    with contextlib.suppress(Exception):
        await rest.aclose()


class _GeminiFold:
    """Chunks folded as they arrive: each one's deltas, the reply at the end."""

    __slots__ = ("parts",)

    done = False  # read to the stream's end: no chunk says it is the last

    def __init__(self) -> None:
        self.parts = GeminiParts()

    def feed(self, chunk: types.GenerateContentResponse) -> list[Delta]:
        parts = self.parts
        out: list[Delta] = []
        for new in parts.add(chunk):
            if type(new) is str:
                out.append(TextDelta(text=new))
                continue
            assert type(new) is dict, "a part is text or a call"
            index = len(parts.calls) - 1
            out.append(ToolCallStart(index=index, id=new["id"], name=new["name"]))
            out.append(ArgumentsDelta(index=index, text=orjson.dumps(new["arguments"]).decode()))
        if parts.finish is not None or parts.blocked is not None:  # the last chunk: its usage
            used = parts.used
            if used is not None:
                out.append(UsageDelta(**used))
        return out

    def missing(self) -> str | None:
        ended = self.parts.finish is not None or self.parts.blocked is not None
        return None if ended else "finish_reason"

    def reply(self) -> Message:
        return self.parts.reply()


def generate_stream(chunks: _Opened, errors: Errors) -> Generator[Delta | Message, None, None]:
    """The deltas of a Gemini stream, then its reply; ``errors`` marks what breaks it."""
    return folded(chunks, _GeminiFold(), errors=errors)


def agenerate_stream(chunks: _AOpened, errors: Errors) -> AsyncGenerator[Delta | Message, None]:
    """``generate_stream`` over an async SDK stream."""
    return afolded(chunks, _GeminiFold(), errors=errors)
