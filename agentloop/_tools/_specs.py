"""Tools described for a provider request: OpenAI (two APIs), Anthropic, or plain JSON Schema.

The OpenAI formats say ``strict: false``: derived schemas have optional
parameters and defaults, which strict mode forbids, and the registry validates
every call itself. An empty description is left out rather than sent as ``""``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["SpecFormat", "build_specs"]

SpecFormat = Literal["openai", "openai-responses", "anthropic", "json-schema"]

# What a provider accepts as a tool name (OpenAI and Anthropic agree).
_PROVIDER_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _described(entry: dict[str, Any], description: str) -> dict[str, Any]:
    return {**entry, "description": description} if description else entry


_BUILDERS: Final[dict[str, Callable[[str, str, dict[str, Any]], dict[str, Any]]]] = {
    "json-schema": lambda name, description, schema: {
        "name": name,
        "description": description,
        "parameters": schema,
    },
    "openai": lambda name, description, schema: {
        "type": "function",
        "function": {
            **_described({"name": name}, description),
            "parameters": schema,
            "strict": False,
        },
    },
    "openai-responses": lambda name, description, schema: {
        "type": "function",
        **_described({"name": name}, description),
        "parameters": schema,
        "strict": False,
    },
    "anthropic": lambda name, description, schema: {
        **_described({"name": name}, description),
        "input_schema": schema,
    },
}


def build_specs(
    tools: Iterable[tuple[str, str, dict[str, Any]]], format: SpecFormat
) -> list[dict[str, Any]]:
    """One entry per ``(name, description, parameters)`` in ``format``.

    ``ValueError`` for an unknown format, or a name a provider would refuse.
    """
    build = _BUILDERS.get(format)
    if build is None:
        raise ValueError(f"expected format to be one of {sorted(_BUILDERS)}, got {format!r}")
    specs = []
    for name, description, parameters in tools:
        if format != "json-schema" and not _PROVIDER_NAME.fullmatch(name):
            raise ValueError(
                f"tool {name!r}: {format} tool names must match "
                f"{_PROVIDER_NAME.pattern}; give the tool a name= that does"
            )
        specs.append(build(name, description, parameters))
    return specs
