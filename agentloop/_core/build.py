"""The table as the engine runs it: each feature's rows put together, checked, bound.

``merged`` puts the rows of a set of features together (``rows/``: the basic
rows, and each feature's joining its groups where it says); ``build_table``
checks them and binds each row to the functions its guard and effects are
(``register.py``). ``table_for(features)`` is the table of one configuration,
built once and kept; ``TABLE`` is the whole table, every feature on, which the
diagrams draw and the docs list. ``reference_machine`` builds a table into a
``transitions`` machine, the reference interpreter the tests run beside the
engine.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from transitions import Machine

from agentloop._core.register import EFFECTS, GUARDS, MEMBERS
from agentloop._core.rows import (
    basic,
    context,
    handoff,
    loopguard,
    nested_approval,
    output,
    retry,
    review,
    wrapup,
)
from agentloop._core.table import Effect, Entry, Feature, Guard, State, Trigger
from agentloop._errors import TableError

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Iterable, Mapping

    from agentloop._core.agents import Agents
    from agentloop._core.context_policy import ContextPolicy
    from agentloop._core.output_schema import OutputSchema
    from agentloop._core.retry_policy import RetryPolicy
    from agentloop._core.state import RunState
    from agentloop._core.values import Budget

__all__ = [
    "ALL",
    "DEFINITION",
    "ROWS",
    "TABLE",
    "Row",
    "Table",
    "build_table",
    "features_of",
    "merged",
    "reference_machine",
    "table_for",
]

# Each feature's rows, in the order they are put together (Feature's order).
_FEATURES: Final = (
    basic,
    output,
    loopguard,
    wrapup,
    context,
    retry,
    review,
    handoff,
    nested_approval,
)
if [module.FEATURE for module in _FEATURES] != list(Feature):
    raise TableError("expected one module of rows a feature, in Feature's order")

#: Every feature.
ALL: Final = frozenset(Feature)


class Row(NamedTuple):
    """One row of the table."""

    source: State
    trigger: Trigger
    guard: Guard | None
    #: None for an internal row: its effects run and the state stays.
    dest: State | None
    effects: tuple[Effect, ...]

    @property
    def name(self) -> str:
        """``source --trigger [guard]--> dest``: the row, as a test names it to pin it.

        ``@pytest.mark.row(name)`` marks the test that pins the row
        (``tests/core/test_row_map.py``); ``dest`` is ``(stays)`` for an internal row.
        """
        guard = f" [{self.guard.value}]" if self.guard else ""
        dest = self.dest.value if self.dest is not None else "(stays)"
        return f"{self.source.value} --{self.trigger.value}{guard}--> {dest}"

    @property
    def label(self) -> str:
        """``trigger [guard] / effects``, as in UML."""
        text = self.trigger.value
        if self.guard:
            text += f" [{self.guard.value}]"
        if self.effects:
            text += " / " + ", ".join(effect.value for effect in self.effects)
        return text


#: A row as the engine runs it: the row, its guard's function (None: unguarded) and its
#: effects' functions, in order.
Bound = tuple[Row, "Callable[[RunState], bool] | None", "tuple[Callable[[RunState], None], ...]"]


class Table(NamedTuple):
    """A checked table: its rows in order, the rows of each (state, trigger), bound."""

    rows: tuple[Row, ...]
    groups: Mapping[tuple[State, Trigger], tuple[Row, ...]]
    #: Each group's rows with their functions: what the engine runs.
    bound: Mapping[tuple[State, Trigger], tuple[Bound, ...]]
    #: The features whose rows it has.
    features: frozenset[Feature]


def features_of(
    budget: Budget,
    output: OutputSchema | None = None,
    context: ContextPolicy | None = None,
    retry: RetryPolicy | None = None,
    models: tuple[str, ...] = (),
    agents: Agents | None = None,
) -> frozenset[Feature]:
    """The features a configuration turns on: the rows its table has.

    Every other feature's guards never hold under it, so its rows are left
    out: the table is smaller, and the run the same. (Review is a driver's:
    ``engine.reviews``.) One set a configuration, kept: its hash is too.
    """
    flags = (
        output is not None,
        budget.max_identical_calls is not None,
        budget.on_exhausted == "answer",
        context is not None,
        retry is not None or len(models) > 1,
        agents is not None,
    )
    found = _FEATURE_SETS.get(flags)
    if found is None:
        on = [feature for feature, flag in zip(_CONFIGURED, flags, strict=True) if flag]
        found = _FEATURE_SETS[flags] = frozenset((Feature.BASIC, *on))
    return found


# The features a configuration's parts turn on, in the order features_of reads them.
_CONFIGURED: Final = (
    Feature.OUTPUT,
    Feature.LOOP_GUARD,
    Feature.WRAP_UP,
    Feature.CONTEXT,
    Feature.RETRY,
    Feature.HANDOFF,
)
_FEATURE_SETS: Final[dict[tuple[bool, ...], frozenset[Feature]]] = {}


def merged(features: Iterable[Feature] = ALL) -> list[dict[str, Any]]:
    """The rows of ``features`` (and the basic rows) put together, in the table's order.

    The basic rows come first, in their order; then each feature's, in
    ``Feature``'s order. A feature's row that joins a group already there goes
    just ahead of the row its ``ahead_of`` names, else just ahead of the
    group's unguarded last row (or after the group, while it has none); a row
    of a group not there yet starts it at the end.
    """
    on = set(features) | {Feature.BASIC}
    rows: list[dict[str, Any]] = []
    for module in _FEATURES:
        if module.FEATURE not in on:
            continue
        for number, written in enumerate(module.ROWS):
            entry = _members(module.FEATURE, number, written)
            anchor = entry.pop("ahead_of", None)
            key = (entry.get("source"), entry.get("trigger"))
            group = [i for i, row in enumerate(rows) if (row["source"], row["trigger"]) == key]
            if anchor is not None:
                ahead = [i for i in group if _guard_of(rows[i]) == anchor]
                if not ahead:
                    raise TableError(
                        f"{module.FEATURE.value} row {number} ({_show(entry)}): ahead_of names "
                        f"{str(anchor)!r}, but no row of its group has that guard"
                    )
                rows.insert(ahead[0], entry)
            elif group and _guard_of(rows[group[-1]]) is None:
                rows.insert(group[-1], entry)
            else:
                rows.insert(group[-1] + 1 if group else len(rows), entry)
    return rows


def _members(feature: Feature, number: int, written: Entry) -> dict[str, Any]:
    """A feature's row with each function it names replaced by its member, as recorded."""

    def member(function: Callable[..., object], kind: type[Guard | Effect]) -> Guard | Effect:
        found = MEMBERS.get(function)
        if not isinstance(found, kind):
            decorator = "@guard" if kind is Guard else "@effect"
            raise TableError(
                f"{feature.value} row {number}: {getattr(function, '__qualname__', function)!r} "
                f"is not a function registered with {decorator}(...)"
            )
        return found

    entry: dict[str, Any] = dict(written)
    for key, kind in (("conditions", Guard), ("before", Effect)):
        if key in entry:
            entry[key] = [member(function, kind) for function in entry[key]]
    if "ahead_of" in entry:
        entry["ahead_of"] = member(entry["ahead_of"], Guard)
    return entry


def _guard_of(entry: dict[str, Any]) -> object:
    conditions = entry.get("conditions") or ()
    return conditions[0] if conditions else None


def build_table(
    definition: Iterable[Mapping[str, Any]], features: frozenset[Feature] = ALL
) -> Table:
    """Check a machine definition, bind its rows, and return it as a ``Table``.

    Refuses, with a ``TableError`` naming the row: an unknown state, trigger,
    guard or effect; a guard or effect no function is registered for; a row
    that can never fire (one after its group's unguarded row, or whose guard
    an earlier row of its group already took); and a group whose last row is
    guarded (a report it could drop). The definition is also built into a
    ``transitions`` machine, so it is one ``transitions`` accepts.
    """
    rows: list[Row] = []
    bound: dict[tuple[State, Trigger], list[Bound]] = {}
    for index, entry in enumerate(definition):
        row = _row(index, entry)
        group = bound.setdefault((row.source, row.trigger), [])
        shadow = _shadow(row, [taken for taken, _, _ in group])
        if shadow is not None:
            raise TableError(
                f"row {index} ({_show(entry)}) can never fire: "
                f"the earlier row {rows.index(shadow)} ({shadow.label}) always wins"
            )
        group.append(_bind(index, entry, row))
        rows.append(row)
    for (source, trigger), group in bound.items():
        last = group[-1][0]
        if last.guard is not None:
            raise TableError(
                f"row {rows.index(last)} ({last.label} from {source.value}): the "
                f"last row for {trigger.value} in {source.value} must have no guard, "
                "so that no report is dropped"
            )
    table = Table(
        tuple(rows),
        {key: tuple(row for row, _, _ in group) for key, group in bound.items()},
        {key: tuple(group) for key, group in bound.items()},
        features,
    )
    reference_machine(table, model=None)  # transitions accepts it too
    return table


def _shadow(row: Row, group: list[Row]) -> Row | None:
    """The earlier row of ``row``'s group that always wins over it, if one does."""
    if group and group[-1].guard is None:
        return group[-1]  # an unguarded row takes every report that reaches it
    return next((taken for taken in group if taken.guard is row.guard), None)


def _row(index: int, entry: Mapping[str, Any]) -> Row:
    """One definition entry as a ``Row``, or ``TableError`` naming what is unknown."""
    unknown = set(entry) - {"source", "trigger", "dest", "conditions", "before"}
    if unknown:
        raise TableError(f"row {index} ({_show(entry)}): unknown keys {sorted(unknown)}")
    conditions = list(entry.get("conditions") or ())
    if len(conditions) > 1:
        raise TableError(f"row {index} ({_show(entry)}): at most one guard a row")

    def known(kind: type[enum.StrEnum], value: object, what: str) -> Any:
        try:
            return kind(value)  # type: ignore[arg-type]  # anything may be tried
        except ValueError:
            names = ", ".join(member.value for member in kind)
            raise TableError(
                f"row {index} ({_show(entry)}): unknown {what} {value!r}; known: {names}"
            ) from None

    dest = entry.get("dest")
    return Row(
        source=known(State, entry.get("source"), "source state"),
        trigger=known(Trigger, entry.get("trigger"), "trigger"),
        guard=known(Guard, conditions[0], "guard") if conditions else None,
        dest=None if dest is None else known(State, dest, "dest state"),
        effects=tuple(known(Effect, name, "effect") for name in entry.get("before") or ()),
    )


def _bind(index: int, entry: Mapping[str, Any], row: Row) -> Bound:
    """``row`` with the functions registered for its guard and effects; else ``TableError``."""

    def missing(what: str, member: Guard | Effect) -> TableError:
        return TableError(
            f"row {index} ({_show(entry)}): {what} {member.value!r} has no function: "
            f"register one with @{what}({type(member).__name__}.{member.name}) in the "
            "module of its feature's rows (agentloop/_core/rows/)"
        )

    guard = None
    if row.guard is not None:
        guard = GUARDS.get(row.guard)
        if guard is None:
            raise missing("guard", row.guard)
    effects = []
    for member in row.effects:
        function = EFFECTS.get(member)
        if function is None:
            raise missing("effect", member)
        effects.append(function)
    return row, guard, tuple(effects)


def _show(entry: Mapping[str, Any]) -> str:
    guard = entry.get("conditions") or ()
    text = f"{entry.get('source')} --{entry.get('trigger')}"
    text += f" [{', '.join(map(str, guard))}]" if guard else ""
    return text + f"--> {entry.get('dest')}"


def reference_machine(
    table: Table, model: object, on_row: Callable[[Row], object] | None = None
) -> Machine:
    """``table`` as a ``transitions`` machine: the reference interpreter.

    Its conditions and ``before`` callbacks are the names of guards and
    effects, resolved on ``model`` (in the tests, the registered functions
    applied to an engine's run); ``on_row(row)`` runs first when a row is
    taken, so the caller knows which. ``model=None`` only checks that
    ``transitions`` accepts the definition.
    """

    def taken(row: Row) -> list[Callable[[], object]]:
        return [] if on_row is None else [lambda: on_row(row)]

    return Machine(
        model=model,
        states=[state.value for state in State],
        transitions=[
            {
                "trigger": row.trigger.value,
                "source": row.source.value,
                "dest": row.dest.value if row.dest is not None else None,
                "conditions": [row.guard.value] if row.guard else [],
                "before": [*taken(row), *(effect.value for effect in row.effects)],
            }
            for row in table.rows
        ],
        initial=State.AWAITING_MODEL.value,
        auto_transitions=False,
        send_event=False,
    )


@functools.cache
def table_for(features: frozenset[Feature]) -> Table:
    """The table of a configuration whose features are ``features``: built once, then kept."""
    return build_table(merged(features), features | {Feature.BASIC})


#: The whole table, as plain data: every feature's rows put together.
DEFINITION: Final = tuple(merged())
#: The whole table, checked and bound: the one the diagrams draw and the docs list.
TABLE: Final = table_for(ALL)
#: Its rows, in order.
ROWS: Final = TABLE.rows
