"""The public API: what __all__ promises exists, is documented and is typed."""

from __future__ import annotations

import inspect
from pathlib import Path

import agentloop


def test_all_names_exist_once() -> None:
    """Every name in __all__ is importable from agentloop, and listed once."""
    for name in agentloop.__all__:
        assert hasattr(agentloop, name), name
    assert len(set(agentloop.__all__)) == len(agentloop.__all__)


def test_public_classes_and_functions_have_docstrings() -> None:
    """Everything exported that can carry a docstring has one."""
    for name in agentloop.__all__:
        obj = getattr(agentloop, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"


def test_nothing_public_is_left_out() -> None:
    """Public-looking names in the package namespace are all in __all__ (modules aside)."""
    public = {
        name
        for name, value in vars(agentloop).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }
    assert public == set(agentloop.__all__)


def test_package_is_typed() -> None:
    """py.typed ships with the package."""
    assert (Path(agentloop.__file__).parent / "py.typed").exists()


def test_durable_runs_are_public() -> None:
    """The ledger protocol, its SQLite store, the key and the errors are exported."""
    durable = {
        "Ledger",
        "LedgerWriter",
        "LedgerRecord",
        "SQLiteLedger",
        "idempotency_key",
        "LedgerError",
        "RunNotFoundError",
        "RunExistsError",
        "RunBusyError",
        "ConfigurationMismatchError",
    }
    assert durable <= set(agentloop.__all__)
    for name in durable - {"LedgerRecord"}:
        assert inspect.getdoc(getattr(agentloop, name))
    for error in ("RunNotFoundError", "RunExistsError", "RunBusyError"):
        assert issubclass(getattr(agentloop, error), agentloop.LedgerError)
    assert issubclass(agentloop.LedgerError, agentloop.AgentloopError)
    for method in ("resume", "aresume"):
        assert inspect.getdoc(getattr(agentloop.Loop, method))
    assert "run_id" in inspect.signature(agentloop.Loop.start).parameters
    assert "ledger" in inspect.signature(agentloop.Loop).parameters
    assert "idempotent" in inspect.signature(agentloop.Tool).parameters
