"""A call's outcome: its arguments validated and converted, its result or error as JSON."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import decimal
import math
import threading
import uuid
from typing import Any

import pydantic
import pytest

from agentloop import Tool, ToolRegistry
from tests.support.helpers import Recorder, add, validator_says
from tests.support.tool_types import (
    CLOSED,
    INTEGER,
    Color,
    HasSet,
    Level,
    Line,
    Point,
    Positive,
    Report,
    dispatch,
)

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
