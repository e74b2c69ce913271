"""An SDK's errors, marked for the retry policy: which may pass, and the wait they ask for.

The adapters' models catch what the SDK raises and mark it here (``classify``)
before it propagates; the Loop's retry policy reads the mark. A response whose
body is not JSON is said so here too (``parsed``), with its status and body,
where the SDK would raise its JSON parser's error or hand back the text; so is
a streamed request's response that is not an event stream (``unstreamed``),
where the SDK would find no event in it.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.retry_policy import mark
from agentloop._errors import UnreadableResponse

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

__all__ = [
    "aparsed",
    "aunstreamed",
    "classify",
    "is_event_stream",
    "parsed",
    "raw_create",
    "retry_after",
    "stream_error_kind",
    "unreadable",
    "unstreamed",
]

#: How much of a body that is not JSON an ``UnreadableResponse`` quotes.
_QUOTED: Final = 200
#: How many bytes of a body in a stream's place are read to quote its start (UTF-8's widest).
_HEAD: Final = 4 * _QUOTED

#: A stream's content types: Server-Sent Events, and the AWS event-stream frames Bedrock
#: streams in. Any other, or none (which a browser's EventSource refuses too), is a
#: response in the stream's place: an HTML page, or a JSON body from a server that
#: ignored ``stream=True``.
_STREAMS: Final = frozenset({"text/event-stream", "application/vnd.amazon.eventstream"})

#: A stream's error event, by its error type, when it may pass: the response itself was a 200,
#: so its status says nothing. Anthropic's own types, the exceptions Bedrock's event
#: stream ends with (its SDK client names them so), and OpenAI's codes.
_STREAM_ERRORS: Final = {
    "server_error": "server",
    "rate_limit_exceeded": "rate_limit",
    "rate_limit_error": "rate_limit",
    "throttlingException": "rate_limit",
    "overloaded_error": "server",
    "api_error": "server",
    "internalServerException": "server",
    "serviceUnavailableException": "server",
    "modelStreamErrorException": "server",
    "modelTimeoutException": "timeout",
}


def raw_create(create: Callable[..., Any]) -> Callable[..., Any] | None:
    """``create``'s twin that answers with the raw response (the SDKs' ``with_raw_response``).

    Its ``parse()`` gives what ``create`` would, and its ``http_response`` the
    status and body to name when that body is not JSON. None for a ``create``
    without one (a stand-in client's).
    """
    owner = getattr(create, "__self__", None)
    raw = getattr(getattr(owner, "with_raw_response", None), getattr(create, "__name__", ""), None)
    return raw if callable(raw) else None


def parsed(response: Any) -> Any:
    """What a raw response parses to; ``UnreadableResponse`` when its body is not JSON."""
    try:
        value = response.parse()
    except ValueError as exc:  # the JSON parser's error, or the SDK's own for JSON it refused
        error = _unreadable(response)
        if error is None:
            raise
        raise error from exc
    return _read(response, value)


async def aparsed(response: Any) -> Any:
    """``parsed`` for an async client's raw response (whose ``parse()`` may be awaited)."""
    try:
        value = response.parse()
        if inspect.isawaitable(value):
            value = await value
    except ValueError as exc:
        error = _unreadable(response)
        if error is None:
            raise
        raise error from exc
    return _read(response, value)


def classify(exc: Exception, sdk: ModuleType | None) -> None:
    """Mark an SDK's error by its own exception types, when it may pass.

    A rate limit, a 5xx, a 408 (a request or model timeout: Bedrock's
    ``ModelTimeoutException``), a timeout, a lost connection, or a stream's
    error event of a passing type; the server's ``Retry-After``
    (``retry-after-ms`` first) goes with it. OpenAI's and Anthropic's SDKs
    share these type names. Anything else stays unmarked.
    """
    if sdk is None:
        return
    if isinstance(exc, sdk.APITimeoutError):  # a subclass of APIConnectionError: first
        mark(exc, "timeout")
    elif isinstance(exc, sdk.APIConnectionError):
        mark(exc, "connection")
    elif isinstance(exc, sdk.RateLimitError):
        mark(exc, "rate_limit", retry_after(exc.response.headers))
    elif isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        if status >= 500:  # 529: overloaded too
            mark(exc, "server", retry_after(exc.response.headers))
        elif status == 408:
            mark(exc, "timeout", retry_after(exc.response.headers))
        elif status < 400:  # an error event in a stream that began well
            kind = _STREAM_ERRORS.get(_error_type(exc.body))
            if kind is not None:
                mark(exc, kind)


def stream_error_kind(kind: object) -> str | None:
    """The kind of passing error a stream's error event of type (or code) ``kind`` is, if any."""
    return _STREAM_ERRORS.get(kind) if type(kind) is str else None


def _error_type(body: object) -> str:
    """The ``error.type`` of an error event's body (``{'type': 'error', 'error': {...}}``)."""
    error = body.get("error") if type(body) is dict else None
    kind = error.get("type") if type(error) is dict else None
    return kind if type(kind) is str else ""


def retry_after(headers: Any) -> float | None:
    """The wait a response asks for, in seconds.

    ``retry-after-ms``, or ``retry-after`` in seconds (an HTTP date, which
    needs a clock, is left to the policy's backoff).
    """
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if 0 <= seconds < math.inf:
            return seconds
    return None


def _read(response: Any, value: Any) -> Any:
    """``value``, unless it is the text an SDK hands back for a body it could not read."""
    error = _unreadable(response) if isinstance(value, str) else None
    if error is not None:
        raise error
    return value


def _unreadable(response: Any) -> UnreadableResponse | None:
    """The error for a raw response whose body is not JSON; None when it is JSON."""
    http = response.http_response
    try:
        orjson.loads(http.content)
    except orjson.JSONDecodeError:
        text = http.content.decode("utf-8", "replace")
        return unreadable(
            http.status_code, text, str(http.request.url), http.headers.get("content-type")
        )
    return None


def unstreamed(events: Any) -> UnreadableResponse | None:
    """The error for an SDK stream whose response is not an event stream; None when it is.

    Read when the stream opens, before any event: the SDK would find none in
    an HTML page, and the fold would say the reply was empty or ended early.
    The start of the body is read to quote it (the stream's ``close()`` ends
    the rest). None for a stand-in stream without an HTTP response.
    """
    http = _not_a_stream(events)
    if http is None:
        return None
    head = b""
    for chunk in http.iter_bytes():
        head += chunk
        if len(head) >= _HEAD:
            break
    return _unstreamed(http, head)


async def aunstreamed(events: Any) -> UnreadableResponse | None:
    """``unstreamed`` for an async SDK stream."""
    http = _not_a_stream(events)
    if http is None:
        return None
    head = b""
    async with contextlib.aclosing(http.aiter_bytes()) as chunks:
        async for chunk in chunks:
            head += chunk
            if len(head) >= _HEAD:
                break
    return _unstreamed(http, head)


def _not_a_stream(events: Any) -> Any:
    """The HTTP response of an SDK stream (its ``response``) if its content type is no stream's."""
    http = getattr(events, "response", None)
    if http is None:
        return None  # a stand-in stream's
    return None if is_event_stream(http.headers.get("content-type")) else http


def is_event_stream(content_type: str | None) -> bool:
    """Whether a response of ``content_type`` is a stream (any case, any parameters)."""
    return (content_type or "").partition(";")[0].strip().lower() in _STREAMS


def _unstreamed(http: Any, head: bytes) -> UnreadableResponse:
    """The error for ``http``, whose body (``head`` its start) is not an event stream."""
    text = head.decode("utf-8", "replace")
    kind = http.headers.get("content-type")
    return unreadable(http.status_code, text, str(http.request.url), kind, "an event stream")


def unreadable(
    status: int, text: str, url: str, content_type: str | None, expected: str = "JSON"
) -> UnreadableResponse:
    """The error for a body that is not ``expected`` (JSON, or an event stream), quoted."""
    return UnreadableResponse(status, text[:_QUOTED], url, content_type, expected=expected)
