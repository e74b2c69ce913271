"""A conversation's turns in a ledger: which there are, oldest first.

Turn ``n`` of conversation ``c`` is the run ``c::n`` (``ids.py``). A ledger
that lists its ids by prefix (``SQLiteLedger.run_ids(prefix=)``) lists them
in one query; any other is asked for turn 1, 2, ... until one is not there.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from agentloop._durable.ids import turn_of, turn_prefix, turn_run_id
from agentloop._errors import RunNotFoundError

if TYPE_CHECKING:
    from agentloop._durable.protocol import Ledger

__all__ = ["checked_conversation_id", "turn_ids"]


def checked_conversation_id(conversation_id: object, where: str = "conversation") -> str:
    """``conversation_id`` if it can name a conversation: a non-empty str without ``':'``.

    ``where`` names what gave it in the error (``conversation=``, or the result ``after=``).
    """
    if type(conversation_id) is not str:
        raise TypeError(
            f"expected {where} to be a conversation's id, a non-empty str (say 'user-42'), "
            f"got {type(conversation_id).__name__}"
        )
    if not conversation_id or ":" in conversation_id:
        raise ValueError(
            f"expected {where} to be a non-empty str without ':' (say "
            f"'user-42'; its turns are the runs 'user-42::1', 'user-42::2', ...), got "
            f"{conversation_id!r:.80}"
        )
    try:
        conversation_id.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"expected {where} to be text, got {conversation_id!r:.80}: {exc.reason}"
        ) from None
    return conversation_id


def turn_ids(ledger: Ledger, conversation_id: str) -> list[str]:
    """The run ids of the conversation's turns in ``ledger``, oldest (turn 1) first."""
    run_ids = getattr(ledger, "run_ids", None)
    if callable(run_ids):
        found = run_ids(prefix=turn_prefix(conversation_id))
        turns = sorted(
            (turn, run_id)
            for run_id in found
            if type(run_id) is str and (turn := turn_of(run_id, conversation_id)) is not None
        )
        return [run_id for _, run_id in turns]
    ids: list[str] = []
    for turn in itertools.count(1):
        run_id = turn_run_id(conversation_id, turn)
        try:
            ledger.read(run_id)
        except RunNotFoundError:
            return ids
        ids.append(run_id)
    raise AssertionError("unreachable")  # pragma: no cover
