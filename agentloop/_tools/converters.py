"""Converters: from a valid JSON value to what a handler's annotation asked for.

``schema.py`` derives one with each schema. A converter that refuses a value
raises ``Refused``, naming the problems by their paths from the root of the
value it converted, so a tool call's ``invalid_arguments`` says where.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import uuid
from collections.abc import Callable
from typing import Any, Final

import attrs

from agentloop._core.json import json_object
from agentloop._core.output_schema import instance_path, problem_line
from agentloop._tools.results import INT_MAX, INT_MIN
from agentloop._tools.validation import out_of_range

__all__ = [
    "TEXT_TYPES",
    "Converter",
    "Refused",
    "class_converter",
    "converted_values",
    "fields_converter",
    "not_an_object",
    "refusals",
    "refused_at",
    "to_decimal",
    "to_float",
    "to_int",
]


#: From valid JSON to what the handler asked for; ``None`` where the JSON is it already.
Converter = Callable[[Any], Any]


class Refused(ValueError):
    """A converter's refusal, as problems at paths from the root of the value it converted.

    ``original`` is the exception the refusing converter raised (a pydantic
    ``ValidationError``, an attrs validator's ``ValueError``, ...).
    """

    def __init__(self, problems: list[dict[str, str]], original: Exception) -> None:
        said = (problem_line(p["path"], p["message"]) for p in problems)
        super().__init__("; ".join(said))
        self.problems, self.original = problems, original


def refusals(exc: Exception) -> list[dict[str, str]]:
    """A converter's refusal as problems: a pydantic model's one per error, at its path."""
    if isinstance(exc, Refused):
        return exc.problems
    errors = getattr(exc, "errors", None)  # pydantic's ValidationError lists its errors
    if callable(errors):
        try:
            return [
                {"path": instance_path(error["loc"]), "message": str(error["msg"])}
                for error in errors()
            ]
        except Exception:  # noqa: BLE001, S110 - not pydantic's after all: said whole below
            pass
    return [{"path": "", "message": f"{type(exc).__name__}: {exc}"}]


def refused_at(step: str | int, exc: Exception) -> Refused:
    """``exc``, raised converting the value at ``step`` (a key or an index), one step out."""
    problems = [{**p, "path": _stepped(step, p["path"])} for p in refusals(exc)]
    return Refused(problems, exc.original if isinstance(exc, Refused) else exc)


def _stepped(step: str | int, path: str) -> str:
    """``path`` (as ``instance_path`` writes one) from one step further out."""
    head = instance_path([step])
    return head + path if not path or path.startswith("[") else f"{head}.{path}"


def _parsed(parse: Callable[[str], Any], what: str) -> Converter:
    """A converter of text in ``what``'s format; ``ValueError`` naming it for other text."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError:
            raise ValueError(f"expected {what}, got {text!r:.60}") from None

    return convert


# Types JSON has no value for, taken as text in the format the schema names (and that a
# tool's result of that type is written in).
TEXT_TYPES: Final[dict[Any, tuple[str, Converter]]] = {
    datetime.datetime: (
        "date-time",
        _parsed(datetime.datetime.fromisoformat, "an ISO 8601 date and time"),
    ),
    datetime.date: ("date", _parsed(datetime.date.fromisoformat, "an ISO 8601 date")),
    datetime.time: ("time", _parsed(datetime.time.fromisoformat, "an ISO 8601 time")),
    uuid.UUID: ("uuid", _parsed(uuid.UUID, "a UUID")),
}


def to_decimal(value: Any) -> decimal.Decimal:
    """A ``Decimal`` from a JSON number or its text.

    A number by its shortest text: ``0.1`` is ``Decimal('0.1')``, not the
    binary float's 55 digits.
    """
    return decimal.Decimal(value if type(value) is str else repr(value))


def to_float(value: Any) -> Any:
    """A JSON integer given for a ``float`` as the ``float`` it equals (``3`` is ``3.0``)."""
    return float(value) if type(value) is int else value


def to_int(value: Any) -> Any:
    """An integral float as the ``int`` it equals (JSON Schema counts ``2.0`` as an integer).

    ``ValueError`` for an ``int`` beyond 64 bits: the validator's bounds catch
    them, except one past 4,300 digits, which jsonschema-rs lets through (only
    a direct ``dispatch`` can pass one: the loop's intake refuses them).
    """
    if type(value) is float:
        return int(value)
    if type(value) is int and not INT_MIN <= value <= INT_MAX:
        raise ValueError(out_of_range(value))
    return value


def class_converter(cls: type, converters: dict[str, Converter | None]) -> Converter | None:
    """An attrs or dataclass instance (a TypedDict's dict) from a valid object, converted."""
    convert = fields_converter(converters)
    if not (attrs.has(cls) or dataclasses.is_dataclass(cls)):
        return convert
    if convert is None:
        return lambda value: cls(**value)
    return lambda value: cls(**convert(value))


def fields_converter(
    converters: dict[str, Converter | None],
) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """Converts the named values of a valid object; None when none needs it.

    The object itself is returned when nothing changed (the caller unpacks it
    anyway). ``int`` and ``float`` fields, the commonest, are converted inline:
    a function call per field would cost more than the rest of the conversion.
    """
    ints = tuple(key for key, convert in converters.items() if convert is to_int)
    floats = tuple(key for key, convert in converters.items() if convert is to_float)
    others = tuple(
        (key, convert)
        for key, convert in converters.items()
        if convert is not None and convert is not to_int and convert is not to_float
    )
    if not (ints or floats or others):
        return None

    def convert_fields(value: dict[str, Any]) -> dict[str, Any]:
        out = value
        for key in ints:  # to_int, inline
            number = value.get(key)
            if type(number) is int:
                if not INT_MIN <= number <= INT_MAX:
                    raise refused_at(key, ValueError(out_of_range(number)))
            elif type(number) is float:
                out = dict(value) if out is value else out
                out[key] = int(number)
        for key in floats:  # to_float, inline: a copy only when an int came
            if type(value.get(key)) is int:
                out = dict(value) if out is value else out
                out[key] = float(value[key])
        if others:
            out = dict(value) if out is value else out
            for key, convert in others:
                if key in out:
                    try:
                        out[key] = convert(out[key])
                    except (TypeError, ValueError) as exc:
                        raise refused_at(key, exc) from exc
        return out

    return convert_fields


def converted_values(
    value: dict[str, Any], converters: dict[str, Converter | None], default: Converter | None
) -> dict[str, Any]:
    """An object's values, each by its key's converter (else ``default``; None: as it is)."""
    out = {}
    for key, item in value.items():
        convert = converters.get(key, default)
        try:
            out[key] = item if convert is None else convert(item)
        except (TypeError, ValueError) as exc:
            raise refused_at(key, exc) from exc
    return out


def not_an_object(raw: str) -> dict[str, str]:
    """The problem with arguments that arrived as text: why they are not a JSON object."""
    value, why = json_object(raw)
    # A str that holds an object is a caller's slip, not the model's: name it so.
    why = "they arrived as text, not as an object" if value is not None else f"they are {why}"
    # JSON-quoted and cut short: the model sees what it sent (Anthropic's history cannot
    # carry the text itself), with any lone surrogate escaped rather than unencodable.
    shown = json.dumps(raw[:200]) + (" (cut at 200 characters)" if len(raw) > 200 else "")
    return {
        "path": "",
        "message": f"expected the arguments to be a JSON object, but {why}; received {shown}",
    }
