"""The committed diagrams are generated from the table the engine runs."""

from __future__ import annotations

import re

import pytest

from agentloop import State
from agentloop._cli.main import main
from agentloop._core.build import table_for
from agentloop.engine import ROWS, TERMINAL, Feature
from agentloop.review import to_dot, to_mermaid
from tests.support import ROOT

DIAGRAMS = ROOT / "diagrams"
CONCEPTS = ROOT / "docs" / "concepts.md"


@pytest.mark.parametrize(
    ("name", "render"), [("agentloop.mmd", to_mermaid), ("agentloop.dot", to_dot)]
)
def test_committed_diagrams_are_fresh(name: str, render: object) -> None:
    """diagrams/ matches freshly generated output; run `make diagrams` if this fails."""
    assert callable(render)
    assert (DIAGRAMS / name).read_text() == render(), f"diagrams/{name} is stale: run make diagrams"


def test_the_docs_embed_the_current_mermaid_diagram() -> None:
    """docs/concepts.md shows the same Mermaid diagram the table produces."""
    assert f"```mermaid\n{to_mermaid()}```" in CONCEPTS.read_text()


def test_mermaid_draws_every_row_with_its_guard() -> None:
    """Each row is a line of its arrow's label, trigger and guard; terminal states end."""
    mermaid = to_mermaid()
    assert mermaid.startswith("---\ntitle: agentloop\n---\nstateDiagram-v2\n    direction LR\n")
    arrows = dict(re.findall(r"^    (\w+ --> \w+): (.*)$", mermaid, re.MULTILINE))
    for row in ROWS:
        guard = f" [{row.guard.value}]" if row.guard else ""
        label = arrows[f"{row.source.value} --> {(row.dest or row.source).value}"]
        assert f"{row.trigger.value}{guard}" in label.split("<br>")
    for state in TERMINAL:
        assert f"    {state.value} --> [*]\n" in mermaid
    assert "    [*] --> awaiting_model\n" in mermaid
    assert not any(line != line.rstrip() for line in mermaid.splitlines())


def test_mermaid_draws_one_arrow_per_pair_of_states() -> None:
    """Mermaid lays parallel arrows' labels over each other: rows between two states share one.

    Its labels are short (no effects) for the same reason; checked by rendering
    diagrams/agentloop.mmd with mermaid 11 in chromium: no label overlaps another.
    """
    pairs = re.findall(r"^    (\w+) --> (\w+):", to_mermaid(), re.MULTILINE)
    assert len(pairs) == len(set(pairs)) == len({(r.source, r.dest or r.source) for r in ROWS})
    assert " / " not in to_mermaid()
    # In table order within an arrow: the first guard that holds wins.
    arrows = dict(re.findall(r"^    (\w+ --> \w+): (.*)$", to_mermaid(), re.MULTILINE))
    assert arrows["validating --> cancelled"] == (
        "validate [cancel_requested]<br>interrupted<br>check_interrupted"
    )


def test_dot_marks_terminal_states_and_internal_rows() -> None:
    """DOT draws terminal states as double circles and internal rows dashed."""
    dot = to_dot()
    for state in State:
        shape = "doublecircle" if state in TERMINAL else "box"
        assert f'"{state.value}" [shape="{shape}"];' in dot
    dashed = [line for line in dot.splitlines() if 'style="dashed"' in line]
    assert len(dashed) == sum(row.dest is None for row in ROWS) == 11
    assert len([line for line in dot.splitlines() if " -> " in line]) == len(ROWS) + 1


def test_one_configurations_table_is_drawn_with_its_features_rows_alone() -> None:
    """features=: the basic rows and the named features', the states they join, a title."""
    mermaid = to_mermaid(features=["output"])
    assert mermaid.startswith('---\ntitle: "agentloop: basic, output"\n---\n')
    assert "validate [output_retry]" in mermaid
    assert "wrap_up" not in mermaid
    assert "summarising" not in mermaid  # no context policy: a state no row joins
    rows = table_for(frozenset({Feature.BASIC, Feature.OUTPUT})).rows
    dot = to_dot(features=[Feature.OUTPUT])
    assert len([line for line in dot.splitlines() if " -> " in line]) == len(rows) + 1
    assert to_dot(features=list(Feature)) == to_dot()  # every feature: the whole table


@pytest.mark.parametrize(
    ("features", "error", "message"),
    [
        ("output", TypeError, "expected features to be an iterable of features"),
        (["outputs"], ValueError, "expected features among 'basic', 'output'"),
    ],
)
def test_features_that_are_no_features_are_refused(
    features: object, error: type[Exception], message: str
) -> None:
    """A str, or a name no feature has, is refused naming the features there are."""
    with pytest.raises(error, match=message):
        to_mermaid(features=features)  # type: ignore[arg-type]


def test_the_command_line_draws_one_configurations_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """agentloop diagram --features names them, comma-separated; a name no feature has fails."""
    assert main(["diagram", "--features", "wrap_up, retry"]) == 0
    assert capsys.readouterr().out == to_mermaid(features=["wrap_up", "retry"])
    assert main(["diagram", "--features", "wrap-up"]) == 2
    assert "--features expected names among basic, output" in capsys.readouterr().err
