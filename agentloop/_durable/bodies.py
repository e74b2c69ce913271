"""A report as DBOS records its steps' values.

A model's answer is ``{'reply': ...}``, ``{'not_json': {'repr', 'problem'}}``
or ``{'raised': {'type', 'message'}, 'usage'?}``; a call's outcome is
``{'status', 'content', 'exception'}``. Each encoder returns what the engine
is to take as well; each reader returns the report to make again, or
``None`` for a body that is not one.
"""

from __future__ import annotations

from typing import Any

import orjson

from agentloop._core.intake import checked_outcome, checked_usage, not_json
from agentloop._core.json import exception_content, intake
from agentloop._core.values import NotJSON, RecordedException, Usage
from agentloop._errors import JSONError

__all__ = [
    "outcome_record",
    "raised_record",
    "recorded_answer",
    "recorded_outcome",
    "reply_record",
]


def reply_record(reply: object) -> tuple[dict[str, Any], object]:
    """A model's reply as recorded, and what the engine is to take.

    ``{'reply': ...}``, or ``{'not_json': {'repr', 'problem'}}`` for one that is not JSON.
    """
    if type(reply) is not NotJSON:
        try:
            taken = intake(reply, "reply")[1]
        except JSONError as exc:
            reply = not_json(reply, str(exc))
        else:
            return {"reply": taken}, taken
    return {"not_json": {"repr": reply.text, "problem": reply.problem}}, reply


def raised_record(exc: Exception) -> dict[str, Any]:
    """What a model raised, as recorded: ``{'raised'}``, and ``'usage'`` if it cost any."""
    raised: dict[str, Any] = {"raised": exception_content(exc)}
    spent = checked_usage(vars(exc).get("usage"))  # as the engine reads it: no user code
    if isinstance(spent, Usage):
        raised["usage"] = spent._asdict()
    return raised


def outcome_record(outcome: object) -> tuple[dict[str, Any], object]:
    """A dispatcher's outcome as recorded, and what the engine is to take.

    ``{'status', 'content', 'exception'}``; the engine's copy keeps the live exception.
    """
    status, content = checked_outcome(outcome)
    exception = outcome.get("exception") if type(outcome) is dict else None
    plain = orjson.loads(content)
    taken: dict[str, Any] = {"status": status, "content": plain}
    recorded = None
    if isinstance(exception, BaseException):
        taken["exception"], recorded = exception, exception_content(exception)
    return {"status": status, "content": plain, "exception": recorded}, taken


def recorded_answer(body: dict[str, Any]) -> tuple[str, Any] | None:
    """A recorded model answer as the report to make: ``('reply', r)``, ``('raised', e)``.

    ``None`` if ``body`` is not what ``reply_record`` or ``raised_record`` makes.
    """
    if body.keys() == {"reply"}:
        return "reply", body["reply"]
    if body.keys() == {"not_json"} and _texts(body["not_json"], "repr", "problem"):
        return "reply", NotJSON(body["not_json"]["repr"], body["not_json"]["problem"])
    if (
        body.keys() - {"usage", "wait"} == {"raised"}
        and _texts(body["raised"], "type", "message")
        and (body.get("wait") is None or type(body["wait"]) in (int, float))
    ):
        raised = RecordedException.from_content(body["raised"])
        raised.usage = body.get("usage")  # what the failed call still cost, if it said
        raised.wait = body.get("wait")  # the wait the retry policy chose, if it retried
        return "raised", raised
    return None


def recorded_outcome(body: dict[str, Any]) -> dict[str, Any] | None:
    """A recorded outcome (``outcome_record``) as the engine takes it; ``None`` if it is not one."""
    exception = body.get("exception")
    if (
        body.keys() != {"status", "content", "exception"}
        or type(body["status"]) is not str
        or not (exception is None or _texts(exception, "type", "message"))
    ):
        return None
    outcome = {"status": body["status"], "content": body["content"]}
    if exception is not None:
        outcome["exception"] = RecordedException.from_content(exception)
    return outcome


def _texts(value: object, *keys: str) -> bool:
    return (
        type(value) is dict
        and value.keys() == set(keys)
        and all(type(value[key]) is str for key in keys)
    )
