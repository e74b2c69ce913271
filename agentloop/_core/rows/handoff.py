"""Handoffs (``Loop(handoffs=...)``): one agent hands the run to another, by a named row.

A handoff is offered to the model as a tool (``transfer_to_billing``). A call
to one of the agent in force, alone in its reply, is taken: answered ``ok``
with ``{"handed_off_to": name}``, appended with its result, and the run goes on
with the other agent (``switch_agent``; the event names it in ``agent``).
Beside other calls it is refused: answered ``error``, unrun, and the rest run.
The call is an accepted call (reserved and counted), so these rows come after
the budgets, the reused ids, the loop guard and cancellation: a handoff past
``max_calls`` ends the run ``exhausted``, and a final still beats the call budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.json import kept
from agentloop._core.register import effect, guard
from agentloop._core.rows.basic import append_batch, name_call, reserve_calls
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from agentloop._core.state import RunState

__all__ = ["FEATURE", "ROWS", "agent_in_force"]

FEATURE: Final = Feature.HANDOFF

S, T, G, E = State, Trigger, Guard, Effect


@guard(G.HANDOFF_ALONE)
def handoff_alone(run: RunState) -> bool:
    """The reply is one call, to a handoff of the agent in force."""
    return len(run.reply.calls) == 1 and _handoffs(run) == [0]


@guard(G.HANDOFFS_ONLY)
def handoffs_only(run: RunState) -> bool:
    """Every call of the batch (two or more) is to a handoff of the agent in force."""
    return len(_handoffs(run)) == len(run.reply.calls) > 1


@guard(G.HANDOFF_IN_BATCH)
def handoff_in_batch(run: RunState) -> bool:
    """Some call of the batch, beside others, is to a handoff of the agent in force."""
    return bool(_handoffs(run))


@effect(E.ANSWER_HANDOFF)
def answer_handoff(run: RunState) -> None:
    """Answer the lone handoff call ``ok``: ``{"handed_off_to": name}``, unrun."""
    batch = run.batch
    assert batch is not None, "a batch was accepted"
    content = {"handed_off_to": _target(run, batch.calls[0][1])}
    batch.answer(0, "ok", kept(orjson.dumps(content)))
    run.draft.status = "ok"


@effect(E.SWITCH_AGENT)
def switch_agent(run: RunState) -> None:
    """The agent the call hands to is in force from now on; the event names it."""
    run.agent = run.draft.agent = _target(run, run.reply.calls[0][1])


@effect(E.REFUSE_HANDOFF)
def refuse_handoff(run: RunState) -> None:
    """Answer each handoff call of the batch ``error``, unrun: a handoff is taken alone."""
    batch = run.batch
    assert batch is not None, "a batch was accepted"
    for index in _handoffs(run):
        name = batch.calls[index][1]
        content = {
            "type": "HandoffRefused",
            "message": f"not taken: {name} hands the conversation to {_target(run, name)}, "
            "and a handoff is taken only as the only call of its reply; call it alone",
        }
        batch.answer(index, "error", kept(orjson.dumps(content)))


def agent_in_force(run: RunState) -> str | None:
    """The agent in force, from the record: the last event's that names one, else the first."""
    agents = run.agents
    if agents is None:
        return None
    return next((e.agent for e in reversed(run.events) if e.agent is not None), agents.start)


def _handoffs(run: RunState) -> list[int]:
    """The indices of the reply's calls that are handoffs of the agent in force (none: no team)."""
    agents, agent = run.agents, run.agent
    if agents is None or agent is None:
        return []
    offered = agents.handoffs[agent]
    return [index for index, (_, name) in enumerate(run.reply.calls) if name in offered]


def _target(run: RunState, tool: str) -> str:
    agents, agent = run.agents, run.agent
    assert agents is not None, "handoff rows are a team's"
    assert agent is not None, "a team has an agent in force"
    return agents.handoffs[agent][tool]


# -- the rows: each names the functions of its guard and effects (above, or imported)

ROWS: Final[tuple[Entry, ...]] = (
    # -- a handoff alone is taken; beside other calls it is refused, unrun (after the
    #    budgets, the reused ids, the loop guard and cancellation, as any accepted batch)
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [handoff_alone],
     "dest": S.AWAITING_MODEL,
     "before": [name_call, reserve_calls, answer_handoff, append_batch, switch_agent]},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [handoffs_only],
     "dest": S.AWAITING_MODEL,
     "before": [name_call, reserve_calls, refuse_handoff, append_batch]},
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [handoff_in_batch],
     "dest": S.DISPATCHING, "before": [name_call, reserve_calls, refuse_handoff]},
)  # fmt: skip
