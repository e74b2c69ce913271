"""What a ``Loop`` is given, checked and read: timeouts, run ids, the system prompt, tools."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop._callbacks import is_async
from agentloop._core._context import ContextPolicy

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._tools._registry import ToolRegistry

__all__ = ["async_policies", "checked_context", "no_ledger", "specs_of", "timeout", "with_system"]


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


def no_ledger(run_id: object) -> None:
    if run_id is not None:
        raise ValueError(
            "run_id= names a run in a ledger, and this Loop has none: make it with "
            "ledger=agentloop.SQLiteLedger('runs.db') (or another Ledger)"
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
