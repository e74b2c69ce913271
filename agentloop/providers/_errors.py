"""An SDK's errors, marked for the retry policy: which may pass, and the wait they ask for.

The adapters' models catch what the SDK raises and mark it here (``classify``)
before it propagates; the Loop's retry policy reads the mark.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

from agentloop._core._retry import mark

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["classify", "retry_after", "stream_error_kind"]

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
