"""Small values: budgets, the cancel token, transitions and results.

The engine's requests (``AskModel``, ``RunTool``, ...) are ``requests.py``'s,
re-exported here.

Transitions and results are immutable, and what they hold of the record is
kept as JSON bytes: every access to ``transcript``, ``appended`` or
``rejected`` decodes a fresh copy, so nobody holding one can rewrite it for
anyone else. This module is data only: saving and loading runs lives in
``agentloop._review``, above the engine.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final, Generic, Literal, NamedTuple, TypeAlias

import attrs
import orjson
from typing_extensions import TypeVar

from agentloop._core.agents import Agents
from agentloop._core.approval import Decision, DecisionKey, PendingCall
from agentloop._core.cancel import CancelToken
from agentloop._core.children import Children
from agentloop._core.context_policy import ContextPolicy, Seen
from agentloop._core.json import describe, unfenced
from agentloop._core.requests import AskModel, AwaitApproval, ReviewCalls, RunTool, Wait
from agentloop._core.table import Guard, State, Trigger
from agentloop._errors import InvalidStateError

__all__ = [
    "AskModel",
    "AwaitApproval",
    "Budget",
    "CancelToken",
    "NotJSON",
    "OutputT",
    "RecordedException",
    "ReviewCalls",
    "RunResult",
    "RunTool",
    "Transition",
    "Usage",
    "Wait",
]

#: What a run's output is: ``RunResult[OutputT]``, and ``Loop``'s, ``Run``'s and
#: ``AsyncRun``'s parameter. Covariant: a ``RunResult[City]`` is a ``RunResult[object]``.
#: ``Any`` by default: ``RunResult`` alone in an annotation (a loaded run's) is
#: ``RunResult[Any]``.
OutputT = TypeVar("OutputT", covariant=True, default=Any)

#: The largest budget a run file can record (JSON integers are kept within 64 bits).
MAX_BUDGET: Final = 2**63 - 1
#: A result's children when its run ran no agent tool: read-only, shared.
NO_CHILDREN: Final[Mapping[str, Any]] = Children()


def _budget(_: object, attribute: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int:
        raise TypeError(f"{attribute.name} must be a non-negative int, got {describe(value)}")
    if value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int, got {value}")
    if value > MAX_BUDGET:
        raise ValueError(
            f"{attribute.name} must be at most 2**63 - 1 (a run file records 64-bit "
            f"integers), got an int of {len(str(value))} digits"
        )


def _token_budget(instance: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is None:
        return
    if type(value) is not int:
        raise TypeError(
            f"{attribute.name} must be a non-negative int or None, got {describe(value)}"
        )
    _budget(instance, attribute, value)  # type: ignore[arg-type]


def _identical(instance: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is None:
        return
    if type(value) is not int or value < 1:
        raise (TypeError if type(value) is not int else ValueError)(
            f"{attribute.name} must be an int of 1 or more, or None, got {describe(value)}"
        )
    _budget(instance, attribute, value)  # type: ignore[arg-type]


#: At a budget's end: ``'stop'``, or ``'answer'`` (one last model step, tools disabled).
OnExhausted: TypeAlias = Literal["stop", "answer"]


def _on_exhausted(_: object, attribute: attrs.Attribute[OnExhausted], value: object) -> None:
    if value not in ("stop", "answer") or type(value) is not str:
        raise ValueError(f"{attribute.name} must be 'stop' or 'answer', got {describe(value)}")


@attrs.frozen(kw_only=True)
class Budget:
    """The limits of a run.

    ``max_steps`` bounds model callback invocations, failed and malformed ones
    included; ``max_calls`` bounds accepted tool attempts, whatever their
    outcome; ``max_total_tokens`` (optional) bounds the tokens the model's
    replies report (input plus output), checked before each model call. Each is
    an ``int`` from 0 to ``2**63 - 1``, so that a run file can record it.
    The defaults, 25 steps and 100 calls, are ``Loop``'s and ``Engine``'s: room
    for a typical agent, a batch of four on every step, yet a bound on a loop.
    ``max_output_retries``, ``max_identical_calls`` and ``on_exhausted`` are
    the ``Loop`` keywords of those names (see the docs' "Typed output" and
    "Loop guard and wrap-up" pages); their defaults change nothing.
    """

    max_steps: int = attrs.field(default=25, validator=_budget)
    max_calls: int = attrs.field(default=100, validator=_budget)
    max_total_tokens: int | None = attrs.field(default=None, validator=_token_budget)
    #: How many invalid final answers the model may correct (with ``Loop(output=T)``).
    max_output_retries: int = attrs.field(default=1, validator=_budget)
    #: How many times the same tool with the same arguments may be accepted (None: any).
    max_identical_calls: int | None = attrs.field(default=None, validator=_identical)
    #: What a run that would end ``exhausted`` does (``OnExhausted``).
    on_exhausted: OnExhausted = attrs.field(default="stop", validator=_on_exhausted)


class Usage(NamedTuple):
    """Tokens a model reply reports: what the provider billed for that step.

    ``input_tokens`` counts every input token, ``cached_tokens`` the part of
    them served from the provider's cache. A run's ``total`` is input plus
    output, what ``max_total_tokens`` bounds.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        """``input_tokens + output_tokens``."""
        return self.input_tokens + self.output_tokens


class RecordedException(Exception):
    """An exception as a run file keeps it: only its type name and message survive.

    ``Transition.exception`` on a loaded run is one of these; the engine
    describes it by ``type_name``, so replaying a run gives back its errors.
    """

    #: What the failed model call cost, when the run recorded it (replay sets it).
    usage: dict[str, int] | None = None
    #: The wait before a retry a ledger recorded with it (``retry=``), if any.
    wait: float | None = None

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name, self.message = type_name, message

    @classmethod
    def from_content(cls, content: dict[str, str]) -> RecordedException:
        """The exception a ``{'type', 'message'}`` record describes, as a run file holds it."""
        return cls(content["type"], content["message"])

    def __repr__(self) -> str:
        return f"RecordedException({self.type_name!r}, {self.message!r})"

    def __reduce__(self) -> tuple[type[RecordedException], tuple[str, str]]:
        # Exception pickles and copies by ``args``, which holds the message alone.
        return RecordedException, (self.type_name, self.message)


@attrs.frozen(repr=False)
class NotJSON:
    """A rejected reply that was not JSON: its ``repr`` and what was wrong with it.

    The engine never keeps a user's object: its ``repr`` (or a placeholder,
    when ``__repr__`` fails) is all that is recorded, so a run can always be saved.
    """

    text: str
    problem: str = ""

    def __repr__(self) -> str:
        return self.text


class Transition(NamedTuple):
    """One state change of a run, with the budget ledger after it.

    An immutable record (a ``NamedTuple``: cheap to make, as the engine makes
    one per transition). ``appended`` holds the messages this transition
    added to the history (a fresh copy on each access); the transcript is
    exactly the input followed by the ``appended`` of every transition, in
    order. ``exception`` is left out of comparisons.
    """

    #: The state before and after.
    source: State
    dest: State
    #: What happened, and the guard that chose this row (if any).
    trigger: Trigger
    guard: Guard | None
    #: The counters after the transition.
    steps: int
    calls: int
    #: The call involved, if any: its id and tool name.
    call_id: str | None = None
    tool: str | None = None
    #: The status of the tool result this transition recorded, if it recorded one.
    result_status: str | None = None
    #: ``'max_steps'`` / ``'max_calls'`` on exhaustion; a description on errors.
    reason: str | None = None
    error: str | None = None
    #: The exception behind ``error`` (or the interruption), kept for the caller.
    exception: BaseException | None = None
    #: The appended messages' JSON; ``appended`` decodes a fresh copy.
    appended_json: tuple[bytes, ...] = ()
    #: The tokens the model's reply reported (on ``model_replied`` only).
    usage: Usage | None = None
    #: When the transition was made, in seconds of the run's monotonic clock.
    at: float | None = None
    #: How long the model call or the tool this transition answers took, in seconds.
    took: float | None = None
    #: The calls a policy asked about (on ``approval_asked`` only).
    pending: tuple[PendingCall, ...] = ()
    #: A person's decision for each of them, by call id (on ``approval_decided`` only).
    decisions: tuple[tuple[DecisionKey, Decision], ...] = ()
    #: The ids of the calls handed out to run since the transition before this one.
    started: tuple[str, ...] = ()
    #: What came from outside with this report, as JSON: the model's reply (on
    #: ``model_replied``, without its usage; ``None`` for a reply that was not
    #: JSON) or the tool's content (on ``tool_returned``). With ``started``, the
    #: cancel guards and the fields above, an event says everything the engine
    #: was given, so a run replays from its events alone.
    input_json: bytes | None = None
    #: Under a context policy, on an event answering a model (or summariser) request:
    #: what it was sent, as a compact reference into the transcript (``agentloop.context``).
    context: Seen | None = None
    #: The seconds the retry policy chose to wait before asking again (on the row
    #: into ``backing_off`` only).
    wait: float | None = None
    #: Which model replied or raised, by name, when the Loop has fallback models
    #: (``agentloop.models.fallback``); ``None`` with one model.
    model: str | None = None
    #: The text a streaming reply had delivered when the run was interrupted (on
    #: ``model_interrupted`` only, and only then): for review, never in the history.
    partial_text: str | None = None
    #: With handoffs (``Loop(handoffs=...)``): the agent in force, on the events that
    #: answer a model; the agent handed to, on a handoff's.
    agent: str | None = None

    @property
    def appended(self) -> list[dict[str, Any]]:
        """The messages this transition appended (a fresh copy)."""
        return [orjson.loads(data) for data in self.appended_json]

    def _compared(self) -> tuple[object, ...]:
        # Times are left out too: two runs of the same story are equal whenever they ran.
        # So are started and input_json: what the engine was given, which a replay feeds
        # back; the rest says what it made of it.
        made = (*self[:11], self.appended_json, self.usage, self.pending, self.decisions)
        return (*made, self.context, self.wait, self.model, self.agent)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Transition:
            return NotImplemented
        return self._compared() == other._compared()

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = (*self._fields[:11], "usage", "pending", "decisions", "wait", "model", "agent")
        values = (
            *self[:11],
            self.usage,
            self.pending or None,
            self.decisions or None,
            self.wait,
            self.model,
            self.agent,
        )
        fields = ", ".join(
            f"{name}={value!r}"
            for name, value in zip(shown, values, strict=True)
            if value is not None or name in ("source", "dest", "trigger", "steps", "calls")
        )
        return f"Transition({fields})"


class RunResult(NamedTuple, Generic[OutputT]):
    """How a run ended: an immutable record, whose collections are fresh copies but ``output``.

    ``output`` is the answer itself, made once: copy it before changing it.
    Generic in its output: ``Loop(model, output=City).run(...)`` is a
    ``RunResult[City]``, whose ``output`` is a ``City | None`` (``None`` unless
    the run finished) and whose ``require_output()`` is a ``City``. A run of a
    ``Loop`` without ``output=`` is a ``RunResult[str]``; a loaded run file's is
    a ``RunResult[Any]`` (its output is the decoded JSON). Save and open it with
    ``agentloop.review.save_run`` / ``load_run`` (``run_to_json`` / ``run_from_json``).
    """

    #: The terminal state (a ``str`` enum: ``result.status == 'finished'``), or
    #: ``awaiting_approval`` for a run that waits for a person (see ``pending``).
    status: State
    #: The final answer's text, when the run finished; with ``Loop(output=T)``, the
    #: answer as a ``T`` (a loaded run's: the decoded JSON). ``None`` for a run that did
    #: not finish: ``require_output()`` says why there is none.
    output: OutputT | None
    steps: int
    calls: int
    budget: Budget
    #: ``'max_steps'`` or ``'max_calls'`` when exhausted.
    reason: str | None
    #: A human-readable description for failed, malformed and repeated_call.
    error: str | None
    #: Every transition, in order: the complete budget ledger. A read-only sequence; a
    #: finished run's are made on demand from its record, held once.
    events: Sequence[Transition]
    #: The transcript's JSON; ``transcript`` decodes a fresh copy.
    transcript_json: bytes
    #: The reply that ended the run unrecorded (its decoded copy, or ``NotJSON``).
    rejected_value: object = None
    #: The tokens every model reply reported, summed.
    usage: Usage = Usage()
    #: The batch that waits for a person (its JSON), when ``awaiting_approval``: not yet
    #: in the transcript, which gets it with every result once the batch has run.
    held_json: bytes | None = None
    #: The context policy the run's requests were fitted by (``agentloop.context``), if any.
    context: ContextPolicy | None = None
    #: The run this one goes on from (``Loop.continue_run``, the turn before), by id, if any.
    continues: str | None = None
    #: The output schema's JSON, for a run made with ``Loop(output=T)``.
    output_schema_json: bytes | None = None
    #: The run's id, for a durable run (a ledger's, or DBOS's workflow id); else ``None``.
    run_id: str | None = None
    #: A conversation's turn (``after=``, ``conversation=``): its id and number, from 1.
    conversation_id: str | None = None
    turn: int | None = None
    #: The summary (turns folded, text) the turn began with, under ``summarise``.
    summary: tuple[int, str] | None = None
    #: The results of the child runs its agent tools ran (``Loop.as_tool``), by call id:
    #: a read-only mapping (a saved run file holds them too, each a run file of its own).
    children: Mapping[str, RunResult[Any]] = NO_CHILDREN
    #: With handoffs: the agent in force at the end (who gave the final answer), and
    #: the team (``Agents``: the first agent and each agent's handoffs).
    agent: str | None = None
    agents: Agents | None = None

    def require_output(self) -> OutputT:
        """The output of a run that finished; ``InvalidStateError`` for any other run.

        The error names the run's status and why it has no output: the budget
        that ran out, the error it failed with, or the calls it awaits a
        decision on. A typed output that may itself be ``None`` is returned.
        """
        status = self.status
        if status == "finished":
            return self.output  # type: ignore[return-value]  # a finished run's is its O
        if status == "awaiting_approval":
            ids = [call.key for call in self.pending]
            why = f": calls {ids} await a decision (decide them, then finish the run)"
        elif self.reason is not None or self.error is not None:
            why = f": {self.reason or self.error}"
        else:
            why = ""
        raise InvalidStateError(
            f"expected a finished run's output, got a run that is {status.value!r}{why}",
            state=status,
        )

    @property
    def output_text(self) -> str | None:
        """The final answer's text, when the run finished; with ``Loop(output=T)``, its JSON.

        A typed output's JSON without the Markdown fence a model may have put
        around it (```` ```json ... ``` ````): ``json.loads(output_text)`` reads
        it. The transcript keeps the final as the model wrote it.
        """
        if self.output_schema_json is None:
            return self.output  # type: ignore[return-value]  # without a schema: the text
        if self.output is None or self.status != "finished":
            return None
        return unfenced(orjson.loads(self.transcript_json)[-1]["text"])

    def __repr__(self) -> str:
        return (
            f"RunResult(status={self.status!r}, output={self.output!r}, steps={self.steps}, "
            f"calls={self.calls}, reason={self.reason!r}, error={self.error!r}, "
            f"usage={self.usage!r}, events=<{len(self.events)} "
            f"transition{'' if len(self.events) == 1 else 's'}>)"
        )

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """Input and every appended message, in order (a fresh copy)."""
        return orjson.loads(self.transcript_json)  # type: ignore[no-any-return]

    @property
    def usage_by_model(self) -> dict[str, Usage]:
        """The tokens each model's replies reported, by name (fallback models; else empty).

        Budgets count across all of them: ``usage`` is their sum.
        """
        spent: dict[str, Usage] = {}
        for event in self.events:
            if event.model is not None and event.usage is not None:
                was = spent.get(event.model, Usage())
                spent[event.model] = Usage(*(a + b for a, b in zip(was, event.usage, strict=True)))
        return spent

    @property
    def held(self) -> Any:
        """A copy of the batch that waits for a person (``None`` unless awaiting approval)."""
        return None if self.held_json is None else orjson.loads(self.held_json)

    @property
    def pending(self) -> tuple[PendingCall, ...]:
        """The calls a person is to decide, when the run is ``awaiting_approval``."""
        if self.status != "awaiting_approval" or not self.events:
            return ()
        return self.events[-1].pending

    @property
    def rejected(self) -> Any:
        """A copy of the reply that ended the run, if one did; never in the transcript."""
        value = self.rejected_value
        if value is None or isinstance(value, NotJSON):
            return value
        return copy.deepcopy(value)


def require_result(value: object, where: str) -> RunResult:
    """``value`` if it is a ``RunResult``; else a ``TypeError`` that says how to get one."""
    if type(value) is not RunResult:
        live = hasattr(value, "step") or hasattr(value, "astep")
        hint = "; call run.result() (or run.finish()) first" if live else ""
        raise TypeError(
            f"{where} expected a RunResult (a finished run's result(), or load_run(path)), "
            f"got {type(value).__name__}{hint}"
        )
    return value
