"""The table: checked when it is built, exhaustive, and run by ``transitions`` as the reference."""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transitions import Machine

import agentloop
from agentloop import State

# Private: the definition, its builder and its transitions form are what these tests
# check; only the built rows are public.
from agentloop._core.build import DEFINITION, TABLE, build_table, reference_machine
from agentloop._core.table import ANSWERS, NEXT, REPORTS, Report
from agentloop._errors import TableError
from agentloop.engine import ROWS, TERMINAL, Effect, Guard, Trigger
from tests.conftest import LONG
from tests.support import ROOT

if TYPE_CHECKING:
    from collections.abc import Iterator

CONCEPTS = (ROOT / "docs" / "concepts.md").read_text()


def broken(index: int, **changes: Any) -> list[dict[str, Any]]:
    """A copy of the definition with row ``index`` changed (a key set to None is dropped)."""
    rows = [dict(row) for row in DEFINITION]
    rows[index].update(changes)
    rows[index] = {key: value for key, value in rows[index].items() if value is not None}
    return rows


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param(broken(0, source="awaiting"), r"row 0 .*unknown source state 'awaiting'",
                     id="unknown source"),
        pytest.param(broken(8, dest="malformd"), r"row 8 .*unknown dest state 'malformd'",
                     id="unknown dest"),
        pytest.param(broken(4, trigger="model_replies"), r"row 4 .*unknown trigger 'model_repl",
                     id="unknown trigger"),
        pytest.param(broken(1, conditions=["steps_out"]), r"row 1 .*unknown guard 'steps_out'",
                     id="unknown guard"),
        pytest.param(broken(9, before=["append_finale"]), r"row 9 .*unknown effect 'append_fi",
                     id="unknown effect"),
        pytest.param(broken(0, after=["count_step"]), r"row 0 .*unknown keys \['after'\]",
                     id="unknown key"),
        pytest.param(broken(1, conditions=["cancel_requested"]),
                     r"row 1 .*can never fire: the earlier row 0 .*always wins",
                     id="guard already taken"),
        pytest.param([*DEFINITION[:9], DEFINITION[0], *DEFINITION[9:]],
                     r"row 9 .*can never fire: the earlier row 8 "
                     r"\(ask_model / count_step, fit_context, ask_for_reply\)",
                     id="after the unguarded row"),
        pytest.param(broken(15, conditions=["cancel_requested"]),
                     r"row 15 .*the last row for model_interrupted in awaiting_model must have no",
                     id="last row guarded"),
        pytest.param(broken(3, conditions=["cancel_requested", "steps_exhausted"]),
                     r"row 3 .*at most one guard a row", id="two guards"),
    ],
)  # fmt: skip
def test_a_broken_copy_of_the_table_is_refused(
    definition: list[dict[str, Any]], message: str
) -> None:
    """Each way of breaking the table is a TableError that names the row."""
    with pytest.raises(TableError, match=message):
        build_table(definition)


def test_the_definition_builds_the_table_the_engine_runs() -> None:
    """ROWS is the checked definition, one Row per entry, in order."""
    assert build_table(DEFINITION) == TABLE
    assert TABLE.rows == ROWS
    assert len(ROWS) == len(DEFINITION)
    assert [row.label for row in ROWS][:9] == [
        "ask_model [cancel_requested]",
        "ask_model [wrap_up_overflows] / note_context_overflow",
        "ask_model [wrapping_up] / count_step, fit_context, ask_for_answer",
        "ask_model [wrap_up_due] / begin_wrap_up",
        "ask_model [steps_exhausted] / note_max_steps",
        "ask_model [tokens_exhausted] / note_max_total_tokens",
        "ask_model [context_overflows] / note_context_overflow",
        "ask_model [summary_due]",
        "ask_model / count_step, fit_context, ask_for_reply",
    ]


def test_the_definition_is_a_transitions_machine() -> None:
    """transitions builds a machine from the definition: the same triggers, no auto rows."""
    machine = reference_machine(TABLE, model=None)
    assert isinstance(machine, Machine)
    assert set(machine.events) == {t.value for t in Trigger}
    assert set(machine.states) == {s.value for s in State}
    for trigger in Trigger:
        for source in State:
            ours = [r.dest for r in ROWS if (r.trigger, r.source) == (trigger, source)]
            theirs = machine.get_transitions(trigger.value, source.value)
            assert [t.dest for t in theirs] == [d.value if d else None for d in ours]


def test_terminal_states_have_no_rows_and_every_state_is_reachable() -> None:
    """Terminal states absorb; every state is the initial one or some row's destination."""
    assert not [row for row in ROWS if row.source in TERMINAL]
    assert {row.dest for row in ROWS} - {None} | {State.AWAITING_MODEL} == set(State)
    assert {s for s in State if s not in TERMINAL} == set(NEXT)


def test_validation_tries_the_contract_order() -> None:
    """Malformed, final, repeated id, call budget, cancel, then dispatch: first match wins."""
    guards = [row.guard for row in TABLE.groups[State.VALIDATING, Trigger.VALIDATE]]
    # The rows of typed output, the wrap-up and the loop guard fit in; off, their guards fail.
    assert guards == [
        Guard.REPLY_MALFORMED,
        Guard.OUTPUT_RETRY,
        Guard.OUTPUT_INVALID,
        Guard.OUTPUT_CHECK_DUE,
        Guard.WRAP_UP_ANSWERED,
        Guard.REPLY_IS_FINAL,
        Guard.WRAPPING_UP,
        Guard.CALL_ID_RESERVED,
        Guard.IDENTICAL_CALL_PERSISTS,
        Guard.CALLS_EXHAUSTED_WRAP_UP,
        Guard.CALLS_EXHAUSTED,
        Guard.CANCEL_REQUESTED,
        Guard.IDENTICAL_CALLS_ONLY,
        Guard.IDENTICAL_CALLS_SOME,
        Guard.HANDOFF_FILTERED,
        Guard.HANDOFF_ALONE,
        Guard.HANDOFFS_ONLY,
        Guard.HANDOFF_IN_BATCH,
        None,
    ]
    asks = [row.guard for row in TABLE.groups[State.AWAITING_MODEL, Trigger.ASK_MODEL]]
    assert asks == [
        Guard.CANCEL_REQUESTED,
        Guard.WRAP_UP_OVERFLOWS,
        Guard.WRAPPING_UP,
        Guard.WRAP_UP_DUE,
        Guard.STEPS_EXHAUSTED,
        Guard.TOKENS_EXHAUSTED,
        Guard.CONTEXT_OVERFLOWS,
        Guard.SUMMARY_DUE,
        None,
    ]


def test_every_report_has_rows_where_its_request_is_handed_out() -> None:
    """A report answers one request; there are rows for it wherever that request can be out."""
    for (request, report), trigger in REPORTS.items():
        assert ANSWERS[trigger] is request
        sources = {row.source for row in ROWS if row.trigger is trigger}
        if request is None:
            assert report is Report.INTERRUPTION
            assert sources == set(NEXT)  # an interruption can land in any working state
        else:
            handed = {row.source for row in ROWS if row.trigger is request and row.dest is None}
            assert sources == handed
    internal = {(row.source, row.trigger) for row in ROWS if row.dest is None}
    assert internal == {
        (State.AWAITING_MODEL, Trigger.ASK_MODEL),
        (State.DISPATCHING, Trigger.START_TOOL),
        (State.AWAITING_APPROVAL, Trigger.AWAIT_APPROVAL),
        # A review that asked nobody: its answers are kept, and nothing is recorded.
        (State.DISPATCHING, Trigger.APPROVAL_ASKED),
        (State.SUMMARISING, Trigger.SUMMARISE),
        (State.BACKING_OFF, Trigger.BACK_OFF),
        (State.HANDING_OFF, Trigger.HAND_OFF),
        (State.VALIDATING, Trigger.VALIDATE),
    }


def test_every_guard_and_effect_is_used() -> None:
    """No enum member is dead: each guard and effect appears in some row."""
    assert {row.guard for row in ROWS} - {None} == set(Guard)
    assert {effect for row in ROWS for effect in row.effects} == set(Effect)


class Truth:
    """A transitions model whose guards hold exactly for ``holding``; effects do nothing."""

    def __init__(self, holding: frozenset[Guard]) -> None:
        self.holding = holding

    def __getattr__(self, name: str) -> Any:
        if name in Guard.__members__.values():
            return lambda: Guard(name) in self.holding
        if name in Effect.__members__.values():
            return lambda: None
        raise AttributeError(name)


def holding_sets(guards: int) -> Iterator[tuple[bool, ...]]:
    """Which of ``guards`` guards (in their rows' order) hold: every combination, or, in
    the fast tier past ten guards (2**18 for validation), each guard the first to hold,
    the guards after it all holding, none, or every other one: each row is taken, with
    the rows after it wanted too or not."""
    if LONG or guards <= 10:
        yield from itertools.product([False, True], repeat=guards)
        return
    yield (False,) * guards
    for first in range(guards):
        after = guards - first - 1
        for rest in (
            (False,) * after,
            (True,) * after,
            (True, False) * after,
            (False, True) * after,
        ):
            yield (False,) * first + (True,) + rest[:after]


@pytest.mark.parametrize(("source", "trigger"), sorted(TABLE.groups))
def test_first_holding_guard_wins_as_in_transitions(source: State, trigger: Trigger) -> None:
    """For every group and every set of its guards that hold, transitions takes the same row."""
    rows = TABLE.groups[source, trigger]
    guards = list(dict.fromkeys(row.guard for row in rows if row.guard is not None))
    taken: list[agentloop.engine.Row] = []
    model = Truth(frozenset())
    machine = reference_machine(TABLE, model, on_row=taken.append)
    for bits in holding_sets(len(guards)):
        model.holding = frozenset(g for g, on in zip(guards, bits, strict=True) if on)
        ours = next(row for row in rows if row.guard is None or row.guard in model.holding)
        taken.clear()
        machine.set_state(source.value, model)
        assert model.trigger(trigger.value)
        assert taken == [ours]


def docs_table() -> list[tuple[str, ...]]:
    """The docs' state table (docs/concepts.md): its first five columns, row by row."""
    section = CONCEPTS.split("<!-- state table -->\n")[1].split("\n\n")[0]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    return [tuple(cell.strip().strip("`") for cell in line.split("|")[1:6]) for line in lines]


def test_the_docs_state_table_is_the_table() -> None:
    """Each docs row names a row of the table, in order: from, trigger, guard, to, effects."""
    expected = [
        (
            row.source.value,
            row.trigger.value,
            row.guard.value if row.guard else "",
            row.dest.value if row.dest else "(stays)",
            ", ".join(effect.value for effect in row.effects),
        )
        for row in ROWS
    ]
    assert [tuple(re.sub(r"`, `", ", ", c) for c in r) for r in docs_table()] == expected


@settings(max_examples=50, deadline=None)
@given(st.permutations(range(len(DEFINITION))))
def test_any_reordering_either_builds_or_names_a_row(order: list[int]) -> None:
    """Shuffled rows build only if every group still ends unguarded; else a row is named."""
    definition = [DEFINITION[i] for i in order]
    groups: dict[tuple[object, object], list[Any]] = {}
    for row in definition:
        groups.setdefault((row["source"], row["trigger"]), []).append(row)
    if all(not rows[-1].get("conditions") for rows in groups.values()):
        assert build_table(definition).groups.keys() == TABLE.groups.keys()
    else:
        with pytest.raises(TableError, match=r"^row \d+ "):
            build_table(definition)
