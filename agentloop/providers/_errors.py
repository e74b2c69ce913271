"""An SDK's errors, marked for the retry policy: which may pass, and the wait they ask for.

The adapters' models catch what the SDK raises and mark it here (``classify``)
before it propagates; the Loop's retry policy reads the mark.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from agentloop._core._retry import mark

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["classify", "retry_after"]


def classify(exc: Exception, sdk: ModuleType | None) -> None:
    """Mark an SDK's error by its own exception types, when it may pass.

    A rate limit, a 5xx, a timeout, a lost connection; the server's
    ``Retry-After`` (``retry-after-ms`` first) goes with it. OpenAI's and
    Anthropic's SDKs share these type names. Anything else stays unmarked.
    """
    if sdk is None:
        return
    if isinstance(exc, sdk.APITimeoutError):  # a subclass of APIConnectionError: first
        mark(exc, "timeout")
    elif isinstance(exc, sdk.APIConnectionError):
        mark(exc, "connection")
    elif isinstance(exc, sdk.RateLimitError):
        mark(exc, "rate_limit", retry_after(exc.response.headers))
    elif isinstance(exc, sdk.APIStatusError) and exc.status_code >= 500:  # 529: overloaded too
        mark(exc, "server", retry_after(exc.response.headers))


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
