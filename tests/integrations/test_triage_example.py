"""examples/triage.py: a triage agent with two specialists, offline and, with a key, live."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

from tests.support import ROOT

EXAMPLE = ROOT / "examples" / "triage.py"


def example() -> Any:
    """examples/triage.py, imported from its path (examples are not a package)."""
    spec = importlib.util.spec_from_file_location("triage_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_triage_example_runs_offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a key, scripted models hand the question to billing, which refunds it."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = example().main("I was charged twice for order A-7")
    assert (result.status, result.agent, result.calls) == ("finished", "billing", 2)
    assert result.output == "I refunded order A-7; sorry for the trouble."
    assert capsys.readouterr().out.splitlines() == [
        "step 1: asked triage",
        "step 1: handed off to billing",
        "step 2: asked billing",
        "step 3: asked billing",
        "finished by billing: I refunded order A-7; sorry for the trouble.",
    ]


@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY")
def test_triage_example_live() -> None:
    """With a key, a real model routes a billing question to billing, which answers it."""
    result = example().main("I was charged twice for order A-7. Please refund it.")
    assert result.status == "finished"
    assert result.agents is not None
    assert "billing" in result.agents.in_turn(result.events)
