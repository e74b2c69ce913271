"""The annotated types the tool tests derive schemas from, and one call dispatched as the engine
would dispatch it."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, NotRequired, TypedDict

import attrs
import pydantic

from agentloop import Tool, ToolRegistry

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


@attrs.frozen
class HasSet:
    tags: set[str]


class Corner(pydantic.BaseModel):
    name: str
