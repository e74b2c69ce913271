"""``Tool``: a handler with its name, description, ``parameters`` schema and validator.

Everything is worked out once, when the tool is defined: the schema (derived
from the signature, or given), its JSON form, the compiled validator and the
arguments converter. A tool that could not be described, published or
validated fails right there, with a ``TypeError`` naming it, never at call time.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, Generic, ParamSpec, overload

import orjson
from typing_extensions import TypeVar

from agentloop._core.approval import Policy
from agentloop._core.json import to_json
from agentloop._drivers.run_context import RunContext
from agentloop._errors import JSONError
from agentloop._tools.results import result_limit
from agentloop._tools.schema import summary
from agentloop._tools.signature import Context, context_of, derive_parameters
from agentloop._tools.validation import ArgumentsValidator, checked_schema

__all__ = ["Tool"]

#: The dependencies a tool's context wants: contravariant, since a tool that takes any deps
#: serves a Loop of any (``Tool[object]``, a handler with no context, serves every Loop).
ToolDeps = TypeVar("ToolDeps", contravariant=True, default=Any)
_D = TypeVar("_D")
_P = ParamSpec("_P")


class Tool(Generic[ToolDeps]):
    """A handler with its name, description and ``parameters`` JSON Schema.

    ``name`` defaults to the handler's ``__name__``; ``description`` to the
    first paragraph of its docstring; ``parameters`` to the schema derived from
    its signature (pass your own to take over: it is checked as Draft 2020-12
    and the handler then receives the arguments as plain JSON). ``policy``
    gates this tool alone, after the registry's policy. ``idempotent=True``
    says running a call twice has the effect of running it once (its handler
    passes ``agentloop.idempotency_key()`` on to a system that deduplicates):
    a durable run re-runs such a call when a crash left its outcome unknown,
    where any other call gets an ``error`` result instead. ``max_result_chars``
    cuts a longer result (a str as it is, other JSON as its text) before the
    history gets it, ending it with a marker that says how many characters
    were cut of how many; unset, the registry's ``max_result_chars`` applies.
    A parameter of the handler (or of ``policy``) annotated
    ``agentloop.RunContext`` (or ``RunContext[Deps]``) gets the call's
    context, and is not in the schema. A type checker reads the tool as a
    ``Tool[Deps]`` when the handler's first parameter is ``RunContext[Deps]``,
    and as a ``Tool[object]`` (for any deps) otherwise.
    """

    __slots__ = (
        "_convert",
        "_is_valid",
        "_published",
        "_validator",
        "context",
        "description",
        "handler",
        "idempotent",
        "max_result_chars",
        "name",
        "policy",
        "policy_context",
    )

    @overload
    def __init__(
        self: Tool[_D],
        handler: Callable[Concatenate[RunContext[_D], _P], Any],
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
        idempotent: bool = False,
        max_result_chars: int | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self: Tool[object],
        handler: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
        idempotent: bool = False,
        max_result_chars: int | None = None,
    ) -> None: ...
    def __init__(
        self,
        handler: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        parameters: Mapping[str, Any] | None = None,
        policy: Policy | None = None,
        idempotent: bool = False,
        max_result_chars: int | None = None,
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
        if type(idempotent) is not bool:
            raise TypeError(
                f"tool {name!r}: expected idempotent to be a bool, got {type(idempotent).__name__}"
            )
        if description is None:  # a partial's own docstring is functools'
            described = handler.func if isinstance(handler, functools.partial) else handler
            description = summary(inspect.getdoc(described))
        for what, text in (("its name", name), ("its description", description)):
            try:
                to_json(text, what)  # a lone surrogate would break every spec
            except JSONError as exc:
                raise TypeError(f"tool {name!r}: {exc}") from None
        self.name: str = name
        self.handler = handler
        self.description: str = description
        self.policy = policy
        #: Whether a call may run again when a crash left its outcome unknown (durable runs).
        self.idempotent: bool = idempotent
        #: A result longer than this (characters) is cut, with a marker, before the history
        #: gets it (None: the registry's default).
        self.max_result_chars = result_limit(f"tool {name!r}: max_result_chars", max_result_chars)
        #: The handler's parameter that takes the call's context, and the deps it names.
        self.context: Context | None
        if parameters is None:
            schema, self._convert, self.context = derive_parameters(name, handler)
        else:
            schema, self._convert = checked_schema(name, parameters), None
            self.context = context_of(f"tool {name!r}", handler)
        #: The policy's parameter that takes the call's context, and the deps it names.
        self.policy_context = (
            None if policy is None else context_of(f"the policy of tool {name!r}", policy)
        )
        try:
            # Published as these bytes: every spec and every parameters copy come from them.
            self._published = to_json(schema, "parameters")
        except JSONError as exc:  # a case the derivation's own checks missed
            raise TypeError(f"tool {name!r}: {exc}") from None
        self._validator = ArgumentsValidator(schema, derived=parameters is None)
        self._is_valid = self._validator.is_valid  # the registry's fast path asks it directly
        if parameters is None:
            self._check_defaults(schema)

    def _check_defaults(self, schema: dict[str, Any]) -> None:
        """Refuse a handler's default that its parameter's annotation refuses.

        The schema publishes it (``"default"``), so a model would be told a
        value the tool itself calls invalid: ``n: int = None`` is ``int | None``.
        """
        defaults = {
            key: value["default"]
            for key, value in schema["properties"].items()
            if type(value) is dict and "default" in value
        }
        for problem in self._validator.problems(defaults):
            key = problem["path"].split(".")[0].split("[")[0]
            if key in defaults:  # (not the missing required parameters, at the top)
                at = "" if problem["path"] == key else f" at {problem['path']}"
                hint = (
                    "; one that may be None is annotated T | None" if defaults[key] is None else ""
                )
                raise TypeError(
                    f"tool {self.name!r}: parameter {key!r}: its default {defaults[key]!r:.80} "
                    f"does not match its annotation{at}: {problem['message']}{hint}"
                )

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @property
    def parameters(self) -> dict[str, Any]:
        """The arguments' JSON Schema (a fresh copy)."""
        return orjson.loads(self._published)  # type: ignore[no-any-return]

    def problems(self, arguments: dict[str, Any]) -> list[dict[str, str]]:
        """Every way ``arguments`` break the schema, as ``{'path', 'message'}``; ``[]`` if none."""
        return self._validator.problems(arguments)

    def convert(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Valid arguments as the handler's types (attrs instances, enum members, tuples).

        The result may be ``arguments`` itself, when nothing needed converting.
        """
        return arguments if self._convert is None else self._convert(arguments)
