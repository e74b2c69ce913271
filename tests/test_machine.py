"""The table itself: every state against every input, and agreement with ``transitions``."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from transitions import Machine

import agentloop
from agentloop import ROWS, TERMINAL, Guard, State, Trigger, build_machine
from agentloop._engine import _TABLE, Engine, _Row
from agentloop._machine import rows_of
from agentloop._messages import input_messages

from .helpers import call, final

WORKING = [s for s in State if s not in TERMINAL]


def make_engine(state: State, holding: frozenset[Guard]) -> Engine:
    """An engine in ``state`` whose guards hold exactly for ``holding``."""
    token = agentloop.CancelToken()
    if Guard.CANCEL_REQUESTED in holding:
        token.cancel()
    engine = Engine.start(input_messages("go"), agentloop.Budget(max_steps=3, max_calls=3), token)
    engine.state = state
    if Guard.STEPS_EXHAUSTED in holding:
        engine.steps = 3
    if Guard.CALLS_EXHAUSTED in holding:
        engine.calls = 3
    reply = final() if Guard.REPLY_IS_FINAL in holding else call("c1", a=1)
    engine._reply = reply
    engine._problem = "bad" if Guard.REPLY_MALFORMED in holding else None
    if Guard.CALL_ID_RESERVED in holding:
        engine._reserved.add("c1")
    return engine


class Reference:
    """A ``transitions`` model whose guards ask a real engine; effects do nothing."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.machine = build_machine(model=self)

    def __getattr__(self, name: str) -> Any:
        if name in Guard.__members__.values():
            return getattr(self.engine, name)
        if name.startswith(("note_", "append_", "count_", "reserve_")):
            return lambda: None
        raise AttributeError(name)

    def choose(self, trigger: Trigger) -> State | None:
        """Fire ``trigger`` from the engine's state; the dest, or None if internal."""
        self.machine.set_state(self.engine.state.value)
        before = self.state
        self.machine.events[trigger.value].trigger(self)
        after = self.state
        # The table has no self-loop rows, so an unchanged state means an internal row.
        return None if after == before else State(after)


ALL_GUARD_SETS = [
    frozenset(g for g, on in zip(Guard, bits, strict=True) if on)
    for bits in itertools.product([False, True], repeat=len(Guard))
]


@pytest.mark.parametrize("state", WORKING)
@pytest.mark.parametrize("trigger", list(Trigger))
def test_compiled_table_agrees_with_transitions(state: State, trigger: Trigger) -> None:
    """For every working state, trigger and guard combination, both pick the same row."""
    for holding in ALL_GUARD_SETS:
        engine = make_engine(state, holding)
        if (state, trigger) not in _TABLE:
            with pytest.raises(agentloop.InvalidStateError):
                engine._rows(trigger)
            with pytest.raises(Exception, match="Can't trigger event"):
                Reference(make_engine(state, holding)).choose(trigger)
            continue
        row: _Row = engine._choose(trigger, _TABLE[state, trigger])
        assert row.dest == Reference(make_engine(state, holding)).choose(trigger), holding


@pytest.mark.parametrize("state", sorted(TERMINAL))
@pytest.mark.parametrize("trigger", list(Trigger))
def test_terminal_states_accept_nothing(state: State, trigger: Trigger) -> None:
    """Every trigger in a terminal state is an InvalidStateError naming the state."""
    engine = make_engine(state, frozenset())
    with pytest.raises(agentloop.InvalidStateError, match=f"in state '{state.value}'") as caught:
        engine._rows(trigger)
    assert caught.value.state is state
    assert "the run is over" in str(caught.value)


def test_every_group_ends_with_an_unconditional_row() -> None:
    """No (state, trigger) can fall through: the last row of each group has no guard."""
    assert all(rows[-1].check is None for rows in _TABLE.values())


def test_guards_are_listed_in_contract_order() -> None:
    """Validation tries malformed, final, repeated id, budget, cancel, in that order."""
    guards = [row.guard for row in _TABLE[State.VALIDATING, Trigger.VALIDATE]]
    assert guards == [
        Guard.REPLY_MALFORMED,
        Guard.REPLY_IS_FINAL,
        Guard.CALL_ID_RESERVED,
        Guard.CALLS_EXHAUSTED,
        Guard.CANCEL_REQUESTED,
        None,
    ]
    asks = [row.guard for row in _TABLE[State.AWAITING_MODEL, Trigger.ASK_MODEL]]
    assert asks == [Guard.CANCEL_REQUESTED, Guard.STEPS_EXHAUSTED, None]


def test_table_names_only_known_states_guards_and_effects() -> None:
    """Every name in the table resolves: states, guards and engine effect methods."""
    rows = list(rows_of(build_machine()))
    assert len(rows) == len(ROWS)
    for row in rows:
        assert State(row.source)
        assert row.dest is None or State(row.dest)
        assert row.guard is None or callable(getattr(Engine, Guard(row.guard).value))
        for effect in row.effects:
            assert callable(getattr(Engine, effect))


def test_terminal_states_have_no_outgoing_rows() -> None:
    """Terminal states absorb: no row leaves them."""
    assert not [row for row in rows_of(build_machine()) if State(row.source) in TERMINAL]
    assert {
        "finished",
        "cancelled",
        "exhausted",
        "repeated_call",
        "malformed",
        "failed",
    } == TERMINAL


def test_every_state_is_reachable() -> None:
    """Every state is the dest of some row, or the initial state."""
    dests = {row.dest for row in rows_of(build_machine())} | {State.AWAITING_MODEL.value}
    assert dests - {None} == {s.value for s in State}


def test_machine_is_plain_transitions() -> None:
    """build_machine gives a transitions Machine with no auto to_<state> shortcuts."""
    machine = build_machine()
    assert isinstance(machine, Machine)
    assert set(machine.events) == {t.value for t in Trigger}


def test_the_model_is_asked_once_until_it_answers() -> None:
    """After ask_model hands the model out, only its answer may follow: not a second ask."""
    engine = make_engine(State.AWAITING_MODEL, frozenset())
    assert engine.ask_model() is None
    with pytest.raises(agentloop.InvalidStateError, match="ask_model is outstanding"):
        engine.ask_model()
    assert engine.steps == 1
    assert engine.model_replied(final()).dest == State.VALIDATING


def test_a_tool_outcome_needs_start_tool_first() -> None:
    """tool_returned without start_tool is refused, and so is a second start_tool."""
    engine = make_engine(State.DISPATCHING, frozenset())
    with pytest.raises(agentloop.InvalidStateError, match="nothing is outstanding"):
        engine.tool_returned({"status": "ok", "content": 1})
    assert engine.start_tool() is None
    with pytest.raises(agentloop.InvalidStateError, match="start_tool is outstanding"):
        engine.start_tool()
    assert engine.tool_returned({"status": "ok", "content": 1}).dest == State.AWAITING_MODEL
