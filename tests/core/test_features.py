"""Each feature's rows, and the functions they name: registered, bound, and left out when off."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from agentloop import CancelToken, State
from agentloop._core import build
from agentloop._core.build import ALL, DEFINITION, TABLE, build_table, merged, table_for
from agentloop._core.register import EFFECTS, GUARDS, guard
from agentloop._core.retry_policy import RetryPolicy, Transient
from agentloop._core.rows import basic, review, wrapup
from agentloop._errors import TableError
from agentloop.engine import Budget, Effect, Engine, Feature, Guard, Trigger
from agentloop.testing import call, final

if TYPE_CHECKING:
    from agentloop._core.state import RunState


def test_a_row_whose_guard_has_no_function_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard no function is registered for is a TableError naming the row and the member."""
    monkeypatch.delitem(GUARDS, Guard.CALLS_EXHAUSTED)
    with pytest.raises(
        TableError,
        match=r"row \d+ \(validating --validate \[calls_exhausted\]--> exhausted\): guard "
        r"'calls_exhausted' has no function: register one with @guard\(Guard.CALLS_EXHAUSTED\)",
    ):
        build_table(DEFINITION)


def test_a_row_whose_effect_has_no_function_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """So is an effect: the first row that names it is the one the error names."""
    monkeypatch.delitem(EFFECTS, Effect.RESERVE_CALLS)
    with pytest.raises(
        TableError,
        match=r"row \d+ \(validating --validate \[identical_calls_only\]--> awaiting_model\): "
        r"effect 'reserve_calls' has no function: register one with "
        r"@effect\(Effect.RESERVE_CALLS\)",
    ):
        build_table(DEFINITION)


def test_a_second_function_for_a_member_is_refused() -> None:
    """Registering another function against a member is a TableError naming both."""

    def calls_exhausted(run: RunState) -> bool:
        return False

    with pytest.raises(
        TableError,
        match=r"guard 'calls_exhausted' has two functions, agentloop._core.rows.basic."
        r"calls_exhausted and tests.core.test_features.*calls_exhausted: register one",
    ):
        guard(Guard.CALLS_EXHAUSTED)(calls_exhausted)
    assert GUARDS[Guard.CALLS_EXHAUSTED] is basic.calls_exhausted


def test_a_final_at_the_call_cap_reads_from_its_row_to_its_functions() -> None:
    """Its row names reply_is_final and append_final, bound to the functions beside it."""
    (found,) = [
        bound
        for bound in TABLE.bound[State.VALIDATING, Trigger.VALIDATE]
        if bound[0].guard is Guard.REPLY_IS_FINAL
    ]
    row, guarded, effects = found
    assert row.dest is State.FINISHED
    assert (guarded, effects) == (basic.reply_is_final, (basic.append_final,))
    assert any(entry.get("conditions") == [basic.reply_is_final] for entry in basic.ROWS)


def test_a_final_at_the_call_cap_is_decided_by_the_guards_arithmetic() -> None:
    """With calls_exhausted tried before reply_is_final, the final at the cap still finishes."""
    rows = merged()
    validate = [i for i, r in enumerate(rows) if r["trigger"] is Trigger.VALIDATE]
    final_at = next(i for i in validate if r_guard(rows[i]) is Guard.REPLY_IS_FINAL)
    exhausted_at = next(i for i in validate if r_guard(rows[i]) is Guard.CALLS_EXHAUSTED)
    rows[final_at], rows[exhausted_at] = rows[exhausted_at], rows[final_at]
    swapped = build_table(rows)
    engine = Engine("go", budget=Budget(max_steps=3, max_calls=1))
    engine._use(swapped)
    engine.next()
    engine.replied(call("c1", "add", a=1, b=2))
    engine.next()
    engine.next()
    engine.returned({"status": "ok", "content": 3})
    engine.next()
    engine.replied(final("3"))
    made = engine.next()

    assert (engine.state, engine.calls) == (State.FINISHED, 1)
    assert made.guard is Guard.REPLY_IS_FINAL  # type: ignore[union-attr]


def r_guard(entry: dict[str, Any]) -> object:
    """The guard a definition entry names, if any."""
    conditions = entry.get("conditions") or ()
    return conditions[0] if conditions else None


def test_a_plain_configuration_consults_the_basic_rows_alone() -> None:
    """No feature on: the engine's table has none of their rows, and is built once."""
    engine = Engine("go")
    table = engine._table
    assert table.features == {Feature.BASIC}
    assert table is table_for(frozenset({Feature.BASIC}))
    assert len(table.rows) == len(basic.ROWS) < len(TABLE.rows)
    guards = [row.guard for row in table.groups[State.VALIDATING, Trigger.VALIDATE]]
    assert guards == [
        Guard.REPLY_MALFORMED,
        Guard.REPLY_IS_FINAL,
        Guard.CALL_ID_RESERVED,
        Guard.CALLS_EXHAUSTED,
        Guard.CANCEL_REQUESTED,
        None,
    ]


@pytest.mark.parametrize(
    ("budget", "feature", "guard_on"),
    [
        (Budget(on_exhausted="answer"), Feature.WRAP_UP, Guard.WRAP_UP_DUE),
        (Budget(max_identical_calls=2), Feature.LOOP_GUARD, Guard.IDENTICAL_CALLS_SOME),
    ],
)
def test_a_budget_turns_its_features_rows_on(
    budget: Budget, feature: Feature, guard_on: Guard
) -> None:
    """The wrap-up and the loop guard are a budget's: their rows join the basic groups."""
    table = Engine("go", budget=budget)._table
    assert table.features == {Feature.BASIC, feature}
    assert guard_on in {row.guard for row in table.rows}


def test_a_driver_that_reviews_and_a_review_reported_bring_the_review_rows() -> None:
    """reviews=True, or a review handed to an engine, adds the review rows; nothing else."""
    engine = Engine("go")
    assert Feature.REVIEW not in engine._table.features
    engine.reviews = True
    assert engine._table.features == {Feature.BASIC, Feature.REVIEW}
    assert len(engine._table.rows) == len(basic.ROWS) + len(review.ROWS)


def test_a_feature_row_placed_ahead_of_a_row_its_group_lacks_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ahead_of must name a guard of the group the row joins: else the error names the row."""
    misplaced = (
        {**wrapup.ROWS[0], "ahead_of": basic.reply_is_final},
        *wrapup.ROWS[1:],
    )
    monkeypatch.setattr(wrapup, "ROWS", misplaced)
    with pytest.raises(
        TableError,
        match=r"wrap_up row 0 \(awaiting_model --ask_model \[wrap_up_overflows\]--> exhausted\): "
        r"ahead_of names 'reply_is_final', but no row of its group has that guard",
    ):
        merged(ALL)


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        (
            {"conditions": [lambda run: True]},
            r"'<lambda>' is not a function registered with @guard",
        ),
        (
            {"before": [basic.steps_exhausted]},
            r"'steps_exhausted' is not a function registered with @effect",
        ),
        (
            {"ahead_of": basic.append_final},
            r"'append_final' is not a function registered with @guard",
        ),
    ],
)
def test_a_row_naming_a_function_not_registered_for_its_place_is_refused(
    monkeypatch: pytest.MonkeyPatch, changed: dict[str, object], message: str
) -> None:
    """A row names its guard's and effects' functions: one registered as neither is a TableError."""
    monkeypatch.setattr(wrapup, "ROWS", ({**wrapup.ROWS[0], **changed}, *wrapup.ROWS[1:]))
    with pytest.raises(TableError, match=r"^wrap_up row 0: " + message):
        merged(ALL)


def test_every_configuration_table_is_the_whole_table_less_the_rows_of_features_off() -> None:
    """Each feature set's rows are the whole table's, in the same order, less the others'."""
    whole = list(TABLE.rows)
    for mask in range(2 ** (len(Feature) - 1)):
        on = frozenset(
            feature for bit, feature in enumerate(list(Feature)[1:]) if mask >> bit & 1
        ) | {Feature.BASIC}
        rows = build.table_for(on).rows
        assert [row for row in whole if row in rows] == list(rows)


def test_the_retry_policy_is_asked_by_the_row_that_plans_the_wait() -> None:
    """retry_planned asks it, once, and only when it is tried: a cancelled run never does."""
    asked: list[str] = []

    def classify(exc: BaseException) -> Transient | None:
        asked.append(str(exc))
        return Transient(kind="timeout")

    policy = RetryPolicy(base=0.0, jitter=0.0, classify=classify)
    for cancelled in (False, True):
        token = CancelToken()
        engine = Engine("go", cancel=token, retry=policy)
        engine.next()
        if cancelled:
            token.cancel()
        made = engine.raised(TimeoutError(f"slow {cancelled}"))
        assert made.guard is (Guard.CANCEL_REQUESTED if cancelled else Guard.RETRY_PLANNED)
    assert asked == ["slow False"]
