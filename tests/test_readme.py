"""Every Python block in the README runs, in order, as one script (found by pytest-examples)."""

from __future__ import annotations

from pathlib import Path

from pytest_examples import CodeExample, find_examples

README = Path(__file__).parent.parent / "README.md"
EXAMPLES = [example for example in find_examples(str(README)) if example.prefix == "python"]


def test_the_readme_has_python_examples() -> None:
    """pytest-examples finds every ```python block, not some blocks by index."""
    blocks = README.read_text().count("```python\n")
    assert len(EXAMPLES) == blocks >= 6


def test_every_python_block_runs_in_order(capsys: object) -> None:
    """Each block runs in the namespace the blocks before it made, as a reader runs them."""
    namespace: dict[str, object] = {"__name__": "readme"}
    for example in EXAMPLES:
        run(example, namespace)
    result = namespace["result"]
    assert getattr(result, "output", None) == "2+2 is 4"


def run(example: CodeExample, namespace: dict[str, object]) -> None:
    """Run one block; a failure names its line in the README."""
    code = compile(example.source, f"{README.name}:{example.start_line}", "exec")
    exec(code, namespace)
