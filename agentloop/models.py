"""agentloop.models: resilience for the model a Loop asks.

``RetryPolicy`` retries a model that failed with a passing error (a rate
limit, a 5xx, a timeout, a lost connection), after a wait with exponential
backoff and jitter that honours the server's ``Retry-After``:
``Loop(model, retry=RetryPolicy(attempts=5))``. The provider adapters'
models are retried by ``RetryPolicy()`` unless told otherwise; plain
callbacks are not. ``fallback(primary, secondary, ...)`` is a model of
models asked in turn: ``Loop(fallback(a, b))``. ``transient(exc)`` says how
an error is classified, and ``mark(exc, kind)`` marks one of your own as
passing. ``sleep``/``asleep`` are how the drivers wait (a policy's
``sleep=`` replaces them). See the docs' "Resilience" page.
"""

from __future__ import annotations

from agentloop._core.retry_policy import KINDS, RetryPolicy, Transient, mark, transient
from agentloop._drivers.waits import asleep, sleep
from agentloop._loop.fallback import Fallback, fallback
from agentloop._names import publish as _publish

__all__ = [
    "KINDS",
    "Fallback",
    "RetryPolicy",
    "Transient",
    "asleep",
    "fallback",
    "mark",
    "sleep",
    "transient",
]

_publish(__name__, globals(), [name for name in __all__ if name != "KINDS"])
