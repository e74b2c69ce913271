"""Tool arguments checked against their JSON Schema with ``jsonschema-rs``.

A tool's validator is compiled once, when the tool is defined, from the very
schema the model is shown (``$ref`` and ``$defs`` as they are), under the
dialect its ``$schema`` declares: Draft 4, 6, 7, 2019-09 or 2020-12, and
2020-12 when it declares none (as JSON Schema and MCP say). A tuple is
``items: [...]`` in Draft 7 and ``prefixItems`` in 2020-12: each schema is
read by its own rules. One rule is
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

from agentloop._core.json import copy_json
from agentloop._core.output_schema import instance_path
from agentloop._tools.results import INT_MAX, INT_MIN

__all__ = [
    "DIALECTS",
    "LATEST",
    "ArgumentsValidator",
    "bounded",
    "checked_schema",
    "dialect",
    "out_of_range",
]

#: The dialects jsonschema-rs compiles, by its validator class, as the errors name them.
DIALECTS: Final = {
    jsonschema_rs.Draft4Validator: "Draft 4",
    jsonschema_rs.Draft6Validator: "Draft 6",
    jsonschema_rs.Draft7Validator: "Draft 7",
    jsonschema_rs.Draft201909Validator: "Draft 2019-09",
    jsonschema_rs.Draft202012Validator: "Draft 2020-12",
}
#: What a schema without ``$schema`` is read as (JSON Schema's default, and MCP's).
LATEST: Final = DIALECTS[jsonschema_rs.Draft202012Validator]

# Keywords of a derived schema that hold schemas (the others hold data: enum, default).
_ONE: Final = ("items", "additionalProperties")
_MANY: Final = ("prefixItems", "anyOf")
_NAMED: Final = ("properties", "$defs")


class ArgumentsValidator:
    """A compiled validator for one tool's arguments, in the dialect its schema declares.

    ``derived=True`` (a schema derived from annotations) adds the 64-bit bounds
    to every ``integer`` (see the module); a given schema is compiled as is.
    """

    __slots__ = ("_derived", "_validator", "is_valid")

    def __init__(self, schema: dict[str, Any], *, derived: bool) -> None:
        compiled = _bounded(schema) if derived else schema
        # offline: a $ref to a URL is refused when compiled, never fetched at call time.
        self._validator = jsonschema_rs.validator_for(compiled, offline=True)
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

    It must be plain JSON, valid in the dialect it declares (``dialect``),
    with every ``$ref`` resolving inside it, and describe an object.
    """
    if not isinstance(parameters, Mapping):
        raise TypeError(
            f"tool {name!r}: expected parameters to be a JSON Schema as a dict, "
            f"got {type(parameters).__name__}"
        )
    try:
        schema = copy_json(dict(parameters), "parameters")
    except (TypeError, ValueError) as exc:  # JSONError
        raise TypeError(f"tool {name!r}: expected parameters to be JSON, but {exc}") from None
    declared = dialect(schema)
    if declared is None:
        raise TypeError(
            f"tool {name!r}: expected parameters' $schema to name a dialect agentloop "
            f"validates ({', '.join(DIALECTS.values())}; none means 2020-12), "
            f"got {schema['$schema']!r:.100}"
        )
    try:
        jsonschema_rs.validator_for(schema, offline=True)
    except ValueError as exc:  # jsonschema_rs.ValidationError
        message = str(getattr(exc, "message", exc)).split("\n", 1)[0]
        raise TypeError(
            f"tool {name!r}: expected parameters to be a {declared} JSON Schema, but {message}"
        ) from None
    if schema.get("type") != "object":
        raise TypeError(
            f"tool {name!r}: expected parameters to describe an object "
            f"({{'type': 'object', ...}}), got type {schema.get('type')!r}"
        )
    return schema  # type: ignore[no-any-return]


def dialect(schema: Mapping[str, Any]) -> str | None:
    """The JSON Schema dialect ``schema`` declares (``Draft 7``), or None for one not known here.

    Without ``$schema`` it is Draft 2020-12, MCP's default as JSON Schema's.
    """
    if "$schema" not in schema:
        return LATEST
    try:  # the $schema alone: a dialect jsonschema-rs does not know is refused
        validator = jsonschema_rs.validator_for({"$schema": schema["$schema"]}, offline=True)
    except ValueError:
        return None
    return DIALECTS.get(type(validator))
