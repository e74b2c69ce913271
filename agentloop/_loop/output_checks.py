"""Output validators (``Loop(output_validators=[...])``): what checks a final the schema accepts.

A validator is ``fn(value)`` or ``fn(value, ctx)``: its ``RunContext``
parameter, if any, is found by its annotation, as a tool's is. It may be
``async def``. It raises ``Retry(why)`` to send the final back to the model
with ``why``; anything else it raises is a problem too, said as what it
raised, so the run stays in the table. What it returns is not read. The
validators run in order, and the first problem stops the check: a later
validator sees only what the earlier ones accepted.

They run in the driver, never in the engine and never in a replay: the
engine hands out ``CheckOutput`` and records the problems reported
(``output_checked``), which a replay or a resume feeds back. The check
below is what a run's driver is given (``engine.output_check``): it runs
the validators in the output's context (the run's ``deps``, ``run_id``,
counters and token; ``call_id`` and ``tool`` are ``None``), set as
``current_context()`` too.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Final

from agentloop._drivers.run_context import Handed, areviewed_in, reviewed_in
from agentloop._tools.signature import Context, context_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from agentloop._drivers.awaiter import Awaiter
    from agentloop._drivers.run_context import CallScope, RunContext

__all__ = ["NONE", "Retry", "Validators", "acheck", "check", "name_of"]


class Retry(Exception):
    """Raised by an output validator: send the final answer back to the model, saying why.

    ``Retry("the city must be in Europe")``: the model is told the message
    and asked for another final answer. It counts against
    ``max_output_retries``, as a final the output schema refuses does; with
    none left, the run ends ``invalid_output`` with the message in its ``error``.
    """


class Validators(tuple["Callable[..., Any]", ...]):
    """A Loop's output validators, in order; ``contexts``: what each one's context parameter is."""

    #: Each validator's ``RunContext`` parameter, and the deps it names (None: it takes none).
    contexts: tuple[Context | None, ...]

    def __new__(cls, validators: Iterable[object]) -> Validators:
        if isinstance(validators, Validators):  # another Loop's: found already
            return validators
        if isinstance(validators, (str, bytes)) or not hasattr(validators, "__iter__"):
            raise TypeError(
                "expected output_validators to be a list of functions (value[, ctx]), got "
                f"{type(validators).__name__}"
            )
        functions: list[Callable[..., Any]] = []
        contexts: list[Context | None] = []
        for validator in validators:
            if not callable(validator):
                raise TypeError(
                    "expected each output validator to be a function (value[, ctx]), got "
                    f"{type(validator).__name__}"
                )
            context = context_of(f"output validator {name_of(validator)}", validator)
            _takes_a_value(validator, context)
            functions.append(validator)
            contexts.append(context)
        made = super().__new__(cls, functions)
        made.contexts = tuple(contexts)
        return made


def _takes_a_value(validator: Callable[..., Any], context: Context | None) -> None:
    """Refuse, now, a validator that cannot be called as it will be: ``fn(value[, ctx=])``."""
    try:
        signature = inspect.signature(validator)
    except (TypeError, ValueError):  # a builtin that says nothing of itself: its call will
        return
    try:
        signature.bind(None, **({} if context is None else {context[0]: None}))
    except TypeError:
        raise TypeError(
            f"expected output validator {name_of(validator)} to be a function of the final's "
            f"value (value[, ctx]), got one whose parameters are {signature}"
        ) from None


#: No output validators: what a Loop without ``output_validators=`` has.
NONE: Final = Validators(())


def check(validators: Validators, scope: CallScope, awaiter: Awaiter) -> Callable[[Any], list[str]]:
    """What a synchronous run checks a final with: an async validator awaited by ``awaiter``.

    As a batch's policies, a check runs to its end: the token does not cut it short.
    """

    def checked(value: Any) -> list[str]:
        given = Handed.given(scope.output_context())  # current_context() in the validators
        for validator, context in zip(validators, validators.contexts, strict=True):
            try:
                answer = reviewed_in(given, _calling(validator, context, given.context()), value)
                if inspect.isawaitable(answer):
                    awaiter(areviewed_in(given, answer), cancellable=False)
            except Exception as exc:  # noqa: BLE001 - a problem, said: the run stays in the table
                return [_problem(validator, exc)]
        return []

    return checked


def acheck(validators: Validators, scope: CallScope) -> Callable[[Any], Awaitable[list[str]]]:
    """What an asyncio run checks a final with: each validator awaited, if async, in turn."""

    async def checked(value: Any) -> list[str]:
        given = Handed.given(scope.output_context())  # current_context() in the validators
        for validator, context in zip(validators, validators.contexts, strict=True):
            try:
                answer = reviewed_in(given, _calling(validator, context, given.context()), value)
                if inspect.isawaitable(answer):
                    await areviewed_in(given, answer)
            except Exception as exc:  # noqa: BLE001 - a problem, said: the run stays in the table
                return [_problem(validator, exc)]
        return []

    return checked


def _calling(
    validator: Callable[..., Any], context: Context | None, given: RunContext[Any]
) -> Callable[[Any], Any]:
    """``validator`` as a function of the value alone: its context given by name."""
    if context is None:
        return validator
    return lambda value: validator(value, **{context[0]: given})


def _problem(validator: Callable[..., Any], exc: Exception) -> str:
    """What the model is told: a ``Retry``'s message, or what the validator raised."""
    if isinstance(exc, Retry):
        return str(exc) or f"the output validator {name_of(validator)} asked for another answer"
    return f"the output validator {name_of(validator)} raised {type(exc).__name__}: {exc}"[:2000]


def name_of(validator: object) -> str:
    """How an error names a validator: its qualified name, quoted."""
    return repr(getattr(validator, "__qualname__", None) or type(validator).__name__)
