"""The table as the engine runs it: the definition in ``table.py``, checked once, at import.

``build_table`` refuses, with a ``TableError`` naming the row, an unknown
state, trigger, guard or effect, a row that can never fire and a group whose
last row is guarded; ``reference_machine`` builds the same rows into a
``transitions`` machine, the reference interpreter the tests run beside the
engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

from transitions import Machine

from agentloop._core.table import DEFINITION, Effect, Guard, State, Trigger
from agentloop._errors import TableError

if TYPE_CHECKING:
    import enum
    from collections.abc import Callable, Iterable, Mapping

__all__ = ["ROWS", "TABLE", "Row", "Table", "build_table", "reference_machine"]


class Row(NamedTuple):
    """One row of the table."""

    source: State
    trigger: Trigger
    guard: Guard | None
    #: None for an internal row: its effects run and the state stays.
    dest: State | None
    effects: tuple[Effect, ...]

    @property
    def label(self) -> str:
        """``trigger [guard] / effects``, as in UML."""
        text = self.trigger.value
        if self.guard:
            text += f" [{self.guard.value}]"
        if self.effects:
            text += " / " + ", ".join(effect.value for effect in self.effects)
        return text


class Table(NamedTuple):
    """A checked table: its rows in order, and the rows of each (state, trigger)."""

    rows: tuple[Row, ...]
    groups: Mapping[tuple[State, Trigger], tuple[Row, ...]]


def build_table(definition: Iterable[Mapping[str, Any]]) -> Table:
    """Check a machine definition and return it as a ``Table``.

    Refuses, with a ``TableError`` naming the row: an unknown state, trigger,
    guard or effect; a row that can never fire (one after its group's
    unguarded row, or whose guard an earlier row of its group already took);
    and a group whose last row is guarded (a report it could drop). The
    definition is also built into a ``transitions`` machine, so it is one
    ``transitions`` accepts.
    """
    rows: list[Row] = []
    groups: dict[tuple[State, Trigger], list[Row]] = {}
    for index, entry in enumerate(definition):
        row = _row(index, entry)
        group = groups.setdefault((row.source, row.trigger), [])
        if group and (group[-1].guard is None or row.guard in {r.guard for r in group}):
            shadow = (
                group[-1]
                if group[-1].guard is None
                else next(r for r in group if r.guard is row.guard)
            )
            raise TableError(
                f"row {index} ({_show(entry)}) can never fire: "
                f"the earlier row {rows.index(shadow)} ({shadow.label}) always wins"
            )
        group.append(row)
        rows.append(row)
    for (source, trigger), group in groups.items():
        if group[-1].guard is not None:
            raise TableError(
                f"row {rows.index(group[-1])} ({group[-1].label} from {source.value}): the "
                f"last row for {trigger.value} in {source.value} must have no guard, "
                "so that no report is dropped"
            )
    table = Table(tuple(rows), {key: tuple(group) for key, group in groups.items()})
    reference_machine(table, model=None)  # transitions accepts it too
    return table


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
    effects, resolved on ``model`` (whose attributes are an engine's own, in
    the tests); ``on_row(row)`` runs first when a row is taken, so the caller
    knows which. ``model=None`` only checks that ``transitions`` accepts the
    definition.
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


#: The table the engine, the run-file replay and the diagrams read, checked once.
TABLE: Final = build_table(DEFINITION)
#: Its rows, in order.
ROWS: Final = TABLE.rows
