"""What a ``Loop`` is given, checked and read: its arguments, run ids, the system prompt, tools.

And what a synchronous run of it refuses: what only the asyncio driver can do.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final, TypedDict

from agentloop._core.context_policy import ContextPolicy
from agentloop._core.messages import check_new_input
from agentloop._core.retry_policy import RetryPolicy, checked_retry
from agentloop._core.values import OnExhausted
from agentloop._drivers.callbacks import is_async
from agentloop._durable.protocol import Ledger
from agentloop._tools.registry import ToolRegistry, reviewing
from agentloop._tools.specs import NameRule

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from agentloop._drivers.callbacks import Listener, Model
    from agentloop._loop.team import Handoff

__all__ = [
    "DEFAULT",
    "DEFAULT_CONCURRENCY",
    "AnyOptions",
    "Default",
    "LoopOptions",
    "async_policies",
    "asyncio_only",
    "checked_bool",
    "checked_context",
    "checked_ledger",
    "checked_listeners",
    "checked_model",
    "checked_name",
    "checked_retry",
    "checked_system",
    "checked_tool_names",
    "concurrency",
    "default_retry",
    "for_sync_driver",
    "name_rules",
    "no_ledger",
    "run_input",
    "single_attempts",
    "specs_of",
    "timeout",
    "timeout_bites",
    "with_system",
]

_CANNOT_AWAIT: Final = "that driver cannot await it"
#: How many calls of a batch the asyncio driver runs at once unless told.
DEFAULT_CONCURRENCY: Final = 10


class Default:
    """``retry=`` not given: on for the provider adapters, off for plain callbacks."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = Default()


class LoopOptions(TypedDict, total=False):
    """``Loop``'s keywords other than ``output``, for its overloads (``**options``).

    The overloads choose the Loop's output type from ``output=``; these are
    checked as the implementation's own keywords (its defaults are theirs).
    """

    tools: object
    system: str | None
    max_steps: int
    max_calls: int
    max_total_tokens: int | None
    listeners: Iterable[Listener]
    model_timeout: float | None
    tool_timeout: float | None
    to_thread: bool
    max_concurrency: int | None
    ledger: Ledger | None
    context: ContextPolicy | None
    retry: RetryPolicy | None
    max_output_retries: int
    output_validators: Iterable[Callable[..., Any]]
    on_exhausted: OnExhausted
    max_identical_calls: int | None
    owns: Iterable[object]
    name: str | None
    #: Checked at ``Loop(...)``: every agent of a team has the Loop's output and deps types.
    handoffs: Iterable[Handoff[Any]]


class AnyOptions(LoopOptions, total=False):
    """``LoopOptions`` and a ``deps_type`` of any kind: for an output that is not a class."""

    deps_type: object


def with_system(system: str, messages: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A new run's input, led by the Loop's system prompt (once: a transcript has it)."""
    prompt = {"kind": "system", "text": system}
    if isinstance(messages, str):
        return [prompt, {"kind": "user", "text": messages}]
    if messages and messages[0].get("kind") == "system":
        if messages[0] == prompt:
            return messages
        raise ValueError(
            f"expected the input to start with this Loop's system prompt or with no system "
            f"message (Loop(system=...) puts {system!r:.60} first), got another: "
            f"{messages[0].get('text')!r:.60}"
        )
    return [prompt, *messages]


def checked_context(context: object) -> ContextPolicy | None:
    """A Loop's ``context=``: a policy of ``agentloop.context``, or None."""
    if context is None:
        return None
    if type(context) is not ContextPolicy:
        raise TypeError(
            "expected context to be agentloop.context.keep_last(tokens=...) or "
            f"summarise(model, tokens=...), or None, got {type(context).__name__}"
        )
    return context


def no_ledger(run_id: object, given: str = "run_id=") -> None:
    """Refuse a run id (``given`` says where it was given) on a Loop without a ledger."""
    if run_id is not None:
        raise ValueError(
            f"{given} names a run in a ledger, and this Loop has none: make it with "
            "ledger=agentloop.ledger.SQLiteLedger('runs.db') (or another Ledger)"
        )


def timeout(name: str, value: object) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float):
        raise TypeError(
            f"{name} must be a positive number of seconds or None, got {type(value).__name__}"
        )
    if not 0 < value < float("inf"):  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r:.40}")
    return float(value)  # type: ignore[arg-type]


def specs_of(dispatcher: object) -> Callable[[], list[dict[str, Any]]]:
    """What gives the tools' specs for each request: a registry's (or a dispatcher's) ``specs``."""
    specs = getattr(dispatcher, "specs", None)
    return specs if callable(specs) else list


def async_policies(registry: ToolRegistry) -> bool:
    """Whether any of the registry's policies is ``async def``."""
    return any(is_async(policy) for policy in (registry.policy, *(t.policy for t in registry)))


def checked_model(model: object) -> None:
    """A Loop's model: a callable taking the history (a fallback chain is checked apart)."""
    if not callable(model):
        raise TypeError(
            f"expected model to be a callable taking the history, got {type(model).__name__}"
        )
    if isinstance(model, type):  # callable, but calling it makes an instance, not a reply
        raise TypeError(
            f"expected model to be a callable taking the history, got the class "
            f"{model.__name__}: pass an instance of it"
        )


def default_retry(models: tuple[Model, ...]) -> RetryPolicy | None:
    """``retry=`` not given: ``RetryPolicy()`` for the provider adapters' models, else none."""
    adapters = all(getattr(one, "agentloop_retry", False) is True for one in models)
    return RetryPolicy() if adapters else None


def name_rules(models: tuple[Model, ...]) -> tuple[NameRule, ...]:
    """The tool-name rules of the models' providers, each once (an adapter declares its own)."""
    declared = (getattr(one, "agentloop_tool_names", None) for one in models)
    return tuple(dict.fromkeys(rule for rule in declared if isinstance(rule, NameRule)))


def checked_tool_names(rules: tuple[NameRule, ...], dispatcher: object) -> None:
    """Refuse a registry's tool whose name a model's provider refuses: now, not at a request.

    Read when the Loop is made and at every run: tools may be added to its
    registry since (an MCP server's, when ``with loop:`` opens it). A
    dispatcher of one's own is checked by the adapter, at each request.
    """
    if not rules or not isinstance(dispatcher, ToolRegistry):
        return
    for tool in dispatcher:
        for rule in rules:
            refused = rule.refusal(tool.name)
            if refused is not None:
                raise ValueError(refused)


def single_attempts(models: tuple[Model, ...]) -> tuple[Model, ...]:
    """The models, each adapter's over its SDK client with the client's own retries off.

    For a Loop that retries: its policy is then the one layer that retries, and
    every attempt is a step in the record (an adapter offers the model as
    ``agentloop_single_attempt()``; any other model is as it is).
    """
    made = (getattr(one, "agentloop_single_attempt", None) for one in models)
    return tuple(
        single() if callable(single) else one for one, single in zip(models, made, strict=True)
    )


def checked_listeners(listeners: Iterable[Listener]) -> tuple[Listener, ...]:
    """A Loop's ``listeners=``: an iterable of callables (not one callable, not a string)."""
    if callable(listeners) or isinstance(listeners, str | bytes):
        raise TypeError(
            "expected listeners to be an iterable of callables (say [listener]), "
            f"got {type(listeners).__name__}"
        )
    checked = tuple(listeners)
    for index, listener in enumerate(checked):
        if not callable(listener):
            raise TypeError(
                f"expected listeners[{index}] to be callable, got {type(listener).__name__}"
            )
        if isinstance(listener, type):
            raise TypeError(
                f"expected listeners[{index}] to be callable with a transition, got the class "
                f"{listener.__name__}: pass an instance of it"
            )
    return checked


def checked_bool(name: str, value: object) -> bool:
    """A Loop's flag (``to_thread=``): a bool, not merely truthy."""
    if type(value) is not bool:
        raise TypeError(f"expected {name} to be a bool, got {type(value).__name__}")
    return value


def checked_system(system: object) -> str | None:
    """A Loop's ``system=``: the system prompt, a str, or None."""
    if system is not None and type(system) is not str:
        raise TypeError(f"expected system to be a str or None, got {type(system).__name__}")
    return system


def concurrency(max_concurrency: object) -> int:
    """A Loop's ``max_concurrency=``: an int of 1 or more, ``DEFAULT_CONCURRENCY`` if None."""
    if max_concurrency is None:  # the default: no refusal from the synchronous driver
        return DEFAULT_CONCURRENCY
    if type(max_concurrency) is not int:
        raise TypeError(
            f"expected max_concurrency to be an int of 1 or more, got "
            f"{type(max_concurrency).__name__}"
        )
    if max_concurrency < 1:
        raise ValueError(
            f"expected max_concurrency to be an int of 1 or more, got {max_concurrency}"
        )
    return max_concurrency


def checked_ledger(ledger: object) -> Ledger | None:
    """A Loop's ``ledger=``: a ``Ledger``, or None."""
    if isinstance(ledger, type):  # the class passes the protocol check: say what to do
        raise TypeError(
            f"expected ledger to be a Ledger, got the class {ledger.__name__}: make one "
            "(say agentloop.ledger.SQLiteLedger('runs.db'))"
        )
    if ledger is not None and not isinstance(ledger, Ledger):
        raise TypeError(
            "expected ledger to be a Ledger (say agentloop.ledger.SQLiteLedger('runs.db')), "
            f"got {type(ledger).__name__}"
        )
    return ledger


def asyncio_only(
    model: Model,
    model_timeout: float | None,
    tool_timeout: float | None,
    to_thread: bool,
    max_concurrency: int | None,
) -> list[tuple[str, str, bool]]:
    """What only the asyncio driver can do of a Loop's settings: (name, why, awaits) each.

    ``awaits``: refused only where there is no event loop of the run's own (DBOS).
    """
    cannot_interrupt = "that driver cannot interrupt a call"
    return [
        (name, why, awaits)
        for name, value, why, awaits in (
            ("an async model", is_async(model) or None, _CANNOT_AWAIT, True),
            ("model_timeout", model_timeout, cannot_interrupt, True),
            ("tool_timeout", tool_timeout, cannot_interrupt, True),
            (
                "to_thread",
                to_thread or None,
                "a synchronous run runs tools in place",
                False,
            ),
            (
                "max_concurrency > 1",
                max_concurrency if (max_concurrency or 1) > 1 else None,
                "a synchronous run runs one call at a time",
                False,
            ),
        )
        if value is not None
    ]


def timeout_bites(dispatcher: object, tool_timeout: float | None, to_thread: bool) -> None:
    """Refuse a ``tool_timeout`` that a registry's plain tool would run past unseen.

    A timeout interrupts an await: an ``async def`` tool's, or a plain tool's
    in a worker thread (``to_thread``, under asyncio). A plain tool called in
    place runs to its end whatever the clock says, so a timeout over it would
    be ignored: it is refused instead, naming the tools and the ways out.
    Read when the Loop is made and again for every run (tools may be added).
    """
    if tool_timeout is None or to_thread or not isinstance(dispatcher, ToolRegistry):
        return
    awaited = dispatcher.async_tools
    plain = [tool.name for tool in dispatcher if tool.name not in awaited]
    if plain:
        names = ", ".join(repr(name) for name in plain)
        tools = "the plain tool" if len(plain) == 1 else "the plain tools"
        raise ValueError(
            f"tool_timeout={tool_timeout} cannot interrupt {tools} {names}: a plain function "
            "runs to its end in the thread that calls it; make it async def, or pass "
            "to_thread=True and run the loop with loop.arun (or astart), which runs it in a "
            "worker thread"
        )


def for_sync_driver(
    asyncio_only: list[tuple[str, str, bool]],
    dispatcher: object,
    instead: str,
    *,
    awaits: bool = False,
) -> ToolRegistry | None:
    """Refuse what needs the asyncio driver; the registry whose policies review, if any.

    ``asyncio_only``: the Loop's settings that need it (``asyncio_only()``);
    async policies and async tools are added here. ``awaits``: the run awaits
    async callables on an event loop of its own (``Run``; a DBOS workflow does
    not), which it cannot do inside a running one. Read on every run, not when
    the Loop is made: tools may be added to its registry since. The run made
    next takes this answer.
    """
    registry = reviewing(dispatcher)
    if registry is not None and async_policies(registry):
        asyncio_only = [*asyncio_only, ("an async policy", _CANNOT_AWAIT, True)]
    tools = dispatcher.async_tools if isinstance(dispatcher, ToolRegistry) else ()
    if tools:
        asyncio_only = [
            *asyncio_only,
            *((f"the async tool {n!r}", _CANNOT_AWAIT, True) for n in tools),
        ]
    if awaits and asyncio_only:
        awaited = [name for name, why, _ in asyncio_only if why == _CANNOT_AWAIT]
        if awaited and asyncio._get_running_loop() is not None:
            names = " and ".join(awaited)
            raise RuntimeError(
                f"{names} cannot be awaited by a synchronous run inside a running event "
                f"loop (its thread's loop would stall): in async code, use {instead}"
            )
        asyncio_only = [entry for entry in asyncio_only if not entry[2]]
    if asyncio_only:
        needs = "needs" if len(asyncio_only) == 1 else "need"
        names = " and ".join(name for name, _, _ in asyncio_only)
        reasons = "; ".join(dict.fromkeys(why for _, why, _ in asyncio_only))
        raise ValueError(f"{names} {needs} the asyncio driver ({instead}): {reasons}")
    return registry


def run_input(
    system: str | None, messages: str | list[dict[str, Any]]
) -> str | list[dict[str, Any]]:
    """A new run's input, checked, and led by the system prompt if the Loop has one."""
    check_new_input(messages)
    return messages if system is None else with_system(system, messages)


def checked_name(name: object) -> str:
    """A Loop's ``name=``: a non-empty str of letters, digits, ``_`` and ``-`` (a tool name's)."""
    if type(name) is not str or not name or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(
            f"expected name to be a non-empty str of letters, digits, _ and -, got {name!r:.80}"
        )
    return name
