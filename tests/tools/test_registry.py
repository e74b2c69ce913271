"""The tool registry: derived schemas, validation, conversion, policies and outcomes."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import decimal
import enum
import functools
import itertools
import math
import threading
import typing
import uuid
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

import annotated_types
import attrs
import jsonschema
import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Decision, Loop, Tool, ToolRegistry, allow, deny
from agentloop.testing import ScriptedModel
from tests.support.helpers import Recorder, add, call, final, kinds, pydantic_says, validator_says

Call = dict[str, Any]

#: The schemas whose words (the validator's own) the outcomes below carry.
INTEGER = {"type": "integer"}
CLOSED = {"properties": {}, "additionalProperties": False}


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Point:
    """A point on the plane."""

    x: int
    y: int = 0


@attrs.frozen
class Line:
    start: Point
    end: Point
    color: Color = Color.RED
    tags: tuple[str, ...] = ()


@attrs.frozen
class Node:
    value: int
    children: list[Node] = attrs.field(factory=list)


@attrs.frozen
class Positive:
    n: int = attrs.field(validator=attrs.validators.gt(0))


class Options(TypedDict):
    depth: int
    color: NotRequired[Color]


@dataclasses.dataclass
class Report:
    level: Level
    points: tuple[Point, ...]


def dispatch(registry: ToolRegistry, name: str, /, **arguments: Any) -> dict[str, Any]:
    """Dispatch one call the way the engine would."""
    return registry.dispatch({"kind": "call", "id": "c1", "name": name, "arguments": arguments})


def tool_for(annotation: object) -> tuple[Tool, list[Any]]:
    """A tool with one parameter ``value: annotation`` that records what it receives."""
    received: list[Any] = []

    def handler(value):  # type: ignore[no-untyped-def] # annotated below, as real objects
        received.append(value)

    handler.__annotations__ = {"value": annotation}
    return Tool(handler), received


# -- schema derivation, one annotation at a time --------------------------------------

REF = {"$ref": "#/$defs/Point"}
POINT_DEF = {
    "type": "object",
    "description": "A point on the plane.",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
    "required": ["x"],
    "additionalProperties": False,
}

# annotation, its derived schema, a valid value, what the handler receives, an invalid value
CASES: list[tuple[object, dict[str, Any], Any, Any, Any]] = [
    (int, {"type": "integer"}, 3, 3, "3"),
    (float, {"type": "number"}, 2.5, 2.5, "2.5"),
    (str, {"type": "string"}, "a", "a", 1),
    (bool, {"type": "boolean"}, True, True, 1),
    (None, {"type": "null"}, None, None, 0),
    (list[int], {"type": "array", "items": {"type": "integer"}}, [1, 2], [1, 2], [1, "2"]),
    (list, {"type": "array"}, [1, "a"], [1, "a"], {"a": 1}),
    (
        dict[str, float],
        {"type": "object", "additionalProperties": {"type": "number"}},
        {"a": 1.5},
        {"a": 1.5},
        {"a": "x"},
    ),
    (dict, {"type": "object"}, {"a": [1]}, {"a": [1]}, [1]),
    (
        tuple[int, str],
        {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
        },
        [1, "a"],
        (1, "a"),
        [1, "a", 2],
    ),
    (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}, [1, 2], (1, 2), ["a"]),
    (tuple, {"type": "array"}, [1, "a"], (1, "a"), "ab"),
    (int | None, {"type": ["integer", "null"]}, None, None, "1"),
    (Optional[str], {"type": ["string", "null"]}, "a", "a", 1),  # noqa: UP045
    (int | str, {"type": ["integer", "string"]}, "a", "a", 1.5),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}, "b", "b", "c"),
    (Literal[1, "x"], {"enum": [1, "x"]}, "x", "x", 2),
    (Color, {"type": "string", "enum": ["red", "blue"]}, "blue", Color.BLUE, "green"),
    (Level, {"type": "integer", "enum": [1, 2]}, 2, Level.HIGH, 3),
    (
        Annotated[int, "how many"],
        {"type": "integer", "description": "how many"},
        4,
        4,
        "four",
    ),
    (Point, REF, {"x": 1}, Point(1), {"x": 1, "z": 2}),
    (Point | None, {"anyOf": [REF, {"type": "null"}]}, {"x": 1, "y": 2}, Point(1, 2), {"y": 2}),
    (list[Point], {"type": "array", "items": REF}, [{"x": 1}], [Point(1)], [{"x": "1"}]),
    (
        Options,
        {"$ref": "#/$defs/Options"},
        {"depth": 1, "color": "red"},
        {"depth": 1, "color": Color.RED},
        {"color": "red"},
    ),
    (Any, {}, {"any": ["json"]}, {"any": ["json"]}, None),
]


@pytest.mark.parametrize(
    ("annotation", "schema", "valid", "received", "invalid"),
    CASES,
    ids=[repr(case[0]).replace("typing.", "") for case in CASES],
)
def test_each_annotation(
    annotation: object, schema: dict[str, Any], valid: Any, received: Any, invalid: Any
) -> None:
    """The derived schema, a value that passes (converted for the handler) and one that fails."""
    tool, seen = tool_for(annotation)
    registry = ToolRegistry([tool])

    assert tool.parameters["properties"]["value"] == schema
    assert tool.parameters["required"] == ["value"]
    jsonschema.Draft202012Validator.check_schema(tool.parameters)

    assert dispatch(registry, "handler", value=valid) == {"status": "ok", "content": None}
    assert seen == [received]
    assert type(seen[0]) is type(received)
    if invalid is not None:
        outcome = dispatch(registry, "handler", value=invalid)
        assert outcome["status"] == "invalid_arguments"
        assert outcome["content"][0]["path"].startswith("value")
        assert len(seen) == 1  # the handler did not run


def test_nested_classes_go_to_defs_once() -> None:
    """attrs classes and TypedDicts are described once under $defs and referenced."""

    def draw(line: Line, more: list[Line], options: Options) -> None:
        """Draw lines."""

    parameters = Tool(draw).parameters
    assert parameters["properties"]["line"] == {"$ref": "#/$defs/Line"}
    assert parameters["properties"]["more"] == {
        "type": "array",
        "items": {"$ref": "#/$defs/Line"},
    }
    assert set(parameters["$defs"]) == {"Line", "Point", "Options"}
    assert parameters["$defs"]["Point"] == POINT_DEF
    assert parameters["$defs"]["Line"] == {
        "type": "object",
        "properties": {
            "start": REF,
            "end": REF,
            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
            "tags": {"type": "array", "items": {"type": "string"}, "default": []},
        },
        "required": ["start", "end"],
        "additionalProperties": False,
    }
    assert parameters["$defs"]["Options"]["required"] == ["depth"]  # NotRequired is honoured


def test_recursive_class() -> None:
    """A recursive attrs class refers to itself; nested values are converted all the way down."""
    seen: list[Node] = []

    def walk(tree: Node) -> int:
        seen.append(tree)
        return tree.value

    registry = ToolRegistry([walk])
    tree = {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}
    assert registry["walk"].parameters["$defs"]["Node"]["properties"]["children"] == {
        "type": "array",
        "items": {"$ref": "#/$defs/Node"},
    }
    assert dispatch(registry, "walk", tree=tree)["status"] == "ok"
    assert seen == [Node(1, [Node(2, [Node(3)])])]
    bad = dispatch(registry, "walk", tree={"value": 1, "children": [{"value": "2"}]})
    assert bad["content"] == [
        {"path": "tree.children[0].value", "message": validator_says(INTEGER, "2")}
    ]


def test_nested_conversion() -> None:
    """An attrs parameter receives an instance, with enum members and tuples inside."""
    seen: list[Any] = []

    def draw(line: Line, palette: dict[str, Color], pair: tuple[Point, Level]) -> None:
        seen.extend([line, palette, pair])

    registry = ToolRegistry([draw])
    outcome = dispatch(
        registry,
        "draw",
        line={"start": {"x": 1}, "end": {"x": 2, "y": 3}, "color": "blue", "tags": ["a"]},
        palette={"sky": "blue"},
        pair=[{"x": 0}, 1],
    )
    assert outcome == {"status": "ok", "content": None}
    assert seen == [
        Line(Point(1), Point(2, 3), Color.BLUE, ("a",)),
        {"sky": Color.BLUE},
        (Point(0), Level.LOW),
    ]


def test_union_of_classes_picks_the_matching_member() -> None:
    """With several converting members, a value is converted by the first it is valid for."""
    seen: list[Any] = []

    def pick(shape: Point | Line | Color) -> None:
        seen.append(shape)

    registry = ToolRegistry([pick])
    line = {"start": {"x": 1}, "end": {"x": 2}}
    for value in ({"x": 5}, line, "red"):
        assert dispatch(registry, "pick", shape=value)["status"] == "ok"
    assert seen == [Point(5), Line(Point(1), Point(2)), Color.RED]


def test_union_members_of_one_json_type_are_told_apart() -> None:
    """Members are skipped by JSON type, yet the first valid one still converts the value."""
    seen: list[Any] = []

    def pick(
        value: Level | int | float | list[Point] | Point | Annotated[Color | None, "a colour"],
    ) -> None:
        seen.append(value)

    registry = ToolRegistry([pick])
    values = [2, 3, 2.0, 2.5, [{"x": 1}], {"x": 5}, "red", None]
    for value in values:
        assert dispatch(registry, "pick", value=value)["status"] == "ok"
    assert seen == [Level.HIGH, 3, Level.HIGH, 2.5, [Point(1)], Point(5), Color.RED, None]
    assert [type(v) for v in seen[1:4]] == [int, Level, float]


def test_union_value_of_a_type_json_lacks_is_checked_against_every_member() -> None:
    """A direct dispatch may pass a tuple where JSON has arrays: still converted, no crash."""
    seen: list[Any] = []

    def pick(value: Point | Line | list[Level]) -> None:
        seen.append(value)

    assert dispatch(ToolRegistry([pick]), "pick", value=(1, 2))["status"] == "ok"
    assert seen == [[Level.LOW, Level.HIGH]]


def test_integral_float_becomes_an_int() -> None:
    """JSON Schema counts 2.0 as an integer; the handler still gets an int."""
    seen: list[Any] = []

    def count(n: int, where: Point) -> None:
        seen.extend([n, where.x])

    assert dispatch(ToolRegistry([count]), "count", n=2.0, where={"x": 3.0})["status"] == "ok"
    assert seen == [2, 3]
    assert [type(v) for v in seen] == [int, int]


def test_integral_float_for_an_int_literal_becomes_an_int() -> None:
    """Literal[1, 2] admits 2.0 (JSON Schema compares numbers by value); the handler gets 2."""
    tool, seen = tool_for(Literal[1, 2, "x"] | None)
    assert dispatch(ToolRegistry([tool]), "handler", value=2.0)["status"] == "ok"
    assert seen == [2]
    assert type(seen[0]) is int


def test_defaults_are_not_required_and_shown_when_json() -> None:
    """A parameter with a default is optional; its default appears when it has a JSON form."""
    marker = object()
    seen: list[Any] = []

    def search(
        query: str,
        limit: int = 10,
        color: Color = Color.BLUE,
        at: tuple[int, int] = (0, 0),
        opaque: Any = marker,
        maybe: str | None = None,
    ) -> None:
        seen.append((query, limit, color, at, opaque, maybe))

    tool = Tool(search, parameters=None)
    properties = tool.parameters["properties"]
    assert tool.parameters["required"] == ["query"]
    assert properties["limit"] == {"type": "integer", "default": 10}
    assert properties["color"]["default"] == "blue"
    assert properties["at"]["default"] == [0, 0]
    assert "default" not in properties["opaque"]
    assert properties["maybe"] == {"type": ["string", "null"], "default": None}
    assert dispatch(ToolRegistry([tool]), "search", query="q")["status"] == "ok"
    assert seen == [("q", 10, Color.BLUE, (0, 0), marker, None)]


def test_annotated_constraints_are_published_and_enforced() -> None:
    """annotated_types' and pydantic's constraints become the schema's keywords, so a call
    that breaks one is invalid_arguments and the handler never runs; a Field's description
    is the parameter's."""
    seen: list[Any] = []

    def tune(
        level: Annotated[int, pydantic.Field(ge=0, le=10, description="0 to 10")],
        cents: pydantic.conint(gt=0),  # type: ignore[valid-type]
        name: Annotated[str, annotated_types.MaxLen(8)],
        code: pydantic.constr(pattern=r"^[A-Z]{3}$"),  # type: ignore[valid-type]
        tags: Annotated[list[str], pydantic.Field(min_length=1)],
        step: Annotated[int, annotated_types.MultipleOf(5)] = 5,
        ratio: Annotated[float, annotated_types.Interval(ge=0, lt=1)] = 0.5,
    ) -> None:
        seen.append((level, cents, name, code, tags, step, ratio))

    tool = Tool(tune)
    properties = tool.parameters["properties"]
    assert properties["level"] == {
        "type": "integer",
        "minimum": 0,
        "maximum": 10,
        "description": "0 to 10",
    }
    assert properties["cents"] == {"type": "integer", "exclusiveMinimum": 0}
    assert properties["name"] == {"type": "string", "maxLength": 8}
    assert properties["code"] == {"type": "string", "pattern": "^[A-Z]{3}$"}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}, "minItems": 1}
    assert properties["step"] == {"type": "integer", "multipleOf": 5, "default": 5}
    assert properties["ratio"] == {
        "type": "number",
        "minimum": 0,
        "exclusiveMaximum": 1,
        "default": 0.5,
    }
    registry = ToolRegistry([tool])
    good = {"level": 3, "cents": 1, "name": "ada", "code": "EUR", "tags": ["a"]}
    assert dispatch(registry, "tune", **good)["status"] == "ok"
    published = registry["tune"].parameters["properties"]
    for broken, path, keyword in (
        ({"level": 50}, "level", "maximum"),
        ({"cents": -500}, "cents", "exclusiveMinimum"),
        ({"name": "far too long"}, "name", "maxLength"),
        ({"code": "eur"}, "code", "pattern"),
        ({"tags": []}, "tags", "minItems"),
        ({"step": 7}, "step", "multipleOf"),
        ({"ratio": 1.0}, "ratio", "exclusiveMaximum"),
        ({"level": 2**70}, "level", None),
    ):
        outcome = dispatch(registry, "tune", **{**good, **broken})
        assert outcome["status"] == "invalid_arguments", broken
        assert [p["path"] for p in outcome["content"]] == [path]
        # The published keyword refuses it, in the validator's words; past 64 bits, in ours.
        message = "expected an integer within 64 bits"
        if keyword is not None:
            assert keyword in published[path], (path, published[path])
            message = validator_says(published[path], broken[path])
        assert outcome["content"][0]["message"].startswith(message), outcome
    assert len(seen) == 1

    def both(n: Annotated[int, pydantic.Field(description="the Field's", ge=1), "the str"]) -> None:
        """A str in the metadata is the description, wherever it stands."""

    assert Tool(both).parameters["properties"]["n"] == {
        "type": "integer",
        "minimum": 1,
        "description": "the str",
    }


def test_a_constraint_no_json_schema_can_say_is_refused_when_the_tool_is_made() -> None:
    """A predicate (or a transformation such as constr(to_upper=True)) would be dropped: the
    tool is refused, naming it, rather than published without it."""

    def odd(n: Annotated[int, annotated_types.Predicate(lambda n: n % 2 == 1)]) -> None:
        """Odd."""

    def shout(s: pydantic.constr(to_upper=True)) -> None:  # type: ignore[valid-type]
        """Shout."""

    with pytest.raises(TypeError, match=r"tool 'odd': parameter 'n': .*Predicate.* \(func\)"):
        Tool(odd)
    with pytest.raises(TypeError, match=r"tool 'shout': parameter 's': .* \(to_upper\)"):
        Tool(shout)


def test_a_method_taken_from_its_class_is_refused_and_a_bound_one_taken() -> None:
    """Unbound, its self would be a parameter the model is asked for: refused, saying how."""
    tools = ToolRegistry()

    class Shop:
        def price(self, item: str) -> int:
            """The price of an item."""
            return len(item)

    with pytest.raises(TypeError, match=r"^tool 'price': its first parameter is 'self', unan"):
        tools.tool(Shop.price)
    tools.add(Shop().price)
    assert tools["price"].parameters["required"] == ["item"]
    assert dispatch(tools, "price", item="tea") == {"status": "ok", "content": 3}


def test_a_default_its_annotation_refuses_is_refused_when_the_tool_is_made() -> None:
    """The schema would publish it: a model told a default the tool itself calls invalid."""

    def limit(n: int = None) -> None:  # type: ignore[assignment]  # noqa: RUF013 - the slip
        """Limit."""

    def point(at: tuple[int, int] = (0, "x")) -> None:  # type: ignore[assignment]
        """Point."""

    def mode(how: Literal["fast", "slow"] = "fastest") -> None:  # type: ignore[assignment]
        """Mode."""

    for handler, said in (
        (
            limit,
            "'n': its default None does not match its annotation: "
            f"{validator_says(INTEGER, None)}; one that may be None is annotated T | None",
        ),
        (
            point,
            "'at': its default [0, 'x'] does not match its annotation at at[1]: "
            + validator_says(INTEGER, "x"),
        ),
        (
            mode,
            "'how': its default 'fastest' does not match its annotation: "
            + validator_says({"enum": ["fast", "slow"]}, "fastest"),
        ),
    ):
        with pytest.raises(TypeError) as raised:
            Tool(handler)
        assert str(raised.value) == f"tool {handler.__name__!r}: parameter " + said
    # A given schema is the author's own: its defaults are published as given.
    given = {"type": "object", "properties": {"n": {"type": "integer", "default": None}}}
    assert Tool(limit, parameters=given).parameters == given


def test_unannotated_and_kwargs() -> None:
    """An unannotated parameter takes any JSON; **kwargs: T admits extra names of type T."""
    seen: list[Any] = []

    def loose(a, **extra: int) -> None:  # type: ignore[no-untyped-def]
        seen.append((a, extra))

    tool = Tool(loose)
    assert tool.parameters == {
        "type": "object",
        "properties": {"a": {}},
        "required": ["a"],
        "additionalProperties": {"type": "integer"},
    }
    registry = ToolRegistry([tool])
    assert dispatch(registry, "loose", a=[1], b=2, c=3.0)["status"] == "ok"
    assert seen == [([1], {"b": 2, "c": 3})]
    outcome = dispatch(registry, "loose", a=1, b="x")
    assert outcome["content"] == [{"path": "b", "message": validator_says(INTEGER, "x")}]


def google(place: str, days: int = 1, **extra: str) -> str:
    """Forecast the weather.

    Args:
        place: The city,
            as the user wrote it.
        days: How many days ahead.
        extra: Anything else to pass on.
        missing: Not a parameter: ignored.
    """
    return place


def sphinx(place: str, days: Annotated[int, "1 to 7"] = 1) -> str:
    """Forecast the weather.

    :param place: The city.
    :param days: Overridden by the annotation.
    """
    return place


def numpy(place: str) -> str:
    """Forecast the weather.

    Parameters
    ----------
    place : str
        The city.
    """
    return place


def test_a_docstring_describes_the_parameters_in_any_of_three_styles() -> None:
    """Google, reST and NumPy sections give each property its description, on one line;
    an Annotated description wins; the tool's description stays the summary."""
    properties = Tool(google).parameters["properties"]
    assert properties["place"] == {
        "type": "string",
        "description": "The city, as the user wrote it.",
    }
    assert properties["days"] == {
        "type": "integer",
        "description": "How many days ahead.",
        "default": 1,
    }
    assert "missing" not in properties
    assert Tool(google).parameters["additionalProperties"] == {
        "type": "string",
        "description": "Anything else to pass on.",
    }
    assert Tool(google).description == "Forecast the weather."
    sphinx_properties = Tool(sphinx).parameters["properties"]
    assert sphinx_properties["place"]["description"] == "The city."
    assert sphinx_properties["days"]["description"] == "1 to 7"
    assert Tool(numpy).parameters["properties"]["place"]["description"] == "The city."
    plain = Tool(lambda place: place, name="f")
    assert "description" not in plain.parameters["properties"]["place"]


def test_additional_properties_are_refused_by_default() -> None:
    """A name the signature does not have is a violation, not silently dropped."""
    outcome = dispatch(ToolRegistry([Tool(lambda a: a, name="f")]), "f", a=1, b=2)
    assert outcome["status"] == "invalid_arguments"
    assert "'b' was unexpected" in outcome["content"][0]["message"]


def test_description_defaults_to_the_docstring_summary() -> None:
    """The description is the docstring's first paragraph on one line, or as given."""

    def documented() -> None:
        """Look something up
        in a table.

        Details the model does not need.
        """

    def bare() -> None:
        pass

    assert Tool(documented).description == "Look something up in a table."
    assert Tool(bare).description == ""
    assert Tool(bare, description="Does nothing.").description == "Does nothing."


def test_explicit_parameters_take_over() -> None:
    """A given schema is used as is; the handler receives plain JSON."""
    seen: list[Any] = []
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1}},
        "required": ["n"],
    }

    def handler(**kwargs: Any) -> None:
        seen.append(kwargs)

    registry = ToolRegistry([Tool(handler, name="h", parameters=schema)])
    assert registry["h"].parameters == schema
    assert dispatch(registry, "h", n=2, extra=[1])["status"] == "ok"
    assert seen == [{"n": 2, "extra": [1]}]
    assert dispatch(registry, "h", n=0)["content"] == [
        {"path": "n", "message": "0 is less than the minimum of 1"}
    ]


# -- definition-time errors -----------------------------------------------------------


@attrs.frozen
class HasSet:
    tags: set[str]


class Shape(enum.Enum):
    SQUARE = (1, 1)


def test_unsupported_annotations_fail_at_definition() -> None:
    """An unsupported annotation fails at definition, naming the tool, parameter and type."""
    cases: list[tuple[object, str]] = [
        (set[int], "unsupported annotation set[int]"),
        (datetime.timedelta, "unsupported annotation timedelta"),
        (object, "unsupported annotation object"),
        (dict[int, str], "dict[int, str]: JSON object keys are str"),
        (list[HasSet], "set[str] (at HasSet.tags)"),
        (Literal[Color.RED], "Literal values must be str, int, bool or None"),
        (Shape, "Enum values must be str, int, float, bool or None"),
        (Callable[[int], int], "unsupported annotation"),
    ]
    for annotation, message in cases:
        with pytest.raises(TypeError, match=r"tool 'handler': parameter 'value': ") as caught:
            tool_for(annotation)
        assert message in str(caught.value)
        assert "supported: int, float, str" in str(caught.value)


def test_annotations_are_resolved_per_parameter() -> None:
    """Only parameters' annotations matter: an unresolvable return annotation (say, a type
    imported under TYPE_CHECKING) is fine; an unresolvable parameter's is named at definition."""

    def handler(a, b=1):  # type: ignore[no-untyped-def] # annotated below, as strings
        return a

    handler.__annotations__ = {"a": "int", "return": "NotImported"}
    assert Tool(handler).parameters["properties"] == {"a": {"type": "integer"}, "b": {"default": 1}}
    handler.__annotations__ = {"a": "int", "b": "list[NotImported]"}
    with pytest.raises(
        TypeError,
        match=r"tool 'handler': parameter 'b': cannot resolve its annotation "
        r"'list\[NotImported\]': name 'NotImported' is not defined",
    ):
        Tool(handler)


def test_partials_and_callable_objects() -> None:
    """A partial is described by its function; a callable object by its own __call__."""

    def scale(value: float, factor: int) -> float:
        """Scale a value."""
        return value * factor

    class Wrapper:
        """Wraps a function (its ``func`` attribute is no partial's)."""

        def __init__(self, func: Callable[..., Any]) -> None:
            self.func = func

        def __call__(self, text: str) -> str:
            return text

    doubled = Tool(functools.partial(scale, factor=2), name="double")
    assert doubled.description == "Scale a value."
    assert doubled.parameters["properties"] == {
        "value": {"type": "number"},
        "factor": {"type": "integer", "default": 2},
    }
    wrapped = Tool(Wrapper(scale), name="wrapped")
    assert wrapped.parameters["properties"] == {"text": {"type": "string"}}
    assert wrapped.description == "Wraps a function (its ``func`` attribute is no partial's)."


def test_positional_only_and_star_args_fail_at_definition() -> None:
    """Arguments arrive by name, so *args and positional-only parameters are refused."""

    def star(*numbers: int) -> None:
        pass

    def slashed(a: int, /) -> None:
        pass

    with pytest.raises(TypeError, match=r"tool 'star': parameter 'numbers' is \*args"):
        Tool(star)
    with pytest.raises(TypeError, match=r"tool 'slashed': parameter 'a' is positional-only"):
        Tool(slashed)


def test_bad_definitions() -> None:
    """Names, handlers, schemas and policies are checked when the tool is defined."""

    def f(a: int) -> int:
        return a

    with pytest.raises(TypeError, match="expected tool names to be non-empty str, got ''"):
        Tool(f, name="")
    with pytest.raises(TypeError, match="tool 'x': expected a callable handler, got int"):
        Tool(3, name="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a callable handler, got int"):
        ToolRegistry([3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="expected name= for a handler without a __name__"):
        Tool(Recorder())
    with pytest.raises(TypeError, match="tool 'f': expected parameters to be a Draft 2020-12"):
        Tool(f, parameters={"type": "object", "properties": 3})
    with pytest.raises(
        TypeError, match="tool 'f': expected parameters to be a JSON Schema as a dict"
    ):
        Tool(f, parameters='{"type": "object"}')  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected parameters to describe an object"):
        Tool(f, parameters={"type": "array"})
    with pytest.raises(TypeError, match="tool 'f': expected policy to be callable, got str"):
        Tool(f, policy="deny")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected unique tool names, got 'f' twice"):
        ToolRegistry([f, Tool(f)])
    with pytest.raises(TypeError, match="expected a denial's reason to be a non-empty str, got ''"):
        deny("")
    with pytest.raises(TypeError, match="expected a denial's reason to be a non-empty str, got ''"):
        Decision(allowed=False)
    with pytest.raises(TypeError, match=r"expected Decision\.allowed to be a bool, got 'no'"):
        Decision(allowed="no")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"expected Decision\.reason to be a str, got None"):
        Decision(allowed=True, reason=None)  # type: ignore[arg-type]


def test_a_given_schema_is_read_in_the_dialect_its_schema_keyword_declares() -> None:
    """$schema chooses the rules: a Draft 7 tuple (items: [...]) and a Draft 4 exclusive bound
    (a bool) are taken and checked by their own draft; no $schema is 2020-12; a dialect
    jsonschema-rs does not know is refused, naming the ones it does."""

    def f(**arguments: object) -> object:
        return arguments

    draft7 = Tool(
        f,
        name="f",
        parameters={
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "pair": {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]}
            },
        },
    )
    assert draft7.problems({"pair": [1, "a"]}) == []
    assert [p["path"] for p in draft7.problems({"pair": ["a", 1]})] == ["pair[0]", "pair[1]"]
    draft4 = Tool(
        f,
        name="f",
        parameters={
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "object",
            "properties": {"n": {"type": "number", "minimum": 0, "exclusiveMinimum": True}},
        },
    )
    assert draft4.problems({"n": 0.5}) == []
    assert [p["path"] for p in draft4.problems({"n": 0})] == ["n"]
    with pytest.raises(TypeError, match="expected parameters to be a Draft 2020-12 JSON Schema"):
        Tool(f, name="f", parameters={"type": "object", "properties": {"p": {"items": [{}]}}})
    with pytest.raises(TypeError, match="expected parameters to be a Draft 7 JSON Schema, but"):
        Tool(
            f,
            name="f",
            parameters={
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "object",
                "required": 3,
            },
        )
    with pytest.raises(
        TypeError,
        match=r"tool 'f': expected parameters' \$schema to name a dialect agentloop validates "
        r"\(Draft 4, Draft 6, Draft 7, Draft 2019-09, Draft 2020-12; none means 2020-12\), "
        r"got 'http://json-schema.org/draft-03/schema#'",
    ):
        Tool(
            f,
            name="f",
            parameters={"$schema": "http://json-schema.org/draft-03/schema#", "type": "object"},
        )


class Huge(enum.Enum):
    BIG = 2**70


class NotANumber(enum.Enum):
    NAN = math.nan


class Infinite(enum.Enum):
    INF = -math.inf


@attrs.frozen
class Surrogate:
    x: int


Surrogate.__doc__ = "A docstring with a lone \ud800 surrogate."


ODD_KEY = TypedDict("ODD_KEY", {"\udfff": int})  # a key no JSON can hold


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        (
            Literal[2**64],
            "Literal[18446744073709551616] cannot be published as JSON: its value "
            "18446744073709551616: expected an integer within 64 bits, got ",  # the core's wording
        ),
        (
            Huge,
            "Huge cannot be published as JSON: its value 1180591620717411303424: "
            "expected an integer within 64 bits, got ",
        ),
        (
            Annotated[int, "\ud800"],
            "cannot be published as JSON: its description: expected text that is valid "
            "Unicode, got a lone surrogate at index 0",
        ),
        (
            NotANumber,
            "NotANumber cannot be published as JSON: its value nan: expected a finite number, "
            "got nan",
        ),
        (
            list[Infinite],
            "Infinite cannot be published as JSON: its value -inf: expected a finite number, "
            "got -inf",
        ),
        (
            Literal["ok", "\udc00"],
            "its value '\\udc00': expected text that is valid Unicode, got a lone surrogate",
        ),
        (
            Surrogate | None,
            "Surrogate cannot be published as JSON: its docstring: expected text "
            "that is valid Unicode, got a lone surrogate at index 24",
        ),
        (
            ODD_KEY,
            "cannot be published as JSON: its key: expected text that is valid Unicode",
        ),
    ],
    ids=[
        "Literal[2**64]",
        "Enum 2**70",
        "surrogate description",
        "Enum NaN",
        "Enum -inf",
        "surrogate Literal",
        "surrogate docstring",
        "surrogate key",
    ],
)
def test_values_with_no_json_form_are_refused_at_definition(
    annotation: object, message: str
) -> None:
    """A schema that could not be published (orjson would raise, or NaN would become null)
    fails when the tool is defined, naming the tool, the parameter and what is wrong."""
    with pytest.raises(TypeError, match=r"^tool 'handler': parameter 'value': ") as caught:
        tool_for(annotation)
    assert message in str(caught.value)


def test_names_and_descriptions_with_no_json_form_are_refused() -> None:
    """A tool's own name and description go into every spec, so they must be valid text."""
    with pytest.raises(TypeError, match=r"its name: expected text that is valid Unicode"):
        Tool(add, name="add\ud800")
    with pytest.raises(
        TypeError, match=r"^tool 'add': its description: expected text that is valid Unicode"
    ):
        Tool(add, description="\udcff")


Café = attrs.make_class("Café", {"x": attrs.field(type=int)}, frozen=True)
Slashed = attrs.make_class("a/b", {"y": attrs.field(type=str)}, frozen=True)


def test_class_names_are_made_safe_for_refs() -> None:
    """A class whose name a $ref cannot hold as is ('Café', 'a/b') is described under a
    safe name, and its values are still checked and converted."""
    seen: list[Any] = []

    def place(here: Café, there: Slashed) -> None:  # type: ignore[valid-type]
        seen.append((here, there))

    tool = Tool(place)
    assert tool.parameters["properties"] == {
        "here": {"$ref": "#/$defs/Caf_"},
        "there": {"$ref": "#/$defs/a_b"},
    }
    registry = ToolRegistry([tool])
    assert dispatch(registry, "place", here={"x": 1}, there={"y": "a"})["status"] == "ok"
    assert seen == [(Café(x=1), Slashed(y="a"))]
    assert dispatch(registry, "place", here={"x": "1"}, there={"y": "a"})["content"] == [
        {"path": "here.x", "message": validator_says(INTEGER, "1")}
    ]


# -- outcomes -------------------------------------------------------------------------


def test_ok() -> None:
    """A valid call runs the handler; its return value is the content."""
    assert dispatch(ToolRegistry([add]), "add", a=2, b=3) == {"status": "ok", "content": 5}


def test_unknown_tool_names_the_available_ones() -> None:
    """An unknown name gives unknown_tool, listing the tools there are."""
    outcome = dispatch(ToolRegistry([add]), "sub", a=1)
    assert outcome == {"status": "unknown_tool", "content": "no tool named 'sub'; available: add"}
    assert dispatch(ToolRegistry(), "sub")["content"] == "no tool named 'sub'; available: none"


def test_invalid_arguments_lists_every_violation() -> None:
    """Every violation is listed with its path, so a model can fix them all at once."""
    recorder = Recorder()

    def place(point: Point, level: Level, names: list[str]) -> None:
        recorder(point=point)

    outcome = dispatch(
        ToolRegistry([place]),
        "place",
        point={"x": "1", "w": 0},
        names=["a", 2],
        extra=True,
    )
    assert outcome["status"] == "invalid_arguments"
    assert sorted(outcome["content"], key=lambda p: (p["path"], p["message"])) == [
        {"path": "", "message": validator_says({"required": ["level"]}, {})},
        {"path": "", "message": validator_says(CLOSED, {"extra": True})},
        {"path": "names[1]", "message": validator_says({"type": "string"}, 2)},
        {"path": "point", "message": validator_says(CLOSED, {"w": 0})},
        {"path": "point.x", "message": validator_says(INTEGER, "1")},
    ]
    assert recorder.calls == []


INT_RANGE = "expected an integer within 64 bits (-9223372036854775808 to 18446744073709551615)"


def test_integers_beyond_64_bits_are_invalid_arguments() -> None:
    """JSON Schema counts 1e300 as an integer; an int parameter takes whole numbers within
    64 bits (what a run's record holds), wherever the int is, every violation listed."""
    seen: list[Any] = []

    def count(n: int, points: list[Point], by: dict[str, int] | None = None) -> None:
        seen.append((n, points, by))

    registry = ToolRegistry([count])
    outcome = dispatch(
        registry, "count", n=1e300, points=[{"x": -1e19}, {"x": 2**64}], by={"a": "x"}
    )
    assert outcome["status"] == "invalid_arguments"
    assert outcome["content"] == [
        {"path": "n", "message": f"{INT_RANGE}, got 1e+300"},
        {"path": "points[0].x", "message": f"{INT_RANGE}, got -1e+19"},
        {"path": "points[1].x", "message": f"{INT_RANGE}, got an integer of 65 bits"},
        {"path": "by", "message": validator_says({"anyOf": [{"type": "null"}]}, {"a": "x"})},
    ]
    assert seen == []
    # jsonschema-rs lets an int past 4,300 digits through its bounds; conversion stops it.
    for huge in (10**5000, -(10**5000)):
        for arguments, path in (
            ({"n": huge, "points": []}, "n"),
            ({"n": 1, "points": [{"x": 1}, {"x": huge}]}, "points[1].x"),
        ):
            outcome = dispatch(registry, "count", **arguments)
            assert outcome["status"] == "invalid_arguments"
            assert outcome["content"] == [
                {"path": path, "message": f"ValueError: {INT_RANGE}, got an integer of 16610 bits"}
            ]
    assert seen == []
    # The bounds themselves, and a whole float within them, are integers.
    edges = {"n": 2**64 - 1, "points": [{"x": -(2**63)}, {"x": 1e19}], "by": {"a": 2.0}}
    assert dispatch(registry, "count", **edges)["status"] == "ok"
    assert seen == [(2**64 - 1, [Point(-(2**63)), Point(10**19)], {"a": 2})]
    assert type(seen[0][2]["a"]) is int


def test_an_integer_given_for_a_float_is_a_float() -> None:
    """JSON has one number: 3 for a float parameter reaches the handler as 3.0, in a list too;
    in int | float it stays the int its first member takes."""
    seen: list[Any] = []

    def scale(factor: float, by: list[float], either: int | float) -> None:
        seen.append((factor, by, either))

    assert dispatch(ToolRegistry([scale]), "scale", factor=3, by=[1, 2.5], either=3)["status"] == (
        "ok"
    )
    assert seen == [(3.0, [1.0, 2.5], 3)]
    assert [type(seen[0][0]), type(seen[0][1][0]), type(seen[0][2])] == [float, float, int]


def test_a_decimal_parameter_takes_a_number_or_its_text_and_keeps_every_digit() -> None:
    """Money as Decimal: a number by its shortest text, or the text itself; other text, NaN
    or a bool is invalid_arguments."""
    seen: list[Any] = []

    def pay(amount: decimal.Decimal, fees: list[decimal.Decimal] | None = None) -> str:
        seen.append((amount, fees))
        return str(amount)

    registry = ToolRegistry([pay])
    for sent, made in ((0.1, "0.1"), ("12.50", "12.50"), (3, "3"), ("-1e3", "-1E+3")):
        assert dispatch(registry, "pay", amount=sent) == {"status": "ok", "content": made}
    assert dispatch(registry, "pay", amount="1", fees=[0.5, "0.25"])["status"] == "ok"
    assert seen[-1] == (decimal.Decimal("1"), [decimal.Decimal("0.5"), decimal.Decimal("0.25")])
    for bad in ("twelve", "NaN", "Infinity", True, None):
        outcome = dispatch(registry, "pay", amount=bad)
        assert outcome["status"] == "invalid_arguments", bad
        assert outcome["content"][0]["path"] == "amount"
    assert len(seen) == 5


def test_a_float_too_big_for_an_int_goes_to_a_float_member() -> None:
    """In int | float, a whole number beyond 64 bits is valid for the float member only."""
    seen: list[Any] = []

    def scale(factor: int | float) -> None:
        seen.append(factor)

    registry = ToolRegistry([scale])
    for value in (3, 3.0, 1e300):
        assert dispatch(registry, "scale", factor=value)["status"] == "ok"
    assert seen == [3, 3, 1e300]
    assert [type(v) for v in seen] == [int, int, float]


def test_given_schemas_get_no_integer_bounds() -> None:
    """The 64-bit rule protects int conversion; a given schema's handler gets the JSON as is."""
    seen: list[Any] = []

    def handler(**kwargs: Any) -> None:
        seen.append(kwargs)

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    registry = ToolRegistry([Tool(handler, name="h", parameters=schema)])
    assert dispatch(registry, "h", n=1e300)["status"] == "ok"
    assert seen == [{"n": 1e300}]


def test_a_refusing_attrs_validator_gives_invalid_arguments() -> None:
    """Valid JSON that an attrs validator refuses is invalid_arguments; the handler does not run."""
    recorder = Recorder()

    def take(p: Positive) -> None:
        recorder(p=p)

    outcome = dispatch(ToolRegistry([take]), "take", p={"n": 0})
    assert outcome["status"] == "invalid_arguments"
    assert outcome["content"][0]["path"] == "p"
    assert outcome["content"][0]["message"].startswith("ValueError: 'n' must be > 0: 0")
    assert recorder.calls == []


def test_handler_exception_gives_error_with_type_and_message() -> None:
    """A raising handler gives error {type, message}; the exception rides along, no traceback."""
    boom = ZeroDivisionError("division by zero")

    def divide(a: int, b: int) -> float:
        raise boom

    outcome = dispatch(ToolRegistry([divide]), "divide", a=1, b=0)
    assert outcome == {
        "status": "error",
        "content": {"type": "ZeroDivisionError", "message": "division by zero"},
        "exception": boom,
    }


def test_results_become_json() -> None:
    """attrs instances and dataclasses via asdict, enums by value, tuples as lists, nested."""

    def report() -> Any:
        return {
            "line": Line(Point(1), Point(2), Color.BLUE, ("t",)),
            "report": Report(Level.HIGH, (Point(3, 4),)),
            "pair": (Color.RED, [Level.LOW]),
            "plain": [1, 2.5, "s", None, True],
        }

    assert dispatch(ToolRegistry([report]), "report")["content"] == {
        "line": {
            "start": {"x": 1, "y": 0},
            "end": {"x": 2, "y": 0},
            "color": "blue",
            "tags": ["t"],
        },
        "report": {"level": 2, "points": [{"x": 3, "y": 4}]},
        "pair": ["red", [1]],
        "plain": [1, 2.5, "s", None, True],
    }


@dataclasses.dataclass
class Held:
    thing: Any


CYCLIC: list[Any] = []
CYCLIC.append(CYCLIC)


def test_dataclass_results_are_converted_field_by_field() -> None:
    """A dataclass holding a dict subclass converts (dataclasses.asdict fails on 3.11)."""
    counts = collections.defaultdict(list, {"a": [Point(1)]})
    outcome = dispatch(ToolRegistry([Tool(lambda: Held(counts), name="f")]), "f")
    assert outcome == {"status": "ok", "content": {"thing": {"a": [{"x": 1, "y": 0}]}}}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {1, 2},
            "result: expected a JSON value (dict, list, str, int, float, bool or None), got set",
        ),
        ({"a": [object()]}, "result.a[0]: expected a JSON value"),
        ({1: "a"}, "result: expected JSON object keys to be str, got int 1"),
        (math.nan, "result: expected a finite number, got nan"),
        (HasSet(tags={"a"}), "result.tags: expected a JSON value"),
        (b"raw", "got bytes"),
        (2**70, "result: expected an integer within 64 bits, got "),  # then the core's wording
        (Held(threading.Lock()), "result.thing: expected a JSON value"),
        (CYCLIC, "result: expected JSON nested less deeply, got a value that contains itself"),
    ],
)
def test_results_without_json_form_give_error(value: object, message: str) -> None:
    """A return value with no JSON form gives error naming its type and where it is."""
    outcome = dispatch(ToolRegistry([Tool(lambda: value, name="f")]), "f")
    assert outcome["status"] == "error"
    assert outcome["content"]["type"] == "TypeError"
    assert outcome["content"]["message"].startswith("tool 'f' returned a value with no JSON form")
    assert message in outcome["content"]["message"]
    assert isinstance(outcome["exception"], TypeError)


def test_dates_uuids_decimals_paths_and_pydantic_models_are_results_as_text() -> None:
    """The values a tool commonly returns that JSON has no type for become their text."""
    import decimal
    import pathlib

    class Booking(pydantic.BaseModel):
        at: datetime.datetime
        seats: int

    when = datetime.datetime(2026, 12, 2, 13, 30, tzinfo=datetime.UTC)
    value = {
        "when": when,
        "day": when.date(),
        "time": datetime.time(9, 5),
        "id": uuid.UUID(int=1),
        "price": decimal.Decimal("19.999999999999999999"),
        "file": pathlib.PurePosixPath("/tmp/a.txt"),
        "booking": Booking(at=when, seats=2),
    }
    outcome = dispatch(ToolRegistry([Tool(lambda: value, name="f")]), "f")
    assert outcome == {
        "status": "ok",
        "content": {
            "when": "2026-12-02T13:30:00+00:00",
            "day": "2026-12-02",
            "time": "09:05:00",
            "id": "00000000-0000-0000-0000-000000000001",
            "price": "19.999999999999999999",
            "file": "/tmp/a.txt",
            "booking": {"at": "2026-12-02T13:30:00Z", "seats": 2},
        },
    }


# -- policies -------------------------------------------------------------------------


def test_policy_allows_and_denies() -> None:
    """A registry policy sees each call and allows it or denies it with a reason."""
    seen: list[Call] = []

    def no_negatives(call: Call) -> Decision:
        seen.append(call)
        if min(call["arguments"].values()) < 0:
            return deny("negative numbers are not allowed")
        return allow()

    registry = ToolRegistry([add], policy=no_negatives)
    assert dispatch(registry, "add", a=1, b=2) == {"status": "ok", "content": 3}
    assert dispatch(registry, "add", a=-1, b=2) == {
        "status": "denied",
        "content": "negative numbers are not allowed",
    }
    assert seen[0] == {"kind": "call", "id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}}


def test_per_tool_policy_runs_after_the_registry_policy() -> None:
    """Both policies must allow; the registry's is asked first and its denial wins."""
    order: list[str] = []

    def registry_policy(call: Call) -> Decision:
        order.append("registry")
        return deny("read-only mode") if call["arguments"].get("b") == 99 else allow()

    def tool_policy(call: Call) -> Decision:
        order.append("tool")
        return deny("a must be small") if call["arguments"]["a"] > 10 else allow()

    recorder = Recorder()
    registry = ToolRegistry(
        [Tool(recorder, name="add", policy=tool_policy)], policy=registry_policy
    )
    registry.add(Tool(add, name="plain"))

    assert dispatch(registry, "add", a=1, b=1)["status"] == "ok"
    assert dispatch(registry, "add", a=11, b=1)["content"] == "a must be small"
    assert dispatch(registry, "add", a=11, b=99)["content"] == "read-only mode"
    assert order == ["registry", "tool", "registry", "tool", "registry"]
    assert dispatch(registry, "plain", a=11, b=1)["status"] == "ok"  # no tool policy there
    assert recorder.calls == [{"a": 1, "b": 1}]


def test_policy_runs_after_validation() -> None:
    """Invalid arguments are reported first; a policy only judges well-formed calls."""
    asked: list[Call] = []

    def deny_all(call: Call) -> Decision:
        asked.append(call)
        return deny("never")

    registry = ToolRegistry([add], policy=deny_all)
    assert dispatch(registry, "add", a="x", b=1)["status"] == "invalid_arguments"
    assert dispatch(registry, "nope")["status"] == "unknown_tool"
    assert asked == []
    assert dispatch(registry, "add", a=1, b=1)["status"] == "denied"


def test_policy_gets_a_copy_of_the_call() -> None:
    """A policy that mutates the call it sees changes nothing the handler receives."""
    seen: list[list[int]] = []

    def meddle(call: Call) -> Decision:
        call["arguments"]["items"].append(666)
        return allow()

    def total(items: list[int]) -> int:
        seen.append(items)
        return sum(items)

    assert dispatch(ToolRegistry([total], policy=meddle), "total", items=[1, 2])["content"] == 3
    assert seen == [[1, 2]]


def test_a_broken_policy_fails_closed() -> None:
    """A policy that raises or answers with anything else gives error; the handler does not run."""
    recorder = Recorder()
    problem = RuntimeError("policy store down")

    def raising(call: Call) -> Decision:
        raise problem

    def forgetful(call: Call) -> Decision:
        return None  # type: ignore[return-value]

    outcome = dispatch(ToolRegistry([Tool(recorder, name="r")], policy=raising), "r")
    assert outcome["status"] == "error"
    assert outcome["exception"] is problem
    outcome = dispatch(ToolRegistry([Tool(recorder, name="r", policy=forgetful)]), "r")
    assert outcome["status"] == "error"
    assert outcome["content"]["message"] == (
        "the policy for tool 'r' returned None; expected agentloop.allow(), "
        "agentloop.deny(reason) or agentloop.ask(reason)"
    )
    assert recorder.calls == []


# -- async handlers -------------------------------------------------------------------


def test_adispatch_awaits_async_handlers() -> None:
    """adispatch awaits an async def handler; the same checks and outcomes apply."""
    problem = LookupError("gone")

    async def fetch(key: str, point: Point) -> dict[str, Any]:
        await asyncio.sleep(0)
        if key == "missing":
            raise problem
        return {"key": key, "point": point}

    registry = ToolRegistry([fetch], policy=lambda c: deny("no") if c["id"] == "x" else allow())

    async def main() -> list[dict[str, Any]]:
        calls = [
            {"id": "1", "arguments": {"key": "k", "point": {"x": 1}}},
            {"id": "2", "arguments": {"key": "missing", "point": {"x": 1}}},
            {"id": "3", "arguments": {"key": 1}},
            {"id": "x", "arguments": {"key": "k", "point": {"x": 1}}},
        ]
        return [await registry.adispatch({"name": "fetch", **c}) for c in calls]

    ok, error, invalid, denied = asyncio.run(main())
    assert ok == {"status": "ok", "content": {"key": "k", "point": {"x": 1, "y": 0}}}
    assert (error["status"], error["exception"]) == ("error", problem)
    assert invalid["status"] == "invalid_arguments"
    assert denied == {"status": "denied", "content": "no"}


def test_adispatch_runs_plain_handlers_in_a_thread_when_asked() -> None:
    """With to_thread=True a plain handler runs in a worker thread, otherwise in the caller's."""
    threads: list[int] = []

    def where() -> None:
        threads.append(threading.get_ident())

    registry = ToolRegistry([where])
    call_ = {"name": "where", "arguments": {}}
    asyncio.run(registry.adispatch(call_))
    asyncio.run(registry.adispatch(call_, to_thread=True))
    assert threads[0] == threading.get_ident()
    assert threads[1] != threading.get_ident()


def test_sync_dispatch_refuses_an_async_handler() -> None:
    """dispatch cannot await: an async handler gives error (and no never-awaited warning)."""

    async def later() -> int:
        return 1

    outcome = dispatch(ToolRegistry([later]), "later")
    assert outcome["status"] == "error"
    assert outcome["content"]["message"] == (
        "tool 'later' is async; run the loop with the async driver (loop.arun or loop.astart), "
        "which awaits it"
    )


# -- the registry as a container and a decorator --------------------------------------


def test_decorator_with_and_without_arguments() -> None:
    """@registry.tool registers the function and returns it unchanged."""
    registry = ToolRegistry()

    @registry.tool
    def double(n: int) -> int:
        """Double a number."""
        return 2 * n

    @registry.tool(name="half", description="Halve a number.", policy=lambda c: deny("no"))
    def halve(n: int) -> float:
        return n / 2

    assert double(4) == 8  # still the plain function
    assert list(registry) == [registry["double"], registry["half"]]
    assert (len(registry), "half" in registry, "halve" in registry) == (2, True, False)
    assert registry["half"].description == "Halve a number."
    assert repr(registry) == "ToolRegistry(['double', 'half'])"
    assert repr(registry["double"]) == "Tool('double')"
    assert dispatch(registry, "double", n=3)["content"] == 6
    assert dispatch(registry, "half", n=3)["status"] == "denied"


def test_mapping_form_builds_a_registry() -> None:
    """A mapping given to Loop (or ToolRegistry) becomes a registry keyed by the mapping's names."""
    loop = Loop(ScriptedModel([]), tools={"plus": add})
    assert isinstance(loop.dispatcher, ToolRegistry)
    assert loop.dispatcher["plus"].handler is add
    registry = ToolRegistry([add])
    assert Loop(ScriptedModel([]), tools=registry).dispatcher is registry


def test_parameters_are_a_fresh_copy() -> None:
    """Changing a tool's parameters dict changes neither its schema nor its validation."""
    tool = Tool(add)
    tool.parameters["properties"]["a"]["type"] = "string"
    assert tool.parameters["properties"]["a"] == {"type": "integer"}


# -- through the loop -----------------------------------------------------------------


def test_every_outcome_counts_against_the_call_budget() -> None:
    """denied, invalid_arguments, unknown_tool and error all spend a call, like ok."""

    def fail() -> None:
        raise ValueError("nope")

    registry = ToolRegistry(
        [add, fail], policy=lambda c: deny("no") if c["id"] == "c1" else allow()
    )
    model = ScriptedModel(
        [
            call("c1", a=1, b=1),  # denied
            call("c2", a="x", b=1),  # invalid_arguments
            call("c3", name="sub"),  # unknown_tool
            call("c4", name="fail"),  # error
            call("c5", a=1, b=1),  # over budget
        ]
    )
    result = Loop(model, tools=registry, max_steps=10, max_calls=4).run("go")

    assert (result.status, result.reason, result.calls, result.steps) == (
        "exhausted",
        "max_calls",
        4,
        5,
    )
    assert kinds(result.transcript) == [
        "user",
        "call",
        "tool_result:denied",
        "call",
        "tool_result:invalid_arguments",
        "call",
        "tool_result:unknown_tool",
        "call",
        "tool_result:error",
    ]
    # The denied call is answered by the engine at the review (approval_asked); the others
    # by the dispatcher (tool_returned): each answer has one more call counted.
    answered = {"tool_returned", "approval_asked"}
    assert [e.calls for e in result.events if e.trigger in answered] == [1, 2, 3, 4]


def test_handler_exception_is_on_the_event_not_in_the_history() -> None:
    """The exception behind an error is on the event; the history has its type and message."""
    problem = KeyError("missing")

    def lookup(key: str) -> str:
        raise problem

    model = ScriptedModel([call("c1", name="lookup", key="k"), final()])
    result = Loop(model, tools={"lookup": lookup}).run("go")
    event = next(e for e in result.events if e.trigger == "tool_returned")
    assert event.exception is problem
    assert result.transcript[2]["content"] == {"type": "KeyError", "message": "'missing'"}
    assert "Traceback" not in str(result.transcript)


def test_mapping_form_validates_plain_annotations_through_the_loop() -> None:
    """tools={'add': add}: wrong types and missing names are invalid_arguments, as before."""
    model = ScriptedModel([call("c1", a="2", b=2), call("c2", a=2), call("c3", a=2, b=2), final()])
    result = Loop(model, tools={"add": add}).run("go")

    assert [m["status"] for m in result.transcript if m["kind"] == "tool_result"] == [
        "invalid_arguments",
        "invalid_arguments",
        "ok",
    ]
    assert result.transcript[2]["content"] == [
        {"path": "a", "message": validator_says(INTEGER, "2")}
    ]
    assert result.transcript[4]["content"] == [
        {"path": "", "message": validator_says({"required": ["b"]}, {})}
    ]


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
    for format in typing.get_args(agentloop.SpecFormat):
        orjson.dumps(registry.specs(format))

    schema = tool.parameters
    valid = data.draw(from_schema(schema["properties"]["value"], schema.get("$defs", {})))
    assert dispatch(registry, "handler", value=valid) == {"status": "ok", "content": None}
    anything = data.draw(JSON | st.sampled_from([1e300, -1e19, 1e19, 2.0**64]))
    if dispatch(registry, "handler", value=anything)["status"] == "ok":
        assert len(received) == 2
    assert all(conforms(value, annotation) for value in received), received


def test_exports() -> None:
    """The registry's names are public."""
    for name in ("Tool", "ToolRegistry", "Decision", "Policy", "SpecFormat", "allow", "deny"):
        assert name in agentloop.__all__


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


# -- dataclasses and pydantic models as parameters ------------------------------------


@dataclasses.dataclass
class Seat:
    """A seat on a flight."""

    row: int
    letter: Literal["A", "B", "C"] = "A"
    notes: list[str] = dataclasses.field(default_factory=list)


def test_a_dataclass_parameter_is_described_and_converted_as_an_attrs_class_is() -> None:
    """Its fields under $defs (the generated docstring left out); arguments become one."""
    received: list[Seat] = []
    registry = ToolRegistry([Tool(_booker(received), name="book")])
    parameters = registry["book"].parameters
    assert parameters["$defs"]["Seat"] == {
        "type": "object",
        "description": "A seat on a flight.",
        "properties": {
            "row": {"type": "integer"},
            "letter": {"type": "string", "enum": ["A", "B", "C"], "default": "A"},
            "notes": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["row"],
        "additionalProperties": False,
    }
    assert dispatch(registry, "book", seat={"row": 3.0})["status"] == "ok"
    assert received == [Seat(row=3)]
    assert type(received[0].row) is int
    refused = dispatch(registry, "book", seat={"row": 3, "letter": "Z"})
    assert refused["status"] == "invalid_arguments"
    assert refused["content"][0]["path"] == "seat.letter"


def _booker(received: list[Seat]) -> Callable[[Seat], None]:
    def book(seat: Seat) -> None:
        received.append(seat)

    return book


class Corner(pydantic.BaseModel):
    name: str


class Box(pydantic.BaseModel):
    low: int
    high: int
    corner: Corner

    @pydantic.field_validator("high")
    @classmethod
    def above(cls, value: int, info: pydantic.ValidationInfo) -> int:
        if value < info.data.get("low", 0):
            raise ValueError("high must be at least low")
        return value


def size(box: Box) -> int:
    """The height of a box."""
    return box.high - box.low


def test_a_pydantic_model_parameter_keeps_its_schema_and_its_validators() -> None:
    """Its own schema (its models beside it in $defs); model_validate converts, and a
    validator's refusal is invalid_arguments, one problem per error, at its path."""
    registry = ToolRegistry([size])
    parameters = registry["size"].parameters
    assert parameters["properties"]["box"] == {"$ref": "#/$defs/Box"}
    assert parameters["$defs"]["Box"]["properties"]["corner"] == {"$ref": "#/$defs/Corner"}
    assert set(parameters["$defs"]) == {"Box", "Corner"}
    box = {"low": 1, "high": 4, "corner": {"name": "ne"}}
    assert dispatch(registry, "size", box=box) == {"status": "ok", "content": 3}
    assert dispatch(registry, "size", box={**box, "high": 0}) == {
        "status": "invalid_arguments",
        "content": [{"path": "box.high", "message": pydantic_says(Box, {**box, "high": 0})}],
    }
    assert dispatch(registry, "size", box={**box, "corner": {}})["content"][0]["path"] == (
        "box.corner"
    )


class Settings(pydantic.BaseModel):
    limit: int = 10


class Left(pydantic.BaseModel):
    x: int


class Right(pydantic.BaseModel):
    y: int


def test_a_union_with_pydantic_models_takes_their_open_schemas() -> None:
    """A model whose fields all have defaults has no "required", and a model's object is
    open: Settings | None is made, and a value with an extra key goes to the member it fits."""
    seen: list[Any] = []

    def search(query: str, opts: Settings | None = None) -> None:
        seen.append(opts)

    def pick(v: Left | Right, w: Left | dict[str, Any]) -> None:
        seen.append((v, w))

    registry = ToolRegistry([search, pick])
    assert dispatch(registry, "search", query="q", opts={})["status"] == "ok"
    assert dispatch(registry, "search", query="q", opts={"limit": 3})["status"] == "ok"
    assert dispatch(registry, "search", query="q")["status"] == "ok"
    extra = {"x": 1, "note": "pydantic ignores it"}
    assert dispatch(registry, "pick", v=extra, w=extra)["status"] == "ok"
    assert dispatch(registry, "pick", v={"y": 2}, w={"z": 3})["status"] == "ok"
    assert seen == [
        Settings(),
        Settings(limit=3),
        None,
        (Left(x=1), Left(x=1)),
        (Right(y=2), {"z": 3}),
    ]
    loop = agentloop.Loop(ScriptedModel([final('{"limit": 4}')]), output=Settings | None)
    assert loop.run("go").output == Settings(limit=4)


def test_a_refusal_inside_a_collection_is_at_its_path_from_the_arguments_root() -> None:
    """A converter's refusal in a list, a tuple or an object's values names the item, then
    the path within it: what the JSON Schema checks' problems say for their own."""
    seen: list[Any] = []

    def pack(
        boxes: list[Box], labelled: dict[str, Box], pair: tuple[int, Box], days: list[datetime.date]
    ) -> None:
        seen.append((boxes, labelled, pair, days))

    registry = ToolRegistry([pack])
    good, bad = (
        {"low": 1, "high": 4, "corner": {"name": "ne"}},
        {"low": 5, "high": 4, "corner": {"name": "sw"}},
    )
    arguments = {
        "boxes": [good],
        "labelled": {"a": good},
        "pair": [1, good],
        "days": ["2026-12-02"],
    }
    assert dispatch(registry, "pack", **arguments)["status"] == "ok"
    refusal = pydantic_says(Box, bad)
    for changed, path, message in (
        ({"boxes": [good, bad]}, "boxes[1].high", refusal),
        ({"labelled": {"a": good, "b": bad}}, "labelled.b.high", refusal),
        ({"pair": [1, bad]}, "pair[1].high", refusal),
        (
            {"days": ["2026-12-02", "soon"]},
            "days[1]",
            "ValueError: expected an ISO 8601 date, got 'soon'",
        ),
    ):
        assert dispatch(registry, "pack", **{**arguments, **changed}) == {
            "status": "invalid_arguments",
            "content": [{"path": path, "message": message}],
        }
    assert len(seen) == 1
