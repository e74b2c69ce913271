"""The output schema of a run: what a final answer's text must be, checked with ``jsonschema-rs``.

A run made with ``Loop(output=T)`` gives the engine an ``OutputSchema``: the
JSON Schema of ``T`` (Draft 2020-12), compiled once, and a converter from
valid JSON to ``T`` (the one tool arguments use). The engine asks it about a
final answer's text (``problems``) before it accepts it; a run file keeps
the schema, so a loaded run is checked the same way, and its output is the
decoded JSON (a run file holds no classes).
"""

from __future__ import annotations

import copy
import re
from typing import TYPE_CHECKING, Any, Final

import jsonschema_rs
import orjson

from agentloop._core.json import to_json, unfenced

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "OutputRefused",
    "OutputSchema",
    "instance_path",
    "problem_line",
    "told",
    "told_problems",
]

#: How many problems the model is told about at most (the rest are counted).
MAX_PROBLEMS: Final = 20


def instance_path(parts: Any) -> str:
    """``point.tags[2]`` for a value at ``['point', 'tags', 2]``; ``''`` for the top."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def problem_line(path: str, message: str) -> str:
    """One problem as the model is told it: ``age: ...``, ``(top level): ...``."""
    return f"{path or '(top level)'}: {message}"


_TOLD_HEAD: Final = "Your final answer does not match the output schema:\n"
_TOLD_TAIL: Final = (
    "\nReply again with a final answer whose text is only JSON that matches the schema."
)


def told(problems: list[str]) -> str:
    """What the model is told of a final the check refused: its problems, one a line."""
    return _TOLD_HEAD + "\n".join(f"- {problem}" for problem in problems) + _TOLD_TAIL


def told_problems(text: str, listed: str) -> list[str] | None:
    """The problems ``told`` listed in ``text``; None when it is no such message.

    ``listed`` is the same problems joined by ``'; '``, as the event's error
    says them. A problem may hold a line that starts ``- ``: the pieces
    between the lines are grouped so that the problems join as both say them.
    """
    if not (text.startswith(_TOLD_HEAD + "- ") and text.endswith(_TOLD_TAIL)):
        return None
    problems: list[str] = []
    at, problem = 0, None
    for piece in text[len(_TOLD_HEAD) + 2 : -len(_TOLD_TAIL)].split("\n- "):
        problem = piece if problem is None else f"{problem}\n- {piece}"
        end = at + len(problem)
        if listed.startswith(problem, at) and (end == len(listed) or listed.startswith("; ", end)):
            problems.append(problem)
            at, problem = end + 2, None
    return problems if problem is None and "; ".join(problems) == listed else None


def _capped(found: list[str]) -> list[str]:
    """At most ``MAX_PROBLEMS`` problems, the rest counted."""
    if len(found) > MAX_PROBLEMS:
        return [*found[:MAX_PROBLEMS], f"... and {len(found) - MAX_PROBLEMS} more"]
    return found


class OutputRefused(ValueError):
    """Raised by an output's converter that refuses a value: what is wrong, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class OutputSchema:
    """A final answer's JSON Schema, compiled, and the converter to the caller's type.

    ``convert`` is None when the decoded JSON is the value (a schema given as a dict).
    ``checked``, when given, is the schema the answer is validated with (the
    derived schema with its 64-bit bounds on integers), ``schema`` the one
    published to providers and recorded. A converter that refuses a value
    raises ``OutputRefused`` with its problems (any other exception is one
    problem, at the top level).
    """

    __slots__ = ("_recorded", "_validator", "convert", "schema", "schema_json", "title")

    def __init__(
        self,
        schema: dict[str, Any],
        convert: Callable[[Any], Any] | None = None,
        *,
        title: str = "output",
        checked: dict[str, Any] | None = None,
    ) -> None:
        if type(schema) is not dict:
            raise TypeError(f"expected the output schema to be a dict, got {type(schema).__name__}")
        #: The schema's JSON: what a run file and a provider request carry.
        self.schema_json = to_json(schema, "output schema")
        self.schema: dict[str, Any] = orjson.loads(self.schema_json)
        try:
            # offline: a $ref to a URL is refused now, never fetched at run time.
            self._validator = jsonschema_rs.Draft202012Validator(
                self.schema if checked is None else checked, offline=True
            )
        except (jsonschema_rs.ValidationError, ValueError) as exc:
            raise TypeError(
                f"expected a valid Draft 2020-12 output schema, got one that fails: {exc}"
            ) from None
        self.convert = convert
        self._recorded: dict[str, list[str]] = {}  # see replaying()
        #: The name a provider's structured-output request gives the schema (OpenAI takes
        #: letters, digits, ``_`` and ``-``, at most 64).
        self.title = re.sub(r"[^A-Za-z0-9_-]", "_", title)[:64] or "output"

    def __repr__(self) -> str:
        return f"OutputSchema({self.title!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not OutputSchema:
            return NotImplemented
        return self.schema_json == other.schema_json

    def __hash__(self) -> int:
        return hash(self.schema_json)

    def request(self) -> dict[str, Any]:
        """What a model that takes ``output`` is given: ``{'name', 'schema'}`` (a copy)."""
        return {"name": self.title, "schema": orjson.loads(self.schema_json)}

    def problems(self, text: str) -> list[str]:
        """What is wrong with ``text`` as this output (``[]``: nothing), one line each."""
        found = self._checked(text)
        recorded = self._recorded.get(text)
        if recorded is not None and "; ".join(found) != "; ".join(recorded):
            # A replay: what the record says was wrong, where this check words it otherwise
            # (a newer validator's words) or cannot tell (no type, and no 64-bit bounds).
            return list(recorded)
        return found

    def replaying(self, recorded: dict[str, list[str]]) -> OutputSchema:
        """A copy for a replay, where the record's refusals stand in its own words.

        ``recorded`` maps each final answer the record refused to the problems
        it lists (``output_refusals``).
        """
        copied = copy.copy(self)
        copied._recorded = recorded
        return copied

    def _checked(self, text: str) -> list[str]:
        try:
            value = orjson.loads(unfenced(text))
        except orjson.JSONDecodeError as exc:
            return [f"the final answer is not JSON: {exc}"]
        if self._validator.is_valid(value):
            if self.convert is None:
                return []
            try:  # what the schema cannot say (a pydantic validator, say) refuses it too
                self.convert(value)
            except OutputRefused as exc:
                return _capped(exc.problems)
            except Exception as exc:  # noqa: BLE001 - the caller's converter: any refusal
                return [problem_line("", f"{type(exc).__name__}: {exc}")[:2000]]
            return []
        return _capped(
            [
                problem_line(instance_path(e.instance_path), e.message)
                for e in self._validator.iter_errors(value)
            ]
        )

    def value(self, text: str) -> Any:
        """The valid ``text`` as the caller's type (the decoded JSON when there is no converter)."""
        value = orjson.loads(unfenced(text))
        return value if self.convert is None else self.convert(value)
