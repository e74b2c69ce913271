"""The ledger protocol: what a store must do to keep durable runs.

A ledger keeps, for each run id, a header (the run's input and configuration,
written once when the run starts) and an append-only list of records. The
durable driver writes each record *before* the engine acts on what it says,
so after a crash the records are everything that happened, and more: a
reply recorded and not yet taken, a call started and never finished.

A store implements ``Ledger`` and ``LedgerWriter``; it never interprets a
record's body (JSON bytes the durable driver writes and reads). Its promises:

1. ``append`` returns only once the record is durable (committed);
2. a run holds at most one record per ``(kind, key)``: a second raises
   ``LedgerError`` and changes nothing;
3. ``read`` returns the records in the order they were appended;
4. one writer per run: ``create`` and ``claim`` hand out a writer only when
   no other writer (in any process) holds the run, else ``RunBusyError``;
   a writer's claim ends with ``release()`` or with its process.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

__all__ = [
    "ASKED",
    "CALL_WAITS",
    "CHECKED",
    "DECISION",
    "END",
    "FINISHED",
    "HANDOFF",
    "KINDS",
    "REPLY",
    "STARTED",
    "Ledger",
    "LedgerRecord",
    "LedgerWriter",
]

#: The model's answers (a reply, or what it raised) no record holds yet, written before the
#: run waits on the model or on a retry's wait again; keyed by the last one's step number.
REPLY = "reply"
#: A call is about to be handed to the dispatcher, keyed by its call id (with the events
#: before it that no record holds yet: the reply that asked for it).
STARTED = "tool_started"
#: A call's outcome, keyed by its call id.
FINISHED = "tool_finished"
#: The policies asked a person about calls of a batch (each reason), keyed by the first's id.
ASKED = "approval_asked"
#: A person's decisions about those calls, keyed by the first's id.
DECISION = "decision"
#: A call waits on its child run, which asks a person: keyed by the first pending call's path
#: key (``c1/k1``: ``approval.key_text``).
CALL_WAITS = "call_waits"
#: What a handoff's filter answered (the view, or that it raised), keyed by the call's id.
HANDOFF = "handoff"
#: What the output validators answered about a step's final, keyed by the step's number.
CHECKED = "output_checked"
#: The run's terminal transition, keyed by ``""``.
END = "end"
KINDS = (REPLY, STARTED, FINISHED, ASKED, CALL_WAITS, DECISION, HANDOFF, CHECKED, END)


class LedgerRecord(NamedTuple):
    """One record of a run: its ``kind``, its ``key`` within the run, and its JSON ``body``."""

    kind: str
    key: str
    body: bytes


@runtime_checkable
class LedgerWriter(Protocol):
    """The one writer of one run, from ``Ledger.create`` or ``Ledger.claim``."""

    def append(self, record: LedgerRecord) -> None:
        """Commit ``record`` durably before returning; a second ``(kind, key)`` raises."""
        ...

    def release(self) -> None:
        """Give up the claim on the run (idempotent); later appends raise."""
        ...


@runtime_checkable
class Ledger(Protocol):
    """Where durable runs are kept: see the module docstring for the promises."""

    def create(self, run_id: str, header: bytes) -> LedgerWriter:
        """Record a new run's header and claim it; ``RunExistsError`` if the id is taken."""
        ...

    def claim(self, run_id: str) -> LedgerWriter:
        """Claim a recorded run; ``RunBusyError`` if held, ``RunNotFoundError`` if unknown."""
        ...

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        """The run's header and records, in append order; ``RunNotFoundError`` if unknown."""
        ...
