"""A handler's signature as its tool's ``parameters`` schema and arguments converter.

Each parameter becomes a property (see ``_schema`` for the annotations); one
with a default is not ``required``; one described in the handler's docstring
(an ``Args:`` section, ``:param x:`` lines or a NumPy ``Parameters`` section,
read by ``docstring_parser``) gets that ``description``, unless its
``Annotated`` metadata gives one; ``**kwargs: T`` admits other names of
type ``T``; ``*args`` and positional-only parameters are refused, since
arguments arrive by name. Only the parameters' annotations are resolved, one
by one, so the return annotation may name a type imported under
``TYPE_CHECKING``. A parameter annotated ``RunContext`` (or
``RunContext[Deps]``), in any position, is no property: the registry fills
it with the call's context (``context_of``).
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from typing import TYPE_CHECKING, Any

from agentloop._core.json import to_json
from agentloop._drivers.run_context import RunContext
from agentloop._errors import JSONError
from agentloop._tools.annotated import Unpublishable, Unsupported
from agentloop._tools.converters import Converter, converted_values, fields_converter
from agentloop._tools.schema import (
    SUPPORTED,
    Deriver,
    json_default,
    show,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Context", "context_of", "derive_parameters"]

#: A parameter that takes the call's context: its name, and the deps its annotation names
#: (``Any`` for a bare ``RunContext``, or one whose annotation could not be resolved).
Context = tuple[str, object]

# An annotation that names RunContext, as text: taken as one even if it cannot be resolved
# (its Deps imported under TYPE_CHECKING, say).
_CONTEXT_TEXT = re.compile(r"(?:\w+\.)*RunContext(?:\[.*\])?")


def derive_parameters(
    name: str, handler: Callable[..., Any]
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], dict[str, Any]] | None, Context | None]:
    """The schema of ``handler``'s parameters, the converter of valid arguments for it, its context.

    The converter is None when the JSON is what the handler asked for. The
    context is the parameter that takes the call's ``RunContext``, if any.

    Raises ``TypeError`` naming the tool and the parameter when one cannot be
    described (or published) as JSON Schema.
    """
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"tool {name!r}: expected a handler with a signature: {exc}") from exc
    first = next(iter(signature.parameters.values()), None)
    if first is not None and first.name in ("self", "cls") and first.name not in _hints_of(handler):
        raise TypeError(
            f"tool {name!r}: its first parameter is {first.name!r}, unannotated: a method taken "
            "from its class, which the model would be asked for; register it from an "
            "instance (obj.method), or make it a staticmethod"
        )
    hints = _parameter_hints(f"tool {name!r}", handler, signature)
    context = _context_in(f"tool {name!r}", signature, hints)
    described = _described(name, handler)
    deriver = Deriver()
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra: dict[str, Any] | bool = False
    converters: dict[str, Converter | None] = {}
    extra_converter: Converter | None = None
    for param in signature.parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.VAR_POSITIONAL):
            kind, why = (
                ("positional-only", "so every parameter needs one")
                if param.kind is param.POSITIONAL_ONLY
                else ("*args", "and *args takes none of them")
            )
            raise TypeError(
                f"tool {name!r}: parameter {param.name!r} is {kind} ({param}); "
                f"arguments arrive by name, {why}"
            )
        if context is not None and param.name == context[0]:
            continue
        try:
            schema, convert = deriver.derive(hints.get(param.name, Any), "")
        except Unsupported as exc:
            raise TypeError(_refusal(name, param.name, exc)) from None
        if param.name in described and "description" not in schema:
            schema = {**schema, "description": described[param.name]}
        if param.kind is param.VAR_KEYWORD:
            extra, extra_converter = (schema or True), convert
            continue
        converters[param.name] = convert
        if param.default is param.empty:
            required.append(param.name)
        else:
            has_default, default = json_default(param.default)
            schema = {**schema, "default": default} if has_default else schema
        properties[param.name] = schema
    deriver.finish()
    out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": extra,
    }
    if deriver.defs:
        out["$defs"] = deriver.defs
    return out, _arguments_converter(converters, extra_converter), context


def context_of(what: str, handler: Callable[..., Any]) -> Context | None:
    """The parameter of ``handler`` that takes the call's context, if any.

    ``handler`` is a tool's with its own ``parameters=``, or a policy; ``what``
    names it in a ``TypeError`` ("tool 'x'").
    """
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # a callable with no signature to read takes no context
        return None
    hints = _parameter_hints(what, handler, signature, strict=False)
    return _context_in(what, signature, hints)


def _context_in(what: str, signature: inspect.Signature, hints: dict[str, Any]) -> Context | None:
    """The one parameter annotated ``RunContext`` (or ``RunContext[...]``), if any."""
    found = []
    for param, hint in hints.items():
        if hint is RunContext or typing.get_origin(hint) is RunContext:
            args = typing.get_args(hint)
            found.append((param, args[0] if args else Any))
    if len(found) > 1:
        raise TypeError(
            f"{what}: expected at most one RunContext parameter, got "
            f"{', '.join(repr(param) for param, _ in found)}"
        )
    if found and signature.parameters[found[0][0]].kind not in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    ):
        raise TypeError(
            f"{what}: its RunContext parameter {found[0][0]!r} must be one that can be "
            "passed by name (not positional-only, *args or **kwargs)"
        )
    return found[0] if found else None


def _described(name: str, handler: Callable[..., Any]) -> dict[str, str]:
    """Each parameter's description in ``handler``'s docstring, by name (none: ``{}``)."""
    documented = handler.func if isinstance(handler, functools.partial) else handler
    doc = inspect.getdoc(documented)
    if not doc or "\n" not in doc.strip():  # a summary line describes no parameter
        return {}
    import docstring_parser  # here: a tool with a longer docstring pays its import, once

    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:  # not one of the styles it reads: no descriptions
        return {}
    found = {}
    for param in parsed.params:
        text = " ".join((param.description or "").split())  # its lines, as one
        if text:
            try:
                to_json(text, "its description")  # a lone surrogate would break every spec
            except JSONError as exc:
                raise TypeError(f"tool {name!r}: parameter {param.arg_name!r}: {exc}") from None
            found[param.arg_name] = text
    return found


def _refusal(tool: str, parameter: str, exc: Unsupported) -> str:
    at = f" (at {exc.where})" if exc.where else ""
    if isinstance(exc, Unpublishable):
        return (
            f"tool {tool!r}: parameter {parameter!r}: {show(exc.annotation)}{at} "
            f"cannot be published as JSON: {exc}"
        )
    why = f": {exc}" if str(exc) else ""
    return (
        f"tool {tool!r}: parameter {parameter!r}: unsupported annotation "
        f"{show(exc.annotation)}{at}{why}; supported: {SUPPORTED}"
    )


def _arguments_converter(
    converters: dict[str, Converter | None], extra: Converter | None
) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """Valid arguments as the handler's keyword arguments; None when they are that already."""
    if extra is None:
        return fields_converter(converters)

    return lambda arguments: converted_values(arguments, converters, extra)


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
    what: str, handler: Callable[..., Any], signature: inspect.Signature, *, strict: bool = True
) -> dict[str, Any]:
    """The parameters' annotations, resolved one by one (the return annotation is not).

    Not ``strict`` (a policy's, of which only the context matters): one that
    cannot be resolved is left out, not refused.
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
            if isinstance(annotations[param], str) and _CONTEXT_TEXT.fullmatch(
                annotations[param].replace(" ", "")
            ):
                hints[param] = RunContext  # its deps unknown here: the run's are given
                continue
            if not strict:
                continue
            raise TypeError(
                f"{what}: parameter {param!r}: cannot resolve its annotation "
                f"{annotations[param]!r}: {exc}"
            ) from exc
    return hints


def _hints_of(handler: Callable[..., Any]) -> dict[str, Any]:
    """The names ``handler`` annotates (unresolved: only which are there)."""
    return dict(getattr(_hint_source(handler), "__annotations__", {}) or {})
