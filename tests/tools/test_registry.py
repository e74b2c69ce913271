"""The tool registry: a container and a decorator of tools, and its tools through a Loop."""

from __future__ import annotations

import agentloop
from agentloop import Loop, Tool, ToolRegistry, allow, deny
from agentloop.testing import ScriptedModel
from tests.support.helpers import add, adder, call, final, kinds, validator_says
from tests.support.tool_types import INTEGER, dispatch

# -- the registry as a container and a decorator --------------------------------------


def test_decorator_with_and_without_arguments() -> None:
    """@registry.tool registers the function and returns it unchanged."""
    registry = ToolRegistry()

    @registry.tool
    def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    @registry.tool(name="half", description="Halve a number.", policy=lambda c: deny("no"))
    def halve(n: int) -> float:
        return n / 2

    assert double(4) == 8  # still the plain function
    assert list(registry) == [registry["double"], registry["half"]]
    assert (len(registry), "half" in registry, "halve" in registry) == (2, True, False)
    assert registry["half"].description == "Halve a number."
    assert repr(registry) == "ToolRegistry(['double', 'half'])"
    assert repr(registry["double"]) == "Tool('double')"
    assert dispatch(registry, "double", n=3)["content"] == 6
    assert dispatch(registry, "half", n=3)["status"] == "denied"


def test_mapping_form_builds_a_registry() -> None:
    """A mapping given to Loop (or ToolRegistry) becomes a registry keyed by the mapping's names."""
    loop = Loop(ScriptedModel([]), tools={"plus": add})
    assert isinstance(loop.dispatcher, ToolRegistry)
    assert loop.dispatcher["plus"].handler is add
    registry = ToolRegistry([add])
    assert Loop(ScriptedModel([]), tools=registry).dispatcher is registry


def test_parameters_are_a_fresh_copy() -> None:
    """Changing a tool's parameters dict changes neither its schema nor its validation."""
    tool = Tool(add)
    tool.parameters["properties"]["a"]["type"] = "string"
    assert tool.parameters["properties"]["a"] == {"type": "integer"}


# -- through the loop -----------------------------------------------------------------


def test_every_outcome_counts_against_the_call_budget() -> None:
    """denied, invalid_arguments, unknown_tool and error all spend a call, like ok."""

    def fail() -> None:
        raise ValueError("nope")

    registry = ToolRegistry(
        [add, fail], policy=lambda c: deny("no") if c["id"] == "c1" else allow()
    )
    model = ScriptedModel(
        [
            call("c1", a=1, b=1),  # denied
            call("c2", a="x", b=1),  # invalid_arguments
            call("c3", name="sub"),  # unknown_tool
            call("c4", name="fail"),  # error
            call("c5", a=1, b=1),  # over budget
        ]
    )
    result = Loop(model, tools=registry, max_steps=10, max_calls=4).run("go")

    assert (result.status, result.reason, result.calls, result.steps) == (
        "exhausted",
        "max_calls",
        4,
        5,
    )
    assert kinds(result.transcript) == [
        "user",
        "call",
        "tool_result:denied",
        "call",
        "tool_result:invalid_arguments",
        "call",
        "tool_result:unknown_tool",
        "call",
        "tool_result:error",
    ]
    # The denied call is answered by the engine at the review (approval_asked); the others
    # by the dispatcher (tool_returned): each answer has one more call counted.
    answered = {"tool_returned", "approval_asked"}
    assert [e.calls for e in result.events if e.trigger in answered] == [1, 2, 3, 4]


def test_handler_exception_is_on_the_event_not_in_the_history() -> None:
    """The exception behind an error is on the event; the history has its type and message."""
    problem = KeyError("missing")

    def lookup(key: str) -> str:
        raise problem

    model = ScriptedModel([call("c1", name="lookup", key="k"), final()])
    result = Loop(model, tools={"lookup": lookup}).run("go")
    event = next(e for e in result.events if e.trigger == "tool_returned")
    assert event.exception is problem
    assert result.transcript[2]["content"] == {"type": "KeyError", "message": "'missing'"}
    assert "Traceback" not in str(result.transcript)


def test_mapping_form_validates_plain_annotations_through_the_loop() -> None:
    """tools={'add': add}: wrong types and missing names are invalid_arguments, as before."""
    model = ScriptedModel([call("c1", a="2", b=2), call("c2", a=2), call("c3", a=2, b=2), final()])
    result = Loop(model, tools={"add": add}).run("go")

    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == [
        "invalid_arguments",
        "invalid_arguments",
        "ok",
    ]
    assert result.transcript[2]["content"] == [
        {"path": "a", "message": validator_says(INTEGER, "2")}
    ]
    assert result.transcript[4]["content"] == [
        {"path": "", "message": validator_says({"required": ["b"]}, {})}
    ]


def test_a_registry_gets_a_tool_by_name_as_a_dict_does() -> None:
    """get(name) is the tool or None; get(name, default) is the tool or the default."""
    registry = agentloop.ToolRegistry([adder])
    assert registry.get("adder") is registry["adder"]
    assert registry.get("missing") is None
    fallback = agentloop.Tool(add, name="fallback")
    assert registry.get("missing", fallback) is fallback
    assert registry.get("adder", fallback) is registry["adder"]
