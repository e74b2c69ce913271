"""A run file's shape: its header checked, and what breaks its shape explained.

(The encoding of a result is ``runencode.py``'s.) The shape is
checked with ``jsonschema-rs`` (Draft 2020-12, at Rust speed) against the
schema in ``runfile_schema.py`` (re-exported here): every violation comes with its
exact JSON path. What relates fields to each other is ``runstory.py``'s.
"""

from __future__ import annotations

import json
import reprlib
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._errors import RunFileError
from agentloop._review.runfile_schema import FORMAT, SCHEMA, VALIDATOR, VERSION  # re-exported

if TYPE_CHECKING:
    import jsonschema_rs

__all__ = [
    "FORMAT",
    "MAX_BYTES",
    "MAX_DEPTH",
    "READS",
    "SCHEMA",
    "VALIDATOR",
    "VERSION",
    "as_found",
    "as_shown",
    "check_header",
    "check_unique_fields",
    "dumps",
    "explain",
    "json_path",
    "too_deep",
]

#: The versions this agentloop reads: a format change comes with its reader (and a fixture).
READS: Final = (VERSION,)
#: The largest run file loaded unless asked for more (``max_bytes=``, ``--max-size``).
MAX_BYTES: Final = 256 * 2**20


# The deepest a run file nests: orjson writes values up to 254 levels deep, a
# tool result wraps its content in one more, and ``$.children.c1.transcript[j]`` is
# 4 down (a child's child deeper still, as deep as agent tools nest).
MAX_DEPTH: Final = 254 + 1 + 4

# Short reprs for messages, safe on any nesting.
_REPR: Final = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 100, 100


def check_header(document: object, source: str) -> None:
    """Say "not a run file" or "unknown version" before any field-level complaint."""
    if type(document) is not dict:
        raise RunFileError(source, "a JSON object (a run file)", as_found(document))
    if document.get("format") != FORMAT:
        found = as_found(document["format"]) if "format" in document else "no format field"
        raise RunFileError(f"{source}: $.format", f"format {FORMAT!r}", found)
    version = document.get("version")
    if type(version) is not int or version not in READS:
        raise RunFileError(
            f"{source}: $.version",
            f"version {' or '.join(map(str, READS))} (what this agentloop reads)",
            as_found(version) if "version" in document else "no version field",
        )


def too_deep(document: dict[str, Any]) -> bool:
    """Whether ``document`` nests deeper than ``MAX_DEPTH`` (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        children = value.values() if type(value) is dict else value
        stack.extend((child, depth + 1) for child in children if type(child) in (dict, list))
    return False


_WHITESPACE: Final = b" \t\r\n"


def check_unique_fields(text: str | bytes | bytearray, written: bytes, source: str) -> None:
    r"""Refuse a field given twice in one object: which one counts is up to the parser.

    orjson keeps the last of duplicates silently. The fast path, in C: a key
    ends in ``":`` (whitespace aside), and a string can hold ``":`` only as
    ``\":``, which writing it again keeps; so the text has more of them than
    the parsed document written again only if a key was dropped. Any doubt
    (a count that differs, or ``\u`` escapes, which writing again can change)
    goes to the standard parser, which can tell exactly.
    """
    raw = text.encode() if isinstance(text, str) else bytes(text)
    if b"\\u" not in raw:
        ends = b'":'
        if raw.translate(None, _WHITESPACE).count(ends) == written.translate(
            None, _WHITESPACE
        ).count(ends):
            return

    def unique(pairs: list[tuple[str, object]]) -> None:
        names: set[str] = set()
        for name, _ in pairs:
            if name in names:
                raise RunFileError(source, "each field once in an object", f"{name!r} twice")
            names.add(name)

    # orjson keeps the last of duplicates silently; the standard parser can tell.
    try:
        json.loads(text, object_pairs_hook=unique)
    except RecursionError:
        raise RunFileError(source, "JSON nested less deeply", "deeper nesting") from None


def json_path(parts: list[str | int]) -> str:
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parts)


def explain(error: jsonschema_rs.ValidationError, field: str = "") -> tuple[str, str]:
    """(expected, found) for a schema error, in the words of this format.

    ``field`` names the value checked when its path is empty (a part checked alone).
    """
    value: Any = error.instance
    name: str = error.kind.name
    rule: Any = error.kind.value  # what the schema asked for
    if name == "required":
        return f"the field {rule!r}", "an object without it"
    if name == "additionalProperties":
        return "only the fields of this format", f"an extra field {rule[0]!r}"
    if name == "type":
        return " or ".join(rule), as_found(value)
    if name == "enum":
        return f"one of {', '.join(repr(v) for v in rule)}", as_found(value)
    if name == "const":
        return repr(rule), as_found(value)
    if name in ("minimum", "maximum"):
        if type(value) is float and value.is_integer():  # past 64 bits: the parser's float
            return "integer", as_found(value)
        if type(value) is not int:  # a number field's (a wait, a time taken): its bound
            return f"a number {'of at least' if name == 'minimum' else 'of at most'} {rule}", (
                as_found(value)
            )
        low = rule if name == "minimum" else 0  # a count's lowest is the schema's (a turn's 1)
        return f"a count from {low} to 2**63 - 1", as_found(value)
    if name == "minItems":
        return f"at least {rule} item{'s' * (rule != 1)}", as_found(value)
    if name == "maxItems":
        return f"at most {rule} item{'s' * (rule != 1)}", as_found(value)
    if name == "oneOf":
        named = [part for part in error.instance_path if type(part) is str] or [field]
        return _ONE_OF.get(named[-1], "one of the forms this field takes"), as_found(value)
    return error.message, as_found(value)


_ONE_OF: Final = {
    "exception": 'null or {"type": str, "message": str}',
    "rejected": 'null, {"json": the reply} or {"repr": str, "problem": str}',
    "max_total_tokens": "null or an int from 0 to 2**63 - 1",
    "usage": 'null or {"input_tokens", "output_tokens", "cached_tokens"}, each an int count',
    "summary": "null or [first, end], the messages a summary folded",
}


def as_found(value: object) -> str:
    """A value as "<JSON type> <short repr>", for messages."""
    if value is None:
        return "null"
    kinds: tuple[tuple[type, str], ...] = (
        (bool, "boolean"),
        (int, "integer"),
        (float, "number"),
        (str, "string"),
        (dict, "object"),
        (list, "array"),
    )
    kind = next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)
    return f"{kind} {as_shown(value)}"


def as_shown(value: object) -> str:
    """A short repr (``null`` for None), safe on any nesting."""
    shown = "null" if value is None else _REPR.repr(value)
    return f"{shown[:100]}{'...' if len(shown) > 100 else ''}"


def dumps(value: object, option: int = 0) -> bytes:
    """``orjson.dumps`` past its depth limit: what it cannot reach goes in as fragments.

    A run holds messages as deep as orjson writes them, and the document puts
    them a few levels further down (``$.events[i].appended[j]``).
    """
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        if isinstance(value, dict):
            value = {key: orjson.Fragment(dumps(item)) for key, item in value.items()}
        elif isinstance(value, list):
            value = [orjson.Fragment(dumps(item)) for item in value]
        else:
            raise
        return orjson.dumps(value, option=option)
