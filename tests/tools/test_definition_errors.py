"""A tool whose schema cannot be derived or published is refused when it is defined."""

from __future__ import annotations

import datetime
import enum
import functools
import math
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypedDict

import attrs
import pytest

from agentloop import Decision, Tool, ToolRegistry, deny
from tests.support.helpers import Recorder, add, validator_says
from tests.support.tool_types import INTEGER, Color, HasSet, dispatch, tool_for

# -- definition-time errors -----------------------------------------------------------


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
        Tool(3, name="x")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="expected a callable handler, got int"):
        ToolRegistry([3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="expected name= for a handler without a __name__"):
        Tool(Recorder())
    with pytest.raises(TypeError, match="tool 'f': expected parameters to be a Draft 2020-12"):
        Tool(f, parameters={"type": "object", "properties": 3})
    with pytest.raises(
        TypeError, match="tool 'f': expected parameters to be a JSON Schema as a dict"
    ):
        Tool(f, parameters='{"type": "object"}')  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="expected parameters to describe an object"):
        Tool(f, parameters={"type": "array"})
    with pytest.raises(TypeError, match="tool 'f': expected policy to be callable, got str"):
        Tool(f, policy="deny")  # type: ignore[call-overload]
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

    tool: Tool[Any] = Tool(place)
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
