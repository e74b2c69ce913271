"""Hypothesis strategies for a misbehaving model, drawn from a registry's own schemas.

Each tool's ``parameters`` JSON Schema says what a valid call is, so it also
says every way a call can be wrong. ``arguments(tool)`` draws valid
arguments; ``invalid_arguments(tool)`` breaks them in one way the schema
forbids (a wrong type, a missing required property, an extra property where
``additionalProperties`` is false, a value outside an ``enum``, an array of
the wrong length); the call strategies wrap them in replies, and
``scripts(registry)`` draws whole scripts for ``ScriptedModel``, ending with a
final so that a run never asks for more than the script holds. For
``Loop(output=T)``, ``outputs(T)`` and ``invalid_outputs(T)`` draw final-answer
texts from ``T``'s schema the same way.

The schemas are read by a small generator (``_schemas.py``) for the subset
of Draft 2020-12 the registry derives; any other keyword raises
``UnsupportedSchema`` when the strategy is built. (``hypothesis-jsonschema``
would be the obvious choice, but its 0.23.1 fails on every object schema
with current Hypothesis and predates Draft 2020-12's ``prefixItems``; see the
docs' Testing page.)
"""

from __future__ import annotations

import functools
from typing import Any

try:
    from hypothesis import assume, note
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - exercised with hypothesis hidden
    raise ImportError(
        "agentloop.testing.strategies needs Hypothesis: pip install hypothesis "
        "(or the testing extra, pip install 'agentloop-fsm[testing]')"
    ) from exc

from collections.abc import Callable, Iterable, Mapping

import orjson
from hypothesis.strategies import DrawFn, SearchStrategy

from agentloop._names import publish
from agentloop._tools.output_type import output_schema
from agentloop._tools.registry import Tool, ToolRegistry
from agentloop.testing import batch, call, final
from agentloop.testing._draw import (
    BREAKS,
    TYPES,
    Break,
    Message,
    Schema,
    UnsupportedSchema,
    call_ids,
    scalars,
    set_at,
    text,
)
from agentloop.testing._schemas import SchemaGenerator, generator_for

__all__ = [
    "BREAKS",
    "Break",
    "UnsupportedSchema",
    "arguments",
    "finals",
    "invalid_arguments",
    "invalid_calls",
    "invalid_outputs",
    "malformed_replies",
    "outputs",
    "oversized_results",
    "replies",
    "scripts",
    "unknown_tool_calls",
    "valid_calls",
]


def _tools(registry: ToolRegistry) -> list[Tool]:
    if not isinstance(registry, ToolRegistry):
        raise TypeError(f"expected a ToolRegistry, got {type(registry).__name__}")
    tools = list(registry)
    if not tools:
        raise ValueError("expected a ToolRegistry with at least one tool, got an empty one")
    return tools


# -- arguments ------------------------------------------------------------------


def arguments(tool: Tool | Mapping[str, Any]) -> SearchStrategy[dict[str, Any]]:
    """Arguments the tool's ``parameters`` schema accepts (or a schema's, given one)."""
    generator = generator_for(tool)
    return generator.valid(generator.root)


def _breakable(generator: SchemaGenerator, kinds: tuple[Break, ...]) -> bool:
    """Whether some value of the schema can be broken in one of ``kinds``.

    Checked on the schema's shape: the top-level object (missing required,
    extra property) and every property it or its classes declare.
    """
    seen: set[int] = set()

    def walk(schema: Schema, top: bool) -> bool:
        if not isinstance(schema, dict) or id(schema) in seen:
            return False
        seen.add(id(schema))
        if "$ref" in schema:
            return walk(generator._resolve(schema["$ref"]), top)
        if "required" in schema and schema["required"] and "missing_required" in kinds:
            return True
        if schema.get("additionalProperties", True) is False and "extra_property" in kinds:
            return True
        if ("enum" in schema or "const" in schema) and "outside_enum" in kinds:
            values = schema["enum"] if "enum" in schema else [schema["const"]]
            if generator._outside(values, schema) is not None:
                return True
        if ("minItems" in schema or "maxItems" in schema) and "wrong_length" in kinds:
            return True
        if not top and "wrong_type" in kinds:
            admitted = generator.admitted(schema)
            if admitted is not None and set(TYPES) - admitted:
                return True
        if "anyOf" in schema:
            return False
        members = [*schema.get("properties", {}).values(), *schema.get("prefixItems", [])]
        members += [schema[key] for key in ("items", "additionalProperties") if key in schema]
        return any(walk(member, False) for member in members)

    return walk(generator.root, True)


def invalid_arguments(
    tool: Tool | Mapping[str, Any], kinds: Iterable[Break] = BREAKS
) -> SearchStrategy[dict[str, Any]]:
    """Arguments that break the tool's schema in one place, in one of the ways in ``kinds``.

    A valid value is drawn, then one place in it is broken: a wrong type
    (never at the top level: arguments that are not an object make the reply
    malformed instead), a required property removed, an extra property added
    where ``additionalProperties`` is false, a value outside an ``enum``, an
    array made too short or too long. Nothing inside an ``anyOf`` member is
    broken, since another member could accept the result. What was broken is
    recorded with ``hypothesis.note``, so a failing example says it.
    """
    generator = generator_for(tool)
    wanted = _kinds(kinds)
    if not _breakable(generator, wanted):
        raise ValueError(
            f"{generator.where}: expected a schema that can be broken by one of "
            f"{', '.join(wanted)}, got one that accepts anything of that shape"
        )

    return _broken(generator, wanted)


@st.composite
def _broken(draw: DrawFn, generator: SchemaGenerator, wanted: tuple[Break, ...]) -> dict[str, Any]:
    value = draw(generator.valid(generator.root))
    options = [
        (site.path, strategy, description)
        for site in generator.sites(generator.root, value, ())
        for kind, strategy, description in generator.breaks(site, top=not site.path)
        if kind in wanted
    ]
    # The schema can be broken, but perhaps not this value (an optional property
    # with an enum was left out, say): Hypothesis draws another.
    assume(options)
    path, strategy, description = draw(st.sampled_from(options))
    note(f"{generator.where}: {description}")
    broken: dict[str, Any] = set_at(value, path, draw(strategy))
    return broken


# -- typed output (Loop(output=T)) -------------------------------------------------


def outputs(output: object) -> SearchStrategy[str]:
    """Final-answer texts that ``Loop(output=output)`` accepts: JSON drawn from its schema.

    ``output`` is what ``Loop(output=...)`` takes (a class, an annotation, a
    JSON Schema); ``final(text)`` makes a reply of each.
    """
    generator = SchemaGenerator(output_schema(output).schema, f"output {_named(output)}")
    return generator.valid(generator.root).map(_json_text)


def invalid_outputs(output: object, kinds: Iterable[Break] = BREAKS) -> SearchStrategy[str]:
    """Final-answer texts the schema of ``output`` refuses: JSON broken in one place, or not JSON.

    The JSON is broken as ``invalid_arguments`` breaks arguments (``kinds``
    says how), when the schema can be; text that is not JSON at all is drawn
    too, as a model that forgot the schema writes.
    """
    schema = output_schema(output).schema
    generator = SchemaGenerator(schema, f"output {_named(output)}")
    not_json = st.sampled_from(["", "Paris", "{", '{"a": 1,', "The answer is 42."])
    wanted = _kinds(kinds)
    if not _breakable(generator, wanted):
        return not_json
    return st.one_of(_broken(generator, wanted).map(_json_text), not_json)


def _named(output: object) -> str:
    return getattr(output, "__name__", None) or type(output).__name__


def _json_text(value: object) -> str:
    return orjson.dumps(value).decode()


def _kinds(kinds: Iterable[Break]) -> tuple[Break, ...]:
    wanted = tuple(kinds)
    unknown = [kind for kind in wanted if kind not in BREAKS]
    if unknown or not wanted:
        raise ValueError(f"expected kinds among {', '.join(BREAKS)}, got {unknown or 'none'}")
    return wanted


# -- replies ----------------------------------------------------------------------


def _calls_to(
    tools: Iterable[Tool],
    args: Callable[[Tool], SearchStrategy[dict[str, Any]]],
    ids: SearchStrategy[str] | None,
) -> SearchStrategy[Message]:
    """Calls to each of ``tools``, with arguments drawn by ``args(tool)`` (built once)."""
    return st.one_of(
        [
            st.builds(functools.partial(_call_to, tool.name), ids or call_ids(), args(tool))
            for tool in tools
        ]
    )


def _call_to(name: str, call_id: str, args: dict[str, Any]) -> Message:
    return call(call_id, name, **args)


def valid_calls(
    registry: ToolRegistry, *, ids: SearchStrategy[str] | None = None
) -> SearchStrategy[Message]:
    """Calls to a tool of ``registry`` with arguments its schema accepts."""
    return _calls_to(_tools(registry), arguments, ids)


def invalid_calls(
    registry: ToolRegistry,
    *,
    kinds: Iterable[Break] = BREAKS,
    ids: SearchStrategy[str] | None = None,
) -> SearchStrategy[Message]:
    """Calls to a tool of ``registry`` whose arguments break its schema (see ``invalid_arguments``).

    Tools whose schema cannot be broken in any of ``kinds`` (a ``**kwargs: Any``
    tool, say) are left out; if none is left, this raises ``ValueError``.
    """
    wanted = _kinds(kinds)
    breakable = [tool for tool in _tools(registry) if _breakable(generator_for(tool), wanted)]
    if not breakable:
        raise ValueError(
            f"expected a tool whose schema can be broken by one of {', '.join(wanted)}, "
            f"got none in {[tool.name for tool in registry]}"
        )
    return _calls_to(breakable, lambda tool: invalid_arguments(tool, wanted), ids)


def unknown_tool_calls(
    registry: ToolRegistry, *, ids: SearchStrategy[str] | None = None
) -> SearchStrategy[Message]:
    """Well-formed calls to tool names ``registry`` does not have."""
    names = {tool.name for tool in _tools(registry)}
    return st.builds(
        lambda call_id, name, args: call(call_id, name, **args),
        ids if ids is not None else call_ids(),
        text(1, 16).filter(lambda name: name not in names),
        st.dictionaries(text(max_size=6), scalars(), max_size=2),
    )


def finals() -> SearchStrategy[Message]:
    """Final replies with any text."""
    return st.builds(final, text())


def oversized_results(
    limit: int, *, max_size: int | None = None
) -> SearchStrategy[str | dict[str, Any] | list[Any]]:
    """Tool results longer than ``limit`` characters: what ``max_result_chars`` must cut.

    A str, a dict or a list whose JSON text is over ``limit`` (up to ``max_size``,
    4 times ``limit`` unless told), with any characters in it: return one from
    a tool (``lambda: result``) and check the history gets it cut, with its marker.
    """
    top = max(limit + 1, 4 * limit if max_size is None else max_size)
    long_text = st.integers(limit + 1, top).flatmap(
        lambda size: st.builds(
            lambda head, fill: (head + fill * size)[:size],
            text(0, 8),
            st.characters(codec="utf-8"),
        )
    )
    return st.one_of(
        long_text,
        st.builds(lambda body: {"result": body}, long_text),
        st.builds(lambda body: [body, 1, None], long_text),
    )


def malformed_replies() -> SearchStrategy[object]:
    """Replies the engine refuses as ``malformed``: neither a well-formed call nor a final."""
    good_call = call("c", "t")
    return st.one_of(
        scalars(),
        st.lists(scalars(), max_size=2),
        st.builds(lambda kind: {"kind": kind}, text().filter(lambda k: k not in ("call", "final"))),
        st.builds(
            lambda text: {"kind": "final", "text": text}, st.one_of(st.none(), st.integers())
        ),
        st.builds(
            lambda key: {**good_call, key: 1}, text(1, 6).filter(lambda k: k not in good_call)
        ),
        st.sampled_from(
            [
                {**good_call, "id": ""},
                {**good_call, "name": ""},
                {**good_call, "arguments": []},
                {k: v for k, v in good_call.items() if k != "arguments"},
            ]
        ),
    )


def _misbehaving(registry: ToolRegistry, malformed: bool) -> list[SearchStrategy[object]]:
    """Calls a model should not make (and valid ones), and malformed replies if asked."""
    options: list[SearchStrategy[object]] = [valid_calls(registry)]
    if any(_breakable(generator_for(tool), BREAKS) for tool in _tools(registry)):
        options.append(invalid_calls(registry))
    options.append(unknown_tool_calls(registry))
    if malformed:
        options.append(malformed_replies())
    return options


def replies(registry: ToolRegistry, *, malformed: bool = False) -> SearchStrategy[object]:
    """One reply of a misbehaving model: a final, or a valid, invalid or unknown call.

    Invalid calls are left out if no tool's schema can be broken; malformed
    replies are drawn too with ``malformed=True``. Ids are arbitrary, so two
    drawn calls may share one: ``scripts`` numbers them.
    """
    return st.one_of([finals(), *_misbehaving(registry, malformed)])


def scripts(
    registry: ToolRegistry,
    *,
    max_size: int = 8,
    repeats: bool = True,
    malformed: bool = False,
    exceptions: bool = False,
    batches: bool = True,
    output: object = None,
) -> SearchStrategy[list[object]]:
    """Scripts for ``ScriptedModel``: up to ``max_size`` replies, the last a final.

    Before the final: valid, invalid and unknown calls, alone and, with
    ``batches``, two to four in one ``calls`` reply (and, if asked,
    ``malformed`` replies and ``exceptions``, a ``RuntimeError`` for the model
    to raise: the run ends ``failed``). Calls get the ids ``call-1``,
    ``call-2``, ... in order; with ``repeats``, a call now and then reuses an
    earlier id instead (the run ends ``repeated_call``). Since the last entry
    is a final, a run ends (finished, or earlier) before the script runs out;
    for ``Loop(output=T)``, give ``output=T``: the final is then drawn from
    ``outputs(T)``, JSON its schema takes.
    """
    if type(max_size) is not int or max_size < 1:
        raise ValueError(f"expected max_size to be an int >= 1, got {max_size!r}")
    one = st.one_of(_misbehaving(registry, malformed=False))
    calls = [one.map(_numbered)]
    if batches:
        calls.append(
            st.builds(
                lambda made, text: _numbered(batch(*made, text=text)),
                st.lists(one, min_size=2, max_size=4),
                st.none() | text(),
            )
        )
    others: list[SearchStrategy[object]] = []
    if malformed:
        others.append(malformed_replies())
    if exceptions:
        others.append(st.builds(RuntimeError, text()))
    entry = st.one_of([*calls, *(option.map(_as_is) for option in others)])
    closing = finals() if output is None else outputs(output).map(final)
    return _scripts(entry, max_size - 1, repeats, closing)


def _numbered(reply: object) -> tuple[bool, object]:
    return True, reply


def _as_is(reply: object) -> tuple[bool, object]:
    return False, reply


def _renamed(draw: DrawFn, made: Message, used: list[str], repeats: bool) -> Message:
    """``made`` with the next id ``call-N``, or now and then (``repeats``) an earlier one."""
    if repeats and used and draw(st.integers(0, 7)) == 0:
        call_id = draw(st.sampled_from(used))
    else:
        call_id = f"call-{len(used) + 1}"
        used.append(call_id)
    return {**made, "id": call_id}


@st.composite
def _scripts(
    draw: DrawFn,
    entry: SearchStrategy[tuple[bool, object]],
    size: int,
    repeats: bool,
    closing: SearchStrategy[Message],
) -> list[object]:
    used: list[str] = []
    out: list[object] = []
    for numbered, reply in draw(st.lists(entry, max_size=size)):
        if numbered:
            assert isinstance(reply, dict)
            if reply["kind"] == "calls":
                made = [_renamed(draw, element, used, repeats) for element in reply["calls"]]
                reply = {**reply, "calls": made}
            else:
                reply = _renamed(draw, reply, used, repeats)
        out.append(reply)
    out.append(draw(closing))
    return out


publish(__name__, globals(), __all__)
