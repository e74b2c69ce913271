"""Dataclasses and pydantic models as a tool's parameters."""

from __future__ import annotations

import dataclasses
import datetime  # the registry resolves tools' annotations at run time
from typing import TYPE_CHECKING, Any, Literal

import pydantic

import agentloop
from agentloop import Tool, ToolRegistry
from agentloop.testing import ScriptedModel
from tests.support.helpers import final, pydantic_says
from tests.support.tool_types import Corner, dispatch

if TYPE_CHECKING:
    from collections.abc import Callable

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
