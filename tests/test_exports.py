"""The public API: what __all__ promises exists, is documented, is typed, and has one home."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import agentloop
import agentloop.context
import agentloop.handoff_filters
import agentloop.mcp
import agentloop.models
import agentloop.providers
import agentloop.streaming

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType


#: Every public module: agentloop and each submodule with no private part in its name.
EVERY_PUBLIC = [
    "agentloop",
    *sorted(
        found.name
        for found in pkgutil.walk_packages(agentloop.__path__, "agentloop.")
        if not any(part.startswith("_") for part in found.name.split("."))
    ),
]

PUBLIC = [
    agentloop,
    agentloop.engine,
    agentloop.ledger,
    agentloop.review,
    agentloop.mcp,
    agentloop.context,
    agentloop.models,
    agentloop.streaming,
    agentloop.handoff_filters,
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


def test_no_name_is_exported_from_two_modules() -> None:
    """Each name in a public module's __all__ is in no other's: every name has one home."""
    homes: dict[str, list[str]] = {}
    for name in EVERY_PUBLIC:
        for exported in importlib.import_module(name).__all__:
            homes.setdefault(exported, []).append(name)
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}
    assert {"agentloop.engine", "agentloop.testing.strategies", "agentloop.dbos"} <= set(
        EVERY_PUBLIC
    )


def test_the_front_door_is_small() -> None:
    """About 20 names: what a user of Loop, tools and approval needs (a tool's RunContext and
    current_context among them, and an output validator's Retry); run files are review's."""
    assert len(agentloop.__all__) <= 26
    assert {"Loop", "Tool", "ToolRegistry", "RunResult", "ask", "approve"} <= set(agentloop.__all__)
    assert {"load_run", "save_run", "RunFileError"} <= set(agentloop.review.__all__)
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
        [{"kind": "user", "text": "hi", "score": float("nan")}]
    )
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"not a ledger, not a run file" * 100)
    raised[agentloop.ledger.LedgerError] = lambda: agentloop.ledger.SQLiteLedger(garbage)
    raised[agentloop.review.RunFileError] = lambda: agentloop.review.load_run(garbage)
    ledger = agentloop.ledger.SQLiteLedger(tmp_path / "runs.db")
    durable = agentloop.Loop(model, ledger=ledger)
    held = durable.start("go", run_id="held")
    raised[agentloop.ledger.RunExistsError] = lambda: durable.start("go", run_id="held")
    raised[agentloop.ledger.RunBusyError] = lambda: durable.resume("held")
    raised[agentloop.ledger.RunNotFoundError] = lambda: durable.resume("nobody")
    durable.run("go", run_id="done")
    turn_1 = durable.run("go", conversation="chat")
    durable.run("again", after=turn_1)  # turn 2: a second one after turn 1 is refused
    raised[agentloop.ledger.ConversationBusyError] = lambda: durable.run("too", after=turn_1)
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
    """The ledger protocol, its SQLite store and the errors only a ledger raises are the
    ledger's; the key a tool reads and the mismatch a resume raises are the front door's."""
    durable = {
        "Ledger",
        "LedgerWriter",
        "LedgerRecord",
        "SQLiteLedger",
        "LedgerError",
        "RunNotFoundError",
        "RunExistsError",
        "RunBusyError",
    }
    assert durable <= set(agentloop.ledger.__all__)
    assert {"idempotency_key", "ConfigurationMismatchError"} <= set(agentloop.__all__)
    for name in durable:
        assert inspect.getdoc(getattr(agentloop.ledger, name))
    for name in ("idempotency_key", "ConfigurationMismatchError"):
        assert inspect.getdoc(getattr(agentloop, name))
    for error in ("RunNotFoundError", "RunExistsError", "RunBusyError"):
        assert issubclass(getattr(agentloop.ledger, error), agentloop.ledger.LedgerError)
    assert issubclass(agentloop.ledger.LedgerError, agentloop.AgentloopError)
    for method in ("resume", "aresume"):
        assert inspect.getdoc(getattr(agentloop.Loop, method))
    assert "run_id" in inspect.signature(agentloop.Loop.start).parameters
    assert "ledger" in inspect.signature(agentloop.Loop).parameters
    assert "idempotent" in inspect.signature(agentloop.Tool).parameters


def test_the_registrys_names_are_public() -> None:
    """The registry's names are public; its type aliases are the engine's."""
    for name in ("Tool", "ToolRegistry", "Decision", "allow", "deny"):
        assert name in agentloop.__all__
    for name in ("Policy", "SpecFormat"):
        assert name in agentloop.engine.__all__


# The modules whose names are public, each documented in its own docstring.
PUBLIC_MODULES = [
    "agentloop",
    "agentloop.engine",
    "agentloop.ledger",
    "agentloop.review",
    "agentloop.testing",
    "agentloop.testing.strategies",
    "agentloop.providers",
    "agentloop.providers.openai",
    "agentloop.providers.anthropic",
    "agentloop.otel",
    "agentloop.dbos",
    "agentloop.handoff_filters",
]


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_class_and_function_is_named_where_it_is_imported_from(module: str) -> None:
    """``agentloop.X`` (or ``agentloop.testing.X``...), never a private module's path: data and
    type aliases (ROWS, Model, SpecFormat...) have no module of their own."""
    public = importlib.import_module(module)
    named = {
        name: getattr(public, name).__module__
        for name in public.__all__
        if inspect.isclass(getattr(public, name)) or inspect.isfunction(getattr(public, name))
    }
    assert named
    # A name also in the front door (agentloop.State in agentloop.engine) is named there.
    front = set(importlib.import_module("agentloop").__all__)
    assert {
        name: where
        for name, where in named.items()
        if where != module and not (name in front and where == "agentloop")
    } == {}


def test_a_traceback_and_a_repr_name_the_public_exception() -> None:
    """``agentloop.ConfigurationMismatchError: ...`` in a traceback, and it still pickles."""
    error = agentloop.ConfigurationMismatchError("the budget differs", ["budget.max_calls"])
    (line,) = traceback.format_exception_only(error)
    assert line == "agentloop.ConfigurationMismatchError: the budget differs\n"
    assert repr(agentloop.ledger.RunBusyError) == "<class 'agentloop.ledger.RunBusyError'>"
    assert repr(agentloop.providers.IncompleteReply) == (
        "<class 'agentloop.providers.IncompleteReply'>"
    )
    again = pickle.loads(pickle.dumps(agentloop.ledger.RunBusyError("busy")))
    assert (type(again), str(again)) == (agentloop.ledger.RunBusyError, "busy")
    with pytest.raises(agentloop.review.RunFileError) as caught:
        agentloop.review.run_from_json("{}")
    (line,) = traceback.format_exception_only(caught.value)
    assert line.startswith("agentloop.review.RunFileError: ")


def test_the_version_is_the_packages() -> None:
    """``agentloop.__version__`` is pyproject.toml's version, and the installed package's."""
    import tomllib
    from importlib.metadata import version

    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert agentloop.__version__ == project["project"]["version"] == version("agentloop-fsm")
