"""Tools described for a provider request: OpenAI (two APIs), Anthropic, Gemini, or JSON Schema.

The OpenAI formats say ``strict: false``: derived schemas have optional
parameters and defaults, which strict mode forbids, and the registry validates
every call itself. An empty description is left out rather than sent as ``""``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["PROVIDER_NAMES", "NameRule", "SpecFormat", "build_specs"]

SpecFormat = Literal["openai", "openai-responses", "anthropic", "gemini", "json-schema"]


def _compiled(pattern: str | re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(pattern)


@attrs.frozen
class NameRule:
    """What a provider accepts as a tool name: ``pattern``, matched in full, and in words.

    An adapter declares its provider's rule (``make_model``'s ``names``), so that
    a ``Loop`` made with it refuses a tool it would send with a name the provider
    refuses, naming the rule, before any request.
    """

    #: Whose rule it is, as a message names it (``'OpenAI'``).
    provider: str
    #: The provider's documented rule, as a regular expression matched in full.
    pattern: re.Pattern[str] = attrs.field(converter=_compiled)
    #: The rule in words (``"letters, digits, '_' and '-', at most 64"``).
    said: str

    def refusal(self, name: str) -> str | None:
        """Why the provider refuses ``name`` (the tool named, the rule and the fix), or None."""
        if self.pattern.fullmatch(name):
            return None
        fitting = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]
        instead = f", say name={fitting!r}" if self.pattern.fullmatch(fitting) else ""
        return (
            f"tool {name!r}: {self.provider} refuses it as a tool name: a name must match "
            f"^{self.pattern.pattern}$ ({self.said}); give the tool a name= that does{instead}"
        )


# OpenAI: "a-z, A-Z, 0-9, or contain underscores and dashes, with a maximum length of 64"
# (the SDK's FunctionDefinition.name); Anthropic: ^[a-zA-Z0-9_-]{1,64}$ (its tool schema).
_RULE, _WORDS = r"[a-zA-Z0-9_-]{1,64}", "letters, digits, '_' and '-', 1 to 64 of them"
_OPENAI: Final = NameRule("OpenAI", _RULE, _WORDS)
#: Each provider format's rule for tool names.
PROVIDER_NAMES: Final[dict[str, NameRule]] = {
    "openai": _OPENAI,
    "openai-responses": _OPENAI,
    "anthropic": NameRule("Anthropic", _RULE, _WORDS),
    # Gemini: "Must start with a letter or an underscore. Must be a-z, A-Z, 0-9, or contain
    # underscores, dots, colons and dashes, with a maximum length of 128" (FunctionDeclaration).
    "gemini": NameRule(
        "Gemini",
        r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}",
        "a letter or '_' first, then letters, digits, '_', '.', ':' and '-', 1 to 128 of them",
    ),
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

    ``ValueError`` for an unknown format, or a name its provider refuses
    (``PROVIDER_NAMES``).
    """
    build = _BUILDERS.get(format)
    if build is None:
        raise ValueError(f"expected format to be one of {sorted(_BUILDERS)}, got {format!r}")
    rule = PROVIDER_NAMES.get(format)
    specs = []
    for name, description, parameters in tools:
        refused = None if rule is None else rule.refusal(name)
        if refused is not None:
            raise ValueError(refused)
        specs.append(build(name, description, parameters))
    return specs
