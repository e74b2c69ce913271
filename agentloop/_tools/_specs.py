"""Tools described for a provider request: OpenAI (two APIs), Anthropic, Gemini, or JSON Schema.

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

SpecFormat = Literal["openai", "openai-responses", "anthropic", "gemini", "json-schema"]

# What each provider accepts as a tool name (OpenAI and Anthropic agree; Gemini's
# FunctionDeclaration.name starts with a letter or an underscore, and takes dots and colons).
_OPENAI_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NAMES: Final = {
    "openai": _OPENAI_NAME,
    "openai-responses": _OPENAI_NAME,
    "anthropic": _OPENAI_NAME,
    "gemini": re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}"),
}


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
    # JSON Schema as it is: Gemini's OpenAPI-subset `parameters` refuses additionalProperties.
    "gemini": lambda name, description, schema: {
        **_described({"name": name}, description),
        "parameters_json_schema": schema,
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
    rule = _NAMES.get(format)
    for name, description, parameters in tools:
        if rule is not None and not rule.fullmatch(name):
            raise ValueError(
                f"tool {name!r}: {format} tool names must match "
                f"{rule.pattern}; give the tool a name= that does"
            )
        specs.append(build(name, description, parameters))
    return specs
