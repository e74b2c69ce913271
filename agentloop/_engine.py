"""The engine core: counters, reserved ids, the history, guards and effects.

It does no I/O. A driver tells it what happened (``ask_model``,
``model_replied``, ``validate``, ...) and it answers with the ``Transition``
it made, or ``None`` when the driver should now do its part: call the model
(after ``ask_model``) or run the tool (after ``start_tool``). Which row fires
is decided only by the table in ``_machine.py``, compiled once at import into
a dict of ``(state, trigger) -> rows``; ``transitions`` resolves the same
table in the reference test.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Final

import attrs
import orjson

from agentloop._machine import COMPLETES, TERMINAL, Guard, State, Trigger, build_machine, rows_of
from agentloop._messages import (
    DISPATCH_STATUSES,
    History,
    JSONError,
    exception_content,
    reply_problem,
    to_json,
    tool_result_json,
)
from agentloop._values import Budget, CancelToken, RunResult, Transition

__all__ = ["Engine", "InvalidStateError", "Listener"]

Listener = Callable[[Transition], object]
_NO_REPLY: Final = object()
_AWAITING_MODEL: Final = State.AWAITING_MODEL
# Module constants: an enum attribute look-up costs ~50 ns, on every transition.
_ASK_MODEL, _MODEL_REPLIED, _MODEL_RAISED, _VALIDATE = (
    Trigger.ASK_MODEL,
    Trigger.MODEL_REPLIED,
    Trigger.MODEL_RAISED,
    Trigger.VALIDATE,
)
_START_TOOL, _TOOL_RETURNED, _TOOL_INTERRUPTED = (
    Trigger.START_TOOL,
    Trigger.TOOL_RETURNED,
    Trigger.TOOL_INTERRUPTED,
)


class AgentloopError(Exception):
    """Base class of the errors agentloop raises for caller mistakes."""


class InvalidStateError(AgentloopError, RuntimeError):
    """An operation was asked of a run in a state that does not allow it."""

    def __init__(self, message: str, *, state: State) -> None:
        super().__init__(message)
        self.state = state


def _error_text(exc: BaseException) -> str:
    content = exception_content(exc)
    return f"{content['type']}: {content['message']}" if content["message"] else content["type"]


@attrs.define(eq=False)
class Engine:
    """One run's state, with no I/O: the core a driver wraps.

    A driver calls one trigger method per checkpoint (``ask_model``, then the
    model, then ``model_replied``; ``validate``; ``start_tool``, then the tool,
    then ``tool_returned``) and gets back the transition made, or ``None``
    when it should now call the model or the tool. The guard and effect
    methods below are named in the table and called only through it.
    """

    budget: Budget
    cancel: CancelToken | None
    _history: History
    state: State = State.AWAITING_MODEL
    steps: int = 0
    calls: int = 0
    _reserved: set[str] = attrs.field(factory=set)
    _events: list[Transition] = attrs.field(factory=list)
    _listeners: list[Listener] = attrs.field(factory=list)
    # The reply being handled: its copy, its JSON, and what is wrong with it.
    _reply: Any = _NO_REPLY
    _reply_json: bytes = b""
    _problem: str | None = None
    _interrupted: bool = False
    # The internal row whose I/O the driver has yet to report (see COMPLETES).
    _outstanding: Trigger | None = None
    _call_fields: dict[str, Any] = attrs.field(factory=dict)
    # What the model raised, or the tool's outcome (status, content JSON).
    _exception: BaseException | None = None
    _outcome: tuple[str, bytes] = ("error", b"null")
    _output: str | None = None
    _reason: str | None = None
    _error: str | None = None
    _rejected: object = None

    @classmethod
    def start(
        cls, encoded_input: list[bytes], budget: Budget, cancel: CancelToken | None
    ) -> Engine:
        """Begin a run over already checked and encoded input messages."""
        history = History(encoded_input)
        engine = cls(budget, cancel, history)
        engine._reserved = history.call_ids()
        return engine

    # -- what drivers and callers read ------------------------------------

    @property
    def done(self) -> bool:
        """Whether the run is in a terminal state."""
        return self.state in TERMINAL

    def history(self) -> list[dict[str, Any]]:
        """A fresh copy of the history (what the model is given)."""
        return self._history.copy()

    def pending_call(self) -> dict[str, Any]:
        """A fresh copy of the accepted call (what the tool is given)."""
        if self.state is not State.DISPATCHING:
            raise InvalidStateError(
                f"there is a pending call only in state 'dispatching', not {self.state.value!r}",
                state=self.state,
            )
        return orjson.loads(self._reply_json)  # type: ignore[no-any-return]

    def events(self) -> tuple[Transition, ...]:
        """Every transition so far, in order."""
        return tuple(self._events)

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(transition)`` after every state change."""
        self._listeners.append(listener)

    def result(self) -> RunResult:
        """The run's result; only once it is done."""
        if not self.done:
            raise InvalidStateError(
                f"result() needs a finished run, but the run is still in state "
                f"{self.state.value!r}; call step() until run.done",
                state=self.state,
            )
        return RunResult(
            status=self.state,
            output=self._output,
            steps=self.steps,
            calls=self.calls,
            budget=self.budget,
            reason=self._reason,
            error=self._error,
            events=tuple(self._events),
            transcript_json=self._history.to_json(),
            rejected_value=self._rejected,
        )

    # -- triggers: what drivers report --------------------------------------

    def ask_model(self) -> Transition | None:
        """About to call the model: a transition if the run stops, else None."""
        return self._fire(_ASK_MODEL, self._rows(_ASK_MODEL))

    def model_replied(self, reply: object) -> Transition:
        """The model returned ``reply``; it is copied in before anything else."""
        rows = self._rows(_MODEL_REPLIED)
        try:
            self._reply_json = to_json(reply, "reply")
            self._reply = orjson.loads(self._reply_json)
            self._problem = reply_problem(self._reply)
        except JSONError as exc:
            self._reply, self._problem = _copy_anything(reply), str(exc)
        if self._problem is None and self._reply["kind"] == "call":
            self._call_fields = {"call_id": self._reply["id"], "tool": self._reply["name"]}
        return self._fire_to_state(_MODEL_REPLIED, rows)

    def model_raised(self, exc: BaseException) -> Transition:
        """The model raised ``exc``."""
        rows = self._rows(_MODEL_RAISED)
        self._exception = exc
        return self._fire_to_state(_MODEL_RAISED, rows)

    def model_interrupted(self, exc: BaseException) -> Transition:
        """The driver was interrupted while the model worked: the run ends cancelled.

        For a ``BaseException`` (``KeyboardInterrupt``, a cancelled asyncio
        task): from now on every ``cancel_requested`` guard holds, whatever the
        token says, so the ``model_raised`` row that follows is the cancelled one.
        """
        rows = self._rows(_MODEL_RAISED)
        self._interrupted = True
        self._exception = exc
        return self._fire_to_state(_MODEL_RAISED, rows)

    def validate(self) -> Transition:
        """Check the reply copied in by ``model_replied``."""
        return self._fire_to_state(_VALIDATE, self._rows(_VALIDATE))

    def start_tool(self) -> Transition | None:
        """About to run the accepted call: a transition if the run stops, else None."""
        return self._fire(_START_TOOL, self._rows(_START_TOOL))

    def tool_returned(self, outcome: object) -> Transition:
        """The dispatcher returned ``outcome`` (``{'status': ..., 'content': ...}``)."""
        rows = self._rows(_TOOL_RETURNED)
        self._outcome = _checked_outcome(outcome)
        if isinstance(outcome, dict) and isinstance(outcome.get("exception"), BaseException):
            self._exception = outcome["exception"]
        return self._fire_to_state(_TOOL_RETURNED, rows)

    def tool_raised(self, exc: Exception) -> Transition:
        """The dispatcher raised ``exc``; the call gets an ``error`` result."""
        rows = self._rows(_TOOL_RETURNED)
        self._outcome = ("error", _exception_content(exc))
        self._exception = exc
        return self._fire_to_state(_TOOL_RETURNED, rows)

    def tool_interrupted(self, exc: BaseException) -> Transition:
        """The run was interrupted while the tool ran: pair the call with ``cancelled``."""
        rows = self._rows(_TOOL_INTERRUPTED)
        self._interrupted = True
        self._outcome = ("cancelled", _exception_content(exc))
        self._exception = exc
        return self._fire_to_state(_TOOL_INTERRUPTED, rows)

    # -- guards (named in the table) ----------------------------------------

    def cancel_requested(self) -> bool:
        return self._interrupted or (self.cancel is not None and self.cancel.cancelled)

    def steps_exhausted(self) -> bool:
        return self.steps >= self.budget.max_steps

    def reply_malformed(self) -> bool:
        return self._problem is not None

    def reply_is_final(self) -> bool:
        return bool(self._reply["kind"] == "final")

    def call_id_reserved(self) -> bool:
        return self._reply["id"] in self._reserved

    def calls_exhausted(self) -> bool:
        return self.calls >= self.budget.max_calls

    # -- effects (named in the table); they return fields for the event -----

    def count_step(self) -> None:
        self.steps += 1

    def note_max_steps(self) -> dict[str, Any]:
        self._reason = "max_steps"
        return {"reason": self._reason}

    def note_max_calls(self) -> dict[str, Any]:
        self._reason = "max_calls"
        return {"reason": self._reason}

    def note_model_error(self) -> dict[str, Any]:
        exc = self._exception
        assert exc is not None, "model_raised stores the exception first"
        self._error = f"the model raised {_error_text(exc)}"
        return {"error": self._error, "exception": exc}

    def note_malformed(self) -> dict[str, Any]:
        self._error = f"malformed reply: {self._problem}"
        return {"error": self._error}

    def note_repeated_call(self) -> dict[str, Any]:
        self._error = (
            f"call id {self._reply['id']!r} was already used in this run; "
            "the call was not run again"
        )
        return {"error": self._error}

    def append_final(self) -> dict[str, Any]:
        self._output = self._reply["text"]
        return {"appended_json": (self._reply_json,)}

    def reserve_call(self) -> None:
        self._reserved.add(self._reply["id"])
        self.calls += 1

    def append_call_and_result(self) -> dict[str, Any]:
        status, content_json = self._outcome
        call = self._reply
        result_json = tool_result_json(call["id"], call["name"], status, content_json)
        fields: dict[str, Any] = {
            "status": status,
            "appended_json": (self._reply_json, result_json),
        }
        if self._exception is not None:
            fields["exception"] = self._exception
        return fields

    # -- the one place a row is chosen and applied --------------------------

    def _rows(self, trigger: Trigger) -> tuple[_Row, ...]:
        """The rows for ``trigger`` here; refuses what the state or the driver's order forbid.

        Called before any intake, so a refused report changes nothing.
        """
        rows = _TABLE.get((self.state, trigger))
        if rows is None:
            raise InvalidStateError(
                f"cannot {trigger.value} in state {self.state.value!r}; "
                f"allowed here: {_allowed(self.state) or 'nothing (the run is over)'}",
                state=self.state,
            )
        outstanding = self._outstanding
        if COMPLETES.get(trigger) is not outstanding:
            if outstanding is None:
                why = f"nothing is outstanding ({trigger.value} answers {COMPLETES[trigger].value})"
            else:
                expected = [t.value for t, begun in COMPLETES.items() if begun is outstanding]
                why = f"{outstanding.value} is outstanding, expected one of {expected}"
            raise InvalidStateError(f"cannot {trigger.value} now: {why}", state=self.state)
        return rows

    def _choose(self, trigger: Trigger, rows: tuple[_Row, ...]) -> _Row:
        """The first of ``trigger``'s rows whose guard holds."""
        for row in rows:
            if row.check is None or row.check(self):
                return row
        raise AssertionError("unreachable: _compile checks the last row is unconditional")

    def _fire(self, trigger: Trigger, rows: tuple[_Row, ...]) -> Transition | None:
        """Choose a row from ``rows`` (from ``_rows``) and apply it."""
        row = self._choose(trigger, rows)
        # Past awaiting_model, every event names the call being handled.
        fields = self._call_fields if self.state is not _AWAITING_MODEL else {}
        if row.effects:
            fields = dict(fields)
            for effect in row.effects:
                extra = effect(self)
                if extra:
                    fields.update(extra)
        dest = row.dest
        self._outstanding = trigger if dest is None else None
        if dest is None:
            return None
        transition = Transition(
            source=self.state,
            dest=dest,
            trigger=trigger,
            guard=row.guard,
            steps=self.steps,
            calls=self.calls,
            **fields,
        )
        self.state = dest
        for message in transition.appended_json:
            self._history.append(message)
        self._events.append(transition)
        if row.starts_over:
            self._reply, self._exception, self._call_fields = _NO_REPLY, None, {}
        elif row.rejects:
            self._rejected = None if self._reply is _NO_REPLY else self._reply
        for listener in self._listeners:
            listener(transition)
        return transition

    def _fire_to_state(self, trigger: Trigger, rows: tuple[_Row, ...]) -> Transition:
        transition = self._fire(trigger, rows)
        assert transition is not None, f"{trigger} has an internal row"
        return transition


def _copy_anything(value: object) -> object:
    """A private copy of a reply that is not JSON, kept only for review."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - an uncopyable reply is kept as its repr
        return repr(value)


def _exception_content(exc: BaseException) -> bytes:
    return orjson.dumps(exception_content(exc))


def _checked_outcome(outcome: object) -> tuple[str, bytes]:
    """A dispatcher's outcome as (status, content JSON); a bad one becomes ``error``."""
    if not (
        isinstance(outcome, dict)
        and {"status", "content"} <= outcome.keys() <= {"status", "content", "exception"}
        and isinstance(outcome["status"], str)
        and outcome["status"] in DISPATCH_STATUSES
    ):
        problem = (
            "the dispatcher's outcome was not valid: expected {'status': one of "
            f"{sorted(DISPATCH_STATUSES)}, 'content': JSON, optionally 'exception': "
            f"the exception behind an error}}, got {outcome!r:.200}"
        )
        return "error", orjson.dumps(problem)
    try:
        return outcome["status"], to_json(outcome["content"], "content")
    except JSONError as exc:
        return "error", orjson.dumps(f"the tool returned a value that is not JSON: {exc}")


@attrs.frozen
class _Row:
    check: Callable[[Engine], bool] | None
    guard: Guard | None
    dest: State | None
    effects: tuple[Callable[[Engine], dict[str, Any] | None], ...]
    # Derived from dest once, to keep enum look-ups off the hot path:
    starts_over: bool = attrs.field(init=False)  # back to awaiting_model: forget the reply
    rejects: bool = attrs.field(init=False)  # ends the run with the reply unrecorded

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "starts_over", self.dest is State.AWAITING_MODEL)
        # A reply that ended the run is kept as rejected, unless the row recorded it.
        recorded = Engine.append_call_and_result in self.effects
        ends = self.dest in TERMINAL - {State.FINISHED}
        object.__setattr__(self, "rejects", ends and not recorded)


def _compile() -> dict[tuple[State, Trigger], tuple[_Row, ...]]:
    """Derive the dispatch table from the ``transitions`` machine's own events."""
    table: dict[tuple[State, Trigger], list[_Row]] = {}
    for row in rows_of(build_machine()):
        guard = Guard(row.guard) if row.guard else None
        table.setdefault((State(row.source), Trigger(row.trigger)), []).append(
            _Row(
                check=getattr(Engine, guard.value) if guard else None,
                guard=guard,
                dest=State(row.dest) if row.dest is not None else None,
                effects=tuple(getattr(Engine, name) for name in row.effects),
            )
        )
    for (source, trigger), rows in table.items():
        if rows[-1].check is not None:
            raise ValueError(f"{trigger} from {source}: the last row must be unconditional")
    return {key: tuple(rows) for key, rows in table.items()}


_TABLE: Final = _compile()


def _allowed(state: State) -> str:
    return ", ".join(trigger.value for (source, trigger) in _TABLE if source is state)
