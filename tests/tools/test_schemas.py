"""Schemas derived from a handler's annotations, one annotation at a time."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

import annotated_types
import jsonschema
import pydantic
import pytest

from agentloop import Tool, ToolRegistry
from tests.support.helpers import validator_says
from tests.support.tool_types import (
    INTEGER,
    Color,
    Level,
    Line,
    Node,
    Options,
    Point,
    dispatch,
    tool_for,
)

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
