"""Tool arguments checked against their Draft 2020-12 schema with ``jsonschema-rs``.

A tool's validator is compiled once, when the tool is defined, from the very
schema the model is shown (``$ref`` and ``$defs`` as they are). One rule is
added for schemas derived from annotations: an ``integer`` must lie within
64 bits, from ``-2**63`` to ``2**64 - 1`` (what ``orjson``, and so a run's
record, can hold). JSON allows ``1e300`` and Draft 2020-12 counts it as an
integer, but a handler asking for an ``int`` would get a 301-digit one. The
bounds are compiled in, not published: they would add two 20-digit numbers
to every integer in every request.

Every violation is reported, each as ``{'path', 'message'}`` with the path
written ``place.city``, ``tags[2]``, or ``''`` for the top level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import jsonschema_rs

from agentloop._core._json import copy_json
from agentloop._core._output import instance_path
from agentloop._tools._results import INT_MAX, INT_MIN

__all__ = ["ArgumentsValidator", "bounded", "checked_schema", "out_of_range"]

# Keywords of a derived schema that hold schemas (the others hold data: enum, default).
_ONE: Final = ("items", "additionalProperties")
_MANY: Final = ("prefixItems", "anyOf")
_NAMED: Final = ("properties", "$defs")


class ArgumentsValidator:
    """A compiled Draft 2020-12 validator for one tool's arguments.

    ``derived=True`` (a schema derived from annotations) adds the 64-bit bounds
    to every ``integer`` (see the module); a given schema is compiled as is.
    """

    __slots__ = ("_derived", "_validator", "is_valid")

    def __init__(self, schema: dict[str, Any], *, derived: bool) -> None:
        compiled = _bounded(schema) if derived else schema
        # offline: a $ref to a URL is refused when compiled, never fetched at call time.
        self._validator = jsonschema_rs.Draft202012Validator(compiled, offline=True)
        self._derived = derived
        #: True when the value breaks no rule; stops at the first violation.
        self.is_valid = self._validator.is_valid

    def problems(self, instance: Any) -> list[dict[str, str]]:
        """Every way ``instance`` breaks the schema, as ``{'path', 'message'}`` (``[]``: none)."""
        if self.is_valid(instance):
            return []
        return [
            {"path": instance_path(error.instance_path), "message": self._message(error)}
            for error in self._validator.iter_errors(instance)
        ]

    def _message(self, error: jsonschema_rs.ValidationError) -> str:
        # A number past 64 bits broke the bounds a derived schema's integers get.
        value = error.instance
        if (
            self._derived
            and error.schema_path[-1] in ("minimum", "maximum")
            and type(value) in (int, float)
            and not INT_MIN <= value <= INT_MAX  # type: ignore[operator]
        ):
            return out_of_range(value)  # type: ignore[arg-type]
        return error.message


def out_of_range(value: float) -> str:
    """What is wrong with a number given for an ``int`` outside the 64-bit range."""
    # An int's size in bits: str() of one past 4,300 digits raises.
    shown = f"an integer of {value.bit_length()} bits" if type(value) is int else f"{value!r:.40}"
    return f"expected an integer within 64 bits ({INT_MIN} to {INT_MAX}), got {shown}"


def _bounded(node: Any) -> Any:
    """A derived schema with the 64-bit bounds on every ``integer`` that is not an ``enum``."""
    if not isinstance(node, dict):
        return node
    out = dict(node)
    kinds = node.get("type")
    is_integer = kinds == "integer" or (
        isinstance(kinds, list) and "integer" in kinds and "number" not in kinds
    )
    if is_integer and "enum" not in node:  # an enum's integers were checked at definition
        # The tighter of each: a parameter's own bound (Annotated[int, Ge(0)]), or 64 bits.
        out["minimum"] = max(node.get("minimum", INT_MIN), INT_MIN)
        out["maximum"] = min(node.get("maximum", INT_MAX), INT_MAX)
    for key in _ONE:
        if key in node:
            out[key] = _bounded(node[key])
    for key in _MANY:
        if key in node:
            out[key] = [_bounded(item) for item in node[key]]
    for key in _NAMED:
        if key in node:
            out[key] = {name: _bounded(item) for name, item in node[key].items()}
    return out


def bounded(schema: dict[str, Any]) -> dict[str, Any]:
    """A derived schema with the 64-bit bounds on its integers, as its validator checks it."""
    return _bounded(schema)  # type: ignore[no-any-return]


def checked_schema(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a given ``parameters`` schema, or ``TypeError`` saying what is wrong with it.

    It must be plain JSON, a valid Draft 2020-12 schema whose every ``$ref``
    resolves inside it, and describe an object.
    """
    if not isinstance(parameters, Mapping):
        raise TypeError(
            f"tool {name!r}: expected parameters to be a JSON Schema as a dict, "
            f"got {type(parameters).__name__}"
        )
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
