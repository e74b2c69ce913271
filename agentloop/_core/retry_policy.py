"""The retry policy: which model errors are worth another attempt, and how long to wait first.

Pure values and arithmetic, no I/O and no clock: the engine asks
``RetryPolicy.wait_for(exc, failures)`` when the model raises, and the
answer (seconds, or ``None``: not retried) goes into the event that takes
the ``retry_planned`` row, so a replay reads the wait rather than drawing
it again. The jitter's random numbers come from ``random`` (a
``random.Random(seed).random`` makes them repeatable). Waiting itself is the
drivers' (``agentloop._drivers.waits``).

An error is classified by ``transient(exc)``: the provider adapters mark the
SDKs' own exceptions (``mark``) with their kind and the server's
``Retry-After``; a plain ``TimeoutError`` or ``ConnectionError`` counts too.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable
from typing import Any, Final

import attrs

from agentloop._core.values import CancelToken

__all__ = ["KINDS", "RetryPolicy", "Transient", "checked_retry", "mark", "transient"]

#: The kinds of transient error: what the default policy retries.
KINDS: Final = frozenset({"rate_limit", "server", "timeout", "connection"})
# The attribute an adapter sets on an SDK's exception (kept off its type: users catch those).
_MARK: Final = "agentloop_transient"


def _kind(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in KINDS:
        raise ValueError(f"expected kind to be one of {sorted(KINDS)}, got {value!r:.40}")


def _after(_: object, attribute: attrs.Attribute[float | None], value: object) -> None:
    if value is not None and (
        type(value) not in (int, float) or not 0 <= value < math.inf  # type: ignore[operator]
    ):
        raise ValueError(
            f"expected retry_after to be a finite number of seconds, 0 or more, or None, "
            f"got {value!r:.40}"
        )


@attrs.frozen(kw_only=True)
class Transient:
    """A model error that may pass: its ``kind`` and the server's ``Retry-After`` (seconds)."""

    #: ``rate_limit``, ``server`` (5xx, overloaded), ``timeout`` or ``connection``.
    kind: str = attrs.field(validator=_kind)
    #: What the server asked us to wait, when it said (``Retry-After``).
    retry_after: float | None = attrs.field(default=None, validator=_after)


def mark(exc: BaseException, kind: str, retry_after: float | None = None) -> None:
    """Mark ``exc`` as transient, of ``kind`` (what an adapter does with an SDK's error)."""
    setattr(exc, _MARK, Transient(kind=kind, retry_after=retry_after))


def transient(exc: BaseException) -> Transient | None:
    """What kind of passing error ``exc`` is, or ``None`` for one that will not pass.

    An adapter's mark (``mark``) first; else a ``TimeoutError`` is ``timeout``
    and a ``ConnectionError`` is ``connection``. Only the exception's own
    ``__dict__`` is read, so no user code runs.
    """
    marked = getattr(exc, "__dict__", {}).get(_MARK)
    if type(marked) is Transient:
        return marked
    if isinstance(exc, TimeoutError):
        return Transient(kind="timeout")
    if isinstance(exc, ConnectionError):
        return Transient(kind="connection")
    return None


def _positive_int(_: object, attribute: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or value < 1:
        raise (TypeError if type(value) is not int else ValueError)(
            f"{attribute.name} must be an int of 1 or more, got {value!r:.40}"
        )


def _seconds(_: object, attribute: attrs.Attribute[float], value: object) -> None:
    if type(value) not in (int, float) or not 0 <= value < math.inf:  # type: ignore[operator]
        raise (TypeError if type(value) not in (int, float) else ValueError)(
            f"{attribute.name} must be a finite number of seconds, 0 or more, got {value!r:.40}"
        )


def _growth(_: object, attribute: attrs.Attribute[float], value: object) -> None:
    if type(value) not in (int, float) or not 1 <= value < math.inf:  # type: ignore[operator]
        raise (TypeError if type(value) not in (int, float) else ValueError)(
            f"{attribute.name} must be a finite number, 1 or more (each wait is the one "
            f"before times it), got {value!r:.40}"
        )


def _fraction(_: object, attribute: attrs.Attribute[float], value: object) -> None:
    if type(value) not in (int, float) or not 0 <= value <= 1:  # type: ignore[operator]
        raise (TypeError if type(value) not in (int, float) else ValueError)(
            f"{attribute.name} must be a number from 0 to 1, got {value!r:.40}"
        )


def _kinds(value: object) -> frozenset[str]:
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise TypeError(f"retry_on must be a collection of kinds, got {type(value).__name__}")
    kinds = frozenset(value)
    if not kinds <= KINDS:
        raise ValueError(
            f"retry_on must hold kinds from {sorted(KINDS)}, got {sorted(map(str, kinds - KINDS))}"
        )
    return kinds


def _callable(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{attribute.name} must be callable, got {type(value).__name__}")


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How a run retries a model that failed: ``Loop(model, retry=RetryPolicy(...))``.

    ``attempts`` bounds the asks of one model for one reply, the first
    included (3: two retries). Before retry ``n`` (0 first) the run waits
    ``min(cap, base * factor**n)``, less up to ``jitter`` of it at random,
    and at least the server's ``Retry-After``; an error whose ``Retry-After``
    is past ``cap`` is not retried (a fallback model is asked, or the run
    fails). Only errors whose kind (``classify(exc).kind``, by default
    ``transient``) is in ``retry_on`` are retried. Every attempt is a model
    step, so ``max_steps`` bounds them all. ``random`` draws the jitter (pass
    ``random.Random(seed).random`` to repeat it); ``sleep(seconds, token)``,
    when given, is what the drivers wait with instead of their own (tests
    inject one; it may return an awaitable under asyncio).
    """

    attempts: int = attrs.field(default=3, validator=_positive_int)
    base: float = attrs.field(default=0.5, validator=_seconds)
    factor: float = attrs.field(default=2.0, validator=_growth)
    cap: float = attrs.field(default=30.0, validator=_seconds)
    jitter: float = attrs.field(default=0.5, validator=_fraction)
    retry_on: frozenset[str] = attrs.field(default=KINDS, converter=_kinds)
    classify: Callable[[BaseException], Transient | None] = attrs.field(
        default=transient, validator=_callable
    )
    random: Callable[[], float] = attrs.field(default=_random.random, validator=_callable)
    sleep: Callable[[float, CancelToken | None], object] | None = attrs.field(
        default=None, validator=_callable
    )

    def wait_for(self, exc: BaseException, failures: int) -> float | None:
        """Seconds to wait before asking again after ``exc``, or ``None``: no retry.

        ``failures`` is how many retries of this ask were made already.
        """
        if failures + 1 >= self.attempts:
            return None
        found = self.classify(exc)
        if found is None or found.kind not in self.retry_on:
            return None
        backoff = min(self.cap, self.base * self.factor**failures)
        wait = backoff * (1 - self.jitter * self.random())
        after = found.retry_after
        if after is not None:
            if after > self.cap:
                return None
            wait = max(wait, after)
        return float(wait)


def checked_retry(retry: object) -> RetryPolicy | None:
    """``retry``, a ``RetryPolicy`` or None; else ``TypeError`` saying what it is."""
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise TypeError(
            f"expected retry to be an agentloop.models.RetryPolicy or None, got {retry!r:.80}"
        )
    return retry
