"""A tool's policy: allowed, denied or asked about before its handler runs."""

from __future__ import annotations

from agentloop import Decision, Tool, ToolRegistry, allow, deny
from tests.support.helpers import Recorder, add
from tests.support.tool_types import Call, dispatch

# -- policies -------------------------------------------------------------------------


def test_policy_allows_and_denies() -> None:
    """A registry policy sees each call and allows it or denies it with a reason."""
    seen: list[Call] = []

    def no_negatives(call: Call) -> Decision:
        seen.append(call)
        if min(call["arguments"].values()) < 0:
            return deny("negative numbers are not allowed")
        return allow()

    registry = ToolRegistry([add], policy=no_negatives)
    assert dispatch(registry, "add", a=1, b=2) == {"status": "ok", "content": 3}
    assert dispatch(registry, "add", a=-1, b=2) == {
        "status": "denied",
        "content": "negative numbers are not allowed",
    }
    assert seen[0] == {"kind": "call", "id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}


def test_per_tool_policy_runs_after_the_registry_policy() -> None:
    """Both policies must allow; the registry's is asked first and its denial wins."""
    order: list[str] = []

    def registry_policy(call: Call) -> Decision:
        order.append("registry")
        return deny("read-only mode") if call["arguments"].get("b") == 99 else allow()

    def tool_policy(call: Call) -> Decision:
        order.append("tool")
        return deny("a must be small") if call["arguments"]["a"] > 10 else allow()

    recorder = Recorder()
    registry = ToolRegistry(
        [Tool(recorder, name="add", policy=tool_policy)], policy=registry_policy
    )
    registry.add(Tool(add, name="plain"))

    assert dispatch(registry, "add", a=1, b=1)["status"] == "ok"
    assert dispatch(registry, "add", a=11, b=1)["content"] == "a must be small"
    assert dispatch(registry, "add", a=11, b=99)["content"] == "read-only mode"
    assert order == ["registry", "tool", "registry", "tool", "registry"]
    assert dispatch(registry, "plain", a=11, b=1)["status"] == "ok"  # no tool policy there
    assert recorder.calls == [{"a": 1, "b": 1}]


def test_policy_runs_after_validation() -> None:
    """Invalid arguments are reported first; a policy only judges well-formed calls."""
    asked: list[Call] = []

    def deny_all(call: Call) -> Decision:
        asked.append(call)
        return deny("never")

    registry = ToolRegistry([add], policy=deny_all)
    assert dispatch(registry, "add", a="x", b=1)["status"] == "invalid_arguments"
    assert dispatch(registry, "nope")["status"] == "unknown_tool"
    assert asked == []
    assert dispatch(registry, "add", a=1, b=1)["status"] == "denied"


def test_policy_gets_a_copy_of_the_call() -> None:
    """A policy that mutates the call it sees changes nothing the handler receives."""
    seen: list[list[int]] = []

    def meddle(call: Call) -> Decision:
        call["arguments"]["items"].append(666)
        return allow()

    def total(items: list[int]) -> int:
        seen.append(items)
        return sum(items)

    assert dispatch(ToolRegistry([total], policy=meddle), "total", items=[1, 2])["content"] == 3
    assert seen == [[1, 2]]


def test_a_broken_policy_fails_closed() -> None:
    """A policy that raises or answers with anything else gives error; the handler does not run."""
    recorder = Recorder()
    problem = RuntimeError("policy store down")

    def raising(call: Call) -> Decision:
        raise problem

    def forgetful(call: Call) -> Decision:
        return None  # type: ignore[return-value]

    outcome = dispatch(ToolRegistry([Tool(recorder, name="r")], policy=raising), "r")
    assert outcome["status"] == "error"
    assert outcome["exception"] is problem
    outcome = dispatch(ToolRegistry([Tool(recorder, name="r", policy=forgetful)]), "r")
    assert outcome["status"] == "error"
    assert outcome["content"]["message"] == (
        "the policy for tool 'r' returned None; expected agentloop.allow(), "
        "agentloop.deny(reason) or agentloop.ask(reason)"
    )
    assert recorder.calls == []
