"""The agent loop's state table: the one place that says what can happen.

Theory of operation
===================

A run is a finite-state machine over three working states and six terminal
ones. The engine (``_engine.py``) holds the counters and the record; the
drivers (``_driver.py``) do the I/O: they call the model and the tools. Each
call to ``Run.step()`` moves the machine through exactly one state change.

The driver fires *triggers*, which state facts:

* ``ask_model`` - the driver is about to call the model. Cancellation and the
  step budget are checked first; if neither stops the run, an *internal*
  transition counts the step (``steps += 1`` happens before the call, so a
  model that raises, hangs or is interrupted has still spent its step).
* ``model_replied`` / ``model_raised`` - the model returned or raised. A
  cancellation requested while it was working wins over either.
* ``validate`` - the engine inspects the reply it copied in. The order of the
  rows is the contract: a final answer is accepted before the call budget is
  consulted, so a model can conclude after its last permitted call.
* ``start_tool`` - the driver is about to run the accepted call. A
  cancellation seen here still wins: the tool does not run.
* ``tool_returned`` - the tool's outcome arrived; the call and its result
  are appended to the history together, so no call is ever left unpaired.
* ``tool_interrupted`` - the run itself was interrupted while the tool ran
  (``KeyboardInterrupt``, or the asyncio task was cancelled): the call is
  recorded with a ``cancelled`` result and the run ends ``cancelled``.

An interruption while the model works is reported as ``model_raised`` after
the driver has marked the run cancelled, so the ``cancel_requested`` row
ends it: the step counts and nothing is appended.

For each (state, trigger) the rows below are tried top to bottom; the first
whose guards all hold wins (this is how ``transitions`` resolves them too, and
a test checks that the compiled table and ``transitions`` agree). A row whose
``dest`` is ``None`` is internal: it runs its effects but keeps the state.
``effects`` name engine methods run after the state changes.

Terminal states have no outgoing rows, so they absorb: firing anything there
is the caller's error (``InvalidTransition``), never a silent no-op.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final, NamedTuple

from transitions import Machine

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from transitions.core import TransitionConfigDict

__all__ = [
    "COMPLETES",
    "ROWS",
    "TERMINAL",
    "Guard",
    "Row",
    "State",
    "Trigger",
    "build_machine",
    "rows_of",
]


class State(enum.StrEnum):
    """Where a run is. Working states are gerunds; outcomes are participles."""

    #: Waiting to ask the model for its next reply (the initial state).
    AWAITING_MODEL = "awaiting_model"
    #: A reply has been copied in and is about to be checked.
    VALIDATING = "validating"
    #: An accepted call is reserved and counted, and its tool is about to run.
    DISPATCHING = "dispatching"
    #: The model gave a final answer; it is the run's output.
    FINISHED = "finished"
    #: Cancellation was requested and seen at a checkpoint.
    CANCELLED = "cancelled"
    #: A budget ran out (``RunResult.reason`` says which).
    EXHAUSTED = "exhausted"
    #: The model reused a call id; nothing ran a second time.
    REPEATED_CALL = "repeated_call"
    #: The reply was neither a well-formed call nor a final answer.
    MALFORMED = "malformed"
    #: The model callback raised an exception.
    FAILED = "failed"


class Trigger(enum.StrEnum):
    """Facts the driver reports to the engine."""

    #: The driver is about to call the model.
    ASK_MODEL = "ask_model"
    #: The model returned a reply.
    MODEL_REPLIED = "model_replied"
    #: The model raised an ``Exception``.
    MODEL_RAISED = "model_raised"
    #: The copied reply is to be checked.
    VALIDATE = "validate"
    #: The driver is about to run the accepted call's tool.
    START_TOOL = "start_tool"
    #: The tool's outcome arrived.
    TOOL_RETURNED = "tool_returned"
    #: The run was interrupted while the tool ran.
    TOOL_INTERRUPTED = "tool_interrupted"


class Guard(enum.StrEnum):
    """Conditions a row can require; each is an engine method of that name."""

    CANCEL_REQUESTED = "cancel_requested"
    STEPS_EXHAUSTED = "steps_exhausted"
    REPLY_MALFORMED = "reply_malformed"
    REPLY_IS_FINAL = "reply_is_final"
    CALL_ID_RESERVED = "call_id_reserved"
    CALLS_EXHAUSTED = "calls_exhausted"


TERMINAL: Final = frozenset(
    {
        State.FINISHED,
        State.CANCELLED,
        State.EXHAUSTED,
        State.REPEATED_CALL,
        State.MALFORMED,
        State.FAILED,
    }
)

# The driver's side of the protocol. An internal ``ask_model`` row means "the
# model is out": only ``model_replied`` or ``model_raised`` may follow, and
# likewise only a tool outcome may follow an internal ``start_tool``. Every
# other trigger needs nothing outstanding. The engine refuses anything else,
# so a second ``step()`` started while one is still waiting (re-entrantly, or
# from a concurrent task) cannot ask the model twice.
COMPLETES: Final[Mapping[Trigger, Trigger]] = {
    Trigger.MODEL_REPLIED: Trigger.ASK_MODEL,
    Trigger.MODEL_RAISED: Trigger.ASK_MODEL,
    Trigger.TOOL_RETURNED: Trigger.START_TOOL,
    Trigger.TOOL_INTERRUPTED: Trigger.START_TOOL,
}

# The table. Order within a (source, trigger) group is priority order.
ROWS: Final[Sequence[TransitionConfigDict]] = (
    # -- before the model is asked: nothing is spent by these two rows
    {"trigger": "ask_model", "source": "awaiting_model", "dest": "cancelled",
     "conditions": ["cancel_requested"]},
    {"trigger": "ask_model", "source": "awaiting_model", "dest": "exhausted",
     "conditions": ["steps_exhausted"], "after": ["note_max_steps"]},
    {"trigger": "ask_model", "source": "awaiting_model", "dest": None,
     "after": ["count_step"]},
    # -- the model answered (or raised) while the step was being spent
    {"trigger": "model_replied", "source": "awaiting_model", "dest": "cancelled",
     "conditions": ["cancel_requested"]},
    {"trigger": "model_replied", "source": "awaiting_model", "dest": "validating"},
    {"trigger": "model_raised", "source": "awaiting_model", "dest": "cancelled",
     "conditions": ["cancel_requested"]},
    {"trigger": "model_raised", "source": "awaiting_model", "dest": "failed",
     "after": ["note_model_error"]},
    # -- the reply is checked; final is tried before any budget
    {"trigger": "validate", "source": "validating", "dest": "malformed",
     "conditions": ["reply_malformed"], "after": ["note_malformed"]},
    {"trigger": "validate", "source": "validating", "dest": "finished",
     "conditions": ["reply_is_final"], "after": ["append_final"]},
    {"trigger": "validate", "source": "validating", "dest": "repeated_call",
     "conditions": ["call_id_reserved"], "after": ["note_repeated_call"]},
    {"trigger": "validate", "source": "validating", "dest": "exhausted",
     "conditions": ["calls_exhausted"], "after": ["note_max_calls"]},
    {"trigger": "validate", "source": "validating", "dest": "cancelled",
     "conditions": ["cancel_requested"]},
    {"trigger": "validate", "source": "validating", "dest": "dispatching",
     "after": ["reserve_call"]},
    # -- the last checkpoint before a tool runs; the call stays counted
    {"trigger": "start_tool", "source": "dispatching", "dest": "cancelled",
     "conditions": ["cancel_requested"]},
    {"trigger": "start_tool", "source": "dispatching", "dest": None},
    # -- the call and its result enter the history together
    {"trigger": "tool_returned", "source": "dispatching", "dest": "awaiting_model",
     "after": ["append_call_and_result"]},
    {"trigger": "tool_interrupted", "source": "dispatching", "dest": "cancelled",
     "after": ["append_call_and_result"]},
)  # fmt: skip


def build_machine(model: object = "self") -> Machine:
    """Build the ``transitions`` machine for the table.

    It is the definition's validator (unknown states fail here), the source of
    the diagrams, and the reference the compiled engine is tested against.
    """
    return Machine(
        model=model,
        states=[state.value for state in State],
        transitions=list(ROWS),
        initial=State.AWAITING_MODEL.value,
        auto_transitions=False,
        send_event=False,
    )


class Row(NamedTuple):
    """One row of the table as ``transitions`` resolved it."""

    trigger: str
    source: str
    dest: str | None
    guard: str | None
    effects: tuple[str, ...]

    @property
    def label(self) -> str:
        """``trigger [guard] / effects``, as in UML."""
        text = self.trigger
        if self.guard:
            text += f" [{self.guard}]"
        if self.effects:
            text += " / " + ", ".join(self.effects)
        return text


def rows_of(machine: Machine) -> Iterator[Row]:
    """Every row of ``machine``, grouped by trigger and source, in priority order."""
    for trigger, event in machine.events.items():
        for source, transitions in event.transitions.items():
            for transition in transitions:
                if len(transition.conditions) > 1 or not all(
                    c.target for c in transition.conditions
                ):
                    raise ValueError(f"{trigger} from {source}: at most one positive guard a row")
                guard = transition.conditions[0].func if transition.conditions else None
                effects = tuple(str(effect) for effect in transition.after)
                yield Row(trigger, source, transition.dest, str(guard) if guard else None, effects)
