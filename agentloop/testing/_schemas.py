"""Values drawn from a JSON Schema, and the ways to break them: what the strategies build on.

A small generator written for the subset of Draft 2020-12 the registry
derives: ``type`` (one or a list), ``enum``, ``const``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``prefixItems``,
``minItems``/``maxItems``, ``anyOf``, ``$ref`` into ``$defs``, and
``minimum``/``maximum`` (also exclusive), ``minLength``/``maxLength``, an
integer ``multipleOf`` and ``pattern`` (a regular expression the text
contains, Python's dialect), as ``Annotated`` constraints and hand-written
schemas give them, and ``format``: a string of ``date-time``, ``date``,
``time`` or ``uuid`` is drawn in that format (the registry's dates, times and
UUIDs), any other format is plain text (Draft 2020-12 asserts none);
annotations (``description``, ``default``, ``title``, ...) are ignored. Any
other keyword raises ``UnsupportedSchema`` when the strategy is built, naming
it and where it is.
"""

from __future__ import annotations

import datetime
import math
from typing import TYPE_CHECKING, Any, Final

import jsonschema_rs
from hypothesis import strategies as st

from agentloop._tools.registry import Tool
from agentloop._tools.validation import LATEST, dialect
from agentloop.testing._draw import (
    ANNOTATIONS,
    EXACT,
    INT_MAX,
    INT_MIN,
    KEYWORDS,
    MAX_ITEMS,
    MAX_TEXT,
    TYPES,
    Break,
    Schema,
    UnsupportedSchema,
    any_json,
    arrays,
    kind_of,
    longer,
    objects,
    of_kind,
    path_text,
    text,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hypothesis.strategies import SearchStrategy

__all__ = ["SchemaGenerator", "Site", "generator_for"]


#: Text in the formats the registry publishes dates, times and UUIDs with.
FORMATS: Final = {
    "date-time": st.datetimes(timezones=st.none() | st.just(datetime.UTC)).map(
        datetime.datetime.isoformat
    ),
    "date": st.dates().map(datetime.date.isoformat),
    "time": st.times().map(datetime.time.isoformat),
    "uuid": st.uuids().map(str),
}


class Site:
    """A place in a drawn value where the schema can be broken, and the ways it can."""

    def __init__(self, path: tuple[str | int, ...], schema: dict[str, Any], value: Any) -> None:
        self.path, self.schema, self.value = path, schema, value


class SchemaGenerator:
    """Strategies for one root schema: valid values, and the places to break them."""

    def __init__(self, root: Schema, where: str) -> None:
        self.where = where
        # Another draft than 2020-12 (a TypeScript server's Draft 7) reads this subset alike,
        # but for the keywords it does not have, or means otherwise: those are refused.
        declared = dialect(root) if isinstance(root, dict) else None
        self.older = declared if declared not in (None, LATEST) else None
        self.defs: dict[str, Any] = root.get("$defs", {}) if isinstance(root, dict) else {}
        self.refs: dict[str, SearchStrategy[Any]] = {}
        # Keyed by node identity: the nodes live in ``root``, which lives as long as this.
        self._memo: dict[int, SearchStrategy[Any]] = {}
        self._check(root, "")
        self.root = root

    # -- checking ---------------------------------------------------------------

    def _unsupported(self, at: str, what: str) -> UnsupportedSchema:
        place = f" at {at}" if at else " at the top"
        return UnsupportedSchema(
            f"{self.where}: expected a schema using only {', '.join(sorted(KEYWORDS))} "
            f"(and annotations), got {what}{place}"
        )

    def _check(self, schema: object, at: str) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise self._unsupported(at, f"a {type(schema).__name__} where a schema belongs")
        for key, value in schema.items():
            here = f"{at}/{key}" if at else key
            if key in ANNOTATIONS:
                continue
            if key not in KEYWORDS:
                raise self._unsupported(at, f"the keyword {key!r}")
            if self.older and (
                key == "prefixItems" or (key.startswith("exclusive") and type(value) is bool)
            ):
                raise self._unsupported(
                    at, f"{key}: {value!r:.40}, which {self.older} reads otherwise"
                )
            if key == "$ref":
                self._resolve(value, here)
                siblings = set(schema) - ANNOTATIONS - {"$ref", "$defs"}
                if siblings:
                    raise self._unsupported(at, f"{sorted(siblings)} beside $ref")
            elif key in ("properties", "$defs"):
                for name, sub in value.items():
                    self._check(sub, f"{here}/{name}")
            elif key in ("items", "additionalProperties"):
                self._check(value, here)
            elif key in ("prefixItems", "anyOf"):
                for index, sub in enumerate(value):
                    self._check(sub, f"{here}/{index}")
        if "anyOf" in schema:
            siblings = set(schema) - ANNOTATIONS - {"anyOf", "$defs"}
            if siblings:
                raise self._unsupported(at, f"{sorted(siblings)} beside anyOf")

    def _resolve(self, ref: object, at: str = "$ref") -> Any:
        prefix = "#/$defs/"
        if (
            not isinstance(ref, str)
            or not ref.startswith(prefix)
            or ref[len(prefix) :] not in (self.defs)
        ):
            raise self._unsupported(at, f"the reference {ref!r} (only #/$defs/Name)")
        return self.defs[ref[len(prefix) :]]

    # -- valid values -----------------------------------------------------------

    def valid(self, schema: Schema) -> SearchStrategy[Any]:
        """Values ``schema`` accepts (built once per schema node)."""
        key = id(schema)
        if key not in self._memo:
            self._memo[key] = self._valid(schema)
        return self._memo[key]

    def _valid(self, schema: Schema) -> SearchStrategy[Any]:
        if schema is True:
            return any_json()
        if schema is False:
            return st.nothing()
        assert isinstance(schema, dict)
        if "$ref" in schema:
            ref = schema["$ref"]
            if ref not in self.refs:
                # Deferred, so that a recursive class refers to its own strategy.
                self.refs[ref] = st.deferred(lambda: self.valid(self._resolve(ref)))
            return self.refs[ref]
        if "anyOf" in schema:
            return st.one_of([self.valid(member) for member in schema["anyOf"]])
        if "const" in schema:
            values = [schema["const"]]
        elif "enum" in schema:
            values = list(schema["enum"])
        else:
            return st.one_of([self._typed(kind, schema) for kind in self._types(schema)])
        kinds = self._types(schema)
        allowed = [value for value in values if self._fits(value, kinds, schema)]
        return st.sampled_from(allowed) if allowed else st.nothing()

    def _types(self, schema: dict[str, Any]) -> list[str]:
        declared = schema.get("type")
        if declared is not None:
            return [declared] if isinstance(declared, str) else list(declared)
        # No type: draw from the kinds the other keywords describe, or any JSON.
        inferred = [
            kind
            for kind, keys in (
                ("object", ("properties", "required", "additionalProperties")),
                ("array", ("items", "prefixItems", "minItems", "maxItems")),
                ("string", ("minLength", "maxLength", "pattern")),
                (
                    "number",
                    ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
                ),
            )
            if any(key in schema for key in keys)
        ]
        return inferred or list(TYPES)

    def _fits(self, value: object, kinds: list[str], schema: dict[str, Any]) -> bool:
        """Whether an enum (or const) value also satisfies the schema's type and bounds."""
        if "type" not in schema:
            return True
        kind = kind_of(value)
        if kind not in kinds and not (kind == "integer" and "number" in kinds):
            return False
        if isinstance(value, str):
            low, high = schema.get("minLength", 0), schema.get("maxLength", len(value))
            return bool(low <= len(value) <= high)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (
                schema.get("minimum", value) <= value <= schema.get("maximum", value)
                and ("exclusiveMinimum" not in schema or value > schema["exclusiveMinimum"])
                and ("exclusiveMaximum" not in schema or value < schema["exclusiveMaximum"])
            )
        return True

    def _typed(self, kind: str, schema: dict[str, Any]) -> SearchStrategy[Any]:
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind in ("integer", "number"):
            return self._number(kind, schema)
        if kind == "string":
            form = schema.get("format")
            if form in FORMATS:
                return FORMATS[form]
            low = schema.get("minLength", 0)
            high = max(low, schema.get("maxLength", low + MAX_TEXT))
            if "pattern" in schema:  # text that contains a match, as JSON Schema's is a search
                pattern = schema["pattern"]
                # Drawn by Python's dialect, kept where JSON Schema's (ECMA 262) agrees: its $
                # does not match before a final newline, say.
                agrees = jsonschema_rs.Draft202012Validator({"pattern": pattern}).is_valid
                matching = st.from_regex(pattern, alphabet=st.characters(codec="utf-8"))
                return matching.filter(lambda value: low <= len(value) <= high and agrees(value))
            return text(low, high)
        if kind == "array":
            return self._array(schema)
        if kind == "object":
            return self._object(schema)
        raise self._unsupported("", f"the type {kind!r}")

    def _number(self, kind: str, schema: dict[str, Any]) -> SearchStrategy[Any]:
        low, high = schema.get("minimum"), schema.get("maximum")
        above, below = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        ints_low = max(
            INT_MIN,
            INT_MIN if low is None else math.ceil(low),
            INT_MIN if above is None else math.floor(above) + 1,
        )
        ints_high = min(
            INT_MAX,
            INT_MAX if high is None else math.floor(high),
            INT_MAX if below is None else math.ceil(below) - 1,
        )
        step = schema.get("multipleOf")
        if step is not None:  # its multiples within the bounds, as integers
            if type(step) is not int or step <= 0:
                raise self._unsupported("", f"multipleOf {step!r} (an int above 0 only)")
            first, last = -(-ints_low // step), ints_high // step
            if first > last:
                return st.nothing()
            return st.integers(first, last).map(lambda k: k * step)
        if ints_low > ints_high:
            ints: SearchStrategy[Any] = st.nothing()
        else:
            ints = st.integers(ints_low, ints_high)
            if max(ints_low, -EXACT) <= min(ints_high, EXACT):
                # An integral float is an integer to JSON Schema (the registry converts it).
                exact = st.integers(max(ints_low, -EXACT), min(ints_high, EXACT))
                ints = st.one_of(ints, exact.map(float))
        if kind == "integer":
            return ints
        # The tighter of each pair of bounds; an exclusive one excludes its value.
        exclude_min = above is not None and (low is None or above >= low)
        exclude_max = below is not None and (high is None or below <= high)
        reals = st.floats(
            min_value=above if exclude_min else low,
            max_value=below if exclude_max else high,
            allow_nan=False,
            allow_infinity=False,
            exclude_min=exclude_min,
            exclude_max=exclude_max,
        )
        return st.one_of(ints, reals)

    def _array(self, schema: dict[str, Any]) -> SearchStrategy[list[Any]]:
        prefix = tuple(self.valid(member) for member in schema.get("prefixItems", ()))
        rest = schema.get("items", True)
        low = schema.get("minItems", 0)
        high = schema.get("maxItems", max(low, len(prefix)) + MAX_ITEMS)
        if rest is False:
            high = min(high, len(prefix))
        if low > high:
            return st.nothing()
        return arrays(prefix, self.valid(rest), low, high)

    def _object(self, schema: dict[str, Any]) -> SearchStrategy[dict[str, Any]]:
        properties: dict[str, Any] = schema.get("properties", {})
        required = list(schema.get("required", ()))
        extra = schema.get("additionalProperties", True)
        if extra is False and any(key not in properties for key in required):
            return st.nothing()
        return objects(
            tuple((key, self.valid(properties.get(key, extra))) for key in required),
            tuple(
                (key, self.valid(value)) for key, value in properties.items() if key not in required
            ),
            None if extra is False else self.valid(extra),
            frozenset(properties) | frozenset(required),
        )

    # -- breaking values ------------------------------------------------------------

    def sites(self, schema: Schema, value: Any, path: tuple[str | int, ...]) -> list[Site]:
        """Every place in ``value`` whose schema is known exactly (not inside ``anyOf``)."""
        if not isinstance(schema, dict):
            return []
        if "$ref" in schema:
            return self.sites(self._resolve(schema["$ref"]), value, path)
        out = [Site(path, schema, value)]
        if "anyOf" in schema:
            return out  # breaking inside one member may satisfy another
        if isinstance(value, dict):
            properties = schema.get("properties", {})
            extra = schema.get("additionalProperties", True)
            for key, item in value.items():
                out += self.sites(properties.get(key, extra), item, (*path, key))
        elif isinstance(value, list):
            prefix = schema.get("prefixItems", [])
            for index, item in enumerate(value):
                member = prefix[index] if index < len(prefix) else schema.get("items", True)
                out += self.sites(member, item, (*path, index))
        return out

    def admitted(self, schema: Schema) -> set[str] | None:
        """The JSON types ``schema`` admits (None: any); ``number`` admits integers too."""
        if not isinstance(schema, dict):
            return None if schema else set()
        if "$ref" in schema:
            return self.admitted(self._resolve(schema["$ref"]))
        if "anyOf" in schema:
            kinds: set[str] = set()
            for member in schema["anyOf"]:
                member_kinds = self.admitted(member)
                if member_kinds is None:
                    return None
                kinds |= member_kinds
            return kinds
        if "type" in schema:
            kinds = set(self._types(schema))
        elif "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            kinds = {kind_of(value) for value in values}
        else:
            return None  # no type: any JSON type is welcome
        return kinds | {"integer"} if "number" in kinds else kinds

    def breaks(self, site: Site, top: bool) -> list[tuple[Break, SearchStrategy[Any], str]]:
        """Each way to break ``site``: (kind, strategy for the broken value, description)."""
        schema, value, where = site.schema, site.value, path_text(site.path) or "the top level"
        out: list[tuple[Break, SearchStrategy[Any], str]] = []
        kinds = self.admitted(schema)
        if not top and kinds is not None:
            wrong = [kind for kind in TYPES if kind not in kinds]
            if wrong:
                out.append(
                    (
                        "wrong_type",
                        st.sampled_from(wrong).flatmap(of_kind),
                        f"a wrong type at {where} (expected {' or '.join(sorted(kinds))})",
                    )
                )
        if "enum" in schema or "const" in schema:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            outside = self._outside(values, schema)
            if outside is not None:
                out.append(("outside_enum", outside, f"a value outside the enum at {where}"))
        if isinstance(value, dict):
            present = [key for key in schema.get("required", ()) if key in value]
            if present:
                out.append(
                    (
                        "missing_required",
                        st.sampled_from(present).map(
                            lambda key: {k: v for k, v in value.items() if k != key}
                        ),
                        f"a required property missing at {where}",
                    )
                )
            if schema.get("additionalProperties", True) is False:
                known = set(schema.get("properties", {})) | set(value)
                out.append(
                    (
                        "extra_property",
                        st.tuples(text(1, 8).filter(lambda k: k not in known), any_json()).map(
                            lambda pair: {**value, pair[0]: pair[1]}
                        ),
                        f"an extra property at {where}",
                    )
                )
        if isinstance(value, list):
            out += self._lengths(schema, value, where)
        return out

    def _outside(self, values: list[Any], schema: dict[str, Any]) -> SearchStrategy[Any] | None:
        """Values of the enum's own types that equal none of its values, if there are any."""
        kinds = set(self._types(schema)) if "type" in schema else {kind_of(v) for v in values}
        # Python's == is looser than JSON Schema's (True == 1), so "not in" is safe.
        candidates = [
            of_kind(kind).filter(lambda x: x not in values)
            for kind in sorted(kinds)
            if kind not in ("null", "boolean")
            or any(x not in values for x in ((None,) if kind == "null" else (True, False)))
        ]
        return st.one_of(candidates) if candidates else None

    def _lengths(
        self, schema: dict[str, Any], value: list[Any], where: str
    ) -> list[tuple[Break, SearchStrategy[Any], str]]:
        out: list[tuple[Break, SearchStrategy[Any], str]] = []
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if low > 0:
            shorter = st.integers(0, low - 1).map(lambda size: value[:size])
            out.append(("wrong_length", shorter, f"too few items at {where} (minItems {low})"))
        if high is not None:
            prefix, rest = schema.get("prefixItems", []), schema.get("items", True)
            # Valid items past the end (any JSON past a closed prefix: wrong either way).
            members = tuple(
                self.valid(prefix[i]) if i < len(prefix) else self.valid(rest or True)
                for i in range(len(value), max(len(value), len(prefix)) + 1)
            )
            out.append(
                (
                    "wrong_length",
                    longer(value, members, high),
                    f"too many items at {where} (maxItems {high})",
                )
            )
        return out


def generator_for(tool: Tool | Mapping[str, Any]) -> SchemaGenerator:
    if isinstance(tool, Tool):
        return SchemaGenerator(tool.parameters, f"tool {tool.name!r}")
    if isinstance(tool, dict) or hasattr(tool, "keys"):
        return SchemaGenerator(dict(tool), "the schema")
    raise TypeError(f"expected a Tool or a JSON Schema dict, got {type(tool).__name__}")
