"""Hypothesis strategies for a misbehaving model, drawn from a registry's own schemas.

Each tool's ``parameters`` JSON Schema says what a valid call is, so it also
says every way a call can be wrong. ``arguments(tool)`` draws valid
arguments; ``invalid_arguments(tool)`` breaks them in one way the schema
forbids (a wrong type, a missing required property, an extra property where
``additionalProperties`` is false, a value outside an ``enum``, an array of
the wrong length); the call strategies wrap them in replies, and
``scripts(registry)`` draws whole scripts for ``ScriptedModel``, ending with a
final so that a run never asks for more than the script holds.

The schemas are read by a small generator written for the subset of Draft
2020-12 the registry derives: ``type`` (one or a list), ``enum``, ``const``,
``properties``, ``required``, ``additionalProperties``, ``items``,
``prefixItems``, ``minItems``/``maxItems``, ``anyOf``, ``$ref`` into
``$defs``, and ``minimum``/``maximum`` (also exclusive) and
``minLength``/``maxLength`` for hand-written schemas; annotations
(``description``, ``default``, ``title``, ...) are ignored. Any other keyword
raises ``UnsupportedSchema`` when the strategy is built, naming it and where
it is. (``hypothesis-jsonschema`` would be the obvious choice, but its 0.23.1
fails on every object schema with current Hypothesis and predates Draft
2020-12's ``prefixItems``; see the docs' Testing page.)
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Final, Literal

try:
    from hypothesis import assume, note
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised with hypothesis hidden
    raise ImportError(
        "agentloop.testing.strategies needs Hypothesis: pip install hypothesis "
        "(or the testing extra, pip install 'agentloop-fsm[testing]')"
    ) from exc

from agentloop._tools._registry import Tool, ToolRegistry
from agentloop.testing import batch, call, final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from hypothesis.strategies import DrawFn, SearchStrategy

__all__ = [
    "BREAKS",
    "Break",
    "UnsupportedSchema",
    "arguments",
    "finals",
    "invalid_arguments",
    "invalid_calls",
    "malformed_replies",
    "replies",
    "scripts",
    "unknown_tool_calls",
    "valid_calls",
]

Message = dict[str, Any]
Schema = dict[str, Any] | bool

#: The ways ``invalid_arguments`` can break a schema.
Break = Literal["wrong_type", "missing_required", "extra_property", "outside_enum", "wrong_length"]
BREAKS: Final[tuple[Break, ...]] = (
    "wrong_type",
    "missing_required",
    "extra_property",
    "outside_enum",
    "wrong_length",
)

_ANNOTATIONS: Final = frozenset(
    {"description", "default", "title", "examples", "$comment", "$schema", "deprecated"}
    | {"readOnly", "writeOnly", "$id"}
)
_KEYWORDS: Final = frozenset(
    {"type", "enum", "const", "properties", "required", "additionalProperties", "items"}
    | {"prefixItems", "minItems", "maxItems", "anyOf", "$ref", "$defs", "minimum", "maximum"}
    | {"exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength"}
)
_TYPES: Final = ("null", "boolean", "integer", "number", "string", "array", "object")
# What the engine accepts as JSON: 64-bit integers; no NaN or infinity.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
# Integral floats that convert to int exactly (a model may send 2.0 for 2).
_EXACT: Final = 2**53
# Sizes kept small: arguments are drawn for every reply of every script.
_MAX_ITEMS: Final = 3
_MAX_TEXT: Final = 12


class UnsupportedSchema(ValueError):
    """A schema uses a keyword (or a form) the strategies cannot draw from."""


@functools.cache
def _ids() -> SearchStrategy[str]:
    return st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)


@functools.cache
def _text(min_size: int = 0, max_size: int = _MAX_TEXT) -> SearchStrategy[str]:
    # UTF-8 encodable: the engine refuses lone surrogates, which are not JSON text.
    return st.text(st.characters(codec="utf-8"), min_size=min_size, max_size=max_size)


@functools.cache
def _scalars() -> SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(_INT_MIN, _INT_MAX),
        st.floats(allow_nan=False, allow_infinity=False),
        _text(),
    )


@functools.cache
def _any_json() -> SearchStrategy[Any]:
    return st.recursive(
        _scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=_MAX_ITEMS),
            st.dictionaries(_text(max_size=6), inner, max_size=_MAX_ITEMS),
        ),
        max_leaves=6,
    )


def _kind(value: object) -> str:
    """The JSON Schema type of a JSON value, ``integer`` for integral floats included."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


@functools.cache
def _of_kind(kind: str) -> SearchStrategy[Any]:
    """Values whose JSON type is exactly ``kind`` (``number``: non-integral floats)."""
    return {
        "null": st.none(),
        "boolean": st.booleans(),
        "integer": st.integers(_INT_MIN, _INT_MAX),
        "number": st.floats(allow_nan=False, allow_infinity=False).filter(
            lambda x: not x.is_integer()
        ),
        "string": _text(),
        "array": st.lists(_scalars(), max_size=2),
        "object": st.dictionaries(_text(max_size=6), _scalars(), max_size=2),
    }[kind]


def _path(parts: Iterable[str | int]) -> str:
    """``place.tags[2]``, as the registry reports it; ``''`` for the top."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


# Composites are built once here: decorating a function per draw costs more than drawing.


@st.composite
def _arrays(
    draw: DrawFn,
    prefix: tuple[SearchStrategy[Any], ...],
    items: SearchStrategy[Any],
    low: int,
    high: int,
) -> list[Any]:
    size = draw(st.integers(low, high))
    return [draw(prefix[i] if i < len(prefix) else items) for i in range(size)]


@st.composite
def _objects(
    draw: DrawFn,
    required: tuple[tuple[str, SearchStrategy[Any]], ...],
    optional: tuple[tuple[str, SearchStrategy[Any]], ...],
    extra: SearchStrategy[Any] | None,
    known: frozenset[str],
) -> dict[str, Any]:
    out = {key: draw(value) for key, value in required}
    for key, value in optional:
        if draw(st.booleans()):
            out[key] = draw(value)
    if extra is not None:
        names = draw(st.lists(_text(max_size=6), max_size=2, unique=True))
        for name in names:
            if name not in known:
                out[name] = draw(extra)
    return out


@st.composite
def _longer(
    draw: DrawFn, value: list[Any], members: tuple[SearchStrategy[Any], ...], high: int
) -> list[Any]:
    """``value`` extended past ``high`` items; ``members[i]`` draws item ``len(value) + i``."""
    size = draw(st.integers(high + 1, high + 2))
    return [*value, *(draw(members[min(i, len(members) - 1)]) for i in range(size - len(value)))]


class _Site:
    """A place in a drawn value where the schema can be broken, and the ways it can."""

    def __init__(self, path: tuple[str | int, ...], schema: dict[str, Any], value: Any) -> None:
        self.path, self.schema, self.value = path, schema, value


class _Generator:
    """Strategies for one root schema: valid values, and the places to break them."""

    def __init__(self, root: Schema, where: str) -> None:
        self.where = where
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
            f"{self.where}: expected a schema using only {', '.join(sorted(_KEYWORDS))} "
            f"(and annotations), got {what}{place}"
        )

    def _check(self, schema: object, at: str) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise self._unsupported(at, f"a {type(schema).__name__} where a schema belongs")
        for key, value in schema.items():
            here = f"{at}/{key}" if at else key
            if key in _ANNOTATIONS:
                continue
            if key not in _KEYWORDS:
                raise self._unsupported(at, f"the keyword {key!r}")
            if key == "$ref":
                self._resolve(value, here)
                siblings = set(schema) - _ANNOTATIONS - {"$ref", "$defs"}
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
            siblings = set(schema) - _ANNOTATIONS - {"anyOf", "$defs"}
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
            return _any_json()
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
                ("string", ("minLength", "maxLength")),
                ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")),
            )
            if any(key in schema for key in keys)
        ]
        return inferred or list(_TYPES)

    def _fits(self, value: object, kinds: list[str], schema: dict[str, Any]) -> bool:
        """Whether an enum (or const) value also satisfies the schema's type and bounds."""
        if "type" not in schema:
            return True
        kind = _kind(value)
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
            low = schema.get("minLength", 0)
            return _text(low, max(low, schema.get("maxLength", low + _MAX_TEXT)))
        if kind == "array":
            return self._array(schema)
        if kind == "object":
            return self._object(schema)
        raise self._unsupported("", f"the type {kind!r}")

    def _number(self, kind: str, schema: dict[str, Any]) -> SearchStrategy[Any]:
        low, high = schema.get("minimum"), schema.get("maximum")
        above, below = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        ints_low = max(
            _INT_MIN,
            _INT_MIN if low is None else math.ceil(low),
            _INT_MIN if above is None else math.floor(above) + 1,
        )
        ints_high = min(
            _INT_MAX,
            _INT_MAX if high is None else math.floor(high),
            _INT_MAX if below is None else math.ceil(below) - 1,
        )
        if ints_low > ints_high:
            ints: SearchStrategy[Any] = st.nothing()
        else:
            ints = st.integers(ints_low, ints_high)
            if max(ints_low, -_EXACT) <= min(ints_high, _EXACT):
                # An integral float is an integer to JSON Schema (the registry converts it).
                exact = st.integers(max(ints_low, -_EXACT), min(ints_high, _EXACT))
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
        high = schema.get("maxItems", max(low, len(prefix)) + _MAX_ITEMS)
        if rest is False:
            high = min(high, len(prefix))
        if low > high:
            return st.nothing()
        return _arrays(prefix, self.valid(rest), low, high)

    def _object(self, schema: dict[str, Any]) -> SearchStrategy[dict[str, Any]]:
        properties: dict[str, Any] = schema.get("properties", {})
        required = list(schema.get("required", ()))
        extra = schema.get("additionalProperties", True)
        if extra is False and any(key not in properties for key in required):
            return st.nothing()
        return _objects(
            tuple((key, self.valid(properties.get(key, extra))) for key in required),
            tuple(
                (key, self.valid(value)) for key, value in properties.items() if key not in required
            ),
            None if extra is False else self.valid(extra),
            frozenset(properties) | frozenset(required),
        )

    # -- breaking values ------------------------------------------------------------

    def sites(self, schema: Schema, value: Any, path: tuple[str | int, ...]) -> list[_Site]:
        """Every place in ``value`` whose schema is known exactly (not inside ``anyOf``)."""
        if not isinstance(schema, dict):
            return []
        if "$ref" in schema:
            return self.sites(self._resolve(schema["$ref"]), value, path)
        out = [_Site(path, schema, value)]
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
            kinds = {_kind(value) for value in values}
        else:
            return None  # no type: any JSON type is welcome
        return kinds | {"integer"} if "number" in kinds else kinds

    def breaks(self, site: _Site, top: bool) -> list[tuple[Break, SearchStrategy[Any], str]]:
        """Each way to break ``site``: (kind, strategy for the broken value, description)."""
        schema, value, where = site.schema, site.value, _path(site.path) or "the top level"
        out: list[tuple[Break, SearchStrategy[Any], str]] = []
        kinds = self.admitted(schema)
        if not top and kinds is not None:
            wrong = [kind for kind in _TYPES if kind not in kinds]
            if wrong:
                out.append(
                    (
                        "wrong_type",
                        st.sampled_from(wrong).flatmap(_of_kind),
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
                        st.tuples(_text(1, 8).filter(lambda k: k not in known), _any_json()).map(
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
        kinds = set(self._types(schema)) if "type" in schema else {_kind(v) for v in values}
        # Python's == is looser than JSON Schema's (True == 1), so "not in" is safe.
        candidates = [
            _of_kind(kind).filter(lambda x: x not in values)
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
                    _longer(value, members, high),
                    f"too many items at {where} (maxItems {high})",
                )
            )
        return out


def _set(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path``."""
    if not path:
        return new
    head, *rest = path
    if isinstance(value, dict):
        return {**value, head: _set(value[head], tuple(rest), new)}
    copy = list(value)
    copy[head] = _set(copy[head], tuple(rest), new)  # type: ignore[index]
    return copy


def _generator(tool: Tool | Mapping[str, Any]) -> _Generator:
    if isinstance(tool, Tool):
        return _Generator(tool.parameters, f"tool {tool.name!r}")
    if isinstance(tool, dict) or hasattr(tool, "keys"):
        return _Generator(dict(tool), "the schema")
    raise TypeError(f"expected a Tool or a JSON Schema dict, got {type(tool).__name__}")


def _tools(registry: ToolRegistry) -> list[Tool]:
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"expected a ToolRegistry, got {type(registry).__name__}")
    tools = list(registry)
    if not tools:
        raise ValueError("expected a ToolRegistry with at least one tool, got an empty one")
    return tools


# -- arguments ------------------------------------------------------------------


def arguments(tool: Tool | Mapping[str, Any]) -> SearchStrategy[dict[str, Any]]:
    """Arguments the tool's ``parameters`` schema accepts (or a schema's, given one)."""
    generator = _generator(tool)
    return generator.valid(generator.root)


def _breakable(generator: _Generator, kinds: tuple[Break, ...]) -> bool:
    """Whether some value of the schema can be broken in one of ``kinds``.

    Checked on the schema's shape: the top-level object (missing required,
    extra property) and every property it or its classes declare.
    """
    seen: set[int] = set()

    def walk(schema: Schema, top: bool) -> bool:
        if not isinstance(schema, dict) or id(schema) in seen:
            return False
        seen.add(id(schema))
        if "$ref" in schema:
            return walk(generator._resolve(schema["$ref"]), top)
        if "required" in schema and schema["required"] and "missing_required" in kinds:
            return True
        if schema.get("additionalProperties", True) is False and "extra_property" in kinds:
            return True
        if ("enum" in schema or "const" in schema) and "outside_enum" in kinds:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            if generator._outside(values, schema) is not None:
                return True
        if ("minItems" in schema or "maxItems" in schema) and "wrong_length" in kinds:
            return True
        if not top and "wrong_type" in kinds:
            admitted = generator.admitted(schema)
            if admitted is not None and set(_TYPES) - admitted:
                return True
        if "anyOf" in schema:
            return False
        members = [*schema.get("properties", {}).values(), *schema.get("prefixItems", [])]
        members += [schema[key] for key in ("items", "additionalProperties") if key in schema]
        return any(walk(member, False) for member in members)

    return walk(generator.root, True)


def invalid_arguments(
    tool: Tool | Mapping[str, Any], kinds: Iterable[Break] = BREAKS
) -> SearchStrategy[dict[str, Any]]:
    """Arguments that break the tool's schema in one place, in one of the ways in ``kinds``.

    A valid value is drawn, then one place in it is broken: a wrong type
    (never at the top level: arguments that are not an object make the reply
    malformed instead), a required property removed, an extra property added
    where ``additionalProperties`` is false, a value outside an ``enum``, an
    array made too short or too long. Nothing inside an ``anyOf`` member is
    broken, since another member could accept the result. What was broken is
    recorded with ``hypothesis.note``, so a failing example says it.
    """
    generator = _generator(tool)
    wanted = _kinds(kinds)
    if not _breakable(generator, wanted):
        raise ValueError(
            f"{generator.where}: expected a schema that can be broken by one of "
            f"{', '.join(wanted)}, got one that accepts anything of that shape"
        )

    return _broken(generator, wanted)


@st.composite
def _broken(draw: DrawFn, generator: _Generator, wanted: tuple[Break, ...]) -> dict[str, Any]:
    value = draw(generator.valid(generator.root))
    options = [
        (site.path, strategy, description)
        for site in generator.sites(generator.root, value, ())
        for kind, strategy, description in generator.breaks(site, top=not site.path)
        if kind in wanted
    ]
    # The schema can be broken, but perhaps not this value (an optional property
    # with an enum was left out, say): Hypothesis draws another.
    assume(options)
    path, strategy, description = draw(st.sampled_from(options))
    note(f"{generator.where}: {description}")
    broken: dict[str, Any] = _set(value, path, draw(strategy))
    return broken


def _kinds(kinds: Iterable[Break]) -> tuple[Break, ...]:
    wanted = tuple(kinds)
    unknown = [kind for kind in wanted if kind not in BREAKS]
    if unknown or not wanted:
        raise ValueError(f"expected kinds among {', '.join(BREAKS)}, got {unknown or 'none'}")
    return wanted


# -- replies ----------------------------------------------------------------------


def _calls_to(
    tools: Iterable[Tool],
    args: Callable[[Tool], SearchStrategy[dict[str, Any]]],
    ids: SearchStrategy[str] | None,
) -> SearchStrategy[Message]:
    """Calls to each of ``tools``, with arguments drawn by ``args(tool)`` (built once)."""
    return st.one_of(
        [
            st.builds(functools.partial(_call_to, tool.name), ids or _ids(), args(tool))
            for tool in tools
        ]
    )


def _call_to(name: str, call_id: str, args: dict[str, Any]) -> Message:
    return call(call_id, name, **args)


def valid_calls(
    registry: ToolRegistry, *, ids: SearchStrategy[str] | None = None
) -> SearchStrategy[Message]:
    """Calls to a tool of ``registry`` with arguments its schema accepts."""
    return _calls_to(_tools(registry), arguments, ids)


def invalid_calls(
    registry: ToolRegistry,
    *,
    kinds: Iterable[Break] = BREAKS,
    ids: SearchStrategy[str] | None = None,
) -> SearchStrategy[Message]:
    """Calls to a tool of ``registry`` whose arguments break its schema (see ``invalid_arguments``).

    Tools whose schema cannot be broken in any of ``kinds`` (a ``**kwargs: Any``
    tool, say) are left out; if none is left, this raises ``ValueError``.
    """
    wanted = _kinds(kinds)
    breakable = [tool for tool in _tools(registry) if _breakable(_generator(tool), wanted)]
    if not breakable:
        raise ValueError(
            f"expected a tool whose schema can be broken by one of {', '.join(wanted)}, "
            f"got none in {[tool.name for tool in registry]}"
        )
    return _calls_to(breakable, lambda tool: invalid_arguments(tool, wanted), ids)


def unknown_tool_calls(
    registry: ToolRegistry, *, ids: SearchStrategy[str] | None = None
) -> SearchStrategy[Message]:
    """Well-formed calls to tool names ``registry`` does not have."""
    names = {tool.name for tool in _tools(registry)}
    return st.builds(
        lambda call_id, name, args: call(call_id, name, **args),
        ids if ids is not None else _ids(),
        _text(1, 16).filter(lambda name: name not in names),
        st.dictionaries(_text(max_size=6), _scalars(), max_size=2),
    )


def finals() -> SearchStrategy[Message]:
    """Final replies with any text."""
    return st.builds(final, _text())


def malformed_replies() -> SearchStrategy[object]:
    """Replies the engine refuses as ``malformed``: neither a well-formed call nor a final."""
    good_call = call("c", "t")
    return st.one_of(
        _scalars(),
        st.lists(_scalars(), max_size=2),
        st.builds(
            lambda kind: {"kind": kind}, _text().filter(lambda k: k not in ("call", "final"))
        ),
        st.builds(
            lambda text: {"kind": "final", "text": text}, st.one_of(st.none(), st.integers())
        ),
        st.builds(
            lambda key: {**good_call, key: 1}, _text(1, 6).filter(lambda k: k not in good_call)
        ),
        st.sampled_from(
            [
                {**good_call, "id": ""},
                {**good_call, "name": ""},
                {**good_call, "arguments": []},
                {k: v for k, v in good_call.items() if k != "arguments"},
            ]
        ),
    )


def _misbehaving(registry: ToolRegistry, malformed: bool) -> list[SearchStrategy[object]]:
    """Calls a model should not make (and valid ones), and malformed replies if asked."""
    options: list[SearchStrategy[object]] = [valid_calls(registry)]
    if any(_breakable(_generator(tool), BREAKS) for tool in _tools(registry)):
        options.append(invalid_calls(registry))
    options.append(unknown_tool_calls(registry))
    if malformed:
        options.append(malformed_replies())
    return options


def replies(registry: ToolRegistry, *, malformed: bool = False) -> SearchStrategy[object]:
    """One reply of a misbehaving model: a final, or a valid, invalid or unknown call.

    Invalid calls are left out if no tool's schema can be broken; malformed
    replies are drawn too with ``malformed=True``. Ids are arbitrary, so two
    drawn calls may share one: ``scripts`` numbers them.
    """
    return st.one_of([finals(), *_misbehaving(registry, malformed)])


def scripts(
    registry: ToolRegistry,
    *,
    max_size: int = 8,
    repeats: bool = True,
    malformed: bool = False,
    exceptions: bool = False,
    batches: bool = True,
) -> SearchStrategy[list[object]]:
    """Scripts for ``ScriptedModel``: up to ``max_size`` replies, the last a final.

    Before the final: valid, invalid and unknown calls, alone and, with
    ``batches``, two to four in one ``calls`` reply (and, if asked,
    ``malformed`` replies and ``exceptions``, a ``RuntimeError`` for the model
    to raise: the run ends ``failed``). Calls get the ids ``call-1``,
    ``call-2``, ... in order; with ``repeats``, a call now and then reuses an
    earlier id instead (the run ends ``repeated_call``). Since the last entry
    is a final, a run ends (finished, or earlier) before the script runs out.
    """
    if type(max_size) is not int or max_size < 1:
        raise ValueError(f"expected max_size to be an int >= 1, got {max_size!r}")
    one = st.one_of(_misbehaving(registry, malformed=False))
    calls = [one.map(_numbered)]
    if batches:
        calls.append(
            st.builds(
                lambda made, text: _numbered(batch(*made, text=text)),
                st.lists(one, min_size=2, max_size=4),
                st.none() | _text(),
            )
        )
    others: list[SearchStrategy[object]] = []
    if malformed:
        others.append(malformed_replies())
    if exceptions:
        others.append(st.builds(RuntimeError, _text()))
    entry = st.one_of([*calls, *(option.map(_as_is) for option in others)])
    return _scripts(entry, max_size - 1, repeats)


def _numbered(reply: object) -> tuple[bool, object]:
    return True, reply


def _as_is(reply: object) -> tuple[bool, object]:
    return False, reply


def _renamed(draw: DrawFn, made: Message, used: list[str], repeats: bool) -> Message:
    """``made`` with the next id ``call-N``, or now and then (``repeats``) an earlier one."""
    if repeats and used and draw(st.integers(0, 7)) == 0:
        call_id = draw(st.sampled_from(used))
    else:
        call_id = f"call-{len(used) + 1}"
        used.append(call_id)
    return {**made, "id": call_id}


@st.composite
def _scripts(
    draw: DrawFn, entry: SearchStrategy[tuple[bool, object]], size: int, repeats: bool
) -> list[object]:
    used: list[str] = []
    out: list[object] = []
    for numbered, reply in draw(st.lists(entry, max_size=size)):
        if numbered:
            assert isinstance(reply, dict)
            if reply["kind"] == "calls":
                made = [_renamed(draw, element, used, repeats) for element in reply["calls"]]
                reply = {**reply, "calls": made}
            else:
                reply = _renamed(draw, reply, used, repeats)
        out.append(reply)
    out.append(draw(finals()))
    return out
