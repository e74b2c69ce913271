"""Intake: what a driver reports, taken in as values the table's guards and effects read.

A model's reply becomes a ``Reply``: its JSON, a decoded copy, what is wrong
with it (if anything), the usage it reported and the calls of its batch. A
tool's outcome becomes an ``Outcome``. Nothing here decides which row fires:
the guards read these values; intake only says what came.

What enters is checked with the record's own rules, so that whatever the
engine accepts it can record and reload: plain JSON (``_json.intake``), and
token counts that stay within 64 bits even once summed over the run.
"""

from __future__ import annotations

import inspect
from typing import Any, Final, NamedTuple

import orjson

from agentloop._core.json import exception_content, intake, kept
from agentloop._core.messages import DISPATCH_STATUSES, batch_of, reply_problem
from agentloop._core.values import MAX_BUDGET, NotJSON, Usage
from agentloop._errors import JSONError

__all__ = [
    "NO_REPLY",
    "Outcome",
    "Reply",
    "checked_outcome",
    "checked_usage",
    "not_json",
    "raised_outcome",
    "raised_usage",
    "take_outcome",
    "take_reply",
]

_USAGE_KEYS: Final = frozenset(Usage._fields)
_OUTCOME_KEYS_AT_MOST: Final = frozenset({"status", "content", "exception", "usage"})
_NO_USAGE: Final = Usage()
# tuple.__new__ makes a NamedTuple from all its fields without the Python-level __new__.
_new: Final = tuple.__new__


class Reply(NamedTuple):
    """A model's reply as the guards read it."""

    #: Its JSON, as the history gets it (``b""`` when it was not JSON).
    json: bytes
    #: A decoded copy (what a rejected reply keeps), or a ``NotJSON``.
    value: Any
    #: What is wrong with it, or ``None`` for a well-formed call, batch or final.
    problem: str | None
    #: The tokens it reported (taken out of the reply: a bill, not a message).
    usage: Usage | None
    #: Each call's ``(id, name)`` in emission order; empty for a final or a malformed reply.
    calls: tuple[tuple[str, str], ...]
    #: The call of a batch of one, which the batch's events name (None for a longer one).
    lone: tuple[str, str] | None = None
    #: Whether it is a well-formed final answer.
    final: bool = False


#: No reply in hand (before the first, and between a batch and the next).
NO_REPLY: Final = Reply(b"", None, None, None, ())


def take_reply(reply: object, spent: Usage) -> Reply:
    """``reply`` taken in; ``spent`` is what the run's replies reported so far."""
    problem: str | None = None
    usage: Usage | None = None
    if type(reply) is dict and "usage" in reply:
        checked = checked_usage(reply["usage"], spent)
        if isinstance(checked, Usage):
            usage = checked
            reply = {key: value for key, value in reply.items() if key != "usage"}
        else:  # kept in the reply, which is malformed: a reviewer sees what came
            problem = checked
    if type(reply) is NotJSON:  # replayed: a reply that was not JSON when it came
        return Reply(b"", reply, reply.problem, usage, ())
    try:
        data, plain = intake(reply, "reply")
    except JSONError as exc:
        value = not_json(reply, str(exc))
        return Reply(b"", value, value.problem, usage, ())
    problem = problem or reply_problem(plain)
    if problem is not None:
        return Reply(data, plain, problem, usage, ())
    if plain["kind"] == "final":
        return _new(Reply, (data, plain, None, usage, (), None, True))
    calls = batch_of(plain)
    return _new(
        Reply, (data, plain, None, usage, calls, calls[0] if len(calls) == 1 else None, False)
    )


def raised_usage(exc: BaseException, spent: Usage) -> Usage | None:
    """What a failed model call still cost, when the exception says (``IncompleteReply``).

    Only the instance's own dict is read, so no user code runs. A usage that
    could not be recorded (of the wrong shape, or past 64 bits once summed) is
    not counted: the failure itself is still recorded.
    """
    found = checked_usage(vars(exc).get("usage"), spent)
    return found if isinstance(found, Usage) else None


def checked_usage(usage: object, spent: Usage = _NO_USAGE) -> Usage | str:
    """A reply's ``usage`` as a ``Usage``, or what is wrong with it.

    Each count is a non-negative int, cached tokens are part of the input
    tokens, and each stays within ``2**63 - 1`` once added to ``spent`` (the
    run's record keeps the sums as 64-bit integers).
    """
    if type(usage) is dict and usage.keys() == _USAGE_KEYS:
        counts = [usage[name] for name in Usage._fields]
        if all(type(n) is int and 0 <= n <= MAX_BUDGET for n in counts) and counts[2] <= counts[0]:
            over = [
                name
                for name, n, before in zip(Usage._fields, counts, spent, strict=True)
                if before + n > MAX_BUDGET
            ]
            if not over:
                return Usage(*counts)
            return (
                f"expected the run's summed usage to stay within 2**63 - 1 for each count, "
                f"got {', '.join(over)} past it once this reply's usage is added"
            )
    return (
        "expected 'usage' to be {'input_tokens', 'output_tokens', 'cached_tokens'}, each a "
        f"non-negative int, cached_tokens at most input_tokens, got {not_json(usage).text:.200}"
    )


class Outcome(NamedTuple):
    """A tool's outcome as the record keeps it: its status, its content's JSON, its exception."""

    status: str
    content_json: bytes
    exception: BaseException | None = None
    #: The tokens the call spent on models (an agent tool's child run), rolled into the run's.
    usage: Usage | None = None


def take_outcome(outcome: object, spent: Usage = _NO_USAGE) -> Outcome:
    """A dispatcher's outcome taken in: a bad one becomes an ``error`` saying what was wrong.

    Its ``usage``, if it has one (an agent tool's: its child run's), is checked
    as a reply's is, against what the run has ``spent``.
    """
    status, content = checked_outcome(outcome)
    exception = outcome.get("exception") if type(outcome) is dict else None
    usage: Usage | str | None = None
    if type(outcome) is dict and "usage" in outcome:
        usage = checked_usage(outcome["usage"], spent)
        if type(usage) is str:
            problem = kept(orjson.dumps(f"the tool's usage: {usage}"))
            return _new(Outcome, ("error", problem, None, None))
    return _new(
        Outcome,
        (status, content, exception if isinstance(exception, BaseException) else None, usage),
    )


def raised_outcome(exc: BaseException) -> Outcome:
    """The outcome of a tool that raised ``exc``: an ``error`` naming it."""
    return Outcome("error", kept(orjson.dumps(exception_content(exc))), exc, None)


def checked_outcome(outcome: object) -> tuple[str, bytes]:
    """A dispatcher's outcome as (status, content JSON); a bad one becomes ``error``."""
    if type(outcome) is dict:
        status = outcome.get("status")
        if (
            type(status) is str
            and status in DISPATCH_STATUSES
            and "content" in outcome
            and (len(outcome) == 2 or outcome.keys() <= _OUTCOME_KEYS_AT_MOST)
        ):
            try:
                return status, intake(outcome["content"], "content")[0]
            except JSONError as exc:
                return "error", kept(
                    orjson.dumps(f"the tool returned a value that is not JSON: {exc}")
                )
    problem = (
        "the dispatcher's outcome was not valid: expected {'status': one of "
        f"{sorted(DISPATCH_STATUSES)}, 'content': JSON, optionally 'exception': "
        "the exception behind an error and 'usage': the tokens it spent}, got "
        f"{not_json(outcome).text:.200}"
    )
    return "error", kept(orjson.dumps(problem))


def not_json(reply: object, problem: str = "") -> NotJSON:
    """A reply that is not JSON, kept for review as text that cannot fail to save."""
    if inspect.iscoroutine(reply):
        reply.close()  # never awaited: say so once, here
        problem = (
            "the model returned a coroutine: an async model needs the asyncio driver "
            "(loop.arun or loop.astart)"
        )
    try:
        text = repr(reply)
        if type(text) is not str:
            raise TypeError("__repr__ returned a non-str")
        text.encode()
    except Exception as exc:  # noqa: BLE001 - any failure of a user's __repr__
        text = f"<unprintable: {type(exc).__name__}>"
    return NotJSON(text[:2000], problem)
