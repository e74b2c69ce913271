"""The built-in deterministic scenario behind ``make demo``."""

from __future__ import annotations

from typing import Any

from agentloop._loop import Loop

__all__ = ["QUESTION", "demo_loop"]

#: What the demo asks.
QUESTION = "What's the weather in Lisbon, in Fahrenheit?"


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
