"""The interpreter of the table: the one place a row is chosen, and the one place it is committed.

``_choose`` takes the first row of a (state, trigger) group whose guard holds
and calls the row's effects, each a method of the engine named after it
(``_<name>``, looked up at each call); ``_record`` commits the chosen row by
appending its event to the log. ``Engine`` inherits both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentloop._core.build import TABLE
from agentloop._core.state import RunState
from agentloop._core.table import MODEL_ANSWERS, Trigger
from agentloop._core.values import Transition, Usage

if TYPE_CHECKING:
    from agentloop._core.build import Row
    from agentloop._core.state import _Draft

__all__ = ["Interpreter"]

# tuple.__new__ makes a NamedTuple from its fields without the Python-level __new__.
_new: Final = tuple.__new__
_START_TOOL: Final = Trigger.START_TOOL

# Each (state, trigger) group as the engine runs it: every row with the names of the
# methods its guard and effects are (``_<name>``), looked up on the engine at each call,
# so that a subclass or a patched method is what runs.
_GROUPS: Final = {
    key: tuple(
        (
            row,
            None if row.guard is None else f"_{row.guard.value}",
            tuple(f"_{effect.value}" for effect in row.effects),
        )
        for row in rows
    )
    for key, rows in TABLE.groups.items()
}


class Interpreter(RunState):
    """The run's state with the table's interpreter: ``_choose`` and ``_record``."""

    __slots__ = ()

    def _choose(self, trigger: Trigger, draft: _Draft) -> Row:
        """Take the first row of (state, ``trigger``) whose guard holds; run its effects."""
        self._draft = draft
        for row, guard, effects in _GROUPS[self._state, trigger]:
            if guard is None or getattr(self, guard)():
                for effect in effects:
                    getattr(self, effect)()
                return row
        raise AssertionError("unreachable: build_table ends each group with an unguarded row")

    def _record(self, row: Row, draft: _Draft) -> Transition:
        """Commit the chosen row: its event first, then what follows from it."""
        appended, usage, since = draft.appended, draft.usage, draft.since
        at = self._clock()
        transition = _new(
            Transition,
            (
                row.source,
                row.dest,
                row.trigger,
                row.guard,
                self.steps,
                self.calls,
                *draft.named,
                draft.status,
                draft.reason,
                draft.error,
                draft.exception,
                appended,
                usage,
                at,
                None if since is None else at - since,
                draft.pending,
                draft.decisions,
                tuple(self._handed),
                draft.input_json,
                # The events that answer a model (or summariser) record what it was sent.
                self._seen if row.trigger in MODEL_ANSWERS else None,
                draft.wait,
                draft.model,
                None,  # partial_text: set by interrupted() alone
            ),
        )
        self._events.append(transition)  # the commit: _settle() redoes the rest
        self._handed.clear()
        if appended:
            self._history.extend(appended)
        if usage is not None:
            self._spent = Usage(*(a + b for a, b in zip(self._spent, usage, strict=True)))
            self._tokens = self._spent.total
        self._state = row.dest  # type: ignore[assignment]  # a recorded row moves
        batch = self._batch
        self._outstanding = _START_TOOL if batch is not None and batch.running else None
        self._applied += 1
        return transition
