"""``ToolRegistry``: named tools behind one dispatcher, with a permission gate.

A registry is a dispatcher in the core's sense; for each call it answers, in
this order:

1. ``unknown_tool``: no tool has the call's name.
2. ``invalid_arguments``: the arguments are a ``str`` (a provider's raw text
   that was not a JSON object: the message says why, so the model can retry),
   break the schema (every violation is listed as ``{'path', 'message'}``) or
   cannot be converted for the handler (an attrs validator refused them).
3. ``denied``: the registry's policy, then the tool's, said no.
4. ``error``: a policy or the handler raised, or the handler returned a value
   with no JSON form. Content ``{'type', 'message'}``; the exception itself
   rides on the outcome's ``'exception'`` key to the transition event.
5. ``ok``: the handler's return value as JSON.

Policies run after validation so that they judge arguments known to be
well-formed (a policy reading ``call['arguments']['path']`` needs no defensive
code); the schema is published to the model anyway, so validating first
reveals nothing a denial would hide.

The public names of ``agentloop._tools`` are importable from here.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, TypeVar, overload

import orjson

from agentloop._core._json import json_object
from agentloop._tools._policy import Decision, Policy, allow, deny
from agentloop._tools._results import failed, returned
from agentloop._tools._specs import SpecFormat, build_specs
from agentloop._tools._tool import Tool

__all__ = ["Decision", "Policy", "SpecFormat", "Tool", "ToolRegistry", "allow", "deny"]

Handler = TypeVar("Handler", bound=Callable[..., Any])

# Return values that cannot be awaitables: the common case skips the awaitable check.
_PLAIN: Final = frozenset({str, int, float, bool, type(None), dict, list, tuple})


class ToolRegistry:
    """A dispatcher over named ``Tool``s, with an optional permission ``policy``.

    ``tools`` is an iterable of ``Tool``s or plain handlers, or a mapping of name
    to handler. ``policy`` sees a copy of every call whose arguments are valid
    and answers ``allow()`` or ``deny(reason)``; a tool's own policy is asked
    next. See the module docstring for the order of outcomes. ``dispatch``
    runs plain handlers; ``adispatch`` (for the async driver) also awaits
    ``async def`` ones.
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] | Mapping[str, Callable[..., Any]] = (),
        *,
        policy: Policy | None = None,
    ) -> None:
        if policy is not None and not callable(policy):
            raise TypeError(f"expected policy to be callable, got {type(policy).__name__}")
        self.policy = policy
        self._tools: dict[str, Tool] = {}
        if isinstance(tools, Mapping):
            for name, handler in tools.items():
                self.add(Tool(handler, name=name))
        else:
            for tool in tools:
                self.add(tool)

    def __repr__(self) -> str:
        return f"ToolRegistry({sorted(self._tools)})"

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def add(self, tool: Tool | Callable[..., Any]) -> Tool:
        """Register a ``Tool`` (or a handler, made into one); names are unique."""
        if not isinstance(tool, Tool):
            tool = Tool(tool)
        if tool.name in self._tools:
            raise ValueError(f"expected unique tool names, got {tool.name!r} twice")
        self._tools[tool.name] = tool
        return tool

    @overload
    def tool(self, handler: Handler, /) -> Handler: ...
    @overload
    def tool(
        self,
        handler: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
        idempotent: bool = False,
    ) -> Callable[[Handler], Handler]: ...
    def tool(
        self,
        handler: Handler | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
        idempotent: bool = False,
    ) -> Handler | Callable[[Handler], Handler]:
        """Decorator: ``@registry.tool`` or ``@registry.tool(name=..., policy=...)``.

        The function is registered and returned unchanged.
        """

        def register(fn: Handler) -> Handler:
            self.add(
                Tool(
                    fn,
                    name=name,
                    description=description,
                    parameters=parameters,
                    policy=policy,
                    idempotent=idempotent,
                )
            )
            return fn

        return register if handler is None else register(handler)

    def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
        """Run ``call`` and return its outcome; never raises for an ``Exception``."""
        prepared = self._prepare(call)
        if isinstance(prepared, dict):
            return prepared
        tool, kwargs = prepared
        try:
            value = tool.handler(**kwargs)
        except Exception as exc:  # noqa: BLE001 - a failing tool is an outcome
            return failed(exc)
        if type(value) not in _PLAIN and inspect.isawaitable(value):
            getattr(value, "close", lambda: None)()  # never awaited: say so, without a warning
            return failed(
                TypeError(
                    f"tool {tool.name!r} is async; run the loop with the async driver "
                    "(loop.arun or loop.astart), which awaits it"
                )
            )
        return returned(tool.name, value)

    async def adispatch(self, call: dict[str, Any], *, to_thread: bool = False) -> dict[str, Any]:
        """``dispatch`` for the async driver: an ``async def`` handler is awaited.

        A plain handler is called in the event loop's thread, or with
        ``to_thread=True`` in a worker thread (``asyncio.to_thread``).
        """
        prepared = self._prepare(call)
        if isinstance(prepared, dict):
            return prepared
        tool, kwargs = prepared
        try:
            if to_thread and not inspect.iscoroutinefunction(tool.handler):
                value = await asyncio.to_thread(tool.handler, **kwargs)
            else:
                value = tool.handler(**kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 - a failing tool is an outcome
            return failed(exc)
        return returned(tool.name, value)

    def _prepare(self, call: dict[str, Any]) -> dict[str, Any] | tuple[Tool, dict[str, Any]]:
        """The tool and its converted arguments, or the outcome that stops the call first."""
        tool = self._tools.get(call["name"])
        if tool is None:
            available = ", ".join(sorted(self._tools)) or "none"
            return {
                "status": "unknown_tool",
                "content": f"no tool named {call['name']!r}; available: {available}",
            }
        arguments = call["arguments"]
        if type(arguments) is str:
            return {"status": "invalid_arguments", "content": [_not_an_object(arguments)]}
        if not tool._is_valid(arguments):  # one compiled check; the list only when it fails
            return {"status": "invalid_arguments", "content": tool.problems(arguments)}
        try:
            kwargs = arguments if tool._convert is None else tool._convert(arguments)
        except (TypeError, ValueError) as exc:  # e.g. an attrs validator said no
            return {
                "status": "invalid_arguments",
                "content": [{"path": "", "message": f"{type(exc).__name__}: {exc}"}],
            }
        except Exception as exc:  # noqa: BLE001 - a failing conversion is an outcome
            return failed(exc)
        if self.policy is None and tool.policy is None:
            return tool, kwargs
        for policy in (self.policy, tool.policy):
            if policy is None:
                continue
            try:
                # A copy: a policy must not be able to change what the handler gets.
                decision = policy(orjson.loads(orjson.dumps(call)))
                if not isinstance(decision, Decision):
                    raise TypeError(
                        f"the policy for tool {tool.name!r} returned {decision!r:.80}; "
                        "expected agentloop.allow() or agentloop.deny(reason)"
                    )
            except Exception as exc:  # noqa: BLE001 - fail closed: the handler does not run
                return failed(exc)
            if not decision.allowed:
                return {"status": "denied", "content": decision.reason}
        return tool, kwargs

    def specs(self, format: SpecFormat = "json-schema") -> list[dict[str, Any]]:
        """The tools described for a provider request (fresh JSON on every call).

        ``'openai'``: Chat Completions ``tools`` entries; ``'openai-responses'``:
        Responses-API function tools; ``'anthropic'``: Messages API ``tools``
        entries; ``'json-schema'``: ``{'name', 'description', 'parameters'}``.
        The OpenAI formats say ``strict: false``: derived schemas have optional
        parameters, which strict mode forbids, and the registry validates anyway.
        """
        return build_specs(
            ((tool.name, tool.description, tool.parameters) for tool in self._tools.values()),
            format,
        )


def _not_an_object(raw: str) -> dict[str, str]:
    """The problem with arguments that arrived as text: why they are not a JSON object."""
    value, why = json_object(raw)
    # A str that holds an object is a caller's slip, not the model's: name it so.
    why = "they arrived as text, not as an object" if value is not None else f"they are {why}"
    # JSON-quoted and cut short: the model sees what it sent (Anthropic's history cannot
    # carry the text itself), with any lone surrogate escaped rather than unencodable.
    shown = json.dumps(raw[:200]) + (" (cut at 200 characters)" if len(raw) > 200 else "")
    return {
        "path": "",
        "message": f"expected the arguments to be a JSON object, but {why}; received {shown}",
    }
