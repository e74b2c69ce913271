"""A map from rows to tests: every row of the table is pinned by a test marked with its name.

A test that shows a row's behaviour carries ``@pytest.mark.row(name)``, where
``name`` is the row's ``Row.name`` (``"validating --validate
[calls_exhausted]--> exhausted"``; ``(stays)`` for an internal row). These read
the marks from the test files themselves, so they hold in any run, however
few tests it collects; the conftest refuses a mark that names no row.
"""

from __future__ import annotations

import re
from typing import Final

from agentloop.engine import ROWS
from tests.support import ROOT

# A mark and its string arguments, one row's name each (a name holds no quote).
_MARK: Final = re.compile(r'pytest\.mark\.row\(\s*((?:"[^"]*"\s*,?\s*)+)\)')


def marked() -> dict[str, list[str]]:
    """Each row name a mark gives, with the test files that give it."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for mark in _MARK.finditer(path.read_text()):
            for name in re.findall(r'"([^"]*)"', mark.group(1)):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_row_of_the_table_is_pinned_by_a_marked_test() -> None:
    """Every row, of every configuration (the whole table), has a test marked with its name."""
    found = marked()
    assert [row.name for row in ROWS if row.name not in found] == []


def test_every_mark_names_a_row_of_the_table() -> None:
    """A mark that names no row (a typo, a row since gone) fails here too."""
    names = {row.name for row in ROWS}
    assert sorted(set(marked()) - names) == []


def test_a_row_name_reads_as_its_event_does() -> None:
    """Row.name is the row as Mismatch and the replay write it; an internal row (stays)."""
    assert ROWS[0].name == "awaiting_model --ask_model [cancel_requested]--> cancelled"
    internal = next(row for row in ROWS if row.dest is None and row.guard is None)
    assert internal.name == "awaiting_model --ask_model--> (stays)"
    assert len({row.name for row in ROWS}) == len(ROWS)
