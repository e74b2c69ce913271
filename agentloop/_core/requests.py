"""The engine's requests: what ``next()`` hands a driver to do, and to report on.

``AskModel`` (call the model), ``RunTool`` (run a call), ``ReviewCalls``
(review an accepted batch), ``AwaitApproval`` (a person decides), ``Wait``
(back off before a retry), which ``agentloop._core.values`` re-exports, and
``CheckOutput`` (a final for the driver's output validators).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from agentloop._core.approval import Decision, PendingCall
from agentloop._core.cancel import CancelToken
from agentloop._core.context_policy import Summarise
from agentloop._core.messages import History

__all__ = [
    "AskModel",
    "AwaitApproval",
    "CheckOutput",
    "Messages",
    "Need",
    "ReviewCalls",
    "RunTool",
    "Wait",
    "uncalled_check",
]


class AskModel:
    """The engine's request: call the model with ``history``, then report its reply.

    ``history`` decodes a fresh copy on each access, and ``history_json`` is
    the same as one JSON array: a driver pays only for the form it uses (the
    run-file replay uses neither). ``messages`` is the record itself, read
    only, for the built-in adapters (``Messages``).
    """

    __slots__ = ("_count", "_record", "_size", "tools_disabled")

    def __init__(self, record: History | bytearray, size: int) -> None:
        # The run's history (append-only: its first ``size`` bytes stay what they were),
        # or the request a context policy fitted, as one JSON array of ``size`` bytes.
        self._record, self._size = record, size
        self._count = record.count(size) if isinstance(record, History) else -1
        #: The wrap-up step (``on_exhausted='answer'``): the model is to answer without
        #: tools; a driver calls it ``model(history, tool_choice='none')`` (see ``options``).
        self.tools_disabled = False

    @property
    def options(self) -> dict[str, Any]:
        """The keyword arguments this request adds to the model call (none, mostly)."""
        return {"tool_choice": "none"} if self.tools_disabled else {}

    @property
    def history(self) -> list[dict[str, Any]]:
        """A fresh copy of the history, as the model is to see it."""
        record = self._record
        if isinstance(record, History):
            return record.decoded(self._count)
        return orjson.loads(record)  # type: ignore[no-any-return]

    @property
    def messages(self) -> Messages | list[dict[str, Any]]:
        """The history as the built-in adapters read it: the record's messages, read only.

        Under a context policy the request is the fitted view, not the
        record's messages: a fresh copy of it, which an adapter converts whole.
        """
        record = self._record
        if isinstance(record, History):
            return Messages(record, self._count)
        return self.history

    @property
    def history_json(self) -> bytes:
        """The history as one JSON array."""
        record = self._record
        buffer = record.buffer if isinstance(record, History) else record
        if len(buffer) == self._size:
            return bytes(buffer)
        held = buffer[: self._size]  # messages appended since: a comma where the array closed
        held[-1] = 0x5D  # ]
        return bytes(held)

    def __repr__(self) -> str:
        return f"AskModel(<history of {self._size} bytes>)"


class Messages:
    """The first messages of a run's history, read only: what a built-in adapter is given.

    ``json(i)`` is message ``i``'s JSON and ``decoded(i)`` a fresh copy of it.
    ``cache`` is the run's own, never another run's: an adapter keeps there
    what it made of the messages (each converted once), as a message never
    changes once recorded. No buffer is exported, so the run may go on
    appending while a thread still reads (a model call interrupted); the
    count is fixed when the request is made.
    """

    __slots__ = ("_count", "_history")

    def __init__(self, history: History, count: int) -> None:
        self._history, self._count = history, count

    def __len__(self) -> int:
        return self._count

    def json(self, index: int) -> bytes:
        """Message ``index``'s JSON."""
        if not 0 <= index < self._count:
            raise IndexError(f"expected a message index in [0, {self._count}), got {index}")
        return self._history.message_json(index)

    def decoded(self, index: int) -> dict[str, Any]:
        """A fresh copy of message ``index``."""
        return orjson.loads(self.json(index))  # type: ignore[no-any-return]

    @property
    def cache(self) -> dict[object, Any]:
        """The run's place for what adapters make of its messages, by adapter."""
        return self._history.cache

    def __repr__(self) -> str:
        return f"Messages(<{self._count} recorded messages>)"


class RunTool(NamedTuple):
    """The engine's request: run ``call`` (a fresh copy), report the outcome.

    ``review`` is what the driver's review answered about the call (see
    ``ReviewCalls``), and ``decision`` a person's decision about it: both
    ``None`` when there was none. The driver hands them to its dispatcher.
    """

    call: dict[str, Any]
    review: object = None
    decision: Decision | None = None


class ReviewCalls(NamedTuple):
    """The engine's request: review these calls of the accepted batch before any of it runs.

    Handed out only to a driver that reviews (``engine.reviews = True``),
    once per batch. Report ``reviewed({call_id: answer})``: an answer whose
    ``asks`` is true (``ask(reason)``, or a prepared call that carries one)
    makes the batch wait for a person; every answer is handed back with its
    call in ``RunTool.review``.
    """

    calls: list[dict[str, Any]]


class AwaitApproval(NamedTuple):
    """The engine's answer in ``awaiting_approval``: a person must decide these calls.

    Nothing is outstanding: report ``decided({call_id: approve() | deny(reason)})``
    when the decisions come (``next()`` may be asked again meanwhile; it
    checks cancellation each time).
    """

    pending: tuple[PendingCall, ...]


class Wait(NamedTuple):
    """The engine's request in ``backing_off``: wait ``seconds``, then report ``waited()``.

    The retry policy chose the wait when the model failed (the event that
    entered ``backing_off`` records it), so a replay never chooses it again.
    A driver waits unless the run's ``CancelToken`` is cancelled first, and
    reports ``waited()`` either way: the table ends a cancelled run there.
    ``sleep`` is the policy's own waiting function, when it has one (tests
    inject it); ``None``: the driver's (``agentloop.models.sleep``/``asleep``).
    """

    seconds: float
    sleep: Callable[[float, CancelToken | None], object] | None = None


class CheckOutput(NamedTuple):
    """The engine's request in ``validating``: check the final the output schema accepted.

    ``value`` is the final's output (``RunResult.output`` as it would be);
    ``check`` is what the driver set (``engine.output_check``): the driver
    calls ``check(value)`` and reports ``output_checked(problems)``, a list of
    strings (empty: the final stands; else it goes back to the model, as the
    schema's problems do). Handed out only to a driver that checks outputs,
    once a final; a replay feeds the recorded problems back instead.
    """

    value: Any
    check: Callable[[Any], object]


def uncalled_check(value: object) -> object:
    """The output check of an engine nothing asks to check: it hands out ``CheckOutput`` only.

    A replay's (the record answers each check) and a resumed run's until its
    driver sets its own.
    """
    raise AssertionError(f"an output check that is never to be called was called on {value!r:.80}")


#: What ``Engine.next()`` hands a driver to do (``Summarise`` is a context policy's).
Need = AskModel | RunTool | ReviewCalls | AwaitApproval | Summarise | Wait | CheckOutput
