"""The run's state: one plain class, what every guard and effect reads and changes.

``RunState`` holds one run's counters, reserved ids, history, batch and log,
and the parts its configuration gave it; ``drafts.py`` has the transition
being made. The guards and effects are functions of a ``RunState`` (``rows/``), the
engine (``engine.py``) chooses and commits rows, and ``settle`` makes the
state again from the log when an interruption lands half-way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from agentloop._core.agents import Agents, checked_agents
from agentloop._core.context_policy import ContextPolicy
from agentloop._core.drafts import Draft
from agentloop._core.events import Events
from agentloop._core.intake import NO_REPLY
from agentloop._core.log import Log
from agentloop._core.messages import History, ids_of, input_messages
from agentloop._core.output_schema import OutputSchema
from agentloop._core.retry_policy import checked_retry
from agentloop._core.rows.context import init_context, rebuild_context
from agentloop._core.rows.handoff import agent_in_force, team_view
from agentloop._core.rows.nested_approval import still_waiting
from agentloop._core.rows.review import approvals
from agentloop._core.rows.wrapup import WRAP_UP_BEGUN
from agentloop._core.table import MODEL_ANSWERS, TERMINAL, Guard, State, Trigger
from agentloop._core.values import Budget, CancelToken, NotJSON, RunResult, Transition, Usage
from agentloop._errors import InvalidStateError

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.batch import Batch
    from agentloop._core.build import Row
    from agentloop._core.context_policy import Seen
    from agentloop._core.intake import Reply
    from agentloop._core.retry_policy import RetryPolicy
    from agentloop._core.rows.loopguard import CallIndex
    from agentloop._core.window import Plan, Summary, Window

__all__ = ["RunState"]

_DEFAULT_BUDGET: Final = Budget()
_NO_IDS: Final[frozenset[str]] = frozenset()
_NO_USAGE: Final = Usage()
_ASK_MODEL, _START_TOOL = Trigger.ASK_MODEL, Trigger.START_TOOL
_SUMMARISE: Final = Trigger.SUMMARISE
_REPLIED: Final = Trigger.MODEL_REPLIED
_new: Final = tuple.__new__
# Events that name a call of the batch without answering it.
_UNANSWERED: Final = (Trigger.CALL_WAITS, Trigger.APPROVAL_ASKED, Trigger.APPROVAL_DECIDED)


class RunState:
    """One run's counters, reserved ids, history, batch and log: what the rows read and change.

    A plain class of plain attributes: the functions of ``rows/`` read and
    set them. Only the engine holds one, and only the core touches it.
    """

    # The context policy's, set by rows/context.py's init_context: the policy, its window
    # and the events read into it, the summary in force, the plan for the request about to
    # be made, what the request outstanding was sent, and its messages when not the history.
    policy: ContextPolicy | None
    context: tuple[Window, list[int]] | None
    summary: Summary | None
    plan: tuple[int, Summary | None, Plan | str] | None
    seen: Seen | None
    view: bytearray | None

    __slots__ = (
        "agent",
        "agents",
        "applied",
        "batch",
        "budget",
        "calls",
        "calls_seen",
        "cancelled",
        "carried",
        "clock",
        "context",
        "continues",
        "conversation",
        "draft",
        "filters",
        "handed",
        "history",
        "input",
        "input_ids",
        "log",
        "models",
        "output",
        "output_check",
        "output_retries",
        "outstanding",
        "plan",
        "policy",
        "rejected",
        "reply",
        "reserved",
        "retry",
        "reviews",
        "run_id",
        "seen",
        "since",
        "spent",
        "state",
        "steps",
        "summary",
        "team_view",
        "tokens",
        "view",
        "wrapping",
    )

    def __init__(
        self,
        messages: str | list[dict[str, Any]],
        budget: Budget,
        cancel: CancelToken | None,
        clock: Callable[[], float],
        context: ContextPolicy | None,
        retry: RetryPolicy | None,
        models: tuple[str, ...],
        output: OutputSchema | None,
        run_id: str | None,
        continues: str | None,
        conversation: tuple[str, int] | None,
        summary: tuple[int, str] | None,
        agents: Agents | None,
    ) -> None:
        # The engine's parts, in the order Engine takes them (it alone makes a RunState).
        _check_parts(budget, cancel, clock, context, retry, models, output, run_id, continues)
        _check_conversation(conversation)
        encoded, input_ids = input_messages(messages)
        self.input_ids = frozenset(input_ids) if input_ids else _NO_IDS
        self.reserved = input_ids
        self.input = tuple(encoded)
        self.history = History(encoded)
        self.budget = budget
        # Without a token, nothing can cancel: ``bool()`` is False, and a C call.
        self.cancelled: Callable[[], bool] = bool if cancel is None else cancel.check()
        self.state = State.AWAITING_MODEL
        #: Model callback invocations so far.
        self.steps = 0
        #: Accepted tool attempts so far.
        self.calls = 0
        # Tokens the model's replies reported so far (input plus output): spent.total.
        self.tokens = 0
        self.spent = _NO_USAGE  # what the replies reported, summed
        # Times are read, never slept on: a clock is the only outside thing the engine reads.
        self.clock = clock
        # When the model was asked, and when each running call was handed out.
        self.since: dict[str | None, float] = {}
        #: The record: the newest events as made, the rest as columns over the history.
        self.log = Log(len(encoded))
        # The calls handed out since the last transition: the next one records them. A tuple,
        # () most of the time: no list of its own for each run in flight to hold.
        self.handed: tuple[str, ...] = ()
        self.applied = 0  # events whose effects on the state are done
        self.outstanding: Trigger | None = None
        self.rejected: object = None
        self.reply: Reply = NO_REPLY  # the reply in hand
        self.batch: Batch | None = None  # the accepted batch in hand
        self.draft = Draft(None)  # the transition being made
        self.reviews = False  # whether the driver reviews each batch (ReviewCalls)
        #: A conversation's: the summary in force as the turn begins (turns folded, text).
        self.carried = summary
        init_context(self, context, encoded)  # policy, context, summary, plan, seen, view
        # Resilience (retry=, fallback models): off unless the Loop sets them.
        self.retry = retry
        self.models = models
        #: The run this one continues (``Loop.continue_run``, the turn before), by id.
        self.continues = continues
        #: The conversation this run is a turn of, and its turn (from 1), if any.
        self.conversation = conversation
        #: This run's id, when it is durable (a ledger's or DBOS's): its result says it.
        self.run_id = run_id
        #: The schema a final answer must match (``Loop(output=T)``), if any.
        self.output = output
        #: The driver's check of a final the schema accepts (output validators), if any.
        self.output_check: Callable[[Any], object] | None = None
        #: Invalid final answers sent back to the model so far.
        self.output_retries = 0
        #: The budget that ran out, once the run wraps up (``on_exhausted='answer'``).
        self.wrapping: str | None = None
        self.calls_seen: CallIndex | None = None  # the loop guard's, made when first asked
        #: A team's (``Loop(handoffs=...)``): the agents, and the one in force.
        self.agents = checked_agents(agents)
        self.agent = None if agents is None else agents.start
        #: The handoffs' filters, by ``(agent, tool)`` (the Loop's: a replay asks none).
        self.filters: dict[tuple[str, str], Callable[..., Any]] = {}
        #: The last filter's view in force (its JSON), and where the history went on after it.
        self.team_view: tuple[bytes, int] | None = None

    @property
    def events(self) -> Events:
        """The events so far, as ``Transition``s made on demand (the log's own reads are faster)."""
        log, history = self.log, self.history
        return log.view(len(log), history.buffer, history.ends)

    def commit(
        self,
        row: Row,
        draft: Draft,
        sink: Callable[[Transition, NotJSON | None], object] | None,
    ) -> Transition:
        """Commit the chosen row: its event, offered to ``sink`` first, then appended.

        Appending the event to the log is the commit: ``settle`` makes the
        rest (the state, the history, the counters) again from the log. If
        ``sink`` raises, nothing is committed and the row's effects are undone.
        """
        dest, named, since, trigger = row.dest, draft.named, draft.since, row.trigger
        assert dest is not None, "a recorded row moves"
        at = self.clock()
        answers = trigger in MODEL_ANSWERS
        appended = draft.appended
        transition: Transition = _new(  # positional, in Transition's order: 5x cheaper
            Transition,
            (
                row.source,
                dest,
                trigger,
                row.guard,
                self.steps,
                self.calls,
                named[0],  # call_id
                named[1],  # tool
                draft.status,  # result_status
                draft.reason,
                draft.error,
                draft.exception,
                appended,  # appended_json
                draft.usage,
                at,
                None if since is None else at - since,  # took
                draft.pending,
                draft.decisions,
                self.handed,  # started
                draft.input_json,
                # The events that answer a model (or summariser) record what it was sent.
                self.seen if answers else None,  # context
                draft.wait,
                draft.model,
                draft.partial_text,
                draft.agent or (self.agent if answers else None),  # agent
            ),
        )
        if sink is not None:
            reply = self.reply.value if trigger is _REPLIED else None
            try:
                sink(transition, reply if type(reply) is NotJSON else None)
            except BaseException:
                self.settle()  # not committed: the row's effects are undone
                raise
        history = self.history
        if appended:
            history.extend(appended)
        self.log.add(transition)  # the commit
        self.handed = ()
        usage = draft.usage
        if usage is not None:
            self.spent = spent = Usage(*(a + b for a, b in zip(self.spent, usage, strict=True)))
            self.tokens = spent.total
        self.state = dest
        batch = self.batch
        self.outstanding = _START_TOOL if batch is not None and batch.running else None
        self.applied += 1
        return transition

    def result(self) -> RunResult:
        """The run's result: once it is done, or while it waits for a person's decisions."""
        run = self
        state = run.state
        if state not in TERMINAL and state is not State.AWAITING_APPROVAL:
            raise InvalidStateError(
                f"result() needs a finished run or one awaiting approval, but the run is "
                f"still in state {state.value!r}; step it until it ends or pauses",
                state=state,
            )
        log, history = run.log, run.history
        last = log.last
        output = None
        if last.dest is State.FINISHED:
            final, reply = last.appended_json[-1], run.reply
            # The reply in hand is the decoded copy of the final it appended: no decoding again.
            output = (reply.value if final is reply.json else orjson.loads(final))["text"]
            if run.output is not None:  # typed: converted as tool arguments are
                output = run.output.value(output)
        transcript_json = history.to_json()
        return RunResult(
            status=state,
            output=output,
            steps=run.steps,
            calls=run.calls,
            budget=run.budget,
            reason=last.reason,
            error=last.error,
            # The transitions read from the transcript's own bytes: the record, held once.
            events=log.view(len(log), transcript_json, history.ends, final=state in TERMINAL),
            transcript_json=transcript_json,
            rejected_value=run.rejected,
            usage=run.spent,
            held_json=run.reply.json if state is State.AWAITING_APPROVAL else None,
            context=run.policy,
            continues=run.continues,
            output_schema_json=None if run.output is None else run.output.schema_json,
            run_id=run.run_id,
            conversation_id=None if run.conversation is None else run.conversation[0],
            turn=None if run.conversation is None else run.conversation[1],
            summary=run.carried,
            agent=run.agent,
            agents=run.agents,
        )

    def settle(self) -> None:
        """Make the state, counters, ids, history and batch again from the log of events.

        Only an interruption, or a record sink that refused a transition, needs
        this (and pays for it): what landed between an effect and the commit
        is undone, what landed after the commit completed. Steps are the last
        event's, plus the one an outstanding model request has spent.
        """
        log = self.log
        count = len(log)
        if self.applied != count:  # the last event was committed: its request is answered
            self.outstanding = None
        # The history the record says: an interrupted commit may have extended it already.
        self.history = history = self.history.cut(log.mark(count - 1))
        self.applied = count
        rows = log.rows
        last = rows[-1] if rows else None
        self.state = State.AWAITING_MODEL if last is None or last.dest is None else last.dest
        steps, self.calls = log.counts(count - 1) if count else (0, 0)
        reported = log.usages()
        self.spent = Usage(*map(sum, zip(*reported, strict=True))) if reported else _NO_USAGE
        self.tokens = self.spent.total
        self.reserved = set(self.input_ids) | _appended_ids(history, len(self.input))
        batch = self.batch
        if self.state is State.HANDING_OFF and batch is not None:  # the handoff was accepted
            self.reserved.update(call_id for call_id, _ in batch.calls)
        if self.state is State.DISPATCHING and batch is not None:
            # The batch in hand was accepted: keep only the results its events committed.
            self.reserved.update(call_id for call_id, _ in batch.calls)
            accepted = max(i for i, row in enumerate(rows) if row.source is State.VALIDATING)
            since = range(accepted + 1, count)
            # Calls whose child waits, with no result.
            batch.waiting = waits = still_waiting(self.events[accepted + 1 :])
            answered = {log.named_call(i) for i in since if rows[i].trigger not in _UNANSWERED} | {
                call_id
                for i in since
                for call_id, decision in log.field(i, "decisions")
                if not decision.allowed
            }
            ids = [call_id for call_id, _ in batch.calls]
            batch.results = {i: r for i, r in batch.results.items() if ids[i] in answered}
            batch.running = {
                ids[i]: i
                for i in range(batch.started)
                if ids[i] not in answered and ids[i] not in waits
            }
            self.outstanding = _START_TOOL if batch.running else None
            # Handed out and in no event yet: the next event records them.
            recorded = {call_id for i in since for call_id in log.started_calls(i)}
            self.handed = tuple(call_id for call_id in batch.running if call_id not in recorded)
        else:
            self.handed = ()
        if self.state in (State.DISPATCHING, State.AWAITING_APPROVAL) and batch is not None:
            batch.pending, batch.decided = approvals(self.events)
        self.steps = steps + (self.outstanding is _ASK_MODEL or self.outstanding is _SUMMARISE)
        if self.policy is not None:
            rebuild_context(self)
        self.rejected = None  # only a terminal row rejects a reply
        self.output_retries = sum(row.guard is Guard.OUTPUT_RETRY for row in rows)
        self.calls_seen = None  # read again from the record when next asked
        self.wrapping = next(
            (log.field(i, "reason") for i, row in enumerate(rows) if row.guard in WRAP_UP_BEGUN),
            None,
        )
        self.agent, self.team_view = agent_in_force(self), team_view(self)


def _appended_ids(history: History, given: int) -> set[str]:
    """The ids of every call the run appended to ``history``: what settle() reserves again."""
    return {
        call_id
        for index in range(given, len(history))
        for call_id in ids_of(orjson.loads(history.message_json(index)))
    }


def _check_parts(
    budget: object,
    cancel: object,
    clock: object,
    context: object,
    retry: object,
    models: object,
    output: object,
    run_id: object,
    continues: object,
) -> None:
    """``TypeError`` naming an engine part of the wrong kind (a Loop passes checked ones)."""
    if context is not None and type(context) is not ContextPolicy:
        raise TypeError(
            "expected context to be a policy of agentloop.context (keep_last(tokens=...) "
            f"or summarise(model, tokens=...)) or None, got {type(context).__name__}"
        )
    if type(budget) is not Budget:
        raise TypeError(f"expected budget to be a Budget, got {type(budget).__name__}")
    if cancel is not None and type(cancel) is not CancelToken:
        raise TypeError(f"expected cancel to be a CancelToken or None, got {type(cancel).__name__}")
    if not callable(clock):
        raise TypeError(f"expected clock to be a callable returning seconds, got {clock!r:.80}")
    checked_retry(retry)
    if type(models) is not tuple or not all(type(name) is str for name in models):
        raise TypeError(
            f"expected models to be a tuple of the fallback models' names (str), got {models!r:.80}"
        )
    if output is not None and not isinstance(output, OutputSchema):
        raise TypeError(
            "expected output to be an OutputSchema (a Loop's: loop.output) or None, "
            f"got {output!r:.80}"
        )
    for name, value in (("run_id", run_id), ("continues", continues)):
        if value is not None and type(value) is not str:
            raise TypeError(f"expected {name} to be a str or None, got {type(value).__name__}")


def _check_conversation(conversation: object) -> None:
    """``TypeError`` unless ``conversation`` is ``(conversation_id, turn from 1)`` or None."""
    if conversation is None:
        return
    if (
        type(conversation) is not tuple
        or len(conversation) != 2
        or type(conversation[0]) is not str
        or type(conversation[1]) is not int
        or conversation[1] < 1
    ):
        raise TypeError(
            "expected conversation to be (conversation_id, turn), a str and a turn from 1, "
            f"or None, got {conversation!r:.80}"
        )
