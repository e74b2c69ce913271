"""The step runner: a run's DBOS steps, each output stamped with the execution that recorded it.

Each step's output says which execution (the process's run of the
workflow) recorded it: the last one's tells whether this execution recorded
it (it drove the run up to here) or replayed it (a process that died did,
and may have started the call that comes next).
"""

from __future__ import annotations

from typing import Any, Final

from dbos import DBOS

__all__ = ["StepRunner"]

# The key of a step's output that names the execution that recorded it.
_BY: Final = "by"


class StepRunner:
    """Runs a run's DBOS steps, each output stamped with the execution that recorded it."""

    __slots__ = ("_execution", "_last")

    def __init__(self, execution: str) -> None:
        self._execution = execution
        self._last: str | None = None  # who recorded the last step; None before the first

    def run(self, step: Any, function: Any, *args: Any) -> dict[str, Any]:
        """Step ``function(*args)``: its output (a dict), recorded or replayed."""
        output: dict[str, Any] = DBOS.run_step(step, self._stamped, function, *args)
        self._last = output.pop(_BY)
        return output

    def replayed(self) -> bool:
        """Whether the last step was recorded by another execution (a process that died)."""
        return self._last is not None and self._last != self._execution

    def _stamped(self, function: Any, *args: Any) -> dict[str, Any]:
        output: dict[str, Any] = function(*args)
        output[_BY] = self._execution
        return output
