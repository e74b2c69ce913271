"""The contract's invariants as assertions over a run or its result (``ContractViolation``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from agentloop._core.json import unfenced
from agentloop._core.messages import RESULT_STATUSES
from agentloop._core.table import TERMINAL, State
from agentloop._core.values import RunResult, Usage
from agentloop.testing._record import (
    ContractViolation,
    Message,
    RunLike,
    calls_made_by,
    describe_message,
    event_location,
    run_record,
    short_repr,
)
from agentloop.testing._requests import assert_requests_fit

__all__ = [
    "ContractViolation",
    "assert_chained",
    "assert_contract",
    "assert_paired",
    "assert_requests_fit",
    "assert_transcript_is_input_plus_appended",
    "assert_within_budget",
]

_ACCEPT: Final = (State.VALIDATING, State.DISPATCHING)
_MODEL_ANSWERS: Final = frozenset({"model_replied", "model_raised"})
# The rows where a run begins its wrap-up step (on_exhausted='answer').
_WRAP_UP_BEGUN: Final = frozenset({"wrap_up_due", "calls_exhausted_wrap_up"})


#: The rows that accept a batch the engine answers whole (it goes back to awaiting_model),
#: or a handoff whose filter is asked next.
_ANSWERED_BY_ENGINE: Final = (
    "identical_calls_only",
    "handoff_alone",
    "handoffs_only",
    "handoff_filtered",
)


def assert_paired(run: RunLike) -> None:
    """Every call in the transcript is answered by its tool_result, and appended with it.

    In the transcript: call ids are unique (across ``call`` and ``calls``
    messages); each ``tool_result`` answers an earlier unanswered call with the
    same id and tool name; no call is still unanswered at a ``final`` or at the
    end. (The input may hold several calls before their results, as parallel
    tool calls do.) In the events: a transition that appends a call or a batch
    appends their ``tool_result`` s right after it, in emission order, so no
    call ever enters the history alone.
    """
    record = run_record(run)
    unanswered: dict[object, tuple[int, object]] = {}
    first_seen: dict[object, int] = {}
    for index, message in enumerate(record.transcript):
        where = f"transcript[{index}]"
        if not isinstance(message, dict) or type(message.get("kind")) is not str:
            raise ContractViolation(
                where, "a message: a dict with a str 'kind'", short_repr(message)
            )
        kind, call_id = message["kind"], message.get("id")
        ids = [call_id] if kind == "tool_result" else [m.get("id") for m in calls_made_by(message)]
        for made_id in ids:
            if type(made_id) is not str:
                raise ContractViolation(where, "a str call id", short_repr(made_id))
        if kind == "tool_result" and message.get("status") not in RESULT_STATUSES:
            raise ContractViolation(
                where,
                f"a tool_result status of {sorted(RESULT_STATUSES)}",
                short_repr(message.get("status")),
            )
        if kind in ("call", "calls"):
            for made in calls_made_by(message):
                call_id = made.get("id")
                if call_id in first_seen:
                    raise ContractViolation(
                        where,
                        "each call id once",
                        f"call id {call_id!r} again (first at transcript[{first_seen[call_id]}])",
                    )
                first_seen[call_id] = index
                unanswered[call_id] = (index, made.get("name"))
        elif kind == "tool_result":
            if call_id not in unanswered:
                why = "already answered" if call_id in first_seen else "no call has that id"
                raise ContractViolation(
                    where,
                    "a tool_result to answer an earlier unanswered call",
                    f"one for {call_id!r} ({why})",
                )
            at, name = unanswered.pop(call_id)
            if message.get("name") != name:
                raise ContractViolation(
                    where,
                    f"the tool_result of call {call_id!r} (transcript[{at}]) to name its "
                    f"tool {name!r}",
                    f"{message.get('name')!r}",
                )
        elif kind == "final" and unanswered:
            call_id, (at, _) = next(iter(unanswered.items()))
            raise ContractViolation(
                f"transcript[{at}]",
                f"call {call_id!r} to be answered before the final at {where}",
                "no tool_result for it",
            )
    if unanswered:
        call_id, (at, _) = next(iter(unanswered.items()))
        raise ContractViolation(
            f"transcript[{at}]",
            f"call {call_id!r} to be answered by a tool_result",
            f"none before the end of the transcript ({len(record.transcript)} messages)",
        )
    for index, event in enumerate(record.events):
        appended = event.appended
        for at, message in enumerate(appended):
            for offset, made in enumerate(calls_made_by(message), start=1):
                after = appended[at + offset] if at + offset < len(appended) else None
                if not (
                    isinstance(after, dict)
                    and after.get("kind") == "tool_result"
                    and after.get("id") == made.get("id")
                ):
                    found = "nothing after it" if after is None else describe_message(after)
                    order = (
                        " (after the results of its batch's earlier calls)" if offset > 1 else ""
                    )
                    raise ContractViolation(
                        f"{event_location(index, event)}.appended[{at}]",
                        f"call {made.get('id')!r} to be appended together with its "
                        f"tool_result{order}",
                        found,
                    )


def assert_within_budget(run: RunLike) -> None:
    """``steps <= max_steps`` and ``calls <= max_calls``, at the end and after every event.

    Also what makes the events a ledger: the counters never go down, each
    transition adds at most one step (one model call), calls grow only when
    ``validate`` accepts a batch (by its size), and the run's counters are its
    last event's.
    """
    record = run_record(run)
    budget = record.budget
    # on_exhausted='answer': the wrap-up step is one model call past max_steps.
    wrap_up = budget.on_exhausted == "answer" and any(
        event.guard in _WRAP_UP_BEGUN for event in record.events
    )
    limits = (("steps", budget.max_steps + wrap_up), ("calls", budget.max_calls))
    for name, limit in limits:
        value = getattr(record, name)
        if value > limit:
            raise ContractViolation("the run", f"{name} <= max_{name}={limit}", f"{name}={value}")
    before = {"steps": 0, "calls": 0}
    for index, event in enumerate(record.events):
        where = event_location(index, event)
        for name, limit in limits:
            value = getattr(event, name)
            if value > limit:
                raise ContractViolation(where, f"{name} <= max_{name}={limit}", f"{name}={value}")
            # A step is one model call; calls grow only when a batch is accepted, by its size.
            # (The loop guard may answer every call of a batch it accepts, and a handoff is
            # answered by the engine: each goes back to awaiting_model.)
            accepts = name == "calls" and (
                (event.source, event.dest) == _ACCEPT or event.guard in _ANSWERED_BY_ENGINE
            )
            most = value if accepts else before[name] + (name == "steps")
            if not before[name] <= value <= most:
                raise ContractViolation(
                    where,
                    f"{name} to stay at {before[name]}"
                    + (
                        " or grow by one (one model call a transition at most)"
                        if name == "steps"
                        else " (calls grow only when validate accepts a batch)"
                    ),
                    f"{name}={value}",
                )
            before[name] = value
    if record.events and (record.steps, record.calls) != (before["steps"], before["calls"]):
        raise ContractViolation(
            "the run",
            f"its counters to be its last event's (steps={before['steps']}, "
            f"calls={before['calls']})",
            f"steps={record.steps}, calls={record.calls}",
        )


def _same_json(a: object, b: object) -> bool:
    """JSON equality that tells ``1`` from ``1.0`` and ``True`` (Python's ``==`` does not)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(_same_json(a[key], b[key]) for key in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _input(messages: object) -> list[Message]:
    if isinstance(messages, str):
        return [{"kind": "user", "text": messages}]
    if isinstance(messages, (list, tuple)):
        return list(messages)
    raise TypeError(
        f"expected the run's input as given to run/start (a str or a list of messages), "
        f"got {type(messages).__name__}"
    )


def assert_transcript_is_input_plus_appended(
    run: RunLike, input_messages: str | Sequence[Message]
) -> None:
    """The transcript is the input followed by every transition's ``appended``, in order.

    ``input_messages`` is what was passed to ``run``/``start`` (a ``str``
    stands for ``{'kind': 'user', 'text': ...}``). Values compare as JSON, so
    ``1`` and ``1.0`` differ; the first difference is reported with where the
    expected message came from.
    """
    record = run_record(run)
    given = _input(input_messages)
    expected: list[tuple[Message, str]] = [
        (message, f"the input's messages[{index}]") for index, message in enumerate(given)
    ]
    for index, event in enumerate(record.events):
        expected += [
            (message, f"{event_location(index, event)}.appended[{at}]")
            for at, message in enumerate(event.appended)
        ]
    transcript = record.transcript
    for index, ((message, origin), found) in enumerate(zip(expected, transcript, strict=False)):
        if not _same_json(message, found):
            raise ContractViolation(
                f"transcript[{index}]", f"{short_repr(message)} (from {origin})", short_repr(found)
            )
    if len(transcript) != len(expected):
        counted = f"{len(given)} input + {len(expected) - len(given)} appended by the events"
        if len(transcript) > len(expected):
            extra = (
                f"transcript[{len(expected)}] = {short_repr(transcript[len(expected)])} is extra"
            )
        else:
            message, origin = expected[len(transcript)]
            extra = f"{short_repr(message)} (from {origin}) is missing"
        raise ContractViolation(
            "the transcript",
            f"{len(expected)} messages ({counted})",
            f"{len(transcript)}: {extra}",
        )


def assert_chained(run: RunLike) -> None:
    """The events form one path: from ``awaiting_model``, each starting where the last ended.

    Only the last event may enter a terminal state, and a finished record's
    last event enters its status.
    """
    record = run_record(run)
    state = State.AWAITING_MODEL
    for index, event in enumerate(record.events):
        where = event_location(index, event)
        if state in TERMINAL:
            raise ContractViolation(
                where, f"no transition after the terminal state {state.value}", "one"
            )
        if event.source is not state:
            raise ContractViolation(where, f"to start in {state.value}", event.source.value)
        state = event.dest
    if record.status is not state:
        raise ContractViolation(
            "the run", f"its state to be where the events end ({state.value})", record.status.value
        )


def assert_contract(run: RunLike, input_messages: str | Sequence[Message]) -> None:
    """Every invariant: chained events, transcript = input + appended, paired calls, budgets.

    Under a context policy, each model request too (``assert_requests_fit``).
    """
    assert_chained(run)
    assert_transcript_is_input_plus_appended(run, input_messages)
    assert_paired(run)
    assert_within_budget(run)
    assert_requests_fit(run)
    if isinstance(run, RunResult):
        _assert_result_is_its_record(run)


def _assert_result_is_its_record(result: RunResult) -> None:
    """A result's output is its final's text, and its usage the sum its events report."""
    transcript = result.transcript
    final = transcript[-1] if transcript and result.status == State.FINISHED else None
    expected = final.get("text") if isinstance(final, dict) else None
    # A typed output (Loop(output=T)) is the final's text as a T: its text is the final's
    # JSON, out of any Markdown fence the model put around it.
    if result.output_schema_json is not None and type(expected) is str:
        expected = unfenced(expected)
    if result.output_text != expected or (final is None and result.output is not None):
        raise ContractViolation(
            "the result's output",
            f"the final's text {short_repr(expected)}"
            if final
            else "None (the run did not finish)",
            short_repr(result.output),
        )
    reported = [event.usage for event in result.events if event.usage is not None]
    total = Usage(*map(sum, zip(*reported, strict=True))) if reported else Usage()
    if result.usage != total:
        raise ContractViolation(
            "the result's usage", f"the sum its events report, {total}", short_repr(result.usage)
        )
    limit, spent = result.budget.max_total_tokens, 0
    wrapping = next((e.steps for e in result.events if e.guard in _WRAP_UP_BEGUN), 0)
    for index, event in enumerate(result.events):
        # A model call is made only while the tokens spent are under the budget.
        # The wrap-up step (on_exhausted='answer') is the one asked past the budget.
        wrap_up = wrapping and event.steps > wrapping
        if limit is not None and event.trigger in _MODEL_ANSWERS and spent >= limit and not wrap_up:
            raise ContractViolation(
                event_location(index, event),
                f"no model call once max_total_tokens={limit} were spent",
                f"a model call after {spent}",
            )
        if event.usage is not None:
            spent += event.usage.total
