"""Tool registry cost per call, measured side by side in one run.

A four-parameter tool with a nested attrs class (``Box`` holding two
``Point``s), a ``Literal`` and an optional list. Each variant is timed in
interleaved repeats so that machine noise hits them alike; the table shows
the median per call:

- direct: the handler called with ready-made Python arguments, and with
  arguments built by hand from the call's JSON (no checks at all);
- registry.dispatch: the whole path (look-up, Draft 2020-12 validation,
  conversion to attrs instances, the handler, the result made JSON);
- validation alone and conversion alone, for the breakdown;
- an invalid call (four violations), which never reaches the handler;
- a two-int tool ``add(a, b)`` through the registry;
- a union of classes, ``shape: Point | Box``, given a ``Box``: validation,
  then conversion picks the member the value is valid for;
- for comparison, the reference ``jsonschema`` (when installed, as in the dev
  environment) listing the violations of the same valid call.

The last two registry rows have targets (3 µs and 10 µs per call), printed
next to what was measured. Run with ``make bench``; the machine may be
shared, so ratios are what count and absolute times vary.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any, Literal

import attrs

from agentloop import ToolRegistry

if TYPE_CHECKING:
    from collections.abc import Callable

REPEATS = 9
NUMBER = 2_000
TARGETS = {  # µs per call
    "registry.dispatch, add(a: int, b: int)": 3.0,
    "registry.dispatch, shape: Point | Box": 10.0,
}


@attrs.frozen
class Point:
    x: float
    y: float


@attrs.frozen
class Box:
    corner: Point
    size: Point
    label: str = ""


def area(
    box: Box, scale: float, unit: Literal["m", "cm"] = "m", tags: list[str] | None = None
) -> dict[str, Any]:
    """The box's area, scaled."""
    return {"area": box.size.x * box.size.y * scale, "unit": unit, "tags": tags or []}


ARGUMENTS = {
    "box": {"corner": {"x": 0.0, "y": 0.0}, "size": {"x": 2.0, "y": 3.5}, "label": "a"},
    "scale": 1.5,
    "unit": "cm",
    "tags": ["x", "y"],
}
CALL = {"kind": "call", "id": "c1", "name": "area", "arguments": ARGUMENTS}
BAD_CALL = {
    **CALL,
    "arguments": {"box": {"corner": {"x": "0"}, "size": {"x": 2.0, "y": 3.5}}, "unit": "km"},
}


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def outline(shape: Point | Box) -> str:
    """Name the shape."""
    return type(shape).__name__


def by_hand(arguments: dict[str, Any]) -> Any:
    """What the registry replaces, minus every check: build the attrs values, call."""
    box = arguments["box"]
    built = Box(Point(**box["corner"]), Point(**box["size"]), box.get("label", ""))
    return area(built, arguments["scale"], arguments["unit"], arguments.get("tags"))


READY: tuple[Any, ...] = (Box(Point(0.0, 0.0), Point(2.0, 3.5), "a"), 1.5, "cm", ["x", "y"])


def main() -> None:
    registry = ToolRegistry([area, add, outline])
    add_call = {"kind": "call", "id": "c2", "name": "add", "arguments": {"a": 2, "b": 3}}
    box_call = {
        "kind": "call",
        "id": "c3",
        "name": "outline",
        "arguments": {"shape": ARGUMENTS["box"]},
    }
    tool = registry["area"]
    assert registry.dispatch(CALL)["status"] == "ok"
    assert registry.dispatch(BAD_CALL)["status"] == "invalid_arguments"
    assert len(registry.dispatch(BAD_CALL)["content"]) == 4
    assert registry.dispatch(box_call)["content"] == "Box"

    variants: dict[str, Callable[[], object]] = {
        "direct: area(*ready)": lambda: area(*READY),
        "direct: by hand from the JSON": lambda: by_hand(ARGUMENTS),
        "registry.dispatch (valid)": lambda: registry.dispatch(CALL),
        "  of which: validation": lambda: tool.problems(ARGUMENTS),
        "  of which: conversion": lambda: tool.convert(ARGUMENTS),
        "registry.dispatch (4 violations)": lambda: registry.dispatch(BAD_CALL),
        "registry.dispatch, add(a: int, b: int)": lambda: registry.dispatch(add_call),
        "registry.dispatch, shape: Point | Box": lambda: registry.dispatch(box_call),
    }
    try:
        import jsonschema
    except ImportError:  # not a dependency of agentloop itself
        print("(the reference jsonschema is not installed: its comparison row is left out)")
    else:
        reference = jsonschema.Draft202012Validator(tool.parameters)
        assert list(reference.iter_errors(ARGUMENTS)) == []
        variants["  validation by the reference jsonschema"] = lambda: list(
            reference.iter_errors(ARGUMENTS)
        )
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(REPEATS):
        for name, run in variants.items():
            start = time.perf_counter()
            for _ in range(NUMBER):
                run()
            samples[name].append((time.perf_counter() - start) / NUMBER * 1e6)

    median = {name: statistics.median(values) for name, values in samples.items()}
    direct = median["direct: area(*ready)"]
    print(f"Tool registry cost per call (median of {REPEATS} x {NUMBER} calls, interleaved)")
    print(f"{'variant':<42}{'µs/call':>9}{'x direct':>10}   target")
    for name, value in median.items():
        target = TARGETS.get(name)
        verdict = (
            "" if target is None else f"<= {target:g} µs: {'met' if value <= target else 'MISSED'}"
        )
        print(f"{name:<42}{value:>9.2f}{value / direct:>10.1f}   {verdict}")
    overhead = median["registry.dispatch (valid)"] - direct
    print(f"registry overhead over a direct call: {overhead:.1f} µs per call")


if __name__ == "__main__":
    main()
