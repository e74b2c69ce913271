"""``Loop(output=T)``: the JSON Schema of ``T`` and the converter from valid JSON to ``T``.

``T`` is an attrs class, a dataclass, a ``TypedDict`` (or any annotation a
tool parameter may have: the same ``Deriver`` describes it, and its converter
makes the value, so ``RunResult.output`` is converted as tool arguments are),
a pydantic model when pydantic is installed (its own ``model_json_schema`` and
``model_validate``), or a JSON Schema given as a dict (the output is then the
decoded JSON).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from agentloop._core.output_schema import OutputRefused, OutputSchema, problem_line
from agentloop._tools.annotated import Unsupported
from agentloop._tools.converters import Converter, refusals
from agentloop._tools.results import is_pydantic_model
from agentloop._tools.schema import SUPPORTED, Deriver, show
from agentloop._tools.validation import bounded, checked_schema

__all__ = ["output_schema"]


def output_schema(output: object) -> OutputSchema:
    """``output`` (a type or a JSON Schema) as the ``OutputSchema`` the engine checks with.

    Raises ``TypeError`` naming what is unsupported, when ``Loop`` is made.
    An ``OutputSchema`` (another Loop's ``output``) is taken as it is.
    """
    if isinstance(output, OutputSchema):
        return output
    if isinstance(output, dict):
        schema = checked_schema("output", output) if output.get("type") == "object" else output
        return OutputSchema(dict(schema), title=str(schema.get("title") or "output"))
    title = getattr(output, "__name__", "output")
    if is_pydantic_model(output):
        model: Any = output
        validate = _refusing_by_path(model.model_validate)
        return OutputSchema(model.model_json_schema(), validate, title=title)
    deriver = Deriver()
    convert: Converter | None
    try:
        if (
            isinstance(output, type)
            and dataclasses.is_dataclass(output)
            and not typing.is_typeddict(output)
        ):
            schema, convert = deriver.describe(output)  # at the top, not referenced
        else:
            schema, convert = deriver.derive(output, "output")
    except Unsupported as exc:
        why = f": {exc}" if str(exc) else ""
        raise TypeError(
            f"expected output to be a type whose values are JSON (any of: {SUPPORTED}) or "
            f"a JSON Schema as a dict, got {show(output)}{why}"
        ) from None
    deriver.finish()
    if deriver.defs:
        # A class at the top is described there, not referenced: providers want an object
        # at the root. It stays in $defs too, for a recursive class's own references.
        name = schema.get("$ref", "").removeprefix("#/$defs/")
        schema = {**deriver.defs.get(name, schema), "$defs": deriver.defs}
    # Checked with the 64-bit bounds a derived schema's integers have (as tool arguments are).
    return OutputSchema(schema, _refusing_by_path(convert), title=title, checked=bounded(schema))


def _refusing_by_path(convert: Converter | None) -> Converter | None:
    """``convert``, refusing with what is wrong at each path (``OutputRefused``).

    In the words tool arguments get: ``day: ValueError: expected an ISO 8601
    date, got 'soon'``, ``age: Value error, expected an adult`` (pydantic).
    """
    if convert is None:
        return None

    def convert_output(value: Any) -> Any:
        try:
            return convert(value)
        except (TypeError, ValueError) as exc:  # a pydantic model's ValidationError too
            problems = refusals(exc)
            raise OutputRefused([problem_line(p["path"], p["message"]) for p in problems]) from exc

    return convert_output
