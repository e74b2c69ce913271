"""What the two drivers share: the read-only view of a run, one step at a time, and reviews."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agentloop._core._table import State
from agentloop._errors import InvalidStateError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentloop._callbacks import TokenCancelled
    from agentloop._core._approval import Decision, PendingCall
    from agentloop._core._engine import Engine
    from agentloop._core._values import Budget, RunResult, Transition, Usage
    from agentloop._streams import Partial

__all__ = ["LOG", "Carried", "RunView", "Verdicts", "carried", "log"]

_T = TypeVar("_T")

#: A tool's outcome, as a dispatcher answers: ``{'status', 'content'}``.
Outcome = dict[str, Any]

#: The library's logger: one DEBUG record per transition, silent unless configured.
LOG: Final = logging.getLogger("agentloop")
LOG.addHandler(logging.NullHandler())
_DEBUG: Final = logging.DEBUG


def log(transition: Transition) -> None:
    """One DEBUG line per transition (the drivers call this when DEBUG is enabled)."""
    guard = f" [{transition.guard.value}]" if transition.guard else ""
    call = f" call={transition.call_id}" if transition.call_id else ""
    status = f" result={transition.result_status}" if transition.result_status else ""
    LOG.debug(
        "%s --%s%s--> %s steps=%d calls=%d%s%s",
        transition.source.value,
        transition.trigger.value,
        guard,
        transition.dest.value,
        transition.steps,
        transition.calls,
        call,
        status,
        extra={"agentloop_transition": transition},
    )


class RunView:
    """The state, counters and record of one run; drivers add the stepping."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # One step at a time: a step started while another is under way (from the
        # model, a tool or a listener, another thread or another task) is refused.
        self._busy = threading.Lock()
        # The text a streaming reply delivered so far (agentloop.streaming), while it streams.
        self._partial: Partial | None = None

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"<{name} state={self.state.value!r} steps={self.steps} calls={self.calls}>"

    @property
    def state(self) -> State:
        """The current state (a ``str`` enum)."""
        return self._engine.state

    @property
    def done(self) -> bool:
        """Whether the run has reached a terminal state."""
        return self._engine.done

    @property
    def steps(self) -> int:
        """Model callback invocations so far."""
        return self._engine.steps

    @property
    def calls(self) -> int:
        """Accepted tool attempts so far."""
        return self._engine.calls

    @property
    def usage(self) -> Usage:
        """The tokens the model's replies reported so far, summed."""
        return self._engine.usage

    @property
    def run_id(self) -> str | None:
        """The run's id in its ledger (``Loop(..., ledger=...)``); ``None`` without one."""
        return getattr(self._engine, "run_id", None)

    @property
    def pending(self) -> tuple[PendingCall, ...]:
        """The calls waiting for a person's decision (in ``awaiting_approval``): see ``decide``."""
        return self._engine.pending

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The history so far (a fresh copy on each access)."""
        return self._engine.history()

    @property
    def events(self) -> tuple[Transition, ...]:
        """Every transition so far, in order."""
        return self._engine.events()

    def result(self) -> RunResult:
        """The result; raises ``InvalidStateError`` until the run is done."""
        return self._engine.result()

    @property
    def budget(self) -> Budget:
        """The run's budget."""
        return self._engine.budget

    def _interrupted(self, exc: BaseException) -> Transition | None:
        """``engine.interrupted``, keeping the text a streaming reply had delivered, if any."""
        partial, self._partial = self._partial, None
        return self._engine.interrupted(exc, partial_text=partial.text if partial else None)

    def _ended_by_token(self, exc: TokenCancelled) -> Transition:
        """``ended_by_token``, keeping the text a streaming reply had delivered, if any."""
        partial, self._partial = self._partial, None
        transition = self._engine.interrupted(exc, partial_text=partial.text if partial else None)
        assert transition is not None, "a request was outstanding, so the run was not over"
        return transition

    def _notify_interrupted(self, transition: Transition | None) -> None:
        """Tell plain listeners how an interrupted step ended; nothing of theirs may mask it."""
        if transition is None:
            return
        for listener in self._plain_listeners():
            try:
                listener(transition)
            except Exception:  # noqa: BLE001, S112 - the interruption propagates, not this
                continue

    def _plain_listeners(self) -> list[Callable[[Transition], object]]:
        raise NotImplementedError

    def _awaiting(self) -> InvalidStateError:
        """A step of a run that waits for a person is refused: it needs ``decide`` first."""
        ids = [call.call_id for call in self._engine.pending]
        decide = "await run.adecide" if hasattr(self, "adecide") else "run.decide"
        return InvalidStateError(
            f"the run is awaiting approval of calls {ids}: call {decide}({{call_id: "
            "approve() | deny(reason)}) first (run.pending lists them)",
            state=self.state,
        )

    def _refused(self) -> InvalidStateError:
        """A step started while another is under way is refused, changing nothing."""
        outstanding = self._engine.outstanding
        doing = f"{outstanding.value} is outstanding" if outstanding else "it is finishing"
        return InvalidStateError(
            f"cannot step now: another step of this run is under way ({doing}, in state "
            f"{self.state.value!r}); step a run from one place at a time",
            state=self.state,
        )


class Verdicts:
    """The policies' answers about the batch in hand, asked once, before its first call.

    An ``ask`` among them stops the batch (``asked_approval``); every other
    answer is handed to the dispatcher with its call, so no policy is asked twice.
    """

    __slots__ = ("_answers", "_at")

    def __init__(self) -> None:
        self._at = -1  # the run's call count when the batch in hand was reviewed
        self._answers: dict[str, Decision | Outcome] = {}

    def due(self, engine: Engine) -> bool:
        """Whether the batch in hand is still to be reviewed."""
        return engine.state is State.DISPATCHING and self._at != engine.calls

    def review(
        self, engine: Engine, review: Callable[[dict[str, Any]], Decision | Outcome | None]
    ) -> Transition | None:
        """Ask about each call of the batch; the ``approval_asked`` transition, if any asked."""
        calls = self.to_review(engine)
        return self._taken(engine, calls, [review(call) for call in calls])

    async def areview(
        self,
        engine: Engine,
        review: Callable[[dict[str, Any]], Awaitable[Decision | Outcome | None]],
    ) -> Transition | None:
        """``review``, awaiting the answers about the batch's calls together."""
        calls = self.to_review(engine)
        answers = await asyncio.gather(*(carried(review(call)) for call in calls))
        for answer in answers:
            if type(answer) is Carried:
                raise answer.exc  # here, in the task that drives the run: the run ends
        return self._taken(engine, calls, answers)  # type: ignore[arg-type]  # none is Carried

    def of(self, engine: Engine, call_id: str) -> Decision | Outcome | None:
        """The answer about ``call_id``: its policies' or a person's (or its failed outcome)."""
        return self._answers.get(call_id) or engine.decisions.get(call_id)

    @staticmethod
    def to_review(engine: Engine) -> list[dict[str, Any]]:
        """The calls to ask about: none once a call of the batch started, none decided."""
        decided = engine.decisions
        return [call for call in engine.unstarted_batch() if call["id"] not in decided]

    def _taken(
        self,
        engine: Engine,
        calls: list[dict[str, Any]],
        answers: list[Decision | Outcome | None],
    ) -> Transition | None:
        """Keep the answers, once the engine took the asks among them (a refusal keeps none)."""
        kept: dict[str, Decision | Outcome] = {}
        reasons: dict[str, str] = {}
        for call, answer in zip(calls, answers, strict=True):
            if answer is None:
                continue
            if not isinstance(answer, dict) and answer.asks:
                reasons[call["id"]] = answer.reason
            else:
                kept[call["id"]] = answer
        asked = engine.asked_approval(reasons) if reasons else None
        self._at, self._answers = engine.calls, kept
        return asked


class Carried:
    """A ``KeyboardInterrupt`` or ``SystemExit`` raised in a task the driver made.

    asyncio raises those out of the event loop itself, past the task that
    drives the run, which then never ends it (``run_until_complete``) or sees
    only its own ``CancelledError`` (``asyncio.run``). ``carried`` catches it
    in the task and returns it as this value, for the driving task to raise.
    """

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def carried(awaitable: Awaitable[_T]) -> _T | Carried:
    """Await ``awaitable`` in a task of its own; an interruption comes back as ``Carried``."""
    try:
        return await awaitable
    except (KeyboardInterrupt, SystemExit) as exc:
        return Carried(exc)
