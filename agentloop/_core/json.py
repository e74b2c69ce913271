"""Strict JSON intake: one check that a value is plain JSON, at C speed.

Everything that enters a run (the caller's input, the model's reply, a tool's
outcome, a tool's schema) passes ``to_json``, which both checks the value and
produces the bytes the record keeps. ``orjson`` quietly turns NaN into
``null`` and tuples into lists, so the bytes are decoded again and compared
with the original; only plain ``dict``/``list``/``str`` values take part in
that comparison, so a subclass's ``__eq__`` cannot vouch for itself.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson

from agentloop._errors import JSONError

__all__ = [
    "MAX_DEPTH",
    "copy_json",
    "describe",
    "exception_content",
    "exception_said",
    "intake",
    "json_object",
    "kept",
    "to_json",
    "unfenced",
]

#: How deep ``orjson`` (and so a run's record) nests JSON.
MAX_DEPTH: Final = 255

JSON = Any  # a dict, list, str, int, finite float, bool or None, nested


# Subclasses of str/int/dict/list, dataclasses and datetimes are refused by orjson
# itself (their methods are user code that could answer differently later), so the
# comparison below only ever runs the built-in types' own ``__eq__``.
_STRICT: Final = (
    orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)


# Scalars orjson writes exactly or refuses (a lone surrogate, an int beyond 64
# bits): no round trip needed. A float is not one of them (NaN becomes null).
_EXACT: Final = frozenset({str, int, bool, type(None)})

_JSON_TYPES: Final = {
    list: "a JSON array",
    str: "a JSON string",
    int: "a JSON number",
    float: "a JSON number",
    bool: "a JSON boolean",
    type(None): "JSON null",
}


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is beyond a float's range")
    return number


def json_object(raw: str) -> tuple[dict[str, Any] | None, str]:
    """Text as a JSON object a run can record, or None and why it is not one.

    The whole check, once for everyone who reads a model's argument text:
    invalid JSON, ``NaN``, an integer beyond 64 bits (``orjson`` would read it
    as a float, silently changing it), nesting too deep, or another type.
    """
    try:
        value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON ({exc})"
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        return None, f"not JSON a run can record ({exc})"
    if type(value) is not dict:
        return None, _JSON_TYPES.get(type(value), "not a JSON object")
    return value, ""


def kept(data: bytes) -> bytes:
    """``data`` copied to its size, for bytes from ``orjson.dumps`` that outlive a step.

    orjson 3.12+ hands back each result in the 4 KiB buffer it wrote it into and
    never shrinks it: a run that kept its replies and contents so would hold about
    29 times its transcript. The copy costs one small allocation.
    """
    return bytes(memoryview(data))


def to_json(value: object, where: str = "value") -> bytes:
    """Serialize a plain JSON value, refusing anything JSON would change."""
    return intake(value, where)[0]


def intake(value: object, where: str = "value") -> tuple[bytes, Any]:
    """A plain JSON value's bytes and an independent copy; ``JSONError`` if it is not one.

    Decoding the bytes again and comparing with the original catches what
    ``orjson`` would silently change (NaN to ``null``, a tuple to a list) at C
    speed; the decoded value is the copy (a str, int, bool or None is its own:
    immutable). ``_find_non_json`` explains a failure only on that slow path.
    """
    try:
        data = kept(orjson.dumps(value, option=_STRICT))  # the record keeps it
        if type(value) in _EXACT:
            return data, value  # immutable, and orjson writes it as it is or raises
        copy = orjson.loads(data)
        if copy == value:
            return data, copy
    except (TypeError, orjson.JSONEncodeError) as exc:
        if "Recursion limit" in str(exc):
            raise JSONError(
                f"{where}: expected JSON nested at most {MAX_DEPTH} levels deep, got deeper"
            ) from None
    except Exception:  # noqa: BLE001, S110 - an enum's own __eq__ raised: explained below
        pass
    raise JSONError(_find_non_json(value, where) or f"{where}: expected plain JSON")


def copy_json(value: JSON, where: str = "value") -> JSON:
    """Return an independent copy of a plain JSON value (checked as ``to_json``)."""
    return intake(value, where)[1]


def _find_non_json(value: object, where: str) -> str:
    """Say where ``value`` stops being plain JSON (iterative: any nesting is safe)."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return f"{at}: expected JSON object keys to be str, got {describe(key)}"
                if not _is_text(key):
                    return f"{at}: expected object keys that are valid Unicode, got {key!r}"
            stack.extend((child, at + _step(key)) for key, child in reversed(item.items()))
        elif kind is list:
            stack.extend(
                (child, f"{at}[{index}]") for index, child in reversed(list(enumerate(item)))
            )
        elif kind is float and not math.isfinite(item):
            return f"{at}: expected a finite number, got {item!r}"
        elif kind is int and not -(2**63) <= item < 2**64:
            # str() of a huge int raises past 4,300 digits: say its size instead
            size = item.bit_length()
            shown = str(item) if size < 1000 else f"an integer of {size} bits"
            return f"{at}: expected an integer within 64 bits, got {shown}"
        elif kind is str:
            try:
                item.encode()
            except UnicodeEncodeError as exc:
                return (
                    f"{at}: expected text that is valid Unicode, "
                    f"got a lone surrogate at index {exc.start}"
                )
        elif not (item is None or kind in (str, int, float, bool, dict, list)):
            return (
                f"{at}: expected a JSON value (dict, list, str, int, float, bool "
                f"or None), got {describe(item)}"
            )
    return ""


def _step(key: str) -> str:
    """A path step: ``.name``, or ``['a key']`` (its repr, odd characters escaped)."""
    return f".{key}" if key.isidentifier() and key.isascii() else f"[{key!r}]"


def describe(value: object) -> str:
    """A value for an error message: the ``repr`` of a plain scalar, else its type's name.

    A user object's own ``repr`` is never called: it is user code, which may
    raise, hang or lie.
    """
    kind = type(value)
    if value is None or kind in (bool, int, float):
        return f"{kind.__name__} {value!r:.60}"
    if kind is str:
        return f"str {value!r:.60}"
    return kind.__name__


def exception_said(exc: BaseException) -> str:
    """``Type: message`` (or the type alone), as an event's ``error`` names what was raised."""
    content = exception_content(exc)
    return f"{content['type']}: {content['message']}" if content["message"] else content["type"]


def exception_content(exc: BaseException) -> dict[str, str]:
    """An exception as results and run files show it: its type's name and its message.

    A message that cannot be read (``__str__`` raises) or recorded (it holds a
    lone surrogate) is replaced, so a broken exception never breaks the run
    that records it. A recorded exception (from a run file) keeps its type name.
    """
    type_name = getattr(exc, "type_name", None)
    if type(type_name) is not str:
        type_name = type(exc).__name__
    if not _is_text(type_name):
        type_name = type_name.encode("utf-8", "backslashreplace").decode("utf-8")
    try:
        message = str(exc)
        if type(message) is not str:
            message = str.__str__(message)
    except Exception as problem:  # noqa: BLE001 - any failure of a user's __str__
        message = f"<unprintable: {type(problem).__name__}>"
    if not _is_text(message):
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"type": type_name, "message": message}


def _is_text(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def unfenced(text: str) -> str:
    """The text inside a Markdown code fence (```json ... ```), as models often write JSON.

    Stripped of the blank space around it; a text with no fence is returned as it is.
    """
    inner = text.strip()
    if len(inner) < 6 or not (inner.startswith("```") and inner.endswith("```")):
        return text
    opening, _, rest = inner[3:-3].partition("\n")
    # The opening line is the fence's and its language (json), or the JSON itself.
    return (rest if opening.strip().isalnum() or not opening.strip() else inner[3:-3]).strip()
