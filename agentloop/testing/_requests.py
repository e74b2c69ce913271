"""The contract's check of each model request under a context policy: ``assert_requests_fit``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.table import State, Trigger
from agentloop._core.values import RunResult
from agentloop._core.window import summary_message
from agentloop.testing._record import (
    ContractViolation,
    Message,
    RunLike,
    calls_made_by,
    event_location,
    run_record,
    short_repr,
)

if TYPE_CHECKING:
    from agentloop._core.context_policy import ContextPolicy

__all__ = ["assert_requests_fit"]

# The events answering a model (or summariser) request: they say what it was sent.
_MODEL_ASKS: Final = frozenset({"model_replied", "model_raised", "model_interrupted"})
_ASKS: Final = _MODEL_ASKS | {"summary_written", "summary_raised", "summary_interrupted"}


def _policy_of(run: RunLike) -> ContextPolicy | None:
    if isinstance(run, RunResult):
        return run.context
    return run._engine.context


def assert_requests_fit(run: RunLike) -> None:
    """Under a context policy, what each model request was sent is paired, fits and is recent.

    Each event answering a model request says what it was sent
    (``Transition.context``); made again from the transcript (and the summary
    in force), those messages: hold every call with its result and no result
    without its call; count (by the policy's counter) to what the event says,
    at most the policy's ``tokens``; keep the head (the messages up to the
    first user message) and every system message; and end with the history's
    last message then, so the newest turn is whole. A summary is asked for
    only with a model request since the one before: two summaries in a row
    would fold the same turns again. A run without a policy passes as it is;
    one with a policy has a reference on every such event.
    """
    policy = _policy_of(run)
    if policy is None:
        return
    record = run_record(run)
    transcript = record.transcript
    data = [orjson.dumps(message) for message in transcript]
    length = len(transcript) - sum(len(event.appended_json) for event in record.events)
    head = next(
        (i + 1 for i, m in enumerate(transcript[:length]) if m.get("kind") == "user"), length
    )
    summary: str | None = None  # the text of the summary in force
    summarised = False  # the last request was the summariser's
    for index, event in enumerate(record.events):
        where = event_location(index, event)
        seen = event.context
        if event.trigger.value in _ASKS:
            if seen is None:
                raise ContractViolation(where, "what the request was sent (context)", "None")
            asked_summary = event.trigger.value not in _MODEL_ASKS
            if asked_summary and summarised:
                raise ContractViolation(
                    where, "a model request since the last summary", "another summary first"
                )
            summarised = asked_summary
            sent = [i for a, b in seen.kept for i in range(a, b)]
            messages = [data[i] for i in sent]
            if seen.summary is not None:
                if summary is None or seen.summary[0] != head:
                    raise ContractViolation(
                        where,
                        "a summary written before, right after the head",
                        short_repr(seen.summary),
                    )
                message = summary_message(summary, seen.summary)
                messages.insert(sum(1 for i in sent if i < head), message)
            if event.trigger.value in _MODEL_ASKS:
                _check_sent(where, transcript, sent, length, head, policy)
            _check_pairs(where, [orjson.loads(m) for m in messages])
            counted = sum(policy.counter(m) for m in messages)
            if event.trigger.value in _MODEL_ASKS and counted != seen.tokens:
                raise ContractViolation(where, f"{seen.tokens} tokens, as recorded", str(counted))
            if event.trigger.value in _MODEL_ASKS and counted > policy.tokens:
                raise ContractViolation(
                    where, f"a request within {policy.tokens} tokens", f"{counted} tokens"
                )
            if (
                event.trigger is Trigger.SUMMARY_WRITTEN
                and event.dest is State.AWAITING_MODEL
                and event.input_json is not None
            ):
                summary = orjson.loads(event.input_json)["text"]
        length += len(event.appended_json)


def _check_sent(
    where: str,
    transcript: list[Message],
    sent: list[int],
    length: int,
    head: int,
    policy: ContextPolicy,
) -> None:
    """The head, every system message, and the history's last message are among those sent."""
    given = set(sent)
    missing = [
        i
        for i in range(length)
        if (i < head or transcript[i].get("kind") == "system") and i not in given
    ]
    if missing:
        raise ContractViolation(
            where,
            "the head (up to the first user message) and every system message sent",
            f"transcript[{missing[0]}] left out",
        )
    if not sent or sent[-1] != length - 1 or any(i >= length for i in sent):
        raise ContractViolation(
            where,
            f"the newest turn sent, up to the history's last message (transcript[{length - 1}])",
            f"messages up to transcript[{sent[-1] if sent else None}]",
        )


def _check_pairs(where: str, messages: list[Message]) -> None:
    """No call without its result, and no result without its call, among ``messages``."""
    calls = {made.get("id") for message in messages for made in calls_made_by(message)}
    results = {m.get("id") for m in messages if m.get("kind") == "tool_result"}
    if calls != results:
        orphan = sorted(map(str, calls ^ results))[0]
        what = "call" if orphan in map(str, calls) else "tool_result"
        raise ContractViolation(
            where,
            "every call sent with its tool_result, and every tool_result with its call",
            f"a {what} {orphan!r} sent alone",
        )
