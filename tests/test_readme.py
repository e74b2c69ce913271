"""The README's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def test_embedding_example_runs() -> None:
    """The 'Embedding it' example runs and its assertion holds."""
    namespace: dict[str, object] = {}
    exec(BLOCKS[0], namespace)
    assert namespace["result"].status == "finished"  # type: ignore[attr-defined]


def test_step_by_step_example_runs_after_the_embedding_one() -> None:
    """The driver loop shown in the README steps a run to its end and prints each step."""
    namespace: dict[str, object] = {}
    exec(BLOCKS[0], namespace)
    exec(BLOCKS[1], namespace)
    assert namespace["result"].output == "2+2 is 4"  # type: ignore[attr-defined]
    assert namespace["run"].done  # type: ignore[attr-defined]
