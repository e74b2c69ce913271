"""RunContext, Tool and a Loop's deps as mypy --strict and pyright read them (make check).

``RunContext`` is covariant in its deps, ``Tool`` contravariant: a tool whose handler takes
``RunContext[Bank]`` is a ``Tool[Bank]``, and serves wherever a ``Tool`` of a subclass of
``Bank`` is wanted; a handler with no context makes a ``Tool[object]``, which serves any.
``Loop(deps_type=D)`` is a ``Loop[str, D]``, whose runs take ``deps`` of ``D``.
The lines both checkers must refuse carry each one's ignore (an unneeded one fails either).
A tool for other deps than a Loop's is refused when the Loop is made, at run time.
"""

from __future__ import annotations

from typing import Any, assert_type

import pytest

from agentloop import Loop, RunContext, Tool
from agentloop.testing import ScriptedModel, final


class Bank:
    balance: float = 1.0


class Vault(Bank):
    pass


class Other:
    pass


def lookup(ctx: RunContext[Bank], account: str) -> float:
    assert_type(ctx.deps, Bank)
    return ctx.deps.balance


def plain(account: str) -> str:
    return account


def test_a_tool_is_typed_by_its_handlers_context() -> None:
    assert_type(Tool(lookup), Tool[Bank])
    assert_type(Tool(plain), Tool[object])
    assert_type(RunContext(deps=Vault()), RunContext[Vault])


def test_a_tool_serves_a_subclass_of_its_deps_and_a_plain_one_serves_any() -> None:
    for_a_vault: Tool[Vault] = Tool(lookup)
    for_a_bank: Tool[Bank] = Tool(plain)
    wider: RunContext[Bank] = RunContext(deps=Vault())
    assert for_a_vault.context is not None
    assert for_a_bank.context is None
    assert isinstance(wider.deps, Vault)


def test_a_context_of_other_deps_is_refused() -> None:
    narrower: RunContext[Vault] = RunContext(deps=Bank())  # type: ignore[arg-type]  # pyright: ignore[reportAssignmentType]
    assert type(narrower.deps) is Bank
    # A Tool[Other] made of lookup is not refused here: a checker that expects one takes the
    # overload for any handler, whose Tool[object] serves any deps. Loop(deps_type=Other)
    # refuses that tool when it is made (test_a_tool_for_other_deps_is_refused_at_loop).


def test_a_loop_is_typed_by_its_deps_type() -> None:
    """``deps=`` of a run is checked against the Loop's ``deps_type``: by the checker, and
    when the run begins."""
    loop = Loop(ScriptedModel([final("ok")]), tools=[lookup], deps_type=Bank)
    assert_type(loop, Loop[str, Bank])
    assert_type(Loop(ScriptedModel([])), Loop[str, Any])
    assert_type(Loop(ScriptedModel([]), output=int, deps_type=Vault), Loop[int, Vault])
    assert loop.run("x", deps=Vault()).output == "ok"  # a Vault is a Bank
    with pytest.raises(TypeError, match="expected deps to be a Bank"):
        loop.run("x", deps=Other())  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
