"""Tool arguments checked against their Draft 2020-12 schema with ``jsonschema``.

A tool's validator is compiled once, when the tool is defined. Every
violation is reported, each as ``{'path', 'message'}`` with the path written
``place.city``, ``tags[2]``, or ``''`` for the top level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jsonschema

from agentloop._core._json import copy_json
from agentloop._errors import JSONError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ArgumentsValidator", "checked_schema"]


class ArgumentsValidator:
    """A compiled Draft 2020-12 validator for one tool's arguments.

    A schema derived from annotations (``derived=True``) is compiled with its
    ``$defs`` inlined, which validates faster with the same errors and paths.
    """

    __slots__ = ("_validator", "is_valid")

    def __init__(self, schema: dict[str, Any], *, derived: bool) -> None:
        compiled = _inlined(schema) if derived else schema
        self._validator = jsonschema.Draft202012Validator(compiled)
        #: True when the value breaks no rule.
        self.is_valid = self._validator.is_valid

    def problems(self, instance: Any) -> list[dict[str, str]]:
        """Every way ``instance`` breaks the schema, as ``{'path', 'message'}`` (``[]``: none)."""
        return [
            {"path": _path(error.absolute_path), "message": error.message}
            for error in self._validator.iter_errors(instance)
        ]


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A derived schema with every non-recursive ``$ref`` replaced by its definition.

    ``jsonschema`` resolves a ``$ref`` on every validation, which costs more
    than checking the referenced schema itself. A class that contains itself
    keeps its ``$ref`` (and ``$defs`` stays for it).
    """
    defs = schema.get("$defs", {})

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                siblings = {k: v for k, v in node.items() if k != "$ref"}
                return {**walk(defs[name], (*seen, name)), **siblings}
        out = dict(node)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                out[key] = walk(node[key], seen)
        for key in ("anyOf", "prefixItems"):
            if key in node:
                out[key] = [walk(item, seen) for item in node[key]]
        if "properties" in node:
            out["properties"] = {k: walk(v, seen) for k, v in node["properties"].items()}
        return out

    return {**walk(schema, ()), "$defs": defs} if defs else schema


def _path(parts: Iterable[str | int]) -> str:
    """``point.tags[2]`` for an error at ``['point', 'tags', 2]``; ``''`` for the top."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def checked_schema(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a given ``parameters`` schema, or ``TypeError`` saying what is wrong with it.

    It must be plain JSON, a valid Draft 2020-12 schema, and describe an object.
    """
    try:
        schema = copy_json(dict(parameters), "parameters")
        jsonschema.Draft202012Validator.check_schema(schema)
    except (TypeError, JSONError, jsonschema.SchemaError) as exc:
        message = exc.message if isinstance(exc, jsonschema.SchemaError) else str(exc)
        raise TypeError(
            f"tool {name!r}: expected parameters to be a Draft 2020-12 JSON Schema, but {message}"
        ) from None
    if schema.get("type") != "object":
        raise TypeError(
            f"tool {name!r}: expected parameters to describe an object "
            f"({{'type': 'object', ...}}), got type {schema.get('type')!r}"
        )
    return schema  # type: ignore[no-any-return]
