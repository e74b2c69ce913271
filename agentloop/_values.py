"""Small values: budgets, the cancel token, transition events and run results.

Transitions and results are frozen, and what they hold of the record is kept
as JSON bytes: every access to ``transcript``, ``appended`` or ``rejected``
decodes a fresh copy, so nobody holding one can rewrite it for anyone else.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from agentloop._machine import Guard, State, Trigger

if TYPE_CHECKING:
    import os

__all__ = ["Budget", "CancelToken", "RunResult", "Transition"]


def _non_negative_int(_: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{attribute.name} must be a non-negative int, got {type(value).__name__} {value!r}"
        )
    if value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int, got {value!r}")


@attrs.frozen(kw_only=True)
class Budget:
    """The two limits of a run.

    ``max_steps`` bounds model callback invocations, failed and malformed ones
    included; ``max_calls`` bounds accepted tool attempts, whatever their
    outcome.
    """

    max_steps: int = attrs.field(validator=_non_negative_int)
    max_calls: int = attrs.field(validator=_non_negative_int)


class CancelToken:
    """A flag a caller sets to stop a run at its next checkpoint.

    ``cancel()`` is safe from any thread; the run checks ``cancelled`` before
    asking the model, right after its reply, and right before a tool runs.
    """

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Request cancellation. Idempotent."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether cancellation has been requested."""
        return self._event.is_set()

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.cancelled})"


def _decode(data: bytes) -> Any:
    return orjson.loads(data)


@attrs.frozen(kw_only=True)
class Transition:
    """One state change of a run, with the budget ledger after it.

    ``appended`` holds the messages this transition added to the history (a
    fresh copy on each access); the transcript is exactly the input followed
    by the ``appended`` of every transition, in order.
    """

    #: The state before and after.
    source: State
    dest: State
    #: What the driver reported, and the guard that chose this row (if any).
    trigger: Trigger
    guard: Guard | None = None
    #: The counters after the transition.
    steps: int
    calls: int
    #: The call involved, if any: its id, tool name, and result status.
    call_id: str | None = None
    tool: str | None = None
    status: str | None = None
    #: ``'max_steps'`` / ``'max_calls'`` on exhaustion; a description on errors.
    reason: str | None = None
    error: str | None = None
    #: The exception behind ``error``, kept for the caller (not compared).
    exception: BaseException | None = attrs.field(default=None, eq=False, repr=False)
    appended_json: tuple[bytes, ...] = attrs.field(default=(), repr=False)

    @property
    def appended(self) -> list[dict[str, Any]]:
        """The messages this transition appended (a fresh copy)."""
        return [_decode(data) for data in self.appended_json]


@attrs.frozen(kw_only=True)
class RunResult:
    """How a run ended. Every collection it hands out is a fresh copy."""

    #: The terminal state (a ``str`` enum: ``result.status == 'finished'``).
    status: State
    #: The final answer's text, when the run finished.
    output: str | None = None
    steps: int
    calls: int
    budget: Budget
    #: ``'max_steps'`` or ``'max_calls'`` when exhausted.
    reason: str | None = None
    #: A human-readable description for failed, malformed and repeated_call.
    error: str | None = None
    #: Every transition, in order: the complete budget ledger.
    events: tuple[Transition, ...]
    transcript_json: bytes = attrs.field(repr=False)
    rejected_value: object = attrs.field(default=None, repr=False)

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """Input and every appended message, in order (a fresh copy)."""
        return _decode(self.transcript_json)  # type: ignore[no-any-return]

    @property
    def rejected(self) -> Any:
        """A copy of the reply that ended the run, if one did; never in the transcript."""
        return copy.deepcopy(self.rejected_value)

    # Saved runs: the format and its checks live in _runfile.py.

    def to_json(self) -> str:
        """The result as a run file: versioned JSON text (``RunResult.from_json`` reads it)."""
        from agentloop._runfile import dump

        return dump(self)

    @classmethod
    def from_json(cls, text: str | bytes) -> RunResult:
        """A result from run file text; ``RunFileError`` if it is not a valid one."""
        from agentloop._runfile import load

        return load(text)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write this result to ``path`` as a run file."""
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunResult:
        """Read a run file; ``OSError`` if unreadable, ``RunFileError`` if invalid."""
        from agentloop._runfile import load

        return load(Path(path).read_bytes(), source=str(path))
