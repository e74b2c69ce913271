"""One annotation as a JSON Schema, with the converter from its JSON to the annotated type.

``Deriver`` handles the supported annotations (the table on the docs' Tools page): JSON
scalars, ``list``, ``dict[str, T]``, ``tuple``, unions, ``Literal``, enums,
``Annotated[T, 'description']``, attrs classes, ``TypedDict`` and ``Any``.
Classes are described once under ``$defs`` and referenced with ``$ref``;
recursive ones work. Everything a schema would carry from the user's code
(``Literal`` and enum values, descriptions, field names) must have a JSON
form, or the annotation is refused when the tool is defined
(``annotated.py``). The converters are ``converters.py``'s.
"""

from __future__ import annotations

import dataclasses
import decimal
import enum
import inspect
import re
import types
import typing
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from agentloop._errors import JSONError
from agentloop._tools.annotated import Unsupported, annotated_schema, published
from agentloop._tools.converters import (
    TEXT_TYPES,
    class_converter,
    converted_values,
    refused_at,
    to_decimal,
    to_float,
    to_int,
)
from agentloop._tools.results import is_pydantic_model, json_form
from agentloop._tools.validation import ArgumentsValidator

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._tools.converters import Converter

__all__ = ["SUPPORTED", "Deriver", "json_default", "show", "summary"]


SUPPORTED: Final = (
    "int, float, str, bool, None, list[T], dict[str, T], tuple[...], X | Y, Literal[...], "
    "Enum, Annotated[T, 'description'], attrs classes, dataclasses, TypedDict, pydantic "
    "models, datetime, date, time, UUID, Decimal, Any"
)

# Characters a $defs name may keep: a $ref is a URI fragment and a JSON pointer, so
# anything else (a '/', '~', space or 'é' in a class's name) would break it.
_UNSAFE_NAME: Final = re.compile(r"[^A-Za-z0-9_.-]")

# The JSON Schema types a value of each JSON Python type may satisfy (2.0 is an integer).
_JSON_TYPES: Final = {
    type(None): {"null"},
    bool: {"boolean"},
    int: {"integer", "number"},
    float: {"integer", "number"},
    str: {"string"},
    list: {"array"},
    dict: {"object"},
}


def show(annotation: object) -> str:
    """An annotation as its user wrote it: ``list[int]``, ``Point``."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def summary(doc: str | None) -> str:
    """A docstring's first paragraph on one line."""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split()) if doc else ""


def _json_type(value: object) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return "null" if value is None else names[type(value)]


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = dict.fromkeys(_json_type(value) for value in values)
    return {"type": next(iter(kinds)), "enum": values} if len(kinds) == 1 else {"enum": values}


def _kinds(schema: dict[str, Any]) -> set[str] | None:
    """The JSON types a derived schema admits, or None for any."""
    if "$ref" in schema:
        return {"object"}  # every entry under $defs describes a class
    if "type" in schema:
        return {schema["type"]} if isinstance(schema["type"], str) else set(schema["type"])
    if "enum" in schema:
        return {_json_type(value) for value in schema["enum"]}
    if "anyOf" in schema:  # a union inside Annotated
        kinds: set[str] = set()
        for member in schema["anyOf"]:
            member_kinds = _kinds(member)
            if member_kinds is None:
                return None
            kinds |= member_kinds
        return kinds
    return None


# A decimal's text, as Decimal() reads it (no NaN or Infinity): what a model may send for one.
_DECIMAL_TEXT: Final = r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$"


def json_default(value: object) -> tuple[bool, Any]:
    """(True, JSON form) when a default has one, else (False, None): it is then left out."""
    try:
        return True, json_form(value, "default")
    except JSONError:
        return False, None


class Deriver:
    """Derives schemas and argument converters for one tool, sharing ``$defs``.

    Call ``finish()`` once every parameter is derived: union conversions check
    values against their members, whose ``$ref``s need the finished ``$defs``.
    """

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self._names: dict[type, str] = {}
        self._converters: dict[type, Converter | None] = {}
        self._pending: list[Callable[[], None]] = []

    def finish(self) -> None:
        """Compile what needed the finished ``$defs`` (the union members' checks)."""
        for compile_now in self._pending:
            compile_now()
        self._pending.clear()

    def derive(self, ann: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
        """The schema for ``ann`` and the converter from JSON to it (None: keep as is)."""
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if ann is Any:
            return {}, None
        if origin is typing.Annotated:
            schema, convert = self.derive(args[0], where)
            return annotated_schema(schema, ann.__metadata__, ann, where), convert
        if ann is None or ann is type(None):
            return {"type": "null"}, None
        if ann is bool:
            return {"type": "boolean"}, None
        if ann is int:
            return {"type": "integer"}, to_int
        if ann is float:
            return {"type": "number"}, to_float
        if ann is str:
            return {"type": "string"}, None
        if ann is decimal.Decimal:  # a number, or its text: a model may keep every digit
            text = {"type": "string", "pattern": _DECIMAL_TEXT}
            return {"anyOf": [{"type": "number"}, text]}, to_decimal
        if isinstance(ann, type) and ann in TEXT_TYPES:  # JSON has no such type: its text
            form, convert = TEXT_TYPES[ann]
            return {"type": "string", "format": form}, convert
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args, where)
        if origin is Literal:
            if not all(arg is None or type(arg) in (str, int, bool) for arg in args):
                raise Unsupported(ann, where, "Literal values must be str, int, bool or None")
            for arg in args:
                published(arg, f"its value {arg!r:.40}", ann, where)
            # A valid float equals one of the ints (JSON Schema's enum compares numbers by value).
            return _enum_schema(list(args)), (to_int if int in map(type, args) else None)
        if isinstance(ann, type) and issubclass(ann, enum.Enum):
            values = [member.value for member in ann]
            if not all(v is None or type(v) in (str, int, float, bool) for v in values):
                raise Unsupported(ann, where, "Enum values must be str, int, float, bool or None")
            for value in values:
                published(value, f"its value {value!r:.40}", ann, where)
            return _enum_schema(values), ann
        if ann is list or origin is list:
            return self._array(args[0] if args else Any, where, list)
        if ann is tuple or origin is tuple:
            return self._tuple(ann, args, where)
        if ann is dict or origin is dict:
            return self._object(ann, args, where)
        if isinstance(ann, type) and (
            attrs.has(ann) or typing.is_typeddict(ann) or dataclasses.is_dataclass(ann)
        ):
            return self._class(ann)
        if is_pydantic_model(ann):
            return self._model(ann, where)
        raise Unsupported(ann, where)

    def _union(self, args: tuple[Any, ...], where: str) -> tuple[dict[str, Any], Converter | None]:
        members = [self.derive(arg, where) for arg in args]
        schemas = [schema for schema, _ in members]
        if all(schema.keys() == {"type"} for schema in schemas):
            schema: dict[str, Any] = {"type": list(dict.fromkeys(s["type"] for s in schemas))}
        else:
            schema = {"anyOf": schemas}
        if all(convert is None for _, convert in members):
            return schema, None
        # Convert with the first member the (valid) value is valid for. Only members
        # whose JSON types admit the value can be, and the last of those needs no check:
        # for each Python type a valid value may have, the members to check in order and
        # the last one's converter. (``object``: a value of any other type, checked plainly.)
        plans: dict[type, tuple[list[tuple[Callable[[Any], bool], Converter | None]], Any]] = {}

        def compile_checks() -> None:
            checks = [(*self._member_checks(s), c, _kinds(s)) for s, c in members]
            for python, json_types in _JSON_TYPES.items():
                admitting = [
                    (check, c)
                    for check, _, c, kinds in checks
                    if kinds is None or kinds & json_types
                ]
                if admitting:
                    plans[python] = (admitting[:-1], admitting[-1][1])
            plans[object] = ([(is_valid, c) for _, is_valid, c, _ in checks[:-1]], checks[-1][2])

        self._pending.append(compile_checks)

        def convert_union(value: Any) -> Any:
            earlier, convert = plans.get(type(value)) or plans[object]
            for is_valid, maybe in earlier:
                if is_valid(value):
                    convert = maybe
                    break
            return value if convert is None else convert(value)

        return schema, convert_union

    def _member_checks(
        self, schema: dict[str, Any]
    ) -> tuple[Callable[[Any], bool], Callable[[Any], bool]]:
        """Two checks that a value is valid for one union member: for a dict, and for any.

        Made once the ``$defs`` are finished. They differ for a class only.
        """
        is_valid = ArgumentsValidator({"$defs": self.defs, **schema}, derived=True).is_valid
        target = self.defs.get(schema.get("$ref", "").rsplit("/", 1)[-1])
        if target is None:
            return is_valid, is_valid
        # A class takes an object with its required keys (and, when it is closed, no
        # others): a set test rules most dicts out before the validator is asked. A
        # pydantic model's schema may leave out "required" and leaves other keys open.
        required = frozenset(target.get("required", ()))
        known = frozenset(target.get("properties", ()))
        closed = target.get("additionalProperties") is False

        def check_dict(value: dict[str, Any]) -> bool:
            keys = value.keys()
            return keys >= required and (keys <= known or not closed) and is_valid(value)

        return check_dict, is_valid

    def _array(
        self, item: Any, where: str, kind: type[list[Any]] | type[tuple[Any, ...]]
    ) -> tuple[dict[str, Any], Converter | None]:
        items, convert = self.derive(item, where)
        schema = {"type": "array", "items": items} if items else {"type": "array"}
        if convert is None:
            return schema, (None if kind is list else tuple)
        if convert is to_float and kind is list:  # a copy only when an int came
            return (
                schema,
                lambda value: [to_float(x) for x in value] if int in map(type, value) else value,
            )

        def convert_items(value: list[Any]) -> list[Any] | tuple[Any, ...]:
            out = []
            for index, item in enumerate(value):
                try:
                    out.append(convert(item))
                except (TypeError, ValueError) as exc:
                    raise refused_at(index, exc) from exc
            return out if kind is list else tuple(out)

        return schema, convert_items

    def _tuple(
        self, ann: Any, args: tuple[Any, ...], where: str
    ) -> tuple[dict[str, Any], Converter | None]:
        if ann is tuple or (not args and ann != tuple[()]):  # typing.Tuple: tuple[Any, ...]
            return self._array(Any, where, tuple)
        if len(args) == 2 and args[1] is Ellipsis:
            return self._array(args[0], where, tuple)
        members = [self.derive(arg, where) for arg in args]
        schema: dict[str, Any] = {"type": "array", "minItems": len(args), "maxItems": len(args)}
        if members:
            schema["prefixItems"] = [s for s, _ in members]
        converters = [c for _, c in members]

        def convert_members(value: list[Any]) -> tuple[Any, ...]:
            out = []
            for index, (convert, item) in enumerate(zip(converters, value, strict=True)):
                try:
                    out.append(item if convert is None else convert(item))
                except (TypeError, ValueError) as exc:
                    raise refused_at(index, exc) from exc
            return tuple(out)

        return schema, convert_members

    def _object(
        self, ann: Any, args: tuple[Any, ...], where: str
    ) -> tuple[dict[str, Any], Converter | None]:
        if not args:
            return {"type": "object"}, None
        if args[0] is not str:
            raise Unsupported(ann, where, "JSON object keys are str")
        values, convert = self.derive(args[1], where)
        schema = (
            {"type": "object", "additionalProperties": values} if values else {"type": "object"}
        )
        if convert is None:
            return schema, None
        return schema, lambda value: converted_values(value, {}, convert)

    def _class(self, cls: type) -> tuple[dict[str, Any], Converter | None]:
        """An attrs class, dataclass or TypedDict: once under ``$defs``, then referenced."""
        if cls not in self._names:
            name = _UNSAFE_NAME.sub("_", cls.__name__)
            while name in self.defs:  # two classes with one name: number the later one
                name += "_"
            self._names[cls] = name
            self.defs[name] = {}  # a placeholder, so that a recursive class refers to it
            self.defs[name], self._converters[cls] = self.describe(cls)
        ref = {"$ref": f"#/$defs/{self._names[cls]}"}
        if cls in self._converters:
            return ref, self._converters[cls]
        converters = self._converters

        def convert_late(value: Any) -> Any:
            # Looked up at call time: a recursive class's converter is not built yet here.
            convert = converters[cls]
            return value if convert is None else convert(value)

        return ref, convert_late

    def _model(self, cls: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
        """A pydantic model: its own schema under ``$defs`` (its models' beside it).

        Referenced from then on; its ``model_validate`` converts (its validators run).
        """
        if cls not in self._names:
            schema = cls.model_json_schema(ref_template="#/$defs/{model}")
            for name, nested in schema.pop("$defs", {}).items():
                if self.defs.get(name, nested) != nested:
                    raise Unsupported(cls, where, f"two definitions are named {name!r}")
                self.defs[name] = nested
            name = _UNSAFE_NAME.sub("_", cls.__name__)
            while name in self.defs:
                name += "_"
            self._names[cls], self.defs[name] = name, schema
            self._converters[cls] = cls.model_validate
        return {"$ref": f"#/$defs/{self._names[cls]}"}, self._converters[cls]

    def describe(self, cls: type) -> tuple[dict[str, Any], Converter | None]:
        """An attrs class's, dataclass's or TypedDict's object schema, and its converter."""
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception as exc:
            raise Unsupported(cls, cls.__name__, f"cannot resolve its annotations: {exc}") from exc
        properties: dict[str, Any] = {}
        required: list[str] = []
        converters: dict[str, Converter | None] = {}
        if attrs.has(cls):
            for field in attrs.fields(cls):
                if not field.init:
                    continue
                key = field.alias or field.name
                where = f"{cls.__name__}.{key}"
                published(key, "its field name", cls, where)
                schema, converters[key] = self.derive(hints.get(field.name, Any), where)
                if field.default is attrs.NOTHING:
                    required.append(key)
                elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
                    has_default, default = json_default(field.default)
                    schema = {**schema, "default": default} if has_default else schema
                properties[key] = schema
        elif dataclasses.is_dataclass(cls):
            for data_field in dataclasses.fields(cls):
                if not data_field.init:
                    continue
                key = data_field.name
                where = f"{cls.__name__}.{key}"
                schema, converters[key] = self.derive(hints.get(key, Any), where)
                if data_field.default is not dataclasses.MISSING:
                    has_default, default = json_default(data_field.default)
                    schema = {**schema, "default": default} if has_default else schema
                elif data_field.default_factory is dataclasses.MISSING:
                    required.append(key)
                properties[key] = schema
        else:
            total_keys = cls.__required_keys__  # type: ignore[attr-defined]
            for key, hint in hints.items():
                where = f"{cls.__name__}.{key}"
                published(key, "its key", cls, where)
                # Python 3.11 cannot see Required/NotRequired in string annotations,
                # so __required_keys__ is trusted only for keys without them.
                origin = typing.get_origin(hint)
                if origin is typing.Required or (
                    origin is not typing.NotRequired and key in total_keys
                ):
                    required.append(key)
                while typing.get_origin(hint) in (typing.Required, typing.NotRequired):
                    hint = typing.get_args(hint)[0]
                properties[key], converters[key] = self.derive(hint, where)
        out: dict[str, Any] = {"type": "object"}
        description = summary(cls.__doc__)
        if description and not description.startswith(f"{cls.__name__}("):  # a dataclass's own
            published(description, "its docstring", cls, "")
            out["description"] = description
        out.update(properties=properties, required=required, additionalProperties=False)
        return out, class_converter(cls, converters)
