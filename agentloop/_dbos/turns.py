"""A DBOSLoop's conversations: turn ``n`` of conversation ``c`` is the workflow ``c::n``.

The last turn is found among the workflows whose id starts with ``c::``; the
next turn's input is its result's transcript and the new messages. DBOS
starts a workflow id once and gives a second start the first's handle, so
two processes beginning one turn are told apart by the input the workflow
recorded (``ConversationBusyError`` for the one whose input it is not).
"""

from __future__ import annotations

from typing import Any

from dbos import DBOS

from agentloop._core.table import State
from agentloop._core.values import require_result
from agentloop._dbos.decisions import pending
from agentloop._durable.conversations import checked_conversation_id
from agentloop._durable.ids import turn_of, turn_prefix, turn_run_id
from agentloop._errors import ConversationBusyError, InvalidStateError
from agentloop._loop.conversation import turn_input

__all__ = ["busy", "next_turn"]


def next_turn(
    conversation: object, messages: str | list[dict[str, Any]]
) -> tuple[str, str | list[dict[str, Any]]]:
    """The next turn's workflow id, and its input (from the last turn's transcript, if any)."""
    conversation_id = checked_conversation_id(conversation)
    found = DBOS.list_workflows(workflow_id_prefix=turn_prefix(conversation_id), load_input=False)
    turns = sorted(
        (turn, status)
        for status in found
        if (turn := turn_of(status.workflow_id, conversation_id)) is not None
    )
    if not turns:
        return turn_run_id(conversation_id, 1), messages
    last, status = turns[-1]
    if status.status != "SUCCESS":
        which = f"turn {last} of conversation {conversation_id!r}"
        if pending(status.workflow_id):
            raise InvalidStateError(
                f"{which} waits for decisions: decide it first", state=State.AWAITING_APPROVAL
            )
        raise InvalidStateError(  # its state is the workflow's to know: it has not ended
            f"{which} has not ended (its workflow is {status.status}): let it end first",
            state=State.AWAITING_MODEL,
        )
    previous = require_result(status.output, f"workflow {status.workflow_id!r}")
    return turn_run_id(conversation_id, last + 1), turn_input(
        previous, messages, conversation_id, last + 1
    )


def busy(turn_id: str, history: list[dict[str, Any]]) -> ConversationBusyError | None:
    """The error for a turn another process began first, with another input; else ``None``."""
    (status,) = DBOS.list_workflows(workflow_ids=[turn_id], load_output=False)
    args = (status.input or {"args": ()})["args"]
    if len(args) > 1 and args[1] == history:
        return None
    conversation_id, _, turn = turn_id.rpartition("::")
    return ConversationBusyError(
        f"turn {turn} of conversation {conversation_id!r} was begun elsewhere first (workflow "
        f"{turn_id!r}), with another input: read it, and go on from it",
        conversation_id,
        int(turn),
    )
