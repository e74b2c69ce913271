"""A handler's return value as JSON, and the outcomes a handler's run ends in.

attrs instances and dataclasses become dicts of their fields, pydantic models
their JSON-mode dump, enums their values, tuples lists; dates and times their
ISO 8601 text, UUIDs, decimals and paths their text; nested. The result must
then pass the core's strict
``to_json`` (no NaN, no integer beyond 64 bits, no lone surrogate). Anything
else is an ``error`` outcome naming the type and where it was.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import math
import pathlib
import sys
import typing
import uuid
from typing import Any, Final

import attrs

from agentloop._core.json import exception_content, to_json
from agentloop._errors import JSONError

__all__ = [
    "INT_MAX",
    "INT_MIN",
    "Answered",
    "failed",
    "is_pydantic_model",
    "json_form",
    "result_limit",
    "returned",
]

#: The integers orjson writes (and so ``to_json`` accepts): 64 bits, signed or not.
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**64 - 1


def _plain(value: object) -> Any:
    """``value`` with its Python-only parts made JSON types, the rest left for ``to_json``."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if attrs.has(type(value)):
        return _plain(attrs.asdict(typing.cast("attrs.AttrsInstance", value), recurse=False))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime.date | datetime.time):  # a datetime is a date too
        return value.isoformat()
    if isinstance(value, uuid.UUID | decimal.Decimal | pathlib.PurePath):
        return str(value)  # a Decimal's text keeps every digit a float would lose
    if is_pydantic_model(type(value)):
        return value.model_dump(mode="json")  # type: ignore[attr-defined]  # a model's
    return value


def is_pydantic_model(cls: object) -> bool:
    """Whether ``cls`` is a pydantic model class (pydantic is never imported to answer)."""
    pydantic = sys.modules.get("pydantic")  # in use only where something imported it
    return pydantic is not None and isinstance(cls, type) and issubclass(cls, pydantic.BaseModel)


def json_form(value: object, where: str) -> Any:
    """``value`` as plain JSON (see the module), or ``JSONError`` naming what is not, and where."""
    # The common scalars, judged here as to_json would: a handler's result is often one.
    if (
        value is None
        or type(value) is bool
        or (type(value) is int and INT_MIN <= value <= INT_MAX)
        or (type(value) is str and value.isascii())
        or (type(value) is float and math.isfinite(value))
    ):
        return value
    try:
        to_json(value, where)
    except JSONError:
        pass  # Python-only parts (attrs instances, enums, tuples) are made plain below
    else:
        return value  # plain JSON already: no walk needed
    try:
        converted = _plain(value)
        to_json(converted, where)
    except RecursionError:
        raise JSONError(
            f"{where}: expected JSON nested less deeply, got a value that contains itself "
            "or nests past Python's recursion limit"
        ) from None
    return converted


class Answered:
    """What a handler returns when it answers with an outcome, not a value (an agent tool).

    The registry hands ``outcome`` on as the call's (cut to the tool's
    ``max_result_chars``): its status, and the ``usage`` its child run spent.
    """

    __slots__ = ("outcome",)

    def __init__(self, outcome: dict[str, Any]) -> None:
        self.outcome = outcome


def returned(tool_name: str, value: object) -> dict[str, Any]:
    """The outcome of a handler that returned ``value``: ``ok``, or ``error`` if it has no JSON.

    An ``Answered`` (an agent tool's) is its outcome already.
    """
    if type(value) is Answered:
        return value.outcome
    try:
        return {"status": "ok", "content": json_form(value, "result")}
    except JSONError as exc:
        return failed(TypeError(f"tool {tool_name!r} returned a value with no JSON form: {exc}"))


def result_limit(what: str, value: object) -> int | None:
    """A ``max_result_chars``: None, or an int of 1 or more."""
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise (TypeError if type(value) is not int else ValueError)(
            f"{what}: expected an int of 1 or more or None, got {value!r:.40}"
        )
    return value


def failed(exc: BaseException) -> dict[str, Any]:
    """The ``error`` outcome: ``exc``'s type and message for the model, itself for the event."""
    return {
        "status": "error",
        "content": exception_content(exc),
        "exception": exc,  # kept on the transition event, never sent to the model
    }
