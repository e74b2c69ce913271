"""Properties of derived schemas: what a schema admits reaches the handler, typed, and nothing
else does; every derived tool publishes."""

from __future__ import annotations

import datetime
import enum
import itertools
import math
import typing
import uuid
from typing import Annotated, Any, Literal, TypedDict

import attrs
import jsonschema
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Tool, ToolRegistry
from tests.support.helpers import Recorder, add
from tests.support.tool_types import Color, Level, Line, Node, Options, Point, dispatch

if typing.TYPE_CHECKING:
    from collections.abc import Iterator

# -- property: what the schema admits reaches the handler, nothing else does ----------


def from_schema(schema: Any, defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid for the JSON Schema subset the registry derives (written from the schema)."""
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(defs[schema["$ref"].split("/")[-1]], defs))
    if "anyOf" in schema:
        return st.one_of([from_schema(s, defs) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kinds = schema.get("type")
    if kinds is None:
        return JSON
    if isinstance(kinds, list):
        return st.one_of([from_schema({**schema, "type": k}, defs) for k in kinds])
    simple = {
        "null": st.none(),
        "boolean": st.booleans(),
        "integer": st.integers(-(2**53), 2**53) | st.integers(-5, 5).map(float),
        "number": st.integers(-10, 10) | st.floats(allow_nan=False, allow_infinity=False),
        "string": st.text(max_size=5),
    }
    if kinds in simple:
        return simple[kinds]
    if kinds == "array":
        if "prefixItems" in schema:
            return st.tuples(*(from_schema(s, defs) for s in schema["prefixItems"])).map(list)
        if schema.get("maxItems") == 0:
            return st.just([])
        return st.lists(from_schema(schema.get("items", {}), defs), max_size=2)
    assert kinds == "object"
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    fixed = st.fixed_dictionaries(
        {k: from_schema(s, defs) for k, s in properties.items() if k in required},
        optional={k: from_schema(s, defs) for k, s in properties.items() if k not in required},
    )
    extra = schema.get("additionalProperties", True)
    if extra is False:
        return fixed
    names = st.text(max_size=4).filter(lambda k: k not in properties)
    values = JSON if extra is True else from_schema(extra, defs)
    return st.tuples(fixed, st.dictionaries(names, values, max_size=2)).map(
        lambda pair: {**pair[1], **pair[0]}
    )


JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-100, 100) | st.floats(-1e6, 1e6) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def wide(
    line: Line,
    nodes: list[Node],
    mode: Literal["fast", "slow"],
    level: Level | None,
    options: Options,
    span: tuple[int, float],
    note: Annotated[str, "free text"] = "",
    scale: float = 1.0,
    **tags: Color,
) -> None:
    """A tool with most of the supported annotations at once."""
    RECEIVED.append({"line": line, "nodes": nodes, "level": level, "options": options})
    RECEIVED[-1].update(mode=mode, span=span, tags=tags)


RECEIVED: list[dict[str, Any]] = []
WIDE = Tool(wide)
WIDE_SCHEMA = WIDE.parameters
VALIDATOR = jsonschema.Draft202012Validator(WIDE_SCHEMA)
VALID_ARGUMENTS = from_schema(WIDE_SCHEMA, WIDE_SCHEMA["$defs"])


@settings(max_examples=150, deadline=None)
@given(VALID_ARGUMENTS)
def test_arguments_drawn_from_the_schema_validate_and_convert(arguments: dict[str, Any]) -> None:
    """Every value the derived schema admits passes, and the handler gets the annotated types."""
    RECEIVED.clear()
    assert VALIDATOR.is_valid(arguments)
    assert dispatch(ToolRegistry([WIDE]), "wide", **arguments) == {"status": "ok", "content": None}
    (got,) = RECEIVED
    assert isinstance(got["line"], Line)
    assert isinstance(got["line"].start, Point)
    assert isinstance(got["line"].color, Color)
    assert isinstance(got["line"].tags, tuple)
    assert all(isinstance(node, Node) for node in got["nodes"])
    assert got["level"] is None or isinstance(got["level"], Level)
    assert isinstance(got["span"], tuple)
    assert type(got["span"][0]) is int
    assert all(isinstance(color, Color) for color in got["tags"].values())
    if "color" in got["options"]:
        assert isinstance(got["options"]["color"], Color)


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """Valid arguments with one key replaced by any JSON, dropped, or added."""
    arguments = dict(draw(VALID_ARGUMENTS))
    key = draw(st.sampled_from([*sorted(arguments), "line", "extra"]))
    action = draw(st.sampled_from(["replace", "drop"]))
    if action == "drop":
        arguments.pop(key, None)
    else:
        arguments[key] = draw(JSON)
    return arguments


@settings(max_examples=200, deadline=None)
@given(mutated())
def test_values_violating_the_schema_never_reach_the_handler(arguments: dict[str, Any]) -> None:
    """invalid_arguments exactly when the schema says no; then the handler does not run."""
    RECEIVED.clear()
    outcome = dispatch(ToolRegistry([WIDE]), "wide", **arguments)
    if VALIDATOR.is_valid(arguments):
        assert outcome["status"] == "ok"
        assert len(RECEIVED) == 1
    else:
        assert outcome["status"] == "invalid_arguments"
        assert outcome["content"]
        assert RECEIVED == []


# -- property: derived tools always publish, and accepted values arrive typed ---------

NAMES = st.sampled_from(["C", "Café", "a/b", "a~b"])
# Lone surrogates (a quarter of the time): valid Python text that no JSON document can hold.
TEXT = st.one_of(*[st.text(max_size=4)] * 3, st.sampled_from(["\ud800", "a\udfff"]))
ONE_LINE = TEXT.filter(lambda text: "\n" not in text)  # a docstring's whole first paragraph
INTEGERS = st.integers() | st.sampled_from([2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1])
LITERALS = st.none() | st.booleans() | INTEGERS | TEXT
ENUM_VALUES = LITERALS | st.floats()  # NaN and infinities included
ENUMS = itertools.count()
make_typed_dict: Any = TypedDict  # called with data, which mypy cannot check


def make_enum(values: list[Any]) -> type[enum.Enum]:
    members = {f"M{i}": value for i, value in enumerate(values)}
    return typing.cast("type[enum.Enum]", enum.Enum(f"E{next(ENUMS)}", members))


def make_attrs(spec: tuple[list[Any], str, str]) -> type:
    types, doc, name = spec
    # attrs reads type=None as "not annotated": None is spelled NoneType here
    fields = {
        f"f{i}": attrs.field(type=type(None) if t is None else t) for i, t in enumerate(types)
    }
    cls = attrs.make_class(name, fields, frozen=True)
    cls.__doc__ = doc
    return cls


def grow(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        inner.map(lambda t: list[t]),  # type: ignore[valid-type]
        inner.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
        inner.map(lambda t: tuple[t, ...]),  # type: ignore[valid-type]
        st.lists(inner, max_size=3).map(lambda ts: tuple[tuple(ts)]),  # type: ignore[misc]
        st.tuples(inner, inner).map(lambda pair: typing.Union[pair]),  # noqa: UP007
        st.tuples(inner, TEXT).map(lambda pair: Annotated[pair[0], pair[1]]),
        st.tuples(st.lists(inner, min_size=1, max_size=3), ONE_LINE, NAMES).map(make_attrs),
        st.builds(
            make_typed_dict, NAMES, st.dictionaries(TEXT, inner, max_size=3), total=st.booleans()
        ),
    )


ANNOTATIONS = st.recursive(
    st.sampled_from([int, float, str, bool, None, Any, list, dict, tuple])
    | st.lists(LITERALS, min_size=1, max_size=3).map(lambda values: Literal[tuple(values)])
    | st.lists(ENUM_VALUES, min_size=1, max_size=3).map(make_enum),
    grow,
    max_leaves=6,
)


def published(annotation: Any) -> Iterator[object]:
    """The values of an annotation that its schema carries (the README's table says which)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        yield from [note for note in annotation.__metadata__ if isinstance(note, str)][:1]
        yield from published(args[0])
    elif origin is Literal:
        yield from args
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        yield from (member.value for member in annotation)
    elif isinstance(annotation, type) and attrs.has(annotation):
        yield annotation.__doc__
        for field in attrs.fields(annotation):
            yield from published(field.type)
    elif typing.is_typeddict(annotation):
        # include_extras: a key's Annotated description is published too
        for key, hint in typing.get_type_hints(annotation, include_extras=True).items():
            yield key
            yield from published(hint)
    else:
        for arg in args:
            yield from published(arg)


def has_json_form(value: object) -> bool:
    """What orjson writes without raising, and without turning NaN or infinity into null."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return not (isinstance(value, float) and not math.isfinite(value))


def conforms(value: Any, annotation: Any) -> bool:
    """Whether a handler asking for ``annotation`` got a value of that type."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any:
        return True
    if origin is Annotated:
        return conforms(value, args[0])
    if annotation is None or annotation is type(None):
        return value is None
    if annotation is float:
        return type(value) in (int, float)  # an int is a float to a type checker
    if annotation is int:
        return type(value) is int and -(2**63) <= value < 2**64
    if annotation in (str, bool):
        return type(value) is annotation
    if origin is typing.Union:
        return any(conforms(value, arg) for arg in args)
    if origin is Literal:
        return any(type(value) is type(arg) and value == arg for arg in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return isinstance(value, annotation)
    if annotation is list or origin is list:
        return type(value) is list and all(conforms(v, args[0] if args else Any) for v in value)
    if annotation is dict or origin is dict:
        item = args[1] if args else Any
        return type(value) is dict and all(
            type(k) is str and conforms(v, item) for k, v in value.items()
        )
    if annotation is tuple or origin is tuple:
        if type(value) is not tuple:
            return False
        if annotation is tuple or (len(args) == 2 and args[1] is Ellipsis):
            return all(conforms(v, args[0] if args else Any) for v in value)
        return len(value) == len(args) and all(map(conforms, value, args))
    if attrs.has(annotation):
        return isinstance(value, annotation) and all(
            conforms(getattr(value, f.name), f.type) for f in attrs.fields(annotation)
        )
    assert typing.is_typeddict(annotation)
    hints = typing.get_type_hints(annotation)
    return (
        type(value) is dict
        and annotation.__required_keys__ <= value.keys() <= hints.keys()
        and all(conforms(v, hints[k]) for k, v in value.items())
    )


@settings(max_examples=300, deadline=None)
@given(ANNOTATIONS, TEXT, st.data())
def test_derived_tools_publish_and_accepted_values_arrive_typed(
    annotation: Any, description: str, data: st.DataObject
) -> None:
    """For any supported annotation: the tool is refused at definition exactly when its schema
    would carry a value with no JSON form; otherwise its parameters and every spec format
    serialize, a value drawn from the schema is accepted, and what the handler receives
    (from that value or from any JSON that is accepted) has the annotated type."""
    received: list[Any] = []

    def handler(value):  # type: ignore[no-untyped-def] # annotated below, as a real object
        received.append(value)

    handler.__annotations__ = {"value": annotation}
    if not all(map(has_json_form, [description, *published(annotation)])):
        with pytest.raises(TypeError, match=r"cannot be published as JSON|its description"):
            Tool(handler, description=description)
        return
    tool = Tool(handler, description=description)
    registry = ToolRegistry([tool])
    orjson.dumps(tool.parameters)
    for format in typing.get_args(agentloop.engine.SpecFormat):
        orjson.dumps(registry.specs(format))

    schema = tool.parameters
    valid = data.draw(from_schema(schema["properties"]["value"], schema.get("$defs", {})))
    assert dispatch(registry, "handler", value=valid) == {"status": "ok", "content": None}
    anything = data.draw(JSON | st.sampled_from([1e300, -1e19, 1e19, 2.0**64]))
    if dispatch(registry, "handler", value=anything)["status"] == "ok":
        assert len(received) == 2
    assert all(conforms(value, annotation) for value in received), received


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ('{"a": 1,', "they are not valid JSON (Expecting property name"),
        ("[1, 2]", "they are a JSON array"),
        ('"two"', "they are a JSON string"),
        ("null", "they are JSON null"),
        ('{"a": 1, "b": 2}', "they arrived as text, not as an object"),
        ('{"a": 1e999999}', "they are not valid JSON (1e999999 is beyond a float's range"),
        ('{"a": NaN}', "they are not valid JSON (NaN is not JSON"),
        ('{"a": 99999999999999999999999}', "they are not JSON a run can record (Integer exceeds"),
    ],
)
async def test_text_arguments_are_invalid_arguments(raw: str, why: str) -> None:
    """A str is a provider's raw arguments that were not a JSON object: invalid_arguments
    saying why and what was received, from dispatch and adispatch alike; no handler runs."""
    handler = Recorder()
    registry = ToolRegistry({"add": handler})
    text_call = {"kind": "call", "id": "c1", "name": "add", "arguments": raw}
    for outcome in (registry.dispatch(text_call), await registry.adispatch(text_call)):
        assert outcome["status"] == "invalid_arguments"
        (problem,) = outcome["content"]
        assert problem["path"] == ""
        assert problem["message"].startswith(
            f"expected the arguments to be a JSON object, but {why}"
        )
        assert problem["message"].endswith(f"; received {orjson.dumps(raw).decode()}")
    assert handler.calls == []


def test_text_arguments_are_checked_after_the_tool_name_and_shown_cut_short() -> None:
    """An unknown name wins over text arguments; long text is cut at 200 characters, and a
    lone surrogate is escaped so that the outcome stays JSON."""
    registry = ToolRegistry({"add": Recorder()})
    unknown = registry.dispatch({"kind": "call", "id": "c1", "name": "nope", "arguments": "{"})
    assert unknown["status"] == "unknown_tool"
    long = registry.dispatch({"kind": "call", "id": "c2", "name": "add", "arguments": "x" * 300})
    message = long["content"][0]["message"]
    assert message.endswith(f'; received "{"x" * 200}" (cut at 200 characters)')
    odd = registry.dispatch({"kind": "call", "id": "c3", "name": "add", "arguments": "\ud800"})
    assert odd["status"] == "invalid_arguments"
    assert odd["content"][0]["message"].endswith('; received "\\ud800"')
    orjson.dumps(odd)


def test_remove_takes_a_tool_out_and_names_a_missing_one() -> None:
    """remove() returns the tool, forgets an async one's name too, and raises KeyError otherwise."""

    async def later(x: int) -> int:
        return x

    registry = agentloop.ToolRegistry([later, agentloop.Tool(lambda: 1, name="one")])
    before = registry.async_tools
    removed = registry.remove("later")
    assert (before, removed.name, registry.async_tools) == (("later",), "later", ())
    assert "later" not in registry
    assert [spec["name"] for spec in registry.specs()] == ["one"]
    with pytest.raises(KeyError, match="expected the name of a tool in the registry, got 'later'"):
        registry.remove("later")


def test_dispatch_refuses_what_is_not_a_call() -> None:
    """A caller's own call without 'name' or 'arguments' is a TypeError naming what it got."""
    registry = ToolRegistry([add])
    with pytest.raises(TypeError, match=r"^expected a call: a dict with 'name' and 'arguments', "
                       r"got keys \['name'\]$"):  # fmt: skip
        registry.dispatch({"name": "add"})
    with pytest.raises(TypeError, match=r"got str$"):
        registry.review("add")  # type: ignore[arg-type]
    assert registry.dispatch({"name": "add", "arguments": {"a": 1, "b": 2}}) == {
        "status": "ok",
        "content": 3,
    }


def test_a_registry_refuses_a_tool_in_a_mapping_as_the_loop_does() -> None:
    """A Tool names itself: a mapping of them is refused, saying to pass a list."""
    with pytest.raises(TypeError, match=r"^tool 'x': expected a callable handler, got a Tool, "
                       r"which names itself: pass Tools as a list"):  # fmt: skip
        ToolRegistry({"x": Tool(lambda: 1, name="x")})  # type: ignore[arg-type]


def test_a_tool_name_given_positionally_to_the_decorator_says_to_use_name() -> None:
    """@registry.tool("plus") is refused, with the keyword form to write instead."""
    registry = ToolRegistry()
    with pytest.raises(TypeError, match=r"write @registry.tool\(name='plus'\)$"):
        registry.tool("plus")  # type: ignore[call-overload]


def test_dates_times_and_uuids_are_parameters_as_text_in_their_format() -> None:
    """datetime, date, time and UUID: a string with its format, converted from ISO 8601 (or
    a UUID's text); other text is invalid_arguments saying what was expected."""
    received: list[Any] = []

    def book(
        at: datetime.datetime, day: datetime.date, hour: datetime.time, ref: uuid.UUID
    ) -> None:
        received.extend((at, day, hour, ref))

    registry = ToolRegistry([book])
    assert registry["book"].parameters["properties"] == {
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "hour": {"type": "string", "format": "time"},
        "ref": {"type": "string", "format": "uuid"},
    }
    arguments = {
        "at": "2026-12-02T13:30:00+00:00",
        "day": "2026-12-03",
        "hour": "09:05",
        "ref": "00000000-0000-0000-0000-000000000001",
    }
    assert dispatch(registry, "book", **arguments)["status"] == "ok"
    assert received == [
        datetime.datetime(2026, 12, 2, 13, 30, tzinfo=datetime.UTC),
        datetime.date(2026, 12, 3),
        datetime.time(9, 5),
        uuid.UUID(int=1),
    ]
    refused = dispatch(registry, "book", **{**arguments, "day": "tomorrow"})
    assert refused == {
        "status": "invalid_arguments",
        "content": [
            {"path": "day", "message": "ValueError: expected an ISO 8601 date, got 'tomorrow'"}
        ],
    }
