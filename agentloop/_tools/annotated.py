"""What an annotation adds to its schema, and the refusal of an annotation that has none.

``Annotated[T, ...]`` adds a description (its first str, or a pydantic
``Field``'s) and the constraints of annotated_types and pydantic, which the
check then enforces. ``Unsupported`` refuses an annotation with no JSON
Schema, and ``Unpublishable`` one carrying a value with no JSON form: a
tool whose schema could not be sent to a provider is no tool.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from agentloop._core.json import to_json
from agentloop._errors import JSONError

__all__ = ["Unpublishable", "Unsupported", "annotated_schema", "published"]


class Unsupported(TypeError):
    """An annotation with no JSON Schema; ``where`` says which class field held it."""

    def __init__(self, annotation: object, where: str, why: str = "") -> None:
        super().__init__(why)
        self.annotation, self.where = annotation, where


class Unpublishable(Unsupported):
    """A supported annotation carrying a value with no JSON form (``Literal[2**64]``)."""


# The JSON Schema keyword of each constraint of annotated_types (Ge, Interval, MaxLen, ...)
# and pydantic (Field(ge=...), conint, constr), by attribute; a length's is a string's or
# an array's.
_CONSTRAINTS: Final[dict[str, str | tuple[str, str]]] = {
    "gt": "exclusiveMinimum",
    "ge": "minimum",
    "lt": "exclusiveMaximum",
    "le": "maximum",
    "multiple_of": "multipleOf",
    "pattern": "pattern",
    "min_length": ("minLength", "minItems"),
    "max_length": ("maxLength", "maxItems"),
}


def annotated_schema(
    schema: dict[str, Any], notes: tuple[Any, ...], ann: Any, where: str
) -> dict[str, Any]:
    """``schema`` with what ``Annotated`` adds to it, which the check then enforces.

    A description (the first str, or a pydantic ``Field``'s), and the
    constraints of annotated_types and pydantic. Other libraries' metadata is
    left alone.
    """
    out = dict(schema)
    texts = [note for note in notes if isinstance(note, str)]
    for note in notes:
        if type(note).__module__.split(".")[0] not in ("annotated_types", "pydantic"):
            continue  # a str (below), or another library's
        if hasattr(note, "metadata") and hasattr(note, "description"):  # pydantic's Field(...)
            out = annotated_schema(out, tuple(note.metadata), ann, where)
            if note.description:
                texts.append(note.description)
            continue
        for attribute, value in _attributes(note).items():
            if value is None or attribute == "strict":  # strict: JSON's types are strict already
                continue
            keyword = _CONSTRAINTS.get(attribute)
            if keyword is None:
                raise Unsupported(
                    ann, where, f"{note!r:.80} cannot be checked from a JSON Schema ({attribute})"
                )
            if isinstance(keyword, tuple):
                keyword = keyword[0] if out.get("type") == "string" else keyword[1]
            published(value, f"its {attribute}", ann, where)
            out[keyword] = value
    if texts:  # the first str; else a Field's description
        published(texts[0], "its description", ann, where)
        out["description"] = texts[0]
    return out


def _attributes(note: object) -> dict[str, Any]:
    """A constraint's attributes: an annotated_types dataclass's fields, or pydantic's."""
    if dataclasses.is_dataclass(note):
        return {field.name: getattr(note, field.name) for field in dataclasses.fields(note)}
    return dict(getattr(note, "__dict__", {}))


def published(value: object, what: str, annotation: object, where: str) -> None:
    """Refuse a value the schema would carry when it has no JSON form (NaN, 2**64, a surrogate)."""
    try:
        to_json(value, what)
    except JSONError as exc:
        raise Unpublishable(annotation, where, str(exc)) from None
