"""The public API: what __all__ promises exists, is documented and is typed."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import agentloop
import agentloop.context
import agentloop.mcp
import agentloop.models
import agentloop.streaming

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType


PUBLIC = [
    agentloop,
    agentloop.engine,
    agentloop.ledger,
    agentloop.review,
    agentloop.mcp,
    agentloop.context,
    agentloop.models,
    agentloop.streaming,
]


@pytest.mark.parametrize("module", PUBLIC, ids=lambda module: module.__name__)
def test_all_names_exist_once(module: ModuleType) -> None:
    """Every name in __all__ is importable from its module, and listed once."""
    for name in module.__all__:
        assert hasattr(module, name), name
    assert len(set(module.__all__)) == len(module.__all__)


@pytest.mark.parametrize("module", PUBLIC, ids=lambda module: module.__name__)
def test_public_classes_and_functions_have_docstrings(module: ModuleType) -> None:
    """Everything exported that can carry a docstring has one, and so has the module."""
    assert inspect.getdoc(module)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"


@pytest.mark.parametrize("module", PUBLIC, ids=lambda module: module.__name__)
def test_nothing_public_is_left_out(module: ModuleType) -> None:
    """Public-looking names in a public module's namespace are all in __all__ (modules aside)."""
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }
    assert public == set(module.__all__)


def test_the_front_door_is_small() -> None:
    """At most 35 names: what a user of Loop, tools, run files and approval needs."""
    assert len(agentloop.__all__) <= 35
    assert {"Loop", "Tool", "ToolRegistry", "RunResult", "load_run", "save_run", "ask"} <= set(
        agentloop.__all__
    )
    assert "Engine" not in agentloop.__all__  # agentloop.engine, for writing a driver


def test_every_exported_error_is_raised_by_a_public_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each error in a public __all__ is what some public call raises."""

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        return {"kind": "final", "text": "done"}

    raised: dict[type[BaseException], Callable[[], object]] = {}
    run = agentloop.Loop(model).start("go")
    run.finish()
    raised[agentloop.InvalidStateError] = run.step
    raised[agentloop.JSONError] = lambda: agentloop.Loop(model).run(
        [{"kind": "user", "text": float("nan")}]
    )
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a ledger, not a run file" * 100)
    raised[agentloop.LedgerError] = lambda: agentloop.SQLiteLedger(garbage)
    raised[agentloop.RunFileError] = lambda: agentloop.load_run(garbage)
    ledger = agentloop.SQLiteLedger(tmp_path / "runs.db")
    durable = agentloop.Loop(model, ledger=ledger)
    held = durable.start("go", run_id="held")
    raised[agentloop.RunExistsError] = lambda: durable.start("go", run_id="held")
    raised[agentloop.RunBusyError] = lambda: durable.resume("held")
    raised[agentloop.RunNotFoundError] = lambda: durable.resume("nobody")
    durable.run("go", run_id="done")
    other = agentloop.Loop(model, ledger=ledger, max_steps=3)
    raised[agentloop.ConfigurationMismatchError] = lambda: other.resume("done")
    monkeypatch.setitem(sys.modules, "pygraphviz", None)  # the svg extra, not installed
    raised[agentloop.review.SVGUnavailableError] = agentloop.review.to_svg
    errors = {
        getattr(module, name)
        for module in PUBLIC
        for name in module.__all__
        if name.endswith("Error")  # RecordedException describes a record: never raised
    }
    assert errors - {agentloop.AgentloopError} == set(raised)
    for error, call in raised.items():
        with pytest.raises(error):
            call()
    assert all(issubclass(error, agentloop.AgentloopError) for error in errors)
    held.finish()


def test_package_is_typed() -> None:
    """py.typed ships with the package."""
    assert (Path(agentloop.__file__).parent / "py.typed").exists()


def test_durable_runs_are_public() -> None:
    """The ledger protocol, its SQLite store, the key and the errors are exported."""
    assert {"Ledger", "LedgerWriter", "LedgerRecord"} <= set(agentloop.ledger.__all__)
    durable = {
        "SQLiteLedger",
        "idempotency_key",
        "LedgerError",
        "RunNotFoundError",
        "RunExistsError",
        "RunBusyError",
        "ConfigurationMismatchError",
    }
    assert durable <= set(agentloop.__all__)
    for name in durable:
        assert inspect.getdoc(getattr(agentloop, name))
    for error in ("RunNotFoundError", "RunExistsError", "RunBusyError"):
        assert issubclass(getattr(agentloop, error), agentloop.LedgerError)
    assert issubclass(agentloop.LedgerError, agentloop.AgentloopError)
    for method in ("resume", "aresume"):
        assert inspect.getdoc(getattr(agentloop.Loop, method))
    assert "run_id" in inspect.signature(agentloop.Loop.start).parameters
    assert "ledger" in inspect.signature(agentloop.Loop).parameters
    assert "idempotent" in inspect.signature(agentloop.Tool).parameters
