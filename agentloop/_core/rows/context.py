"""The context policy's rows: their guards and effects, and the state they keep.

What ``agentloop.context`` adds to a run: the window of its messages, the
summary in force, and the plan for the request about to be made (``fit_context``,
``context_overflows``, the ``summarising`` rows). ``RunState`` inherits them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson

from agentloop._core.context_policy import OVERFLOW, Summarise
from agentloop._core.json import exception_said
from agentloop._core.table import State, Trigger
from agentloop._core.window import Window

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentloop._core.context_policy import ContextPolicy, Seen
    from agentloop._core.messages import History
    from agentloop._core.rows.state import _Draft
    from agentloop._core.values import Transition
    from agentloop._core.window import Plan, Summary

__all__ = ["ContextRows"]

_SUMMARISE: Final = Trigger.SUMMARISE
_WRITTEN: Final = Trigger.SUMMARY_WRITTEN


class ContextRows:
    """The context policy's guards and effects, as methods of ``RunState`` (a mixin of it)."""

    if TYPE_CHECKING:  # what these rows read and assign, as RunState holds it
        _clock: Callable[[], float]
        _draft: _Draft
        _events: list[Transition]
        _history: History
        _input: tuple[bytes, ...]
        _outstanding: Trigger | None
        _rejected: object
        _since: dict[str | None, float]
    else:
        # RunState holds the slots (an instance has one layout). The type checker is not
        # shown this empty tuple, which to it would forbid assigning RunState's slots here.
        __slots__ = ()

    def _init_context(self, policy: ContextPolicy | None, encoded: list[bytes]) -> None:
        self._policy = policy
        #: The messages as the policy reads them (None: no policy), and the events read in.
        self._context: tuple[Window, list[int]] | None = (
            None if policy is None else (Window(policy.counter, encoded), [0])
        )
        self._summary: Summary | None = None  # the summary in force
        self._plan: tuple[int, Summary | None, Plan | str] | None = None  # for this request
        self._seen: Seen | None = None  # what the request outstanding was sent
        self._view: bytearray | None = None  # the request's messages, when not the history

    def _context_plan(self) -> Plan | str:
        """The view for the request about to be made (found once a request), or why none fits."""
        policy, context = self._policy, self._context
        assert policy is not None, "a context policy is set"
        assert context is not None, "a policy has its window"
        window, read = context
        events = self._events
        for event in events[read[0] :]:
            for data in event.appended_json:
                window.add(data)
        read[0] = len(events)
        cached, summary = self._plan, self._summary
        if cached is not None and cached[0] == len(window.messages) and cached[1] is summary:
            return cached[2]
        plan = window.plan(
            policy.tokens,
            summary,
            policy.summariser is not None,
            policy.keep_tokens,
            self._history.buffer,
        )
        self._plan = (len(window.messages), summary, plan)
        return plan

    def _rebuild_context(self) -> None:
        """The window and the summary in force again, from the input and the events."""
        policy, seen = self._policy, self._seen
        assert policy is not None, "a context policy is set"
        self._init_context(policy, list(self._input))
        self._seen = seen  # what a request still outstanding was sent
        window, read = self._context  # type: ignore[misc]  # just made
        for event in self._events:
            if event.trigger is Trigger.SUMMARY_WRITTEN and event.dest is State.AWAITING_MODEL:
                # The plan as it was when this summary was asked for.
                plan = window.plan(policy.tokens, self._summary, True, policy.keep_tokens)
                assert not isinstance(plan, str), "a summary was asked for a plan"
                assert event.input_json is not None, "a summary is a final answer"
                self._summary = window.summary(plan.fold, orjson.loads(event.input_json)["text"])
            for data in event.appended_json:
                window.add(data)
        read[0] = len(self._events)

    def _context_overflows(self) -> bool:
        return self._policy is not None and isinstance(self._context_plan(), str)

    def _summary_due(self) -> bool:
        if self._policy is None or self._policy.summariser is None:
            return False
        events = self._events
        if events and events[-1].trigger is _WRITTEN:
            return False  # a summary was just written: the request goes next, with or without it
        plan = self._context_plan()
        return not isinstance(plan, str) and plan.fold > plan.folded

    def _summary_malformed(self) -> bool:
        reply = self._draft.summary_in
        return reply is None or reply.problem is not None or not reply.final

    def _fit_context(self) -> None:
        if self._policy is None:
            return
        plan = self._context_plan()
        # Checked first, by context_overflows (or, in the wrap-up step, wrap_up_overflows).
        assert not isinstance(plan, str), "context_overflows was checked first"
        self._seen = plan.seen
        self._view = None if plan.view is None else bytearray(plan.view)

    def _note_context_overflow(self) -> None:
        plan = self._context_plan()
        assert isinstance(plan, str), "context_overflows said so"
        self._draft.reason, self._draft.error = OVERFLOW, plan

    def _ask_for_summary(self) -> None:
        policy, context = self._policy, self._context
        assert policy is not None, "a context policy is set"
        assert policy.summariser is not None, "summary_due holds only under summarise"
        assert context is not None, "a policy has its window"
        plan = self._context_plan()
        assert not isinstance(plan, str), "summary_due was checked first"
        request, self._seen = context[0].fold_request(plan.folded, plan.fold, self._summary)
        self._outstanding = _SUMMARISE
        self._since[None] = self._clock()
        self._draft.request = Summarise(policy.summariser, request)

    def _keep_summary(self) -> None:
        context, reply = self._context, self._draft.summary_in
        assert context is not None, "a policy has its window"
        assert reply is not None, "a summary was written"
        plan = self._context_plan()
        assert not isinstance(plan, str), "a summary was asked for a plan"
        self._summary = context[0].summary(plan.fold, reply.value["text"])

    def _note_summary_error(self) -> None:
        draft = self._draft
        assert draft.exception is not None, "the summariser raised"
        draft.error = f"the summariser raised {exception_said(draft.exception)}"

    def _note_malformed_summary(self) -> None:
        reply = self._draft.summary_in
        assert reply is not None, "the summariser replied"
        problem = reply.problem or f"expected a final answer, got a {reply.value['kind']!r} reply"
        self._draft.error = f"malformed summary: {problem}"
        self._rejected = reply.value  # kept for review (and a replay), as a rejected reply is
