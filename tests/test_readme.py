"""Every Python block of the README and of each docs page runs, in order, as one script."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pytest_examples import CodeExample, find_examples

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("**/*.md"))]


def examples(page: Path) -> list[CodeExample]:
    """The page's ```python blocks, as pytest-examples finds them, in order."""
    return [example for example in find_examples(str(page)) if example.prefix == "python"]


def name(page: Path) -> str:
    """The page's path from the repository's root, for test ids and messages."""
    return str(page.relative_to(ROOT))


def test_the_pages_have_python_examples() -> None:
    """pytest-examples finds every ```python block of every page, not some blocks by index."""
    found = {name(page): len(examples(page)) for page in PAGES}
    assert found == {name(page): page.read_text().count("```python\n") for page in PAGES}
    assert found["README.md"] >= 3
    assert sum(found.values()) >= 25


@pytest.fixture
def dbos_polls_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    """DBOS as a page configures it, but polling every few milliseconds, not every second.

    DBOS's own advice for tests: its notification listener (which ``pending`` waits on,
    and which ``DBOS.destroy()`` waits a poll for) and a queue's dispatcher each poll once
    a second unless told, and docs/dbos.md launches DBOS four times. The pages show the
    settings a reader needs; what they do and assert is the same at either interval.
    """
    from dbos import DBOS

    launch, register_queue = DBOS.__init__, DBOS.register_queue

    def quick_launch(self: DBOS, *, config: Any, **options: Any) -> None:
        quick: Any = {"notification_listener_polling_interval_sec": 0.01, **config}
        launch(self, config=quick, **options)

    def quick_queue(name: str, **options: Any) -> Any:
        return register_queue(name, **{"polling_interval_sec": 0.02, **options})

    monkeypatch.setattr(DBOS, "__init__", quick_launch)
    monkeypatch.setattr(DBOS, "register_queue", staticmethod(quick_queue))


@pytest.mark.parametrize("page", PAGES, ids=name)
@pytest.mark.usefixtures("dbos_polls_quickly")
def test_every_python_block_runs_in_order(page: Path) -> None:
    """Each block runs in the namespace its page's blocks before it made, as a reader runs them."""
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for example in examples(page):
        run(page, example, namespace)


def test_the_readme_example_answers() -> None:
    """The README's first example ends as its assertion says, run alone."""
    namespace: dict[str, object] = {"__name__": "readme"}
    run(README, examples(README)[0], namespace)
    result = namespace["result"]
    assert getattr(result, "output", None) == "2+2 is 4"


def test_the_readme_lists_the_manual_in_the_sites_order() -> None:
    """The README's list of manual pages is mkdocs.yml's nav, every page but the overview."""
    nav = re.findall(r"^  - [^:\n]+: ([\w/]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    listed = re.findall(r"^- \[[^\]]+\]\(docs/([\w/]+\.md)\):", README.read_text(), re.M)
    assert nav[0] == "index.md"
    assert listed == nav[1:]


def run(page: Path, example: CodeExample, namespace: dict[str, object]) -> None:
    """Run one block; a failure names its page and line."""
    code = compile(example.source, f"{name(page)}:{example.start_line}", "exec")
    exec(code, namespace)
