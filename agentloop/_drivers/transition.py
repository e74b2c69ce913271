"""What the drivers share: one transition, the loop that pumps it, and the view of a run.

``one_transition(engine)`` is the one source of every driver (after trio's
``unrolled_run``): a generator that asks the engine what the run needs,
yields each request (``AskModel``, ``RunTool``, ``ReviewCalls``) to the
driver that pumps it, takes the answer sent back in (or the exception
thrown in), reports it, and returns the transition that followed.

Each host pumps it in one place. ``pump`` is the loop for a host that
performs with plain calls: ``Run`` and the DBOS workflow. A model's stream
comes back from ``perform`` as ``Streaming``: ``pump`` reads it, yielding
its deltas as they arrive for ``stream()``, or draining them where it reads
them (``drain``) for a plain step. The plain step is so the streamed step,
drained: one loop, one reader of a stream. ``AsyncRun`` pumps it with
awaits, in the same shape.

A listener that traces (``agentloop.otel.OtelListener``) has
``for_run(run)``: the listener of that one run, with ``around(request)``,
a context manager that the pump enters around the performance of each
request (and, for a stream, around each pull of it, left before each
delta is handed on), so that its span is current while the model or the
tool runs. A run without one pays one ``is None`` per request.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

from agentloop._core.children import Children
from agentloop._core.context_policy import FilterHistory, Summarise
from agentloop._core.requests import CheckOutput
from agentloop._core.values import (
    AskModel,
    AwaitApproval,
    OutputT,
    ReviewCalls,
    RunTool,
    Wait,
)
from agentloop._drivers.callbacks import TokenCancelled, ended_by_token
from agentloop._drivers.child_waits import Waiting, WaitingChild, end_waiting
from agentloop._drivers.streams import current_while_read
from agentloop._errors import InvalidStateError

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Generator, Mapping, Sequence

    from agentloop._core.approval import PendingCall
    from agentloop._core.engine import Engine
    from agentloop._core.table import State
    from agentloop._core.values import Budget, RunResult, Transition, Usage
    from agentloop._drivers.deltas import Delta, Partial

#: What a driver is asked to perform: call the model (or a context policy's summariser),
#: run a tool, review a batch, wait before a retry, check a final (output validators).
Request = AskModel | Summarise | RunTool | ReviewCalls | Wait | CheckOutput

__all__ = [
    "LOG",
    "Around",
    "Follower",
    "Request",
    "RunView",
    "Streaming",
    "drain",
    "log",
    "one_transition",
    "pump",
]

_T = TypeVar("_T")
_L = TypeVar("_L")

#: What the pump enters around the performance of a request: a context manager it may
#: enter again and again (once per pull of a stream), never twice at once.
Around = Callable[[Request], AbstractContextManager[object]]


class Follower(Protocol):
    """What a tracing listener's ``for_run(run)`` gives: the listener of that one run.

    It hears the run's transitions, as any listener does, and ``around(need)``
    is entered around the performance of each request ``need``.
    """

    def __call__(self, transition: Transition) -> object:
        """Hear ``transition``."""
        ...

    def around(self, need: Request) -> AbstractContextManager[object]:
        """A context manager to be current in while ``need`` is performed."""
        ...


#: A tool's outcome, as a dispatcher answers: ``{'status', 'content'}``.
Outcome = dict[str, Any]

#: The library's logger: one DEBUG record per transition, silent unless configured.
LOG: Final = logging.getLogger("agentloop")
LOG.addHandler(logging.NullHandler())
_DEBUG: Final = logging.DEBUG


def one_transition(
    engine: Engine, need: object = None, children: Mapping[str, RunResult[Any]] | None = None
) -> Generator[Request, object, Transition | None]:
    """One transition of ``engine``: its requests yielded, their answers reported, it returned.

    The driver sends in what the request answered, or throws in the
    ``Exception`` (or ``TokenCancelled``) performing it raised; the engine
    says what either means. ``None``: the run waits for a person's
    decisions, and nothing happened. ``need``: what ``engine.next()``
    answered already, if the driver asked it; ``children``: the run's agent
    calls' child runs (a cut one's usage counts, ``ended_by_token``).
    """
    while True:
        if need is None:
            need = engine.next()
        kind = type(need)
        if kind is Wait:  # retry=: the driver waits, unless the token cuts it short
            yield need  # type: ignore[misc]  # a request
            return engine.waited()
        if kind is ReviewCalls:
            answers: Any = yield need  # type: ignore[misc]  # a request
            asked = engine.reviewed(answers)
            if asked is not None:
                return asked  # a policy asked a person: the batch waits
            need = None  # nothing recorded: on to the batch's first call
            continue
        if kind is CheckOutput:  # the output validators' problems: the driver's check says them
            problems: Any = yield need  # type: ignore[misc]  # a request
            return engine.output_checked(problems)
        call_id: str | None = None  # a tool's report names its call (a resume may run several)
        if kind is RunTool:
            call_id = need.call["id"]  # type: ignore[attr-defined]  # a RunTool
        elif kind is AwaitApproval:
            return None
        elif kind is not AskModel and kind is not Summarise and kind is not FilterHistory:
            return need  # type: ignore[return-value]  # the engine moved by itself
        try:
            answer = yield need  # type: ignore[misc]  # a request
        except TokenCancelled as exc:
            return ended_by_token(engine, exc, children)
        except Exception as exc:  # noqa: BLE001 - the engine says what it means
            return engine.raised(exc, call_id)
        if call_id is None:
            return engine.replied(answer)
        if type(answer) is Waiting:  # an agent tool's child run waits for a person
            return engine.call_waits(answer.pending, call_id)
        return engine.returned(answer, call_id)


class Streaming:
    """What a driver's ``perform`` answers for a model's stream, in place of the reply.

    ``deltas`` reads the stream: it yields each delta as it arrives (told to
    the delta listeners already) and ends with the whole reply, which the
    pump hands to the engine; ``taken``, if given, is called once the engine
    has taken it (it closes the stream: what the stream runs at its close
    cannot change the reply the run records).
    """

    __slots__ = ("deltas", "taken")

    def __init__(
        self,
        deltas: Generator[Delta, None, object] | AsyncGenerator[Delta, None],
        taken: Callable[[], None] | None = None,
    ) -> None:
        self.deltas, self.taken = deltas, taken


def pump(
    engine: Engine,
    perform: Callable[[Request], object],
    need: object = None,
    *,
    hand_on: bool = False,
    around: Around | None = None,
    children: Mapping[str, RunResult[Any]] | None = None,
) -> Generator[Delta, None, Transition | None]:
    """One transition of ``engine``, each request done by ``perform``; a stream's deltas yielded.

    The loop of a host that performs with plain calls. What ``perform``
    answers is sent in, and what it raises (an ``Exception``, or
    ``TokenCancelled``) is thrown in, for the engine to say what it means;
    a ``Streaming`` answer is read to its end and its reply sent in, its
    deltas yielded as they come with ``hand_on`` (``stream()``), else
    drained here: a delta passed up through each generator of the driver
    would cost about as much again as reading it. ``around(need)``, if
    given, is entered around each request's performance, and around each
    pull of its stream (``current_while_read``). Returns what
    ``one_transition`` returns (``need``, ``children``: as it takes them).
    """
    steps = one_transition(engine, need, children)
    try:
        need = steps.send(None)
        while True:
            streaming = None
            try:
                if around is None:
                    scope = None
                    answer = perform(need)
                else:
                    scope = around(need)
                    with scope:
                        answer = perform(need)
                if type(answer) is Streaming:
                    streaming = answer
                    reading: Generator[Delta, None, object] = answer.deltas  # type: ignore[assignment]
                    if scope is None:
                        answer = (yield from reading) if hand_on else drain(reading)
                    elif hand_on:
                        answer = yield from current_while_read(reading, scope)
                    else:
                        with scope:
                            answer = drain(reading)
            except (Exception, TokenCancelled) as exc:  # noqa: BLE001 - thrown in: the engine says
                need = steps.throw(exc)
            else:
                if streaming is None or streaming.taken is None:
                    need = steps.send(answer)
                else:
                    try:
                        need = steps.send(answer)
                    finally:
                        streaming.taken()
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def drain(steps: Generator[Delta, None, _T]) -> _T:
    """What ``steps`` returns, the deltas it yields dropped (their listeners heard them).

    An interruption that lands here, between two deltas rather than inside
    ``steps``, is thrown into it, where its stream closes at once.
    """
    try:
        while True:
            next(steps)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except BaseException as exc:
        steps.throw(exc)  # raises: ``exc`` again, once ``steps`` has closed its stream
        raise


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


class RunView(Generic[OutputT]):
    """The state, counters and record of one run; drivers add the stepping."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # One step at a time: a step started while another is under way (from the
        # model, a tool or a listener, another thread or another task) is refused.
        self._busy = threading.Lock()
        # The text a streaming reply delivered so far (agentloop.streaming), while it streams.
        self._partial: Partial | None = None
        # The reading of a stream whose reply was handed to the engine: closed once taken.
        self._unclosed: Any = None
        # What the pump enters around each request: the tracing listeners' (``_following``).
        self._around: Around | None = None
        # The results of the child runs its agent tools ran (Loop.as_tool), by call id, and
        # those of the children that wait for a person (their calls wait on them).
        self.children: dict[str, RunResult[Any]] = {}
        self._waiting: dict[str, WaitingChild] = {}

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
    def conversation_id(self) -> str | None:
        """The conversation the run is a turn of (``after=``, ``conversation=``); else ``None``."""
        turn = self._engine.conversation
        return None if turn is None else turn[0]

    @property
    def pending(self) -> tuple[PendingCall, ...]:
        """The calls waiting for a person's decision (in ``awaiting_approval``): see ``decide``."""
        return self._engine.pending

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The history so far (a fresh copy on each access)."""
        return self._engine.history()

    @property
    def events(self) -> Sequence[Transition]:
        """Every transition so far, in order (a read-only sequence)."""
        return self._engine.events()

    def result(self) -> RunResult[OutputT]:
        """The result; raises ``InvalidStateError`` until the run is done."""
        result = self._engine.result()
        if self.children:  # the child runs of its agent tools (Loop.as_tool), by call id
            return result._replace(children=Children(self.children))
        return result

    @property
    def budget(self) -> Budget:
        """The run's budget."""
        return self._engine.budget

    def _following(self, listener: _L) -> _L | Follower:
        """``listener``, or, if it traces (``for_run``), its listener of this run.

        That one's ``around`` is entered around each request of the run (see
        ``pump``): with several, the first subscribed outermost.
        """
        for_run = getattr(listener, "for_run", None)
        if for_run is None:
            return listener
        follower: Follower = for_run(self)
        around = self._around
        self._around = (
            follower.around if around is None else functools.partial(_both, around, follower.around)
        )
        return follower

    def _end_cancelled(self) -> RunResult[OutputT]:
        """End a child run that waits for a person, whose parent ended: ``cancelled`` too.

        Its own waiting children end first (``end_waiting``); its listeners hear its end.
        """
        end_waiting(self.children, self._waiting)
        ended = TokenCancelled("its parent run ended while it waited for a person")
        self._notify_interrupted(self._interrupted(ended))
        return self.result()

    def _interrupted(self, exc: BaseException) -> Transition | None:
        """``engine.interrupted``, keeping the text a streaming reply had delivered, if any."""
        partial, self._partial = self._partial, None
        return self._engine.interrupted(exc, partial_text=partial.text if partial else None)

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
        ids = [call.key for call in self._engine.pending]
        decide = "await run.adecide" if hasattr(self, "adecide") else "run.decide"
        return InvalidStateError(
            f"the run is awaiting approval of calls {ids}: call {decide}({{key: "
            "approve() | deny(reason)}) first (run.pending lists them, each with its key)",
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


def _both(outer: Around, inner: Around, need: Request) -> AbstractContextManager[object]:
    """``outer(need)`` and ``inner(need)``, entered in that order (and left in the other)."""
    return _Both(outer(need), inner(need))


class _Both:
    """Two scopes as one, entered (as each of them may be) again and again."""

    __slots__ = ("_inner", "_outer")

    def __init__(
        self, outer: AbstractContextManager[object], inner: AbstractContextManager[object]
    ) -> None:
        self._outer, self._inner = outer, inner

    def __enter__(self) -> None:
        self._outer.__enter__()
        try:
            self._inner.__enter__()
        except BaseException:
            self._outer.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._inner.__exit__(*exc)  # type: ignore[arg-type]
        finally:
            self._outer.__exit__(*exc)  # type: ignore[arg-type]
