"""The building blocks the strategies draw JSON with: sizes, kinds, primitive strategies."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final, Literal

from hypothesis import strategies as st

if TYPE_CHECKING:
    from collections.abc import Iterable

    from hypothesis.strategies import DrawFn, SearchStrategy

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

ANNOTATIONS: Final = frozenset(
    {"description", "default", "title", "examples", "$comment", "$schema", "deprecated"}
    | {"readOnly", "writeOnly", "$id"}
)
KEYWORDS: Final = frozenset(
    {"type", "enum", "const", "properties", "required", "additionalProperties", "items"}
    | {"prefixItems", "minItems", "maxItems", "anyOf", "$ref", "$defs", "minimum", "maximum"}
    | {"exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "format"}
    | {"multipleOf", "pattern"}
)
TYPES: Final = ("null", "boolean", "integer", "number", "string", "array", "object")
# What the engine accepts as JSON: 64-bit integers; no NaN or infinity.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1
# Integral floats that convert to int exactly (a model may send 2.0 for 2).
EXACT: Final = 2**53
# Sizes kept small: arguments are drawn for every reply of every script.
MAX_ITEMS: Final = 3
MAX_TEXT: Final = 12


class UnsupportedSchema(ValueError):
    """A schema uses a keyword (or a form) the strategies cannot draw from."""


@functools.cache
def call_ids() -> SearchStrategy[str]:
    return st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)


@functools.cache
def text(min_size: int = 0, max_size: int = MAX_TEXT) -> SearchStrategy[str]:
    # UTF-8 encodable: the engine refuses lone surrogates, which are not JSON text.
    return st.text(st.characters(codec="utf-8"), min_size=min_size, max_size=max_size)


@functools.cache
def scalars() -> SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(INT_MIN, INT_MAX),
        st.floats(allow_nan=False, allow_infinity=False),
        text(),
    )


@functools.cache
def any_json() -> SearchStrategy[Any]:
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=MAX_ITEMS),
            st.dictionaries(text(max_size=6), inner, max_size=MAX_ITEMS),
        ),
        max_leaves=6,
    )


def kind_of(value: object) -> str:
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
def of_kind(kind: str) -> SearchStrategy[Any]:
    """Values whose JSON type is exactly ``kind`` (``number``: non-integral floats)."""
    return {
        "null": st.none(),
        "boolean": st.booleans(),
        "integer": st.integers(INT_MIN, INT_MAX),
        "number": st.floats(allow_nan=False, allow_infinity=False).filter(
            lambda x: not x.is_integer()
        ),
        "string": text(),
        "array": st.lists(scalars(), max_size=2),
        "object": st.dictionaries(text(max_size=6), scalars(), max_size=2),
    }[kind]


def path_text(parts: Iterable[str | int]) -> str:
    """``place.tags[2]``, as the registry reports it; ``''`` for the top."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


# Composites are built once here: decorating a function per draw costs more than drawing.


@st.composite
def arrays(
    draw: DrawFn,
    prefix: tuple[SearchStrategy[Any], ...],
    items: SearchStrategy[Any],
    low: int,
    high: int,
) -> list[Any]:
    size = draw(st.integers(low, high))
    return [draw(prefix[i] if i < len(prefix) else items) for i in range(size)]


@st.composite
def objects(
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
        names = draw(st.lists(text(max_size=6), max_size=2, unique=True))
        for name in names:
            if name not in known:
                out[name] = draw(extra)
    return out


@st.composite
def longer(
    draw: DrawFn, value: list[Any], members: tuple[SearchStrategy[Any], ...], high: int
) -> list[Any]:
    """``value`` extended past ``high`` items; ``members[i]`` draws item ``len(value) + i``."""
    size = draw(st.integers(high + 1, high + 2))
    return [*value, *(draw(members[min(i, len(members) - 1)]) for i in range(size - len(value)))]


def set_at(value: Any, path: tuple[str | int, ...], new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path``."""
    if not path:
        return new
    head, *rest = path
    if isinstance(value, dict):
        return {**value, head: set_at(value[head], tuple(rest), new)}
    copy = list(value)
    copy[head] = set_at(copy[head], tuple(rest), new)  # type: ignore[index]
    return copy
