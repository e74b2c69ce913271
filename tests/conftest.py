"""Shared fixtures: semantics tests run against both drivers."""

from __future__ import annotations

import importlib

import pytest

from .helpers import DRIVERS, Driver


@pytest.fixture(params=DRIVERS, ids=lambda d: d.name)
def driver(request: pytest.FixtureRequest) -> Driver:
    """The synchronous driver, then the asyncio driver."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def no_pygraphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pygraphviz`` fail, as on a machine without the svg extra."""
    real = importlib.import_module

    def refuse(name: str, package: str | None = None) -> object:
        if name == "pygraphviz":
            raise ModuleNotFoundError("No module named 'pygraphviz'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", refuse)
