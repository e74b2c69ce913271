"""``typing.get_type_hints`` works on everything public: what pydantic, FastAPI, cattrs and
documentation tools call on a class or a signature."""

from __future__ import annotations

import importlib
import inspect
import typing
from typing import Any

import pytest

from tests.test_exports import EVERY_PUBLIC


def annotated(module: str) -> list[tuple[str, Any]]:
    """Each public class, its ``__init__``, its public methods and property getters, and each
    public function of ``module``, by a name that says which."""
    public = importlib.import_module(module)
    found: list[tuple[str, Any]] = []
    for name in public.__all__:
        value = getattr(public, name)
        if inspect.isfunction(value):
            found.append((name, value))
        elif isinstance(value, type):
            found.append((name, value))
            for attribute, member in vars(value).items():
                if attribute.startswith("_") and attribute != "__init__":
                    continue
                if isinstance(member, property):
                    member = member.fget
                elif isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                if inspect.isfunction(member):
                    found.append((f"{name}.{attribute}", member))
    return found


@pytest.mark.parametrize("module", EVERY_PUBLIC)
def test_get_type_hints_works_on_every_public_class_and_function(module: str) -> None:
    failed = {}
    for name, value in annotated(module):
        try:
            typing.get_type_hints(value, include_extras=True)
        except Exception as exc:  # noqa: BLE001 - each failure is collected and named
            failed[name] = f"{type(exc).__name__}: {exc}"
    assert failed == {}


def test_the_hints_are_the_types_themselves() -> None:
    """Not strings: a class's fields and a method's return resolve to the objects they name."""
    import agentloop

    fields = typing.get_type_hints(agentloop.RunResult)
    assert fields["status"] is agentloop.State
    assert fields["usage"] is agentloop.Usage
    assert typing.get_type_hints(agentloop.Run.finish)["return"].__origin__ is agentloop.RunResult
    init = typing.get_type_hints(agentloop.InvalidStateError.__init__)
    assert init["state"] is agentloop.State
