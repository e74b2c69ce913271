"""Typed output, the wrap-up step and the loop guard: their rows' guards and effects.

The output schema's check of a final answer (``output_retry``,
``output_invalid``), the wrap-up step of ``on_exhausted='answer'``
(``wrap_up_due``, ``begin_wrap_up``) and the loop guard's index of identical
calls (``max_identical_calls``). ``RunState`` inherits them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from agentloop._core.approval import call_fingerprint
from agentloop._core.json import kept
from agentloop._core.output_schema import told
from agentloop._core.requests import AskModel
from agentloop._core.table import Guard

if TYPE_CHECKING:
    from agentloop._core.batch import Batch
    from agentloop._core.intake import Reply
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.rows.state import _Draft
    from agentloop._core.values import Budget, Transition

__all__ = ["OutputRows"]


class OutputRows:
    """The guards and effects of typed output, the wrap-up and the loop guard (a RunState mixin)."""

    if TYPE_CHECKING:  # what these rows read and assign, as RunState holds it
        _batch: Batch | None
        _budget: Budget
        _calls_seen: _CallIndex | None
        _draft: _Draft
        _events: list[Transition]
        _input: tuple[bytes, ...]
        _output: OutputSchema | None
        _reply: Reply
        _wrapping: str | None
        _output_retries: int

        def _steps_exhausted(self) -> bool: ...
        def _tokens_exhausted(self) -> bool: ...
        def _calls_exhausted(self) -> bool: ...
        def _context_overflows(self) -> bool: ...
        def _ask_for_reply(self) -> None: ...
    else:
        # RunState holds the slots (an instance has one layout). The type checker is not
        # shown this empty tuple, which to it would forbid assigning RunState's slots here.
        __slots__ = ()

    def _output_retry(self) -> bool:
        return (
            self._wrapping is None
            and self._output_retries < self._budget.max_output_retries
            and bool(self._final_problems())
        )

    def _output_invalid(self) -> bool:
        return bool(self._final_problems())

    def _wrap_up_due(self) -> bool:
        return self._budget.on_exhausted == "answer" and (
            self._steps_exhausted() or self._tokens_exhausted()
        )

    def _wrapping_up(self) -> bool:
        return self._wrapping is not None

    def _wrap_up_overflows(self) -> bool:
        return self._wrapping is not None and self._context_overflows()

    def _wrap_up_answered(self) -> bool:
        return self._wrapping is not None and self._reply.final

    def _calls_exhausted_wrap_up(self) -> bool:
        return self._budget.on_exhausted == "answer" and self._calls_exhausted()

    def _identical_call_persists(self) -> bool:
        return self._identical_found().persists is not None

    def _identical_calls_only(self) -> bool:
        over = self._identical_found().over
        return bool(over) and len(over) == len(self._reply.calls)

    def _identical_calls_some(self) -> bool:
        return bool(self._identical_found().over)

    def _call_index(self) -> _CallIndex:
        """The loop guard's index of the calls so far, brought up to date."""
        index = self._calls_seen
        if index is None:
            index = self._calls_seen = _CallIndex(self._input)
        index.update(self._events)
        return index

    def _final_problems(self) -> list[str]:
        """What the output schema finds wrong with the final in hand (asked once a transition)."""
        draft = self._draft
        if draft.output_problems is None:
            reply, output = self._reply, self._output
            draft.output_problems = (
                output.problems(reply.value["text"]) if output is not None and reply.final else []
            )
        return draft.output_problems

    def _identical_found(self) -> _Identical:
        """The loop guard's look at the batch in hand (once a transition; nothing when off)."""
        draft = self._draft
        if draft.identical is None:
            limit = self._budget.max_identical_calls
            calls = self._reply.calls
            draft.identical = (
                _NOTHING_IDENTICAL
                if limit is None or not calls
                else self._call_index().check(self._reply.value, limit)
            )
        return draft.identical

    def _append_output_errors(self) -> None:
        problems = self._final_problems()
        message = {"kind": "user", "text": told(problems)}
        self._draft.appended = (self._reply.json, kept(orjson.dumps(message)))
        self._draft.error = "invalid output: " + "; ".join(problems)
        self._output_retries += 1

    def _note_invalid_output(self) -> None:
        problems = self._final_problems()
        retries = self._output_retries
        self._draft.error = (
            f"the final answer does not match the output schema (after {retries} output "
            f"retr{'y' if retries == 1 else 'ies'}): " + "; ".join(problems)
        )

    def _begin_wrap_up(self) -> None:
        draft = self._draft
        if draft.reason is None:
            draft.reason = "max_steps" if self._steps_exhausted() else "max_total_tokens"
        self._wrapping = draft.reason
        note = {
            "kind": "user",
            "text": f"The run's budget ran out ({draft.reason}): tools are disabled. "
            "Give your final answer now, from what you have.",
        }
        draft.appended = (kept(orjson.dumps(note)),)

    def _ask_for_answer(self) -> None:
        self._ask_for_reply()
        request = self._draft.request
        assert type(request) is AskModel, "a model request was made"
        request.tools_disabled = True

    def _note_wrap_up(self) -> None:
        self._draft.reason = self._wrapping

    def _refuse_identical(self) -> None:
        batch, found = self._batch, self._identical_found()
        assert batch is not None, "a batch was accepted"
        limit = self._budget.max_identical_calls
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
            if self._draft.call is not None and batch.calls[index] == self._draft.call:
                self._draft.status = "error"

    def _note_identical_calls(self) -> None:
        persists = self._identical_found().persists
        assert persists is not None, "a call repeats one the loop guard refused"
        call_id, name, earlier = persists
        self._draft.named = (call_id, name)
        self._draft.reason = "max_identical_calls"
        self._draft.error = (
            f"call {call_id!r} repeats {name} with the same arguments after the loop guard "
            f"refused it (call {earlier!r}, max_identical_calls="
            f"{self._budget.max_identical_calls}); nothing of the batch was run"
        )


_WRAP_UP_BEGUN: Final = (Guard.WRAP_UP_DUE, Guard.CALLS_EXHAUSTED_WRAP_UP)


class _Identical(NamedTuple):
    """What the loop guard found in a batch: the calls beyond the limit, and a persisting one."""

    #: ``(index, id of the earlier identical call)`` of each call beyond the limit.
    over: tuple[tuple[int, str], ...] = ()
    #: ``(call id, tool, id of the refused call)`` of a call the guard refused before.
    persists: tuple[str, str, str] | None = None


_NOTHING_IDENTICAL: Final = _Identical()


class _CallIndex:
    """The loop guard's index of the conversation's calls, read from the record as it grows.

    A call is identical to another when its fingerprint (tool name and
    canonical arguments, as approval binds them) is the same. The record is
    the source: the input's messages, then each event's appended ones, read
    once each; a refused call is one whose result the guard wrote (an
    ``IdenticalCall`` error). ``_settle`` drops the index, which is read again.
    """

    __slots__ = ("events", "made", "refused", "seen")

    def __init__(self, input_json: tuple[bytes, ...]) -> None:
        self.seen: dict[str, list[str]] = {}  # fingerprint -> ids of its calls, in order
        self.refused: dict[str, str] = {}  # fingerprint -> id of a call the guard refused
        self.made: dict[str, str] = {}  # call id -> fingerprint
        self.events = 0  # events read so far
        self._read(input_json)

    def update(self, events: list[Transition]) -> None:
        """Read the messages of the events not read yet."""
        for event in events[self.events :]:
            self._read(event.appended_json)
        self.events = len(events)

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

    def check(self, reply: dict[str, Any], limit: int) -> _Identical:
        """Each call of ``reply`` against the calls before it (the batch's earlier ones too)."""
        over: list[tuple[int, str]] = []
        added: dict[str, list[str]] = {}  # this batch's accepted calls, by fingerprint
        calls = [reply] if reply["kind"] == "call" else reply["calls"]
        for index, call in enumerate(calls):
            fingerprint = call_fingerprint(call["name"], call["arguments"])
            if fingerprint in self.refused:
                return _Identical(persists=(call["id"], call["name"], self.refused[fingerprint]))
            earlier = self.seen.get(fingerprint, [])
            mine = added.setdefault(fingerprint, [])
            if len(earlier) + len(mine) >= limit:
                over.append((index, (mine or earlier)[-1]))
            else:
                mine.append(call["id"])
        return _Identical(over=tuple(over))
