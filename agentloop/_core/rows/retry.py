"""Retries and fallback models: their rows' guards and effects, and what they read.

A failed model call is retried after the wait the retry policy chose
(``retry_planned``, ``backing_off``), then the next fallback model is asked
(``fallback_left``). What these rows read is derived from the log, so nothing
needs settling. ``RunState`` inherits them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentloop._core.requests import Wait
from agentloop._core.table import Guard, Trigger

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.retry_policy import RetryPolicy
    from agentloop._core.state import _Draft
    from agentloop._core.values import Transition

__all__ = ["RetryRows"]

_BACK_OFF: Final = Trigger.BACK_OFF


class RetryRows:
    """The retry and fallback guards and effects, as methods of ``RunState`` (a mixin of it)."""

    if TYPE_CHECKING:  # what these rows read and assign, as RunState holds it
        _clock: Callable[[], float]
        _draft: _Draft
        _events: list[Transition]
        _models: tuple[str, ...]
        _outstanding: Trigger | None
        _retry: RetryPolicy | None
        _since: dict[str | None, float]
        _wrapping: str | None
    else:
        # RunState holds the slots (an instance has one layout). The type checker is not
        # shown this empty tuple, which to it would forbid assigning RunState's slots here.
        __slots__ = ()

    def _set_resilience(self, retry: RetryPolicy | None, models: tuple[str, ...]) -> None:
        """Retry failed model calls by ``retry``, and fall back through ``models`` (names).

        What ``Loop(retry=..., model=fallback(...))`` sets on each engine of its
        runs, a resumed one too (its replay took the recorded waits instead).
        """
        self._retry, self._models = retry, models

    # The wrap-up step is one model step past the budget, whatever it meets: no retry, no
    # fallback model (a model that raises there ends the run failed).
    def _retry_planned(self) -> bool:
        return self._wrapping is None and self._draft.wait_in is not None

    def _fallback_left(self) -> bool:
        return self._wrapping is None and self._model_index + 1 < len(self._models)

    def _plan_wait(self) -> None:
        self._draft.wait = self._draft.wait_in

    def _ask_for_wait(self) -> None:
        last = self._events[-1]
        assert last.wait is not None, "backing_off is entered by a row that plans the wait"
        self._outstanding = _BACK_OFF
        self._since[None] = self._clock()
        self._draft.request = Wait(last.wait, None if self._retry is None else self._retry.sleep)

    def _next_model(self) -> None:
        pass  # model_index counts the rows that took it: nothing to keep but the event

    @property
    def _model_index(self) -> int:
        """Which fallback model is asked now: the rows that moved on to the next, counted."""
        return sum(event.guard is Guard.FALLBACK_LEFT for event in self._events)

    def _retries(self) -> int:
        """The retries of the ask in hand made so far.

        The ``retry_planned`` rows since the model last replied or a fallback model took over.
        """
        count = 0
        for event in reversed(self._events):
            if event.guard is Guard.RETRY_PLANNED:
                count += 1
            elif event.trigger is not Trigger.WAITED:
                break
        return count

    def _planned_wait(self, exc: BaseException) -> float | None:
        """The wait the retry policy chooses after the model raised ``exc`` (None: no retry)."""
        policy = self._retry
        return None if policy is None else policy.wait_for(exc, self._retries())

    def _model_name(self) -> str | None:
        models = self._models
        return models[self._model_index] if models else None
