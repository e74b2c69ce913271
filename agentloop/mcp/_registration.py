"""A server's tools as ``MCPTool``s: their hints, options and policies, and the registries filled.

What ``register`` was given is kept (``Registration``), so that ``refresh``
can put a newer listing into the same registries under the same options.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Final, cast

from agentloop._core.approval import Decision, allow, ask

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import mcp.types

    from agentloop._tools.policy import Policy
    from agentloop._tools.registry import ToolRegistry
    from agentloop.mcp._server import MCPTool

__all__ = [
    "HINTS",
    "Registration",
    "add_all_or_none",
    "ask_before_destructive",
    "both_policies",
    "checked_annotations",
    "checked_options",
    "task_only",
    "tool_hints",
]

#: The annotations a user may declare for a tool, over the server's (MCP's spelling).
HINTS: Final = ("readOnlyHint", "destructiveHint", "idempotentHint")


def ask_before_destructive(call: dict[str, Any]) -> Decision:
    """A ready policy for ``register(destructive=...)``: a person approves each call first."""
    return ask(
        f"the MCP tool {call['name']!r} may change or delete data "
        "(its server does not say it is read-only or non-destructive)"
    )


def task_only(listed: mcp.types.Tool) -> bool:
    """Whether the server runs ``listed`` only as a task, which agentloop does not run.

    MCP (2025-11-25) asks a client to call such a tool as a task, and a server
    to refuse any other call of it (``-32601``): it is left out of the registry.
    """
    execution = listed.execution
    return execution is not None and execution.task_support == "required"


def tool_hints(listed: mcp.types.Tool, declared: Mapping[str, bool]) -> dict[str, bool]:
    """The tool's hints: the user's declarations, else the server's, else MCP's defaults."""
    given = listed.annotations
    server = {
        "readOnlyHint": None if given is None else given.read_only_hint,
        "destructiveHint": None if given is None else given.destructive_hint,
        "idempotentHint": None if given is None else given.idempotent_hint,
    }
    defaults = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
    out = {}
    for hint in HINTS:
        value = declared.get(hint, server[hint])
        out[hint] = defaults[hint] if value is None else bool(value)
    return out


class Registration:
    """One ``register`` call: its registry (weakly held), options, and the names it added."""

    __slots__ = ("names", "options", "registry")

    def __init__(self, registry: ToolRegistry, options: dict[str, Any]) -> None:
        self.registry = weakref.ref(registry)
        self.options, self.names = options, list[str]()


def checked_options(
    prefix: str,
    allow: Iterable[str] | None,
    deny: Iterable[str],
    policy: Policy | None,
    destructive: Policy | None,
    annotations: Mapping[str, Mapping[str, bool]] | None,
    listing: list[mcp.types.Tool],
) -> dict[str, Any]:
    """``tools``' options, checked: a name the server does not list is a mistake, said so."""
    if not isinstance(prefix, str):
        raise TypeError(f"expected prefix to be a str, got {type(prefix).__name__}")
    for what, value in (("allow", allow), ("deny", deny)):
        if isinstance(value, str):
            raise TypeError(
                f"expected {what} to be a collection of tool names, got a str {value!r}"
            )
    for what, gate in (("policy", policy), ("destructive", destructive)):
        if gate is not None and not callable(gate):
            raise TypeError(f"expected {what} to be a policy (callable), got {type(gate).__name__}")
    annotations = checked_annotations(annotations)
    allowed = None if allow is None else frozenset(allow)
    denied = frozenset(deny)
    listed = {tool.name for tool in listing}
    unknown = sorted(((allowed or frozenset()) | denied | annotations.keys()) - listed)
    if unknown:
        raise ValueError(
            f"expected names of tools the server lists ({', '.join(sorted(listed)) or 'none'}), "
            f"got {', '.join(map(repr, unknown))}"
        )
    wanted = (allowed or frozenset()) | annotations.keys()
    tasks = sorted(tool.name for tool in listing if tool.name in wanted and task_only(tool))
    if tasks:
        raise ValueError(
            f"expected tools agentloop can call, got {', '.join(map(repr, tasks))}, which the "
            "server runs only as tasks (execution.taskSupport 'required'): agentloop does not "
            "run MCP tasks, so it leaves such tools out"
        )
    return {
        "prefix": prefix,
        "allow": allowed,
        "deny": denied,
        "policy": policy,
        "destructive": destructive,
        "annotations": annotations,
    }


def checked_annotations(
    annotations: Mapping[str, Mapping[str, bool]] | None,
) -> dict[str, dict[str, bool]]:
    """Declared hints by tool name, checked: each maps some of ``HINTS`` to bools."""
    checked = {}
    for name, declared in (annotations or {}).items():
        wrong = [hint for hint in declared if hint not in HINTS]
        if wrong or not all(type(value) is bool for value in declared.values()):
            raise ValueError(
                f"expected the annotations of {name!r} to map {', '.join(HINTS)} to bools, "
                f"got {dict(declared)!r}"
            )
        checked[name] = dict(declared)
    return checked


def both_policies(first: Policy | None, second: Policy) -> Policy:
    """One policy that asks two (plain ones): a denial wins, then an ask, then ``allow()``."""
    if first is None:
        return second

    def both(call: dict[str, Any]) -> Decision:
        answers = [cast("Decision", policy(call)) for policy in (first, second)]
        for answer in answers:
            if not (answer.allowed or answer.asks):
                return answer
        return next((answer for answer in answers if answer.asks), allow())

    return both


def add_all_or_none(registry: ToolRegistry, tools: list[MCPTool]) -> None:
    """Add every tool, or none: a name taken already raises before any is added."""
    taken = [tool.name for tool in tools if tool.name in registry]
    if taken:
        raise ValueError(
            f"expected unique tool names, got {', '.join(map(repr, taken))} in the registry "
            "already (register(prefix=...) tells a server's tools apart)"
        )
    for tool in tools:
        registry.add(tool)
