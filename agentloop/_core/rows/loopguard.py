"""The loop guard (``max_identical_calls=N``): its rows, guards, effects and index of calls.

A call whose fingerprint was accepted ``N`` times is answered ``error`` by the
engine, never run; one the guard refused, made again, ends the run
``repeated_call``. What the guard knows is read from the record (the input
and every event's ``appended``), so a replay finds the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from agentloop._core.approval import call_fingerprint
from agentloop._core.json import kept
from agentloop._core.register import effect, guard
from agentloop._core.rows.basic import (
    append_batch,
    calls_exhausted,
    name_call,
    reject_reply,
    reserve_calls,
)
from agentloop._core.rows.handoff import handoff_calls, refuse_handoff
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from agentloop._core.messages import History
    from agentloop._core.state import RunState

__all__ = ["FEATURE", "ROWS", "CallIndex", "Identical"]

FEATURE: Final = Feature.LOOP_GUARD

S, T, G, E = State, Trigger, Guard, Effect


@guard(G.IDENTICAL_CALL_PERSISTS)
def identical_call_persists(run: RunState) -> bool:
    """A call of the batch repeats one the loop guard refused before."""
    return identical_found(run).persists is not None


@guard(G.IDENTICAL_CALLS_ONLY)
def identical_calls_only(run: RunState) -> bool:
    """Every call of the batch is beyond ``max_identical_calls``, or a handoff beside them."""
    over = {index for index, _ in identical_found(run).over}
    return bool(over) and len(over | set(handoff_calls(run))) == len(run.reply.calls)


@guard(G.IDENTICAL_CALLS_SOME)
def identical_calls_some(run: RunState) -> bool:
    """Some call of the batch is beyond ``max_identical_calls``."""
    return bool(identical_found(run).over)


@effect(E.REFUSE_IDENTICAL)
def refuse_identical(run: RunState) -> None:
    """Answer each call beyond the limit ``error``, pointing at the earlier identical call."""
    batch, found, draft = run.batch, identical_found(run), run.draft
    assert batch is not None, "a batch was accepted"
    limit = run.budget.max_identical_calls
    for index, earlier in found.over:
        name = batch.calls[index][1]
        content = {
            "type": "IdenticalCall",
            "message": f"not run: {name} was already called with these same arguments "
            f"{limit} time{'s' if limit != 1 else ''} in this conversation "
            f"(max_identical_calls={limit}); the result is in the tool_result of call "
            f"{earlier!r} above. Use it, or call with other arguments.",
        }
        batch.answer(index, "error", kept(orjson.dumps(content)))
        if draft.call is not None and batch.calls[index] == draft.call:
            draft.status = "error"


@effect(E.NOTE_IDENTICAL_CALLS)
def note_identical_calls(run: RunState) -> None:
    """The event names the repeated call; ``reason = 'max_identical_calls'``."""
    persists = identical_found(run).persists
    assert persists is not None, "a call repeats one the loop guard refused"
    call_id, name, earlier = persists
    draft = run.draft
    draft.named = (call_id, name)
    draft.reason = "max_identical_calls"
    draft.error = (
        f"call {call_id!r} repeats {name} with the same arguments after the loop guard "
        f"refused it (call {earlier!r}, max_identical_calls="
        f"{run.budget.max_identical_calls}); nothing of the batch was run"
    )


def identical_found(run: RunState) -> Identical:
    """The loop guard's look at the batch in hand (once a transition; nothing when off)."""
    draft = run.draft
    if draft.identical is None:
        limit = run.budget.max_identical_calls
        draft.identical = (
            _NOTHING_IDENTICAL
            if limit is None or not run.reply.calls
            else _call_index(run).check(run.reply.value, limit)
        )
    return draft.identical


def _call_index(run: RunState) -> CallIndex:
    """The loop guard's index of the calls so far, brought up to date."""
    index = run.calls_seen
    if index is None:
        index = run.calls_seen = CallIndex(run.input)
    index.update(run.history)
    return index


class Identical(NamedTuple):
    """What the loop guard found in a batch: the calls beyond the limit, and a persisting one."""

    #: ``(index, id of the earlier identical call)`` of each call beyond the limit.
    over: tuple[tuple[int, str], ...] = ()
    #: ``(call id, tool, id of the refused call)`` of a call the guard refused before.
    persists: tuple[str, str, str] | None = None


_NOTHING_IDENTICAL: Final = Identical()


class CallIndex:
    """The loop guard's index of the conversation's calls, read from the record as it grows.

    A call is identical to another when its fingerprint (tool name and
    canonical arguments, as approval binds them) is the same. The record is
    the source: the input's messages, then each event's appended ones, read
    once each; a refused call is one whose result the guard wrote (an
    ``IdenticalCall`` error). ``settle`` drops the index, which is read again.
    """

    __slots__ = ("made", "read", "refused", "seen")

    def __init__(self, input_json: tuple[bytes, ...]) -> None:
        self.seen: dict[str, list[str]] = {}  # fingerprint -> ids of its calls, in order
        self.refused: dict[str, str] = {}  # fingerprint -> id of a call the guard refused
        self.made: dict[str, str] = {}  # call id -> fingerprint
        self.read = len(input_json)  # the history's messages read so far
        self._read(input_json)

    def update(self, history: History) -> None:
        """Read the messages the run appended to ``history`` since, not read yet."""
        self._read(tuple(history.message_json(i) for i in range(self.read, len(history))))
        self.read = len(history)

    def _read(self, messages: tuple[bytes, ...]) -> None:
        for data in messages:
            message = orjson.loads(data)
            kind = message.get("kind")
            if kind == "call" or kind == "calls":
                for call in [message] if kind == "call" else message.get("calls") or ():
                    call_id = str(call.get("id"))
                    fingerprint = call_fingerprint(str(call.get("name")), call.get("arguments"))
                    self.made[call_id] = fingerprint
                    self.seen.setdefault(fingerprint, []).append(call_id)
            elif kind == "tool_result" and message.get("status") == "error":
                content = message.get("content")
                if type(content) is dict and content.get("type") == "IdenticalCall":
                    found = self.made.get(str(message.get("id")))
                    if found is not None:
                        self.refused.setdefault(found, str(message.get("id")))

    def check(self, reply: dict[str, Any], limit: int) -> Identical:
        """Each call of ``reply`` against the calls before it (the batch's earlier ones too)."""
        over: list[tuple[int, str]] = []
        added: dict[str, list[str]] = {}  # this batch's accepted calls, by fingerprint
        calls = [reply] if reply["kind"] == "call" else reply["calls"]
        for index, call in enumerate(calls):
            fingerprint = call_fingerprint(call["name"], call["arguments"])
            if fingerprint in self.refused:
                return Identical(persists=(call["id"], call["name"], self.refused[fingerprint]))
            earlier = self.seen.get(fingerprint, [])
            mine = added.setdefault(fingerprint, [])
            if len(earlier) + len(mine) >= limit:
                over.append((index, (mine or earlier)[-1]))
            else:
                mine.append(call["id"])
        return Identical(over=tuple(over))


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- a call refused as identical, made again: the model persists
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [identical_call_persists],
     "dest": S.REPEATED_CALL, "before": [name_call, note_identical_calls, reject_reply],
     "ahead_of": calls_exhausted},
    # -- calls past max_identical_calls are answered error by the engine, unrun (after
    #    the budgets and cancellation, as any accepted batch); a handoff beside them is
    #    refused as the handoff rows refuse one beside other calls
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [identical_calls_only],
     "dest": S.AWAITING_MODEL,
     "before": [name_call, reserve_calls, refuse_identical, refuse_handoff, append_batch]},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [identical_calls_some],
     "dest": S.DISPATCHING,
     "before": [name_call, reserve_calls, refuse_identical, refuse_handoff]},
)  # fmt: skip
