"""Tool arguments checked against their Draft 2020-12 schema with ``jsonschema-rs``.

A tool's validator is compiled once, when the tool is defined, from the very
schema the model is shown (``$ref`` and ``$defs`` as they are). Every
violation is reported, each as ``{'path', 'message'}`` with the path written
``place.city``, ``tags[2]``, or ``''`` for the top level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jsonschema_rs

from agentloop._core._json import copy_json

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ArgumentsValidator", "checked_schema"]


class ArgumentsValidator:
    """A compiled Draft 2020-12 validator for one tool's arguments."""

    __slots__ = ("_validator", "is_valid")

    def __init__(self, schema: dict[str, Any]) -> None:
        # offline: a $ref to a URL is refused when compiled, never fetched at call time.
        self._validator = jsonschema_rs.Draft202012Validator(schema, offline=True)
        #: True when the value breaks no rule; stops at the first violation.
        self.is_valid = self._validator.is_valid

    def problems(self, instance: Any) -> list[dict[str, str]]:
        """Every way ``instance`` breaks the schema, as ``{'path', 'message'}`` (``[]``: none)."""
        if self.is_valid(instance):
            return []
        return [
            {"path": _path(error.instance_path), "message": error.message}
            for error in self._validator.iter_errors(instance)
        ]


def _path(parts: Iterable[str | int]) -> str:
    """``point.tags[2]`` for an error at ``['point', 'tags', 2]``; ``''`` for the top."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def checked_schema(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a given ``parameters`` schema, or ``TypeError`` saying what is wrong with it.

    It must be plain JSON, a valid Draft 2020-12 schema whose every ``$ref``
    resolves inside it, and describe an object.
    """
    try:
        schema = copy_json(dict(parameters), "parameters")
        jsonschema_rs.Draft202012Validator(schema, offline=True)
    except (TypeError, ValueError) as exc:  # JSONError, or jsonschema_rs.ValidationError
        message = str(getattr(exc, "message", exc)).split("\n", 1)[0]
        raise TypeError(
            f"tool {name!r}: expected parameters to be a Draft 2020-12 JSON Schema, but {message}"
        ) from None
    if schema.get("type") != "object":
        raise TypeError(
            f"tool {name!r}: expected parameters to describe an object "
            f"({{'type': 'object', ...}}), got type {schema.get('type')!r}"
        )
    return schema  # type: ignore[no-any-return]
