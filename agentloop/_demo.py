"""The built-in deterministic scenario behind ``make demo``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop._driver import Loop

if TYPE_CHECKING:
    from agentloop._values import RunResult

__all__ = ["demo_loop", "scripted"]


def scripted(*replies: dict[str, Any]) -> Any:
    """A model that returns ``replies`` in order (and a final answer after them)."""
    remaining = list(replies)

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        return remaining.pop(0) if remaining else {"kind": "final", "text": "(no more script)"}

    return model


def demo_loop() -> Loop:
    """A scripted model that uses two tools, then answers from their results."""

    def weather(city: str) -> dict[str, Any]:
        """Today's weather in a city (canned)."""
        return {"city": city, "celsius": 21.5, "sky": "clear"}

    def convert(celsius: float) -> float:
        """Celsius to Fahrenheit."""
        return round(celsius * 9 / 5 + 32, 1)

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        results = [m for m in history if m["kind"] == "tool_result"]
        if not results:
            return {"kind": "call", "id": "c1", "name": "weather", "arguments": {"city": "Lisbon"}}
        if len(results) == 1:
            celsius = results[0]["content"]["celsius"]
            return {
                "kind": "call",
                "id": "c2",
                "name": "convert",
                "arguments": {"celsius": celsius},
            }
        return {
            "kind": "final",
            "text": f"Lisbon is clear, {results[0]['content']['celsius']} °C "
            f"({results[1]['content']} °F).",
        }

    return Loop(model, tools={"weather": weather, "convert": convert}, max_steps=5, max_calls=2)


def run_demo() -> RunResult:
    """Run the scenario, printing each transition as it happens, then the result."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from agentloop._report import HEADERS, describe

    console = Console()
    if not console.is_terminal:
        console.width = 140  # keep piped output (CI logs, files) unwrapped
    loop = demo_loop()
    run = loop.start("What's the weather in Lisbon, in Fahrenheit?")
    table = Table(title="agentloop demo: one transition per step")
    for header in HEADERS:
        table.add_column(Text(header))  # Text: not markup
    for number, transition in enumerate(run, 1):
        table.add_row(*(Text(cell) for cell in describe(number, transition, loop.budget)))
    console.print(table)
    result = run.result()
    console.print(
        Text(
            f"status={result.status.value} output={result.output!r} "
            f"steps={result.steps}/{result.budget.max_steps} "
            f"calls={result.calls}/{result.budget.max_calls}"
        )
    )
    return result
