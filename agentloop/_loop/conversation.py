"""Conversations: each turn a run that starts from the turn before's transcript.

``run(message, after=result)`` goes on from a result (in memory, or loaded
from a run file); ``run(message, conversation="user-42")`` from the last turn
the Loop's ledger holds, in any process. Each turn is a run of its own, with
its own budgets and record; its input is the turn before's transcript and the
new messages, so the ids of earlier calls stay reserved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, NamedTuple
from uuid import uuid4

import orjson

from agentloop._core.messages import check_new_input
from agentloop._core.table import TERMINAL, State
from agentloop._core.values import OutputT, require_result
from agentloop._durable.conversations import checked_conversation_id, turn_ids
from agentloop._durable.ids import turn_of, turn_run_id
from agentloop._durable.resume import differences
from agentloop._durable.view import view_run
from agentloop._errors import ConfigurationMismatchError, InvalidStateError, RunNotFoundError
from agentloop._loop.engines import carried_summary, fresh_engine

if TYPE_CHECKING:
    from agentloop._core.engine import Engine
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.values import CancelToken, RunResult
    from agentloop._durable.protocol import Ledger
    from agentloop._loop.loop import Loop

__all__ = ["Conversations", "Turn", "next_turn", "turn_engine", "turn_input"]


def turn_engine(
    loop: Loop,
    messages: str | list[dict[str, Any]],
    cancel: CancelToken | None,
    run_id: str | None,
    deps: object,
    after: RunResult | None,
    conversation: str | None,
) -> tuple[Engine, CancelToken | None]:
    """A new run's engine and token (``fresh_engine``): a turn with ``after=``/``conversation=``."""
    turn = next_turn(loop, messages, after, conversation, run_id)
    if turn is None:
        return fresh_engine(loop, messages, cancel, run_id, deps)
    return fresh_engine(
        loop, turn.input, cancel, None, deps, turn.continues, turn.conversation, turn.summary
    )


class Turn(NamedTuple):
    """The next turn: its input, its conversation and number, and the turn before (an id)."""

    input: str | list[dict[str, Any]]
    conversation: tuple[str, int]
    continues: str | None
    #: The summary in force when the turn before stopped (``summarise``), carried in.
    summary: tuple[int, str] | None = None


def next_turn(
    loop: Loop,
    messages: str | list[dict[str, Any]],
    after: RunResult | None,
    conversation: str | None,
    run_id: str | None,
) -> Turn | None:
    """The turn ``run(messages, after=, conversation=)`` begins; ``None`` outside a conversation."""
    if after is None and conversation is None:
        return None
    if run_id is not None:
        raise ValueError(
            "a conversation's turn has an id made for it ('user-42::3' is turn 3 of "
            f"'user-42'): leave run_id= out, got {run_id!r:.60}"
        )
    check_new_input(messages)
    previous: RunResult | None = None
    if conversation is None:
        previous = require_result(after, "after=")
        conversation_id = (
            uuid4().hex
            if previous.conversation_id is None  # a run file's, or a caller's _replace: checked
            else checked_conversation_id(previous.conversation_id, "after=.conversation_id")
        )
        turn = 2 if previous.turn is None else previous.turn + 1
        if loop.ledger is not None:
            _recorded_before(loop.ledger, previous, conversation_id, turn)
    else:
        conversation_id = checked_conversation_id(conversation)
        ledger = _ledger_of(loop.ledger)
        turns = turn_ids(ledger, conversation_id)
        turn = 1
        if turns:
            previous = view_run(ledger, turns[-1]).result
            turn = (turn_of(turns[-1], conversation_id) or 0) + 1
        if after is not None:
            last = require_result(after, "after=").run_id
            if previous is None or last != previous.run_id:
                raise ValueError(
                    f"expected after= to be the last turn of conversation {conversation_id!r} "
                    f"({'none yet' if previous is None else previous.run_id}), got run {last!r}"
                )
    if previous is None:
        return Turn(messages, (conversation_id, turn), None)
    return Turn(
        turn_input(previous, messages, conversation_id, turn),
        (conversation_id, turn),
        previous.run_id,
        carried_summary(loop, previous),
    )


def turn_input(
    previous: RunResult, messages: str | list[dict[str, Any]], conversation_id: str, turn: int
) -> list[dict[str, Any]]:
    """Turn ``turn``'s input: the ended ``previous``'s transcript, then ``messages``."""
    _ended(previous, conversation_id, turn - 1)
    new = [{"kind": "user", "text": messages}] if type(messages) is str else messages
    return [*previous.transcript, *new]


class Conversations(Generic[OutputT]):
    """What a ``Loop`` reads of its conversations (a mixin of it)."""

    if TYPE_CHECKING:
        ledger: Ledger | None
        output: OutputSchema | None

    def conversation(self, conversation_id: str) -> tuple[RunResult[OutputT], ...]:
        """The results of the conversation's turns in the Loop's ledger, oldest first.

        Read, never run: a turn that has not ended has its working state as
        ``status``. A finished turn's output is the Loop's type, as ``resume``
        gives it (a ``City`` under ``Loop(output=City)``).
        """
        ledger = _ledger_of(self.ledger)
        conversation_id = checked_conversation_id(conversation_id)
        found = turn_ids(ledger, conversation_id)
        return tuple(self._typed(view_run(ledger, run_id).result) for run_id in found)

    async def aconversation(self, conversation_id: str) -> tuple[RunResult[OutputT], ...]:
        """``conversation`` under asyncio."""
        return self.conversation(conversation_id)

    def _typed(self, result: RunResult) -> RunResult[OutputT]:
        """``result`` with a finished turn's output made the Loop's type (its schema checked)."""
        if result.status is not State.FINISHED:
            return result
        output = self.output
        recorded = (
            None if result.output_schema_json is None else orjson.loads(result.output_schema_json)
        )
        if differences({"output": recorded}, {"output": output and output.schema}):
            found = [
                f"$.output_schema: run {result.run_id!r} has another schema than this "
                "Loop's output="
            ]
            raise ConfigurationMismatchError(
                "a turn was made with another output than this Loop's: " + found[0], found
            )
        if output is None:
            return result
        return result._replace(output=output.value(result.output_text or ""))


def _recorded_before(ledger: Ledger, previous: RunResult, conversation_id: str, turn: int) -> None:
    """Refuse a durable turn ``turn`` whose turn before is not in ``ledger`` as ``c::(turn-1)``.

    A conversation is listed from its turns' ids (``turn_ids``): a durable
    turn 2 after an in-memory turn 1, a plain run or a fork would be a
    conversation without its turn 1, which a ledger that lists ids by prefix
    shows from turn 2 and one that asks for turn 1, 2, ... shows empty.
    """
    expected = turn_run_id(conversation_id, turn - 1)
    given = previous.run_id
    if given == expected:
        try:
            ledger.read(expected)
        except RunNotFoundError:
            pass
        else:
            return
    what = "a result in memory" if given is None else f"run {given!r}"
    raise ValueError(
        f"expected after= to be turn {turn - 1} of its conversation as recorded in this "
        f"Loop's ledger (run {expected!r}), got {what}, which is not: a durable turn goes on "
        "from the ledger's turn before. Begin a conversation in this ledger from its "
        "transcript instead: loop.run([*result.transcript, message], conversation=...)"
    )


def _ledger_of(ledger: Ledger | None) -> Ledger:
    if ledger is None:
        raise ValueError(
            "a conversation by id (conversation=) is kept in a ledger, and this Loop has none: "
            "go on from a result with loop.run(message, after=result), or make the Loop with "
            "ledger=agentloop.ledger.SQLiteLedger('runs.db')"
        )
    return ledger


def _ended(previous: RunResult, conversation_id: str, turn: int) -> None:
    """Refuse to go on from a turn that has not ended (it waits for decisions, or runs)."""
    status = previous.status
    if status in TERMINAL:
        return
    which = f"turn {turn} of conversation {conversation_id!r}"
    if status is State.AWAITING_APPROVAL:
        raise InvalidStateError(
            f"{which} waits for decisions: decide and resume it first", state=status
        )
    raise InvalidStateError(
        f"{which} has not ended (it is {status.value!r}): resume it first", state=status
    )
