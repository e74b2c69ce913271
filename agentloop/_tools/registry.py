"""``ToolRegistry``: named tools behind one dispatcher, with a permission gate.

A registry is a dispatcher in the core's sense; for each call it answers, in
this order:

1. ``unknown_tool``: no tool has the call's name.
2. ``invalid_arguments``: the arguments are a ``str`` (a provider's raw text
   that was not a JSON object: the message says why, so the model can retry),
   break the schema (every violation is listed as ``{'path', 'message'}``) or
   cannot be converted for the handler (an attrs validator refused them).
3. ``denied``: the registry's policy, then the tool's, said no (or a person
   did, about a call a policy asked about: ``ask(reason)``).
4. ``error``: a policy or the handler raised, or the handler returned a value
   with no JSON form. Content ``{'type', 'message'}``; the exception itself
   rides on the outcome's ``'exception'`` key to the transition event.
5. ``ok``: the handler's return value as JSON.

Policies run after validation so that they judge arguments known to be
well-formed (a policy reading ``call['arguments']['path']`` needs no defensive
code); the schema is published to the model anyway, so validating first
reveals nothing a denial would hide.

A run asks the policies about every call of a batch before any of it runs
(``review``), so that an ``ask`` can stop the batch whole. The review hands
back a ``PreparedCall`` (the tool, the converted arguments and the policies'
answer), which the run passes on to ``dispatch(call, review=...)`` with a
person's decision if there was one: no policy is asked twice, and no call's
arguments are validated or converted twice. A registry dispatched on its own
(no run to wait in) answers an ``ask`` ``denied``, saying a person's approval
was needed.

The public names of ``agentloop._tools`` are importable from here.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable, Iterator, Mapping
from typing import Any, Final, TypeVar, overload

from agentloop._drivers.callbacks import is_async
from agentloop._drivers.cuts import cut_to
from agentloop._drivers.run_context import context_here
from agentloop._tools.converters import not_an_object, refusals
from agentloop._tools.policy import (
    Decision,
    Policy,
    PreparedCall,
    allow,
    ask,
    awaited,
    checked_answer,
    deny,
    leaves_open,
    policy_answer,
    stopped_by,
    strictest_answer,
    unawaited,
)
from agentloop._tools.results import failed, result_limit, returned
from agentloop._tools.signature import Context, context_of
from agentloop._tools.specs import SpecFormat, build_specs
from agentloop._tools.tool import Tool

__all__ = [
    "Decision",
    "Policy",
    "PreparedCall",
    "SpecFormat",
    "Tool",
    "ToolRegistry",
    "allow",
    "ask",
    "deny",
    "reviewing",
]

Handler = TypeVar("Handler", bound=Callable[..., Any])
_Default = TypeVar("_Default")

# Return values that cannot be awaitables: the common case skips the awaitable check.
_PLAIN: Final = frozenset({str, int, float, bool, type(None), dict, list, tuple})


class ToolRegistry:
    """A dispatcher over named ``Tool``s, with an optional permission ``policy``.

    ``tools`` is an iterable of ``Tool``s or plain handlers, or a mapping of name
    to handler. ``policy`` sees a copy of every call whose arguments are valid
    and answers ``allow()``, ``deny(reason)`` or ``ask(reason)`` (or, an
    ``async def`` one, awaits it: in a run, under either driver); a tool's own
    policy is asked next. See the module docstring for the order of outcomes.
    ``dispatch`` runs plain handlers; ``adispatch`` (for the async driver) also
    awaits ``async def`` ones, and the synchronous driver awaits it for them
    (``dispatch_or_adispatch``). ``max_result_chars`` is the longest result a
    tool without a limit of its own gives the history (see ``Tool``).
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] | Mapping[str, Callable[..., Any]] = (),
        *,
        policy: Policy | None = None,
        max_result_chars: int | None = None,
    ) -> None:
        self.policy = policy
        #: The longest result (characters) a tool without its own ``max_result_chars`` gives
        #: the history; a longer one is cut, with a marker saying how much (None: no limit).
        self.max_result_chars = result_limit("max_result_chars", max_result_chars)
        self._tools: dict[str, Tool] = {}
        self._async_tools: list[str] = []
        if isinstance(tools, Mapping):
            for name, handler in tools.items():
                if isinstance(handler, Tool):
                    raise TypeError(
                        f"tool {name!r}: expected a callable handler, got a Tool, which names "
                        "itself: pass Tools as a list, tools=[Tool(...), ...]"
                    )
                self.add(Tool(handler, name=name))
        else:
            for tool in tools:
                self.add(tool)

    def __repr__(self) -> str:
        return f"ToolRegistry({sorted(self._tools)})"

    @property
    def policy(self) -> Policy | None:
        """The registry's policy, asked about every call before a tool's own."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy | None) -> None:
        if policy is not None and not callable(policy):
            raise TypeError(f"expected policy to be callable, got {type(policy).__name__}")
        #: The policy's parameter that takes the call's context, and the deps it names.
        self.policy_context = None if policy is None else context_of("the policy", policy)
        self._policy = policy

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    @overload
    def get(self, name: str) -> Tool | None: ...
    @overload
    def get(self, name: str, default: _Default) -> Tool | _Default: ...
    def get(self, name: str, default: object = None) -> object:
        """The tool named ``name``, or ``default`` (None) if there is none, as ``dict.get``."""
        return self._tools.get(name, default)

    def add(self, tool: Tool | Callable[..., Any]) -> Tool:
        """Register a ``Tool`` (or a handler, made into one); names are unique."""
        if not isinstance(tool, Tool):
            tool = Tool(tool)
        if tool.name in self._tools:
            raise ValueError(f"expected unique tool names, got {tool.name!r} twice")
        self._tools[tool.name] = tool
        if is_async(tool.handler):
            self._async_tools.append(tool.name)
        return tool

    def remove(self, name: str) -> Tool:
        """Take the tool named ``name`` out of the registry and return it (``KeyError`` if none).

        Between runs, or between a run's model steps (``agentloop.mcp`` refreshes
        a server's tools so): never while a batch runs.
        """
        tool = self._tools.pop(name, None)
        if tool is None:
            raise KeyError(f"expected the name of a tool in the registry, got {name!r}")
        if name in self._async_tools:
            self._async_tools.remove(name)
        return tool

    @property
    def async_tools(self) -> tuple[str, ...]:
        """The names of the tools whose handlers are ``async def``: the asyncio driver's."""
        return tuple(self._async_tools)

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
        max_result_chars: int | None = None,
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
        max_result_chars: int | None = None,
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
                    max_result_chars=max_result_chars,
                )
            )
            return fn

        if isinstance(handler, str):  # @registry.tool("plus"): the name meant as a keyword
            raise TypeError(
                f"expected @registry.tool or @registry.tool(name=...), got a str "
                f"positionally: write @registry.tool(name={handler!r:.60})"
            )
        return register if handler is None else register(handler)

    @property
    def has_policies(self) -> bool:
        """Whether any policy (the registry's, or a tool's) can be asked about a call."""
        return self.policy is not None or any(tool.policy is not None for tool in self)

    def review(self, call: dict[str, Any]) -> PreparedCall | dict[str, Any]:
        """What the policies answer about ``call``, asked once, before its batch runs.

        A ``PreparedCall``: the call checked and converted, with the policies'
        ``Decision`` (pass it on with ``dispatch(call, review=...)``). Or the
        outcome the call gets without running: ``unknown_tool``,
        ``invalid_arguments``, or, when a policy raised or answered something
        else, an ``error`` (it fails closed, and no policy is asked again).
        """
        return unawaited(self._reviewing(call))

    async def areview(self, call: dict[str, Any]) -> PreparedCall | dict[str, Any]:
        """``review`` for the async driver: an ``async def`` policy is awaited."""
        return await awaited(self._reviewing(call))

    def _reviewing(
        self, call: dict[str, Any]
    ) -> Generator[Awaitable[object], object, PreparedCall | dict[str, Any]]:
        """``review`` and ``areview``: the call prepared, then its policies asked (``_asking``)."""
        prepared = self._prepare(call)
        if isinstance(prepared, dict):
            return prepared
        answer = yield from self._asking(prepared[0], call)
        return answer if isinstance(answer, dict) else PreparedCall(*prepared, answer)

    def dispatch(
        self, call: dict[str, Any], *, review: object = None, decision: Decision | None = None
    ) -> dict[str, Any]:
        """Run ``call`` and return its outcome; never raises for an ``Exception``.

        ``review``: what ``review`` answered about this call (or a recorded
        ``Decision``); ``decision``: a person's decision about it, which wins.
        Without either, the policies are asked now.
        """
        ready = self._ready(call, review, decision)
        if isinstance(ready, dict):
            return ready
        tool, kwargs = ready
        if tool.context is not None:  # the call's context, set by the driver around it
            kwargs = {**kwargs, tool.context[0]: context_here()}
        try:
            value = tool.handler(**kwargs)
        except Exception as exc:  # noqa: BLE001 - a failing tool is an outcome
            return self._cut(tool, failed(exc))
        if type(value) not in _PLAIN and inspect.isawaitable(value):
            getattr(value, "close", lambda: None)()  # never awaited: say so, without a warning
            return failed(
                TypeError(
                    f"tool {tool.name!r} is async; run the loop with the async driver "
                    "(loop.arun or loop.astart), which awaits it"
                )
            )
        return self._cut(tool, returned(tool.name, value))

    def _cut(self, tool: Tool, outcome: dict[str, Any]) -> dict[str, Any]:
        """(context) The outcome, its content cut to the tool's (or the registry's) limit."""
        limit = tool.max_result_chars
        return cut_to(outcome, self.max_result_chars if limit is None else limit)

    def dispatch_or_adispatch(
        self, call: dict[str, Any], *, review: object = None, decision: Decision | None = None
    ) -> dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]:
        """``dispatch``, or, for a call of an ``async def`` tool, ``adispatch``'s coroutine.

        What the synchronous driver calls: it awaits the coroutine on the
        run's own event loop, so a plain tool's call costs what it always did.
        """
        if call["name"] in self._async_tools:
            return self.adispatch(call, review=review, decision=decision)
        return self.dispatch(call, review=review, decision=decision)

    async def adispatch(
        self,
        call: dict[str, Any],
        *,
        to_thread: bool = False,
        review: object = None,
        decision: Decision | None = None,
    ) -> dict[str, Any]:
        """``dispatch`` for the async driver: ``async def`` handlers and policies are awaited.

        A plain handler is called in the event loop's thread, or with
        ``to_thread=True`` in a worker thread (``asyncio.to_thread``).
        """
        if review is None and decision is None and self.has_policies:
            review = await self.areview(call)
        ready = self._ready(call, review, decision)
        if isinstance(ready, dict):
            return ready
        tool, kwargs = ready
        if tool.context is not None:  # the call's context, set by the driver around it
            kwargs = {**kwargs, tool.context[0]: context_here()}
        try:
            if to_thread and not inspect.iscoroutinefunction(tool.handler):
                value = await asyncio.to_thread(tool.handler, **kwargs)
            else:
                value = tool.handler(**kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 - a failing tool is an outcome
            return self._cut(tool, failed(exc))
        return self._cut(tool, returned(tool.name, value))

    def _ready(
        self, call: dict[str, Any], review: object, decision: Decision | None
    ) -> dict[str, Any] | tuple[Tool, dict[str, Any]]:
        """The tool and its arguments, or the outcome that stops the call, after its review."""
        if type(review) is PreparedCall:  # checked and converted at the review: not again
            stopped = stopped_by(review.decision if decision is None else decision)
            return (review.tool, review.kwargs) if stopped is None else stopped
        if isinstance(review, dict):  # known at the review: the call fails without running
            return review
        if decision is None and isinstance(review, Decision):
            decision = review  # as a durable run recorded it
        prepared = self._prepare(call)
        if isinstance(prepared, dict):
            return prepared
        if decision is None:
            if self.policy is None and prepared[0].policy is None:
                return prepared
            answer = unawaited(self._asking(prepared[0], call))
            if isinstance(answer, dict):
                return answer
            decision = answer
        stopped = stopped_by(decision)
        return prepared if stopped is None else stopped

    def _prepare(self, call: dict[str, Any]) -> dict[str, Any] | tuple[Tool, dict[str, Any]]:
        """The tool and its converted arguments, or the outcome that stops the call first."""
        try:
            name, arguments = call["name"], call["arguments"]
        except (KeyError, TypeError):  # a caller's own call, not one the engine handed out
            got = f"keys {sorted(call)}" if type(call) is dict else type(call).__name__
            raise TypeError(
                f"expected a call: a dict with 'name' and 'arguments', got {got}"
            ) from None
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(sorted(self._tools)) or "none"
            return {
                "status": "unknown_tool",
                "content": f"no tool named {name!r}; available: {available}",
            }
        if type(arguments) is str:
            return {"status": "invalid_arguments", "content": [not_an_object(arguments)]}
        if not tool._is_valid(arguments):  # one compiled check; the list only when it fails
            return {"status": "invalid_arguments", "content": tool.problems(arguments)}
        try:
            kwargs = arguments if tool._convert is None else tool._convert(arguments)
        except (TypeError, ValueError) as exc:  # e.g. an attrs or pydantic validator said no
            return {"status": "invalid_arguments", "content": refusals(exc)}
        except Exception as exc:  # noqa: BLE001 - a failing conversion is an outcome
            return failed(exc)
        return tool, kwargs

    def _asking(
        self, tool: Tool, call: dict[str, Any]
    ) -> Generator[Awaitable[object], object, Decision | dict[str, Any]]:
        """The policies' answer, together (``strictest_answer``); an awaitable one yielded.

        The registry's policy is asked first, and a failure or a denial
        is the answer (``leaves_open``): the tool's is not asked then. The async
        side awaits what is yielded (``awaited``); the plain side sends it
        back as it is (``unawaited``), and ``checked_answer`` fails the call
        closed, saying the policy needs the async driver.
        """
        answers = []
        asked: tuple[tuple[Policy | None, Context | None], ...] = (
            (self._policy, self.policy_context),
            (tool.policy, tool.policy_context),
        )
        for policy, context in asked:
            if policy is not None:
                answer = policy_answer(policy, call, context)
                if inspect.isawaitable(answer):
                    answer = yield answer
                answers.append(checked_answer(tool, answer))
                if not leaves_open(answers[-1]):
                    break
        return strictest_answer(answers)

    def specs(self, format: SpecFormat = "json-schema") -> list[dict[str, Any]]:
        """The tools described for a provider request (fresh JSON on every call).

        ``'openai'``: Chat Completions ``tools`` entries; ``'openai-responses'``:
        Responses-API function tools; ``'anthropic'``: Messages API ``tools``
        entries; ``'gemini'``: Gemini ``function_declarations`` entries;
        ``'json-schema'``: ``{'name', 'description', 'parameters'}``.
        The OpenAI formats say ``strict: false``: derived schemas have optional
        parameters, which strict mode forbids, and the registry validates anyway.
        """
        return build_specs(
            ((tool.name, tool.description, tool.parameters) for tool in self._tools.values()),
            format,
        )


def reviewing(dispatcher: object) -> ToolRegistry | None:
    """The registry whose policies review each batch before it runs, if it has any policy."""
    if isinstance(dispatcher, ToolRegistry) and dispatcher.has_policies:
        return dispatcher
    return None
