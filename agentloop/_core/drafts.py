"""The draft of a transition: what its report brought, taken in, and the event's fields so far.

``next()`` and each report start their transition from a fresh ``Draft``:
the call in hand, when the request it answers was handed out, and what came
with it (a reply taken in by ``intake.py``, a tool's outcome, an exception
and the wait before a retry). The row's effects fill in the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.intake import raised_usage, take_reply
from agentloop._core.json import exception_content, kept
from agentloop._core.messages import CUT_OFF, input_messages
from agentloop._core.rows.retry import Ask, model_name
from agentloop._core.table import NEXT, REPORTS, Report, State, Trigger
from agentloop._core.values import RecordedException
from agentloop._errors import InvalidStateError

if TYPE_CHECKING:
    from agentloop._core.approval import Decision, DecisionKey, PendingCall
    from agentloop._core.intake import Outcome, Reply
    from agentloop._core.requests import Need
    from agentloop._core.rows.loopguard import Identical
    from agentloop._core.state import RunState
    from agentloop._core.values import Usage

__all__ = [
    "Draft",
    "aside_draft",
    "exception_draft",
    "interruption_draft",
    "next_draft",
    "outcome_draft",
    "reply_draft",
    "summary_draft",
]

_CUT_OFF: Final = orjson.dumps(CUT_OFF)

_START_TOOL: Final = Trigger.START_TOOL
_TIMED: Final = (
    Trigger.MODEL_INTERRUPTED,
    Trigger.SUMMARY_INTERRUPTED,
    Trigger.WAIT_INTERRUPTED,
    Trigger.FILTER_INTERRUPTED,
    Trigger.CHECK_INTERRUPTED,
)


class Draft:
    """The transition being made: what its report brought, and the event's fields so far.

    A fresh one for every transition, so nothing of one transition leaks into
    the next. The class attributes are the defaults: an effect sets what its
    row records, and the rest is read from here.
    """

    #: The event's call: its id and tool name (``name_call`` sets it).
    named: tuple[str | None, str | None] = (None, None)
    status: str | None = None
    reason: str | None = None
    error: str | None = None
    exception: BaseException | None = None
    appended: tuple[bytes, ...] = ()
    usage: Usage | None = None
    pending: tuple[PendingCall, ...] = ()
    decisions: tuple[tuple[DecisionKey, Decision], ...] = ()
    # What the report brought, for the effects.
    outcome: Outcome | None = None
    asked: tuple[PendingCall, ...] = ()
    denied: tuple[tuple[str, Decision], ...] = ()
    review: dict[str, object] | None = None
    decisions_in: tuple[tuple[DecisionKey, Decision], ...] = ()
    cut: bytes = _CUT_OFF
    # What came from outside with the report (the reply's or the content's JSON).
    input_json: bytes | None = None
    # What an internal row hands the driver.
    request: Need | None = None
    # The summariser's reply, taken in (on summary_written).
    summary_in: Reply | None = None
    #: The wait before a retry the report brought (a replay's, DBOS's; ``None``: no
    #: retry), or ``ASK_POLICY``: ``retry_planned`` asks the retry policy; and the
    #: event's copy once ``plan_wait`` keeps it.
    wait_in: float | Ask | None = None
    wait: float | None = None
    #: The fallback model that replied or raised, by name (``None`` with one model).
    model: str | None = None
    #: What a streaming reply delivered before an interruption cut it (for review).
    partial_text: str | None = None
    #: The agent a handoff hands to (``switch_agent`` sets it).
    agent: str | None = None
    # What the output schema found wrong with the final in hand (None: not asked yet).
    output_problems: list[str] | None = None
    # The loop guard's findings about the batch in hand (None: not looked yet).
    identical: Identical | None = None

    def __init__(self, call: tuple[str, str] | None, since: float | None = None) -> None:
        #: The call in hand: being checked, handed out or reported (None: none is).
        self.call = call
        #: When the request this transition answers was handed out.
        self.since = since


def next_draft(run: RunState) -> tuple[Trigger, Draft]:
    """The trigger ``next()`` fires, and its draft; ``InvalidStateError`` if it is refused."""
    state = run.state
    trigger = NEXT.get(state)
    if trigger is None:
        raise InvalidStateError(
            f"the run ended in state {state.value!r}: there is nothing next; read its result()",
            state=state,
        )
    if trigger is _START_TOOL:
        batch = run.batch
        assert batch is not None, "a run dispatches an accepted batch"
        index = batch.next_index()
        if index is None:
            raise InvalidStateError(
                f"cannot go on in state {state.value!r}: every call of the batch was "
                f"handed out, and the answers for {list(batch.running)} are outstanding",
                state=state,
            )
        return trigger, Draft(batch.calls[index])
    if run.outstanding is not None:
        raise InvalidStateError(
            f"cannot go on in state {state.value!r}: the answer to "
            f"{run.outstanding.value} is outstanding (one step at a time)",
            state=state,
        )
    return trigger, Draft(run.reply.lone)


def reply_draft(run: RunState, reply: object) -> Draft:
    """The model's ``reply``, taken in: the reply in hand from now on."""
    run.reply = taken = take_reply(reply, run.spent)
    draft = Draft(taken.lone, run.since.get(None))
    draft.model = model_name(run) if run.models else None
    draft.usage = taken.usage
    draft.input_json = taken.json or None  # b"": not JSON (the rejected reply keeps it)
    return draft


def summary_draft(run: RunState, reply: object) -> Draft:
    """The summariser's ``reply``, taken in as a model's reply is, usage and all."""
    taken = take_reply(reply, run.spent)
    draft = Draft(None, run.since.get(None))
    draft.summary_in, draft.usage = taken, taken.usage
    draft.input_json = taken.json or None
    return draft


def aside_draft(run: RunState, reply: object) -> tuple[Trigger, Draft]:
    """The summariser's reply, or a handoff filter's view (one that is no history: it raised)."""
    if run.outstanding is not Trigger.HAND_OFF:
        return Trigger.SUMMARY_WRITTEN, summary_draft(run, reply)
    try:
        encoded, _ = input_messages(reply)  # checked as a run's input: every call answered
    except (TypeError, ValueError) as exc:
        return Trigger.FILTER_RAISED, exception_draft(run, exc, None)
    draft = Draft(run.reply.lone, run.since.get(None))
    draft.input_json = b"[" + b",".join(encoded) + b"]"
    return Trigger.HANDED_OFF, draft


def outcome_draft(run: RunState, index: int, outcome: Outcome) -> Draft:
    """A running call's outcome, reported or raised."""
    assert run.batch is not None, "a tool returns in a batch"
    call = run.batch.calls[index]
    draft = Draft(call, run.since.pop(call[0], None))
    draft.outcome, draft.exception = outcome, outcome.exception
    draft.input_json = outcome.content_json
    draft.usage = outcome.usage  # a child run's tokens (an agent tool), rolled into the run's
    return draft


def exception_draft(run: RunState, exc: Exception, wait: float | Ask | None) -> Draft:
    """The model raised ``exc``; ``wait``, the wait given with it (else ``retry_planned`` asks)."""
    draft = Draft(run.reply.lone, run.since.get(None))
    # A failed call can still have cost tokens (IncompleteReply says how many).
    draft.usage = raised_usage(exc, run.spent)
    draft.exception = exc
    draft.model = model_name(run) if run.models else None
    if isinstance(wait, Ask) and isinstance(exc, RecordedException):
        wait = exc.wait  # a recorded exception brings the wait recorded with it
    draft.wait_in = wait
    return draft


def interruption_draft(run: RunState, exc: BaseException) -> tuple[Trigger, Draft]:
    """What an interruption means where the run is (settled), and its draft."""
    trigger = REPORTS[run.outstanding, Report.INTERRUPTION]
    if trigger is Trigger.TOOL_INTERRUPTED:
        # The running calls are cut off by this interruption; the first is in hand.
        batch = run.batch
        assert batch is not None, "a tool runs in a batch"
        call = batch.calls[min(batch.running.values())]
        draft = Draft(call, run.since.get(call[0]))
        draft.cut = kept(orjson.dumps(exception_content(exc)))
    else:  # in handing_off, the handoff's call is in hand: it is answered
        lone = run.reply.lone if run.state is State.HANDING_OFF else None
        draft = Draft(lone, run.since.get(None) if trigger in _TIMED else None)
    draft.exception = exc
    draft.usage = raised_usage(exc, run.spent)  # what the child runs of the cut calls spent
    return trigger, draft
