"""The tool registry: typed tools, JSON Schema arguments, a permission gate, specs.

A ``Tool`` is a handler with a name, a description and a ``parameters`` JSON
Schema, derived once from the handler's signature when the tool is defined
(an annotation that has no JSON Schema fails right there, never at call
time). Its Draft 2020-12 validator is compiled once, too. ``ToolRegistry`` is
a dispatcher in the core's sense; for each call it answers, in this order:

1. ``unknown_tool``: no tool has the call's name.
2. ``invalid_arguments``: the arguments break the schema (every violation is
   listed as ``{'path', 'message'}``) or cannot be converted for the handler
   (an attrs validator refused them).
3. ``denied``: the registry's policy, then the tool's, said no.
4. ``error``: a policy or the handler raised, or the handler returned a value
   with no JSON form. Content ``{'type', 'message'}``; the exception itself
   rides on the outcome's ``'exception'`` key to the transition event.
5. ``ok``: the handler's return value as JSON.

Policies run after validation so that they judge arguments known to be
well-formed (a policy reading ``call['arguments']['path']`` needs no defensive
code); the schema is published to the model anyway, so validating first
reveals nothing a denial would hide.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final, Literal, TypeVar, overload

import attrs
import jsonschema
import orjson

from agentloop._core._json import copy_json, exception_content, to_json
from agentloop._errors import JSONError

__all__ = ["Decision", "Policy", "SpecFormat", "Tool", "ToolRegistry", "allow", "deny"]

Converter = Callable[[Any], Any]
Handler = TypeVar("Handler", bound=Callable[..., Any])
SpecFormat = Literal["openai", "openai-responses", "anthropic", "json-schema"]

# What a provider accepts as a tool name (OpenAI and Anthropic agree).
_PROVIDER_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SUPPORTED: Final = (
    "int, float, str, bool, None, list[T], dict[str, T], tuple[...], X | Y, Literal[...], "
    "Enum, Annotated[T, 'description'], attrs classes, TypedDict, Any"
)


# -- policies ---------------------------------------------------------------


@attrs.frozen
class Decision:
    """A policy's answer: ``allow()``, or ``deny(reason)`` with the reason for the model."""

    allowed: bool
    reason: str = ""

    def __attrs_post_init__(self) -> None:
        # Checked here, so that a policy cannot answer with a truthy "no" or an empty denial.
        if type(self.allowed) is not bool:
            raise TypeError(f"expected Decision.allowed to be a bool, got {self.allowed!r:.80}")
        if not isinstance(self.reason, str) or not (self.allowed or self.reason):
            what = "Decision.reason" if self.allowed else "a denial's reason"
            empty = "" if self.allowed else "non-empty "
            raise TypeError(f"expected {what} to be a {empty}str, got {self.reason!r:.80}")


_ALLOW: Final = Decision(allowed=True)

#: A permission policy: sees a copy of the call, answers ``allow()`` or ``deny(reason)``.
Policy = Callable[[dict[str, Any]], Decision]


def allow() -> Decision:
    """The policy answer that lets a call run."""
    return _ALLOW


def deny(reason: str) -> Decision:
    """The policy answer that refuses a call; ``reason`` becomes the ``denied`` content."""
    return Decision(allowed=False, reason=reason)


# -- results ------------------------------------------------------------------


def _plain(value: object) -> Any:
    """``value`` with its Python-only parts made JSON types, the rest left for ``to_json``.

    attrs instances and dataclasses become dicts of their fields, enums their
    values, tuples lists, nested.
    """
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
    return value


def _json_form(value: object, where: str) -> Any:
    """``value`` as plain JSON (see ``_plain``), or ``JSONError`` naming what is not, and where."""
    try:
        converted = _plain(value)
        to_json(converted, where)
    except RecursionError:
        raise JSONError(
            f"{where}: expected JSON nested less deeply, got a value that contains itself "
            "or nests past Python's recursion limit"
        ) from None
    return converted


# -- schema derivation --------------------------------------------------------


def _show(annotation: object) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def _summary(doc: str | None) -> str:
    """A docstring's first paragraph on one line."""
    return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split()) if doc else ""


def _json_type(value: object) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    return "null" if value is None else names[type(value)]


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = dict.fromkeys(_json_type(value) for value in values)
    return {"type": next(iter(kinds)), "enum": values} if len(kinds) == 1 else {"enum": values}


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


def _to_int(value: Any) -> Any:
    # JSON Schema counts 2.0 as an integer; the handler asked for an int.
    return int(value) if isinstance(value, float) else value


def _json_default(value: object) -> tuple[bool, Any]:
    """(True, JSON form) when a default has one, else (False, None)."""
    try:
        return True, _json_form(value, "default")
    except JSONError:
        return False, None


class _Unsupported(TypeError):
    """An annotation with no JSON Schema; ``where`` says which field held it."""

    def __init__(self, annotation: object, where: str, why: str = "") -> None:
        super().__init__(why)
        self.annotation, self.where = annotation, where


class _Deriver:
    """Derives schemas and argument converters for one tool, sharing ``$defs``."""

    def __init__(self) -> None:
        self.defs: dict[str, dict[str, Any]] = {}
        self._names: dict[type, str] = {}
        self._converters: dict[type, Converter | None] = {}

    def derive(self, ann: Any, where: str) -> tuple[dict[str, Any], Converter | None]:
        """The schema for ``ann`` and the converter from JSON to it (None: keep as is)."""
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if ann is Any:
            return {}, None
        if origin is typing.Annotated:
            schema, convert = self.derive(args[0], where)
            notes = [note for note in ann.__metadata__ if isinstance(note, str)]
            return ({**schema, "description": notes[0]} if notes else schema), convert
        if ann is None or ann is type(None):
            return {"type": "null"}, None
        if ann is bool:
            return {"type": "boolean"}, None
        if ann is int:
            return {"type": "integer"}, _to_int
        if ann is float:
            return {"type": "number"}, None
        if ann is str:
            return {"type": "string"}, None
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args, where)
        if origin is Literal:
            if not all(arg is None or type(arg) in (str, int, bool) for arg in args):
                raise _Unsupported(ann, where, "Literal values must be str, int, bool or None")
            # A valid float equals one of the ints (JSON Schema's enum compares numbers by value).
            return _enum_schema(list(args)), (_to_int if int in map(type, args) else None)
        if isinstance(ann, type) and issubclass(ann, enum.Enum):
            values = [member.value for member in ann]
            if not all(v is None or type(v) in (str, int, float, bool) for v in values):
                raise _Unsupported(ann, where, "Enum values must be str, int, float, bool or None")
            return _enum_schema(values), ann
        if ann is list or origin is list:
            return self._array(args[0] if args else Any, where, list)
        if ann is tuple or origin is tuple:
            return self._tuple(ann, args, where)
        if ann is dict or origin is dict:
            return self._object(ann, args, where)
        if isinstance(ann, type) and (attrs.has(ann) or typing.is_typeddict(ann)):
            return self._class(ann)
        raise _Unsupported(ann, where)

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
        # whose JSON types admit the value can be; the last of those needs no check.
        checks = [
            (jsonschema.Draft202012Validator({"$defs": self.defs, **s}).is_valid, c, _kinds(s))
            for s, c in members
        ]
        candidates = {
            python: [(v, c) for v, c, kinds in checks if kinds is None or kinds & json_types]
            for python, json_types in _JSON_TYPES.items()
        }
        everyone = [(v, c) for v, c, _ in checks]

        def convert_union(value: Any) -> Any:
            *earlier, (_, convert) = candidates.get(type(value)) or everyone
            for is_valid, maybe in earlier:
                if is_valid(value):
                    convert = maybe
                    break
            return value if convert is None else convert(value)

        return schema, convert_union

    def _array(
        self, item: Any, where: str, kind: type[list[Any]] | type[tuple[Any, ...]]
    ) -> tuple[dict[str, Any], Converter | None]:
        items, convert = self.derive(item, where)
        schema = {"type": "array", "items": items} if items else {"type": "array"}
        if convert is None:
            return schema, (None if kind is list else tuple)
        return schema, lambda value: kind(convert(x) for x in value)

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
        return schema, lambda value: tuple(
            x if c is None else c(x) for c, x in zip(converters, value, strict=True)
        )

    def _object(
        self, ann: Any, args: tuple[Any, ...], where: str
    ) -> tuple[dict[str, Any], Converter | None]:
        if not args:
            return {"type": "object"}, None
        if args[0] is not str:
            raise _Unsupported(ann, where, "JSON object keys are str")
        values, convert = self.derive(args[1], where)
        schema = (
            {"type": "object", "additionalProperties": values} if values else {"type": "object"}
        )
        if convert is None:
            return schema, None
        return schema, lambda value: {k: convert(v) for k, v in value.items()}

    def _class(self, cls: type) -> tuple[dict[str, Any], Converter | None]:
        """An attrs class or TypedDict: described once under ``$defs``, then referenced."""
        if cls not in self._names:
            name = cls.__name__
            while name in self.defs:  # two classes with one name: number the later one
                name += "_"
            self._names[cls] = name
            self.defs[name] = {}  # a placeholder, so that a recursive class refers to it
            self.defs[name], self._converters[cls] = self._describe(cls)
        ref = {"$ref": f"#/$defs/{self._names[cls]}"}
        if self._converters.get(cls, True) is None:
            return ref, None
        converters = self._converters

        def convert_late(value: Any) -> Any:
            # Looked up at call time: a recursive class's converter is not built yet here.
            convert = converters[cls]
            return value if convert is None else convert(value)

        return ref, convert_late

    def _describe(self, cls: type) -> tuple[dict[str, Any], Converter | None]:
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception as exc:
            raise _Unsupported(cls, cls.__name__, f"cannot resolve its annotations: {exc}") from exc
        properties: dict[str, Any] = {}
        required: list[str] = []
        converters: dict[str, Converter | None] = {}
        if attrs.has(cls):
            for field in attrs.fields(cls):
                if not field.init:
                    continue
                key = field.alias or field.name
                schema, converters[key] = self.derive(
                    hints.get(field.name, Any), f"{cls.__name__}.{key}"
                )
                if field.default is attrs.NOTHING:
                    required.append(key)
                elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
                    has_default, default = _json_default(field.default)
                    schema = {**schema, "default": default} if has_default else schema
                properties[key] = schema
        else:
            total_keys = cls.__required_keys__  # type: ignore[attr-defined]
            for key, hint in hints.items():
                # Python 3.11 cannot see Required/NotRequired in string annotations,
                # so __required_keys__ is trusted only for keys without them.
                origin = typing.get_origin(hint)
                if origin is typing.Required or (
                    origin is not typing.NotRequired and key in total_keys
                ):
                    required.append(key)
                while typing.get_origin(hint) in (typing.Required, typing.NotRequired):
                    hint = typing.get_args(hint)[0]
                properties[key], converters[key] = self.derive(hint, f"{cls.__name__}.{key}")
        out: dict[str, Any] = {"type": "object"}
        if description := _summary(cls.__doc__):
            out["description"] = description
        out.update(properties=properties, required=required, additionalProperties=False)
        active = {key: c for key, c in converters.items() if c is not None}
        if attrs.has(cls):
            return out, lambda value: cls(
                **{k: (active[k](v) if k in active else v) for k, v in value.items()}
            )
        if not active:
            return out, None
        return out, lambda value: {
            k: (active[k](v) if k in active else v) for k, v in value.items()
        }


# -- tools --------------------------------------------------------------------


def _hint_source(handler: Callable[..., Any]) -> Any:
    """Where a handler's annotations live."""
    if inspect.isroutine(handler):
        return handler
    if isinstance(handler, type):
        return handler.__init__  # type: ignore[misc]
    if isinstance(handler, functools.partial):
        return _hint_source(handler.func)
    return type(handler).__call__


def _parameter_hints(
    name: str, handler: Callable[..., Any], signature: inspect.Signature
) -> dict[str, Any]:
    """The parameters' annotations, resolved one by one.

    The return annotation is not needed, so it is not evaluated: it may name a
    type imported under ``TYPE_CHECKING``.
    """
    source = _hint_source(handler)
    annotations = getattr(source, "__annotations__", None) or {}
    globalns = getattr(inspect.unwrap(source), "__globals__", {})
    hints = {}
    for param in signature.parameters:
        if param not in annotations:
            continue
        # get_type_hints on an object holding this one annotation: the same evaluation.
        holder = types.SimpleNamespace(__annotations__={param: annotations[param]})
        try:
            hints[param] = typing.get_type_hints(holder, globalns, include_extras=True)[param]
        except Exception as exc:
            raise TypeError(
                f"tool {name!r}: parameter {param!r}: cannot resolve its annotation "
                f"{annotations[param]!r}: {exc}"
            ) from exc
    return hints


class Tool:
    """A handler with its name, description and ``parameters`` JSON Schema.

    ``name`` defaults to the handler's ``__name__``; ``description`` to the
    first paragraph of its docstring; ``parameters`` to the schema derived from
    its signature (pass your own to take over: it is checked as Draft 2020-12
    and the handler then receives the arguments as plain JSON). ``policy``
    gates this tool alone, after the registry's policy.
    """

    __slots__ = (
        "_converters",
        "_extra",
        "_schema",
        "_validator",
        "description",
        "handler",
        "name",
        "policy",
    )

    def __init__(
        self,
        handler: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
    ) -> None:
        if not callable(handler):
            named = "" if name is None else f"tool {name!r}: "
            raise TypeError(f"{named}expected a callable handler, got {type(handler).__name__}")
        if name is None:
            name = getattr(handler, "__name__", None)
            if not isinstance(name, str):
                raise TypeError(
                    f"expected name= for a handler without a __name__, got {handler!r:.80}"
                )
        if not isinstance(name, str) or not name:
            raise TypeError(f"expected tool names to be non-empty str, got {name!r}")
        if description is not None and not isinstance(description, str):
            raise TypeError(
                f"tool {name!r}: expected description to be a str, got {type(description).__name__}"
            )
        if policy is not None and not callable(policy):
            raise TypeError(
                f"tool {name!r}: expected policy to be callable, got {type(policy).__name__}"
            )
        self.name: str = name
        self.handler = handler
        if description is None:  # a partial's own docstring is functools'
            described = handler.func if isinstance(handler, functools.partial) else handler
            description = _summary(inspect.getdoc(described))
        self.description: str = description
        self.policy = policy
        self._converters: dict[str, Converter | None] = {}
        self._extra: Converter | None = None
        if parameters is None:
            self._schema = self._derive()
        else:
            self._schema = _checked_schema(name, parameters)
        # Derived schemas validate faster with their $defs inlined (same errors, same paths).
        compiled = self._schema if parameters is not None else _inlined(self._schema)
        self._validator = jsonschema.Draft202012Validator(compiled)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @property
    def parameters(self) -> dict[str, Any]:
        """The arguments' JSON Schema (a fresh copy)."""
        return orjson.loads(orjson.dumps(self._schema))  # type: ignore[no-any-return]

    def _derive(self) -> dict[str, Any]:
        """The parameters' schema from the signature; fills the converters."""
        name, handler = self.name, self.handler
        try:
            signature = inspect.signature(handler)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"tool {name!r}: expected a handler with a signature: {exc}") from exc
        hints = _parameter_hints(name, handler, signature)
        deriver = _Deriver()
        properties: dict[str, Any] = {}
        required: list[str] = []
        extra: dict[str, Any] | bool = False
        for param in signature.parameters.values():
            if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
                raise TypeError(
                    f"tool {name!r}: parameter {param.name!r} is positional-only "
                    f"({param}); arguments arrive by name, so every parameter needs one"
                )
            try:
                schema, convert = deriver.derive(hints.get(param.name, Any), "")
            except _Unsupported as exc:
                at = f" (at {exc.where})" if exc.where else ""
                why = f": {exc}" if str(exc) else ""
                raise TypeError(
                    f"tool {name!r}: parameter {param.name!r}: unsupported annotation "
                    f"{_show(exc.annotation)}{at}{why}; supported: {_SUPPORTED}"
                ) from None
            if param.kind is param.VAR_KEYWORD:
                extra, self._extra = (schema or True), convert
                continue
            self._converters[param.name] = convert
            if param.default is param.empty:
                required.append(param.name)
            else:
                has_default, default = _json_default(param.default)
                schema = {**schema, "default": default} if has_default else schema
            properties[param.name] = schema
        out: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": extra,
        }
        if deriver.defs:
            out["$defs"] = deriver.defs
        return out

    def problems(self, arguments: dict[str, Any]) -> list[dict[str, str]]:
        """Every way ``arguments`` break the schema, as ``{'path', 'message'}``."""
        return [
            {"path": _path(error.absolute_path), "message": error.message}
            for error in self._validator.iter_errors(arguments)
        ]

    def convert(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Valid arguments as the handler's types (attrs instances, enum members, tuples)."""
        converters, extra = self._converters, self._extra
        out = {}
        for key, value in arguments.items():
            convert = converters.get(key, extra)
            out[key] = value if convert is None else convert(value)
        return out


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A derived schema with every non-recursive ``$ref`` replaced by its definition.

    ``jsonschema`` resolves a ``$ref`` on every validation, which costs more
    than checking the referenced schema itself. A class that contains itself
    keeps its ``$ref`` (and ``$defs`` stays for it).
    """
    defs = schema.get("$defs", {})

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name not in seen:
                siblings = {k: v for k, v in node.items() if k != "$ref"}
                return {**walk(defs[name], (*seen, name)), **siblings}
        out = dict(node)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                out[key] = walk(node[key], seen)
        for key in ("anyOf", "prefixItems"):
            if key in node:
                out[key] = [walk(item, seen) for item in node[key]]
        if "properties" in node:
            out["properties"] = {k: walk(v, seen) for k, v in node["properties"].items()}
        return out

    return {**walk(schema, ()), "$defs": defs} if defs else schema


def _path(parts: Iterable[str | int]) -> str:
    """``point.tags[2]`` for an error at ``['point', 'tags', 2]``; ``''`` for the top."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _checked_schema(name: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    try:
        schema = copy_json(dict(parameters), "parameters")
        jsonschema.Draft202012Validator.check_schema(schema)
    except (TypeError, JSONError, jsonschema.SchemaError) as exc:
        message = exc.message if isinstance(exc, jsonschema.SchemaError) else str(exc)
        raise TypeError(
            f"tool {name!r}: expected parameters to be a Draft 2020-12 JSON Schema, but {message}"
        ) from None
    if schema.get("type") != "object":
        raise TypeError(
            f"tool {name!r}: expected parameters to describe an object "
            f"({{'type': 'object', ...}}), got type {schema.get('type')!r}"
        )
    return schema  # type: ignore[no-any-return]


# -- the registry -------------------------------------------------------------


def _result(tool: Tool, value: object) -> dict[str, Any]:
    try:
        return {"status": "ok", "content": _json_form(value, "result")}
    except JSONError as exc:
        return _error(TypeError(f"tool {tool.name!r} returned a value with no JSON form: {exc}"))


def _error(exc: BaseException) -> dict[str, Any]:
    return {
        "status": "error",
        "content": exception_content(exc),
        "exception": exc,  # kept on the transition event, never sent to the model
    }


class ToolRegistry:
    """A dispatcher over named ``Tool``s, with an optional permission ``policy``.

    ``tools`` is an iterable of ``Tool``s or plain handlers, or a mapping of name
    to handler. ``policy`` sees a copy of every call whose arguments are valid
    and answers ``allow()`` or ``deny(reason)``; a tool's own policy is asked
    next. See the module docstring for the order of outcomes. ``dispatch``
    runs plain handlers; ``adispatch`` (for the async driver) also awaits
    ``async def`` ones.
    """

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any]] | Mapping[str, Callable[..., Any]] = (),
        *,
        policy: Policy | None = None,
    ) -> None:
        if policy is not None and not callable(policy):
            raise TypeError(f"expected policy to be callable, got {type(policy).__name__}")
        self.policy = policy
        self._tools: dict[str, Tool] = {}
        if isinstance(tools, Mapping):
            for name, handler in tools.items():
                self.add(Tool(handler, name=name))
        else:
            for tool in tools:
                self.add(tool)

    def __repr__(self) -> str:
        return f"ToolRegistry({sorted(self._tools)})"

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def add(self, tool: Tool | Callable[..., Any]) -> Tool:
        """Register a ``Tool`` (or a handler, made into one); names are unique."""
        if not isinstance(tool, Tool):
            tool = Tool(tool)
        if tool.name in self._tools:
            raise ValueError(f"expected unique tool names, got {tool.name!r} twice")
        self._tools[tool.name] = tool
        return tool

    @overload
    def tool(self, handler: Handler, /) -> Handler: ...
    @overload
    def tool(
        self,
        handler: None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
    ) -> Callable[[Handler], Handler]: ...
    def tool(
        self,
        handler: Handler | None = None,
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
    ) -> Handler | Callable[[Handler], Handler]:
        """Decorator: ``@registry.tool`` or ``@registry.tool(name=..., policy=...)``.

        The function is registered and returned unchanged.
        """

        def register(fn: Handler) -> Handler:
            self.add(
                Tool(fn, name=name, description=description, parameters=parameters, policy=policy)
            )
            return fn

        return register if handler is None else register(handler)

    def dispatch(self, call: dict[str, Any]) -> dict[str, Any]:
        """Run ``call`` and return its outcome; never raises for an ``Exception``."""
        prepared = self._prepare(call)
        if isinstance(prepared, dict):
            return prepared
        tool, kwargs = prepared
        try:
            value = tool.handler(**kwargs)
        except Exception as exc:  # noqa: BLE001 - a failing tool is an outcome
            return _error(exc)
        if inspect.isawaitable(value):
            getattr(value, "close", lambda: None)()  # never awaited: say so, without a warning
            return _error(
                TypeError(
                    f"tool {tool.name!r} is async; run the loop with the async driver "
                    "(loop.arun or loop.astart), which awaits it"
                )
            )
        return _result(tool, value)

    async def adispatch(self, call: dict[str, Any], *, to_thread: bool = False) -> dict[str, Any]:
        """``dispatch`` for the async driver: an ``async def`` handler is awaited.

        A plain handler is called in the event loop's thread, or with
        ``to_thread=True`` in a worker thread (``asyncio.to_thread``).
        """
        prepared = self._prepare(call)
        if isinstance(prepared, dict):
            return prepared
        tool, kwargs = prepared
        try:
            if to_thread and not inspect.iscoroutinefunction(tool.handler):
                value = await asyncio.to_thread(tool.handler, **kwargs)
            else:
                value = tool.handler(**kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 - a failing tool is an outcome
            return _error(exc)
        return _result(tool, value)

    def _prepare(self, call: dict[str, Any]) -> dict[str, Any] | tuple[Tool, dict[str, Any]]:
        """The tool and its converted arguments, or the outcome that stops the call first."""
        tool = self._tools.get(call["name"])
        if tool is None:
            available = ", ".join(sorted(self._tools)) or "none"
            return {
                "status": "unknown_tool",
                "content": f"no tool named {call['name']!r}; available: {available}",
            }
        arguments = call["arguments"]
        problems = tool.problems(arguments)
        if problems:
            return {"status": "invalid_arguments", "content": problems}
        try:
            kwargs = tool.convert(arguments)
        except (TypeError, ValueError) as exc:  # e.g. an attrs validator said no
            return {
                "status": "invalid_arguments",
                "content": [{"path": "", "message": f"{type(exc).__name__}: {exc}"}],
            }
        except Exception as exc:  # noqa: BLE001 - a failing conversion is an outcome
            return _error(exc)
        for policy in (self.policy, tool.policy):
            if policy is None:
                continue
            try:
                # A copy: a policy must not be able to change what the handler gets.
                decision = policy(orjson.loads(orjson.dumps(call)))
                if not isinstance(decision, Decision):
                    raise TypeError(
                        f"the policy for tool {tool.name!r} returned {decision!r:.80}; "
                        "expected agentloop.allow() or agentloop.deny(reason)"
                    )
            except Exception as exc:  # noqa: BLE001 - fail closed: the handler does not run
                return _error(exc)
            if not decision.allowed:
                return {"status": "denied", "content": decision.reason}
        return tool, kwargs

    def specs(self, format: SpecFormat = "json-schema") -> list[dict[str, Any]]:
        """The tools described for a provider request (fresh JSON on every call).

        ``'openai'``: Chat Completions ``tools`` entries; ``'openai-responses'``:
        Responses-API function tools; ``'anthropic'``: Messages API ``tools``
        entries; ``'json-schema'``: ``{'name', 'description', 'parameters'}``.
        The OpenAI formats say ``strict: false``: derived schemas have optional
        parameters, which strict mode forbids, and the registry validates anyway.
        """
        build = _SPEC_BUILDERS.get(format)
        if build is None:
            raise ValueError(
                f"expected format to be one of {sorted(_SPEC_BUILDERS)}, got {format!r}"
            )
        specs = []
        for tool in self._tools.values():
            if format != "json-schema" and not _PROVIDER_NAME.fullmatch(tool.name):
                raise ValueError(
                    f"tool {tool.name!r}: {format} tool names must match "
                    f"{_PROVIDER_NAME.pattern}; give the tool a name= that does"
                )
            specs.append(build(tool.name, tool.description, tool.parameters))
        return specs


def _described(entry: dict[str, Any], description: str) -> dict[str, Any]:
    # An empty description is left out rather than sent as "".
    return {**entry, "description": description} if description else entry


_SPEC_BUILDERS: Final[dict[str, Callable[[str, str, dict[str, Any]], dict[str, Any]]]] = {
    "json-schema": lambda name, description, schema: {
        "name": name,
        "description": description,
        "parameters": schema,
    },
    "openai": lambda name, description, schema: {
        "type": "function",
        "function": {
            **_described({"name": name}, description),
            "parameters": schema,
            "strict": False,
        },
    },
    "openai-responses": lambda name, description, schema: {
        "type": "function",
        **_described({"name": name}, description),
        "parameters": schema,
        "strict": False,
    },
    "anthropic": lambda name, description, schema: {
        **_described({"name": name}, description),
        "input_schema": schema,
    },
}
