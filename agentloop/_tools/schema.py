"""One annotation as a JSON Schema, with the converter from its JSON to the annotated type.

``Deriver`` handles the supported annotations (the table on the docs' Tools page): JSON
scalars, ``list``, ``dict[str, T]``, ``tuple``, unions, ``Literal``, enums,
``Annotated[T, 'description']``, attrs classes, ``TypedDict`` and ``Any``.
Classes are described once under ``$defs`` and referenced with ``$ref``;
recursive ones work. Everything a schema would carry from the user's code
(``Literal`` and enum values, descriptions, field names) must have a JSON
form, or the annotation is refused when the tool is defined: a tool whose
schema could not be sent to a provider is no tool.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import inspect
import re
import types
import typing
import uuid
from collections.abc import Callable
from typing import Any, Final, Literal

import attrs

from agentloop._core.json import to_json
from agentloop._core.output_schema import instance_path, problem_line
from agentloop._errors import JSONError
from agentloop._tools.results import INT_MAX, INT_MIN, is_pydantic_model, json_form
from agentloop._tools.validation import ArgumentsValidator, out_of_range

__all__ = [
    "SUPPORTED",
    "Converter",
    "Deriver",
    "Refused",
    "Unpublishable",
    "Unsupported",
    "converted_values",
    "fields_converter",
    "json_default",
    "refusals",
    "show",
    "summary",
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


def _refused_at(step: str | int, exc: Exception) -> Refused:
    """``exc``, raised converting the value at ``step`` (a key or an index), one step out."""
    problems = [{**p, "path": _stepped(step, p["path"])} for p in refusals(exc)]
    return Refused(problems, exc.original if isinstance(exc, Refused) else exc)


def _stepped(step: str | int, path: str) -> str:
    """``path`` (as ``instance_path`` writes one) from one step further out."""
    head = instance_path([step])
    return head + path if not path or path.startswith("[") else f"{head}.{path}"


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


class Unsupported(TypeError):
    """An annotation with no JSON Schema; ``where`` says which class field held it."""

    def __init__(self, annotation: object, where: str, why: str = "") -> None:
        super().__init__(why)
        self.annotation, self.where = annotation, where


class Unpublishable(Unsupported):
    """A supported annotation carrying a value with no JSON form (``Literal[2**64]``)."""


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
_TEXT_TYPES: Final[dict[Any, tuple[str, Converter]]] = {
    datetime.datetime: (
        "date-time",
        _parsed(datetime.datetime.fromisoformat, "an ISO 8601 date and time"),
    ),
    datetime.date: ("date", _parsed(datetime.date.fromisoformat, "an ISO 8601 date")),
    datetime.time: ("time", _parsed(datetime.time.fromisoformat, "an ISO 8601 time")),
    uuid.UUID: ("uuid", _parsed(uuid.UUID, "a UUID")),
}


# A decimal's text, as Decimal() reads it (no NaN or Infinity): what a model may send for one.
_DECIMAL_TEXT: Final = r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$"


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


def json_default(value: object) -> tuple[bool, Any]:
    """(True, JSON form) when a default has one, else (False, None): it is then left out."""
    try:
        return True, json_form(value, "default")
    except JSONError:
        return False, None


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


def _annotated(
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
            out = _annotated(out, tuple(note.metadata), ann, where)
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
            _published(value, f"its {attribute}", ann, where)
            out[keyword] = value
    if texts:  # the first str; else a Field's description
        _published(texts[0], "its description", ann, where)
        out["description"] = texts[0]
    return out


def _attributes(note: object) -> dict[str, Any]:
    """A constraint's attributes: an annotated_types dataclass's fields, or pydantic's."""
    if dataclasses.is_dataclass(note):
        return {field.name: getattr(note, field.name) for field in dataclasses.fields(note)}
    return dict(getattr(note, "__dict__", {}))


def _published(value: object, what: str, annotation: object, where: str) -> None:
    """Refuse a value the schema would carry when it has no JSON form (NaN, 2**64, a surrogate)."""
    try:
        to_json(value, what)
    except JSONError as exc:
        raise Unpublishable(annotation, where, str(exc)) from None


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
            return _annotated(schema, ann.__metadata__, ann, where), convert
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
        if isinstance(ann, type) and ann in _TEXT_TYPES:  # JSON has no such type: its text
            form, convert = _TEXT_TYPES[ann]
            return {"type": "string", "format": form}, convert
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args, where)
        if origin is Literal:
            if not all(arg is None or type(arg) in (str, int, bool) for arg in args):
                raise Unsupported(ann, where, "Literal values must be str, int, bool or None")
            for arg in args:
                _published(arg, f"its value {arg!r:.40}", ann, where)
            # A valid float equals one of the ints (JSON Schema's enum compares numbers by value).
            return _enum_schema(list(args)), (to_int if int in map(type, args) else None)
        if isinstance(ann, type) and issubclass(ann, enum.Enum):
            values = [member.value for member in ann]
            if not all(v is None or type(v) in (str, int, float, bool) for v in values):
                raise Unsupported(ann, where, "Enum values must be str, int, float, bool or None")
            for value in values:
                _published(value, f"its value {value!r:.40}", ann, where)
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
                    raise _refused_at(index, exc) from exc
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
                    raise _refused_at(index, exc) from exc
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
                _published(key, "its field name", cls, where)
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
                _published(key, "its key", cls, where)
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
            _published(description, "its docstring", cls, "")
            out["description"] = description
        out.update(properties=properties, required=required, additionalProperties=False)
        return out, _class_converter(cls, converters)


def _class_converter(cls: type, converters: dict[str, Converter | None]) -> Converter | None:
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
                    raise _refused_at(key, ValueError(out_of_range(number)))
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
                        raise _refused_at(key, exc) from exc
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
            raise _refused_at(key, exc) from exc
    return out
