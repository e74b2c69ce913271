"""Provider-ready tool specs, checked against the openai, anthropic and google-genai SDKs' own
types (offline)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated, Any

import anthropic.types
import attrs
import google.genai.types
import jsonschema
import openai.types.chat
import openai.types.responses
import pydantic
import pytest

from agentloop import Tool, ToolRegistry

if TYPE_CHECKING:
    from agentloop.engine import SpecFormat


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


@attrs.frozen
class Place:
    """Where to look."""

    city: str
    country: str | None = None


def weather(place: Place, unit: Unit = Unit.C, days: Annotated[int, "1 to 7"] = 1) -> str:
    """Today's weather, or a forecast.

    The model does not see this paragraph.
    """
    return f"sunny in {place.city}"


def ping() -> str:
    return "pong"


def registry() -> ToolRegistry:
    """Two tools: one with nested types and a docstring, one with neither."""
    return ToolRegistry([weather, ping])


def conforms(value: dict[str, Any], typed_dict: Any) -> None:
    """``value`` validates as the SDK's TypedDict and uses only the keys it declares."""
    pydantic.TypeAdapter(typed_dict).validate_python(value, strict=True)
    declared = typed_dict.__required_keys__ | typed_dict.__optional_keys__
    assert typed_dict.__required_keys__ <= value.keys() <= declared


def test_openai_chat_completions() -> None:
    """'openai' gives Chat Completions tools entries: ChatCompletionToolParam."""
    specs = registry().specs("openai")
    for spec in specs:
        conforms(spec, openai.types.chat.ChatCompletionToolParam)
        conforms(spec["function"], openai.types.shared_params.FunctionDefinition)
    assert specs[0] == {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Today's weather, or a forecast.",
            "parameters": Tool(weather).parameters,
            "strict": False,
        },
    }
    assert specs[1]["function"] == {
        "name": "ping",
        "parameters": {
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        },
        "strict": False,
    }


def test_openai_responses() -> None:
    """'openai-responses' gives Responses-API function tools: FunctionToolParam."""
    specs = registry().specs("openai-responses")
    for spec in specs:
        conforms(spec, openai.types.responses.FunctionToolParam)
    assert specs[0] == {
        "type": "function",
        "name": "weather",
        "description": "Today's weather, or a forecast.",
        "parameters": Tool(weather).parameters,
        "strict": False,
    }
    assert "description" not in specs[1]


def test_anthropic_messages() -> None:
    """'anthropic' gives Messages API tools entries: ToolParam with an object input_schema."""
    specs = registry().specs("anthropic")
    for spec in specs:
        conforms(spec, anthropic.types.ToolParam)
        assert spec["input_schema"]["type"] == "object"
    assert specs[0] == {
        "name": "weather",
        "description": "Today's weather, or a forecast.",
        "input_schema": Tool(weather).parameters,
    }


def test_gemini() -> None:
    """'gemini' gives function_declarations entries: a FunctionDeclaration whose parameters are
    the JSON Schema as it is (parameters_json_schema), and a Tool holds them."""
    specs = registry().specs("gemini")
    for spec in specs:
        declared = google.genai.types.FunctionDeclaration.model_validate(spec, strict=True)
        assert declared.model_dump(exclude_none=True) == spec
    assert specs[0] == {
        "name": "weather",
        "description": "Today's weather, or a forecast.",
        "parameters_json_schema": Tool(weather).parameters,
    }
    assert "description" not in specs[1]
    google.genai.types.Tool.model_validate({"function_declarations": specs}, strict=True)


def test_plain_json_schema() -> None:
    """'json-schema' (the default) gives name, description and parameters, nothing else."""
    specs = registry().specs()
    assert specs == registry().specs("json-schema")
    assert specs[1] == {
        "name": "ping",
        "description": "",
        "parameters": {
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        },
    }


def test_parameters_are_valid_draft_2020_12_with_defs() -> None:
    """The exported parameters are a valid Draft 2020-12 schema; nested classes sit in $defs."""
    parameters = registry().specs()[0]["parameters"]
    jsonschema.Draft202012Validator.check_schema(parameters)
    assert parameters == {
        "type": "object",
        "properties": {
            "place": {"$ref": "#/$defs/Place"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "days": {"type": "integer", "description": "1 to 7", "default": 1},
        },
        "required": ["place"],
        "additionalProperties": False,
        "$defs": {
            "Place": {
                "type": "object",
                "description": "Where to look.",
                "properties": {
                    "city": {"type": "string"},
                    "country": {"type": ["string", "null"], "default": None},
                },
                "required": ["city"],
                "additionalProperties": False,
            }
        },
    }
    validator = jsonschema.Draft202012Validator(parameters)
    assert validator.is_valid({"place": {"city": "Lisbon"}, "unit": "fahrenheit"})
    assert not validator.is_valid({"place": {"city": "Lisbon", "zip": "1000"}})


def test_specs_are_fresh_copies() -> None:
    """Editing the specs a caller got changes neither the tool nor the next specs."""
    tools = registry()
    first = tools.specs("anthropic")
    first[0]["input_schema"]["properties"].clear()
    first[0]["name"] = "changed"
    assert tools.specs("anthropic")[0]["name"] == "weather"
    assert tools["weather"].parameters["properties"]


@pytest.mark.parametrize("format", ["openai", "openai-responses", "anthropic"])
def test_provider_formats_check_tool_names(format: SpecFormat) -> None:
    """A name a provider would refuse is reported when its specs are built, naming the tool."""
    tools = ToolRegistry([Tool(ping, name="ping me")])
    with pytest.raises(
        ValueError, match=r"tool 'ping me': .* a name must match \^\[a-zA-Z0-9_-\]\{1,64\}\$"
    ):
        tools.specs(format)
    assert tools.specs("json-schema")[0]["name"] == "ping me"  # no provider, no rule


def test_gemini_names_start_with_a_letter_and_may_hold_dots_and_colons() -> None:
    """Gemini's rule is its own: a letter or an underscore first, then dots and colons too,
    up to 128 characters."""
    names = ["mcp:files.read", "_private", "a" * 128]
    assert [s["name"] for s in ToolRegistry([Tool(ping, name=n) for n in names]).specs("gemini")]
    for refused in ["1st", "ping me", "a" * 129]:
        with pytest.raises(ValueError, match=rf"^tool '{refused}': Gemini refuses it as a tool"):
            ToolRegistry([Tool(ping, name=refused)]).specs("gemini")
    with pytest.raises(ValueError, match=r"OpenAI refuses it as a tool name"):
        ToolRegistry([Tool(ping, name="mcp:files.read")]).specs("openai")


def test_unknown_format() -> None:
    """An unknown format names the ones there are."""
    with pytest.raises(
        ValueError, match=r"expected format to be one of \['anthropic', 'gemini', 'json-schema'"
    ):
        registry().specs("gemini-1")  # type: ignore[arg-type]
