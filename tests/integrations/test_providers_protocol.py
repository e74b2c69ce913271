"""The model protocol the adapters use: a model that takes ``tools`` gets the Loop's specs.

``Loop`` reads the model's signature once: a keyword parameter ``tools`` means
``model(history, tools=specs)`` on every request, the specs being the
registry's ``specs()`` (``{'name', 'description', 'parameters'}``), made
afresh; any other model is called ``model(history)``, as ever.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentloop import Loop, Tool, ToolRegistry
from agentloop.models import fallback
from agentloop.providers import NameRule
from agentloop.testing import call, final
from tests.support.helpers import add

Message = dict[str, Any]


def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def replies(history: list[Message]) -> Message:
    """One call to ``add``, then a final."""
    return call("c1", "add", a=2, b=3) if len(history) == 1 else final("5")


class TakesTools:
    """A model object whose ``__call__`` takes ``tools``, as an adapter's may."""

    def __init__(self) -> None:
        self.given: list[Any] = []

    def __call__(self, history: list[Message], *, tools: Any = None) -> Message:
        self.given.append(tools)
        return replies(history)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_model_that_takes_tools_gets_fresh_specs_with_each_request(flavour: str) -> None:
    """Each request gets the registry's json-schema specs as they are then (a tool added between
    requests included), in a copy of its own; under either driver, plain or async model."""
    registry = ToolRegistry([add])
    given: list[Any] = []

    def model(history: list[Message], *, tools: Any = None) -> Message:
        given.append(tools)
        if len(history) == 1:
            tools[0]["name"] = "changed by the model"  # its own copy
            registry.add(mul)
        return replies(history)

    async def amodel(history: list[Message], *, tools: Any = None) -> Message:
        return model(history, tools=tools)

    loop = Loop(model if flavour == "sync" else amodel, tools=registry)
    result = loop.run("go") if flavour == "sync" else asyncio.run(loop.arun("go"))
    assert result.output == "5"
    assert given[0] == [{**ToolRegistry([add]).specs()[0], "name": "changed by the model"}]
    assert given[1] == ToolRegistry([add, mul]).specs()
    assert given[1][0] == {
        "name": "add",
        "description": "Add two integers.",
        "parameters": ToolRegistry([add]).specs("json-schema")[0]["parameters"],
    }


def test_a_model_object_that_takes_tools_and_a_loop_without_tools() -> None:
    """An object's __call__ is read as a function's is; a Loop without tools passes []."""
    model = TakesTools()
    Loop(model, tools=[add]).run("go")
    assert model.given == [ToolRegistry([add]).specs()] * 2
    bare = TakesTools()
    Loop(bare).run("go")
    assert bare.given == [[], []]


def test_a_model_that_does_not_take_tools_gets_the_history_alone() -> None:
    """No parameter named tools (a **kwargs one is not), no tools: model(history), as ever."""
    seen: list[dict[str, Any]] = []

    def open_ended(history: list[Message], **options: Any) -> Message:
        seen.append(options)
        return replies(history)

    assert Loop(open_ended, tools=[add]).run("go").output == "5"
    assert seen == [{}, {}]


def test_a_dispatcher_of_ones_own_offers_its_specs_or_none() -> None:
    """A dispatcher with specs() has them passed on; one without gives the model []."""

    class Echo:
        def dispatch(self, call: Message) -> Message:
            return {"status": "ok", "content": sum(call["arguments"].values())}

    class Described(Echo):
        def specs(self) -> list[Message]:
            return [{"name": "add", "description": "", "parameters": {"type": "object"}}]

    described, silent = TakesTools(), TakesTools()
    assert Loop(described, tools=Described()).run("go").output == "5"
    assert Loop(silent, tools=Echo()).run("go").output == "5"
    assert described.given == [Described().specs()] * 2
    assert silent.given == [[], []]


def test_an_adapter_declares_its_provider_s_rule_for_tool_names() -> None:
    """A model callback declares the rule (``agentloop_tool_names``, a ``NameRule``), as
    ``make_model`` does for the adapters: the Loop refuses a tool that breaks it, naming the
    provider, when it is made; in a fallback chain, every model's rule holds."""

    def strict(history: list[Message], *, tools: Any = None) -> Message:
        return replies(history)

    strict.agentloop_tool_names = NameRule(  # type: ignore[attr-defined]
        "Example", r"[a-z][a-z_]{0,31}", "lower-case letters and '_', from a letter, at most 32"
    )

    def lenient(history: list[Message]) -> Message:
        return replies(history)

    with pytest.raises(
        ValueError,
        match=r"^tool 'Add': Example refuses it as a tool name: a name must match "
        r"\^\[a-z\]\[a-z_\]\{0,31\}\$ \(lower-case letters and '_', from a letter, at most 32\); "
        r"give the tool a name= that does$",
    ):
        Loop(fallback(lenient, strict), tools=[Tool(add, name="Add")])
    assert Loop(lenient, tools=[Tool(add, name="Add")]).run("2+3?").output == "5"
    assert Loop(strict, tools=[add]).run("2+3?").output == "5"
