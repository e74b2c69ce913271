"""The built-in deterministic scenario behind ``make demo``."""

from __future__ import annotations

from typing import Any

from agentloop._loop.loop import Loop

__all__ = ["QUESTION", "demo_loop"]

#: What the demo asks.
QUESTION = "Which is warmer today, Lisbon or Porto? In Fahrenheit, please."

#: Today's canned weather: degrees Celsius and the sky.
_WEATHER = {"Lisbon": (21.5, "clear"), "Porto": (18.0, "cloudy")}


def demo_loop() -> Loop:
    """A scripted model: both cities' weather in one reply (a batch), a conversion, an answer."""

    def weather(city: str) -> dict[str, Any]:
        """Today's weather in a city (canned)."""
        celsius, sky = _WEATHER[city]
        return {"city": city, "celsius": celsius, "sky": sky}

    def convert(celsius: float) -> float:
        """Celsius to Fahrenheit."""
        return round(celsius * 9 / 5 + 32, 1)

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        results = [m["content"] for m in history if m["kind"] == "tool_result"]
        if not results:
            return {
                "kind": "calls",
                "calls": [
                    {"id": "c1", "name": "weather", "arguments": {"city": "Lisbon"}},
                    {"id": "c2", "name": "weather", "arguments": {"city": "Porto"}},
                ],
                "text": "Looking up both cities at once.",
            }
        warmer, cooler = sorted(results[:2], key=lambda city: city["celsius"], reverse=True)
        if len(results) == 2:
            return {
                "kind": "call",
                "id": "c3",
                "name": "convert",
                "arguments": {"celsius": warmer["celsius"]},
            }
        return {
            "kind": "final",
            "text": f"{warmer['city']} is warmer: {warmer['celsius']} °C ({results[2]} °F) "
            f"and {warmer['sky']}; {cooler['city']} is {cooler['celsius']} °C and {cooler['sky']}.",
        }

    return Loop(model, tools={"weather": weather, "convert": convert}, max_steps=5, max_calls=3)
