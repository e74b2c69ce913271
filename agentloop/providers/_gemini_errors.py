"""google-genai's errors, and the transport's it lets through, marked for the retry policy.

And a body that is not JSON, which the SDK reports with its JSON parser's
error, said as the other adapters say it (``UnreadableResponse``).

The SDK raises ``ClientError`` (4xx) and ``ServerError`` (5xx), each with the
status ``code`` and the error's JSON as ``details``; a 429's wait sits in the
``RetryInfo`` among those details, which the SDK itself ignores. It does not
wrap the transport's errors: a timeout is httpx's ``TimeoutException`` (the
SDK sends through httpx2, or httpx when given an httpx client), a lost
connection its ``RemoteProtocolError`` or a ``NetworkError``, and aiohttp's
``ClientConnectionError`` when the SDK's async client uses aiohttp.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
from typing import Final

from google.genai import errors

from agentloop._core.retry_policy import mark
from agentloop.providers._errors import retry_after, unreadable

__all__ = ["classify_gemini"]

# A protobuf Duration in JSON: seconds, up to nine decimals, then "s" ("37s", "0.250s").
_DURATION: Final = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)s")
_RETRY_INFO: Final = "type.googleapis.com/google.rpc.RetryInfo"


def _transport_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """The timeouts and the lost connections of each HTTP library the SDK may send through."""
    timeouts: list[type[Exception]] = []
    lost: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError):
            library = importlib.import_module(name)
            timeouts.append(library.TimeoutException)
            lost += [library.NetworkError, library.RemoteProtocolError]
    with contextlib.suppress(ImportError):  # the SDK's async client uses it when installed
        lost.append(importlib.import_module("aiohttp").ClientConnectionError)
    return tuple(timeouts), tuple(lost)


_TIMEOUTS, _LOST = _transport_errors()


def classify_gemini(exc: Exception, url: str) -> Exception | None:
    """Mark ``exc`` with its kind when it may pass; give the error to raise in its place, if any.

    A 429, a 408, a 5xx, a timeout, a lost connection are marked; a 400 (a bad
    API key is one) and every other error stay unmarked. A body that is not
    JSON (the SDK raised its parser's error, so the status was a 200) gives an
    ``UnreadableResponse`` naming ``url`` (what was asked).
    """
    if isinstance(exc, errors.APIError):
        code = exc.code
        kind = "server" if code >= 500 else {429: "rate_limit", 408: "timeout"}.get(code)
        if kind is not None:
            wait = retry_delay(exc.details)
            if wait is None and exc.response is not None:
                wait = retry_after(getattr(exc.response, "headers", {}))
            mark(exc, kind, wait)
    elif isinstance(exc, _TIMEOUTS):
        mark(exc, "timeout")
    elif isinstance(exc, _LOST):
        mark(exc, "connection")
    elif isinstance(exc, json.JSONDecodeError):  # a whole response's body
        return unreadable(200, exc.doc, url, None)
    elif isinstance(exc, errors.UnknownApiResponseError):  # a stream's chunk
        said = str(exc)
        return unreadable(200, said.partition("Raw response: ")[2] or said, url, None)
    return None


def retry_delay(details: object) -> float | None:
    """The wait a Google error's ``RetryInfo`` asks for (``"retryDelay": "37s"``), in seconds."""
    error = details.get("error", details) if isinstance(details, dict) else None
    found = error.get("details") if isinstance(error, dict) else None
    for detail in found if isinstance(found, list) else ():
        if isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO:
            delay = detail.get("retryDelay")
            matched = _DURATION.fullmatch(delay) if isinstance(delay, str) else None
            if matched:
                return float(matched[1])
    return None
