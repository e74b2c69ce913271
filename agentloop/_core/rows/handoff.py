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

import functools
from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.context_policy import FilterHistory
from agentloop._core.json import exception_said, kept
from agentloop._core.register import effect, guard
from agentloop._core.rows.basic import (
    answer_rest,
    append_batch,
    cancel_requested,
    name_call,
    reserve_calls,
)
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger

if TYPE_CHECKING:
    from agentloop._core.state import RunState

__all__ = ["FEATURE", "ROWS", "agent_in_force", "handoff_calls", "refuse_handoff", "team_view"]

FEATURE: Final = Feature.HANDOFF

S, T, G, E = State, Trigger, Guard, Effect

_HAND_OFF: Final = Trigger.HAND_OFF


@guard(G.HANDOFF_FILTERED)
def handoff_filtered(run: RunState) -> bool:
    """The reply is one call, to a handoff of the agent in force that has a filter."""
    agents, agent = run.agents, run.agent
    return (
        agents is not None
        and handoff_alone(run)
        and (agent, run.reply.calls[0][1]) in agents.filtered
    )


@guard(G.HANDOFF_ALONE)
def handoff_alone(run: RunState) -> bool:
    """The reply is one call, to a handoff of the agent in force."""
    return len(run.reply.calls) == 1 and handoff_calls(run) == [0]


@guard(G.HANDOFFS_ONLY)
def handoffs_only(run: RunState) -> bool:
    """Every call of the batch (two or more) is to a handoff of the agent in force."""
    return len(handoff_calls(run)) == len(run.reply.calls) > 1


@guard(G.HANDOFF_IN_BATCH)
def handoff_in_batch(run: RunState) -> bool:
    """Some call of the batch, beside others, is to a handoff of the agent in force."""
    return bool(handoff_calls(run))


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
    """Answer each handoff call of the batch ``error``, unrun: a handoff is taken alone.

    One the loop guard answered already (a repeat past ``max_identical_calls``) keeps its answer.
    """
    batch = run.batch
    assert batch is not None, "a batch was accepted"
    for index in handoff_calls(run):
        if index in batch.results:
            continue
        name = batch.calls[index][1]
        content = {
            "type": "HandoffRefused",
            "message": f"not taken: {name} hands the conversation to {_target(run, name)}, "
            "and a handoff is taken only as the only call of its reply; call it alone",
        }
        batch.answer(index, "error", kept(orjson.dumps(content)))


@effect(E.ASK_FOR_FILTER)
def ask_for_filter(run: RunState) -> None:
    """Hand the driver ``FilterHistory``: the handoff's filter and a copy of the history."""
    tool = run.reply.calls[0][1]
    to = _target(run, tool)
    run.outstanding = _HAND_OFF
    run.since[None] = run.clock()
    given = run.filters.get((run.agent or "", tool), _missing)
    # The driver calls it as it calls a summariser: with the history alone.
    run.draft.request = FilterHistory(functools.partial(given, to=to), run.history.to_json(), to)


@effect(E.KEEP_VIEW)
def keep_view(run: RunState) -> None:
    """The filter's view (the event's input) is what the next agent is sent, then what follows."""
    batch = run.batch
    assert batch is not None, "a handoff was accepted"
    assert run.draft.input_json is not None, "the filter's view came with the report"
    run.team_view = (run.draft.input_json, len(run.history) + len(batch.calls) + 1)


@effect(E.ANSWER_HANDOFF_FAILED)
def answer_handoff_failed(run: RunState) -> None:
    """Answer the handoff call ``error``: its filter failed; the agent in force stays."""
    batch, draft = run.batch, run.draft
    assert batch is not None, "a handoff was accepted"
    assert draft.exception is not None, "the filter raised"
    content = {
        "type": "HandoffFilterFailed",
        "message": f"not handed off: the handoff's filter raised "
        f"{exception_said(draft.exception)}; the conversation stays with {run.agent}",
    }
    batch.answer(0, "error", kept(orjson.dumps(content)))
    draft.status = "error"
    draft.error = content["message"]


def _missing(history: object, to: str) -> object:
    raise RuntimeError("no filter was given for this handoff (a Loop with its filter drives it)")


def agent_in_force(run: RunState) -> str | None:
    """The agent in force, from the record: the last event's that names one, else the first."""
    agents = run.agents
    if agents is None:
        return None
    return next((e.agent for e in reversed(run.events) if e.agent is not None), agents.start)


def team_view(run: RunState) -> tuple[bytes, int] | None:
    """The last filter's view in force, from the record: its JSON, and where the history went on."""
    at = len(run.input)
    found = None
    for event in run.events:
        at += len(event.appended_json)
        if event.trigger is T.HANDED_OFF and event.input_json is not None:
            found = (event.input_json, at)
        elif event.guard is G.HANDOFF_ALONE:
            found = None  # a handoff without a filter: the whole history again
    return found


def handoff_calls(run: RunState) -> list[int]:
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
    # -- a handoff with a filter: the filter is asked (cancellation first), then taken
    {"source": S.VALIDATING, "trigger": T.VALIDATE, "conditions": [handoff_filtered],
     "dest": S.HANDING_OFF, "before": [name_call, reserve_calls]},
    {"source": S.HANDING_OFF, "trigger": T.HAND_OFF, "conditions": [cancel_requested],
     "dest": S.CANCELLED, "before": [name_call, answer_rest, append_batch]},
    {"source": S.HANDING_OFF, "trigger": T.HAND_OFF,
     "dest": None, "before": [ask_for_filter]},
    {"source": S.HANDING_OFF, "trigger": T.HANDED_OFF,
     "dest": S.AWAITING_MODEL,
     "before": [name_call, keep_view, answer_handoff, append_batch, switch_agent]},
    {"source": S.HANDING_OFF, "trigger": T.FILTER_RAISED,
     "dest": S.AWAITING_MODEL, "before": [name_call, answer_handoff_failed, append_batch]},
    {"source": S.HANDING_OFF, "trigger": T.FILTER_INTERRUPTED,
     "dest": S.CANCELLED, "before": [name_call, answer_rest, append_batch]},
    {"source": S.HANDING_OFF, "trigger": T.INTERRUPTED,
     "dest": S.CANCELLED, "before": [name_call, answer_rest, append_batch]},
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
