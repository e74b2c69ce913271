"""What a report brings, checked before the engine takes any of it in.

A report out of turn is refused (``refused``); a tool report names the
running call it answers (``answering``); a review's answers and a person's
decisions are checked whole (``checked_review``, ``checked_decisions``), so
a bad one raises and changes nothing. Each is a function of the run's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

from agentloop._core.approval import Decision
from agentloop._core.batch import check_decisions
from agentloop._core.intake import not_json
from agentloop._core.table import REPORTS, Report, State, Trigger
from agentloop._errors import InvalidStateError

if TYPE_CHECKING:
    from agentloop._core.approval import DecisionKey, PendingCall
    from agentloop._core.state import RunState

__all__ = [
    "answering",
    "checked_decisions",
    "checked_interruption",
    "checked_problems",
    "checked_raised",
    "checked_review",
    "refused",
]


def checked_review(
    run: RunState, answers: object
) -> tuple[tuple[PendingCall, ...], tuple[tuple[str, Decision], ...], dict[str, object]]:
    """What ``reviewed(answers)`` would take: the calls asked about, the denials, the answers.

    An answer asks a person when its ``asks`` is true; it denies its call when
    it is a ``Decision`` that denies (``deny(reason)``), or carries one
    (``decision``, as a registry's ``PreparedCall`` does). The denials are in
    the batch's order, each about a call still without a result.
    """
    batch = run.batch
    if (
        run.state is not State.DISPATCHING
        or batch is None
        or batch.handed
        or batch.review is not None
    ):
        why = "was reviewed already" if batch and batch.review is not None else "is not one"
        raise InvalidStateError(
            f"cannot take a review in state {run.state.value!r}: only an accepted batch "
            f"none of whose calls has started is reviewed, once (this {why})",
            state=run.state,
        )
    if not isinstance(answers, dict):
        raise TypeError(
            "expected answers to be a dict of call id -> the review's answer, "
            f"got {not_json(answers).text:.80}"
        )
    taken = dict(list(answers.items()))  # read once: what is checked is what is kept
    ids = [call_id for call_id, _ in batch.calls]
    unknown = [call_id for call_id in taken if call_id not in ids]
    if unknown:
        raise ValueError(
            f"expected answers about calls of the batch (its calls: {ids}), "
            f"got answers about {[not_json(i).text[:80] for i in unknown]}"
        )
    reasons = {
        call_id: getattr(answer, "reason", None)
        for call_id, answer in taken.items()
        if getattr(answer, "asks", False) is True
    }
    denied = []
    for index, (call_id, _) in enumerate(batch.calls):
        decision = _denial(taken.get(call_id))
        if decision is not None and index not in batch.results and call_id not in reasons:
            denied.append((call_id, decision))
    return (batch.asked(reasons) if reasons else ()), tuple(denied), taken


def _denial(answer: object) -> Decision | None:
    """The denial ``answer`` is or carries, made again so its one rule holds; else None."""
    decision = answer if type(answer) is Decision else getattr(answer, "decision", None)
    if type(decision) is not Decision or decision.allowed or decision.asks:
        return None
    # Made again: a Decision changed after it was made (object.__setattr__) raises here.
    return Decision(False, decision.reason, False, decision.fingerprint)


def checked_decisions(run: RunState, decisions: object) -> tuple[tuple[DecisionKey, Decision], ...]:
    """The decisions ``decided`` would keep, in pending order; raises if it would refuse."""
    if run.state is not State.AWAITING_APPROVAL or run.batch is None:
        taken = "; this batch's decisions were taken already" if run.batch else ""
        raise InvalidStateError(
            f"cannot take decisions in state {run.state.value!r}: "
            f"the run is not awaiting approval{taken}",
            state=run.state,
        )
    return check_decisions(run.batch.pending, decisions)


def refused(run: RunState, what: str) -> InvalidStateError:
    """A report that answers nothing outstanding is refused, before any intake."""
    if run.outstanding is None:
        why = "no request is outstanding: call next() first"
    else:
        why = f"the outstanding request is {run.outstanding.value}"
    return InvalidStateError(
        f"cannot take {what} in state {run.state.value!r}: {why}", state=run.state
    )


def answering(run: RunState, call_id: str | None) -> int:
    """The index of the running call a tool report answers; else the report is refused."""
    batch = run.batch
    running = {} if batch is None else batch.running
    if call_id is None:
        if len(running) != 1:
            raise InvalidStateError(
                f"calls {list(running)} are running: say which one this report answers (call_id=)",
                state=run.state,
            )
        return next(iter(running.values()))
    if call_id not in running:
        raise InvalidStateError(
            f"cannot take a report for call {call_id!r}: it is not running "
            f"(running: {list(running)})",
            state=run.state,
        )
    return running[call_id]


def checked_raised(run: RunState, exc: object) -> Trigger:
    """What ``raised(exc)`` means where the run is; refused unless the model or a tool is out."""
    if not isinstance(exc, Exception):
        raise TypeError(
            f"raised() takes an Exception, got {type(exc).__name__}; "
            "report an interruption with interrupted()"
        )
    trigger = REPORTS.get((run.outstanding, Report.EXCEPTION))
    if trigger is None:
        raise InvalidStateError(
            f"cannot report an exception in state {run.state.value!r}: "
            "neither the model nor a tool is outstanding",
            state=run.state,
        )
    return trigger


def checked_interruption(exc: object) -> None:
    """``interrupted(exc)`` takes what interrupted the driver, a ``BaseException``."""
    if not isinstance(exc, BaseException):
        raise TypeError(
            "interrupted() takes what interrupted the driver (KeyboardInterrupt, a "
            f"CancelledError), got {type(exc).__name__}"
        )


def checked_problems(run: RunState, problems: object) -> bytes:
    """What ``output_checked(problems)`` records: the problems as JSON, a list of strings."""
    if run.outstanding is not Trigger.VALIDATE:
        raise refused(run, "an output check")
    if not isinstance(problems, (list, tuple)) or not all(type(p) is str for p in problems):
        raise TypeError(
            "expected the output check's problems to be a list of str (empty: none), "
            f"got {not_json(problems).text:.80}"
        )
    return orjson.dumps(list(problems))
