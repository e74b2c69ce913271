"""Agent tools' child runs in ``show``: each printed indented under the call it answers.

A run file holds its child runs; a durable parent's are runs of its ledger
(``ids.child_run_id``), which ``view_run`` reads into the parent's result's
``children``, by call id.
``show`` prints each child's own lines (its title, input, transitions and
end) under the row of the transition that answered its call, or, while the
call has no outcome, after the parent's last row; a grandchild under its
child's call, and so on, down to ``--depth`` generations (all by default).
The runs a depth leaves out are counted on a line after the run's, never
dropped unsaid.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from agentloop._core.table import Trigger

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.values import RunResult

__all__ = ["INDENT", "nested_lines", "unshown", "who_calls"]

#: How far a child's lines are indented under its parent's.
INDENT: Final = "      "


def nested_lines(
    result: RunResult,
    lines: list[str],
    show: Callable[[RunResult, str], list[str]],
    depth: int | None = None,
) -> list[str]:
    """``lines`` (``result`` as ``run_lines`` prints it) with each child's lines put in.

    ``show(child, title)`` gives a child's own lines (``run_lines``'s);
    ``depth`` is how many generations below ``result`` (``None``: all).
    """
    if not result.children or depth == 0:
        return lines
    table = next((at for at, line in enumerate(lines) if line.startswith("step ")), None)
    if table is None:  # pragma: no cover - run_lines always prints its table
        return lines
    rows = len(result.events)
    answered = {
        event.call_id: index
        for index, event in enumerate(result.events)
        if event.trigger is Trigger.TOOL_RETURNED and event.call_id is not None
    }
    under: dict[int, list[str]] = {}
    for call_id, child in result.children.items():
        row = answered.get(call_id, rows - 1)
        named = "child" if child.run_id is None else f"child {child.run_id}"  # durable: its id
        title = f"{named} (call {call_id}): {child.status.value}"
        own = nested_lines(child, show(child, title), show, None if depth is None else depth - 1)
        under.setdefault(row, []).extend(INDENT + line if line else "" for line in own)
    found: list[str] = []
    for at, line in enumerate(lines):
        found.append(line)
        block = under.get(at - table - 1)
        if block:
            found.extend(["", *block, ""])
    return found


def unshown(result: RunResult, depth: int | None) -> str | None:
    """The line that counts the child runs ``depth`` leaves out of ``result``'s; ``None``: none."""
    if depth is None:
        return None
    below = _descendants(result, depth)
    if not below:
        return None
    runs = "1 child run" if below == 1 else f"{below} child runs"
    return f"{runs} below --depth {depth} not shown (--depth {depth + 1} shows more)"


def _descendants(result: RunResult, below: int) -> int:
    """How many runs ``result`` has more than ``below`` generations down."""
    children = result.children.values()
    if below == 0:
        return sum(1 + _descendants(child, 0) for child in children)
    return sum(_descendants(child, below - 1) for child in children)


def who_calls(caller: tuple[str, str]) -> str:
    """The line that begins ``show`` of a child run: whose child it is, and for which call."""
    return f"child of {caller[0]}, call {caller[1]}"
