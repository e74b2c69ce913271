"""Every error agentloop raises on purpose, in one place.

A misbehaving model or tool never raises: it becomes a state or a result.
These are for the caller: a setup mistake (``TableError``, bad configuration),
a call the run's state does not allow (``InvalidStateError``), a value that is
not plain JSON (``JSONError``), a run file that cannot be loaded
(``RunFileError``), a ledger that cannot be used (``LedgerError`` and its
kinds), or an optional part that is not installed. Two are raised
by a model callback rather than for a caller: ``IncompleteReply`` and
``UnreadableResponse``, by the provider adapters, which the engine records as
the run's ``failed`` error.
"""

from __future__ import annotations

# The one name from above: an InvalidStateError names the State it met, and typing.get_type_hints
# reads its signature here. terms.py is a leaf (it imports only enum), so there is no cycle.
from agentloop._core.terms import State

__all__ = [
    "AgentloopError",
    "ConfigurationMismatchError",
    "ConversationBusyError",
    "IncompleteReply",
    "InvalidStateError",
    "JSONError",
    "LedgerError",
    "RunBusyError",
    "RunExistsError",
    "RunFileError",
    "RunNotFoundError",
    "SVGUnavailableError",
    "TableError",
    "UnreadableResponse",
]


class AgentloopError(Exception):
    """Base class of every error agentloop raises for a caller's mistake."""


class IncompleteReply(AgentloopError):
    """A provider's reply was cut off, refused or empty: never taken as a final answer.

    Raised by the ``agentloop.providers`` adapters; the run ends ``failed`` with
    this message as its ``error`` (for example "the reply was cut off at max_tokens").
    ``usage`` is what the call still cost (a reply's ``usage`` dict, or None):
    the engine records it on the ``model_raised`` event and counts it.
    """

    __module__ = "agentloop.providers"  # where it is imported from (agentloop/__init__.py)

    def __init__(self, message: str, usage: dict[str, int] | None = None) -> None:
        super().__init__(message)
        self.usage = usage


class UnreadableResponse(AgentloopError):
    """A provider answered a request with a body that is not JSON (an HTML page, say).

    Raised by the ``agentloop.providers`` adapters, where the SDK would have
    raised its JSON parser's error or handed back the text, and, with
    ``expected='an event stream'``, for a streamed request answered with
    anything but an event stream; the run ends ``failed`` with this message
    as its ``error``. ``status`` is the HTTP status, ``body`` the start of
    the body (at most 200 characters), ``url`` what was asked.
    """

    __module__ = "agentloop.providers"  # where it is imported from

    def __init__(
        self,
        status: int,
        body: str,
        url: str,
        content_type: str | None,
        *,
        expected: str = "JSON",
    ) -> None:
        kind = f", content-type {content_type}" if content_type else ""
        super().__init__(
            f"the provider's response was not {expected} (HTTP {status}{kind}, from {url}): "
            f"{body!r}; check that the client's base_url is the provider's API"
        )
        self.status, self.body, self.url = status, body, url


class InvalidStateError(AgentloopError, RuntimeError):
    """An operation was asked of a run in a state that does not allow it.

    ``state`` is the run's state when it was refused; the run is unchanged.
    """

    def __init__(self, message: str, *, state: State) -> None:
        super().__init__(message)
        self.state = state


class JSONError(AgentloopError, TypeError):
    """A value is not plain JSON; the message names the path and the type."""


class TableError(AgentloopError, ValueError):
    """A state table definition is inconsistent; the message names the row."""


class RunFileError(AgentloopError, ValueError):
    """A run file could not be loaded: not JSON, an unknown version, too big, or damaged.

    ``where`` locates the problem (a JSON path such as ``$.events[2].steps``);
    ``expected`` and ``found`` say what should have been there and what was.
    """

    def __init__(self, where: str, expected: str, found: str) -> None:
        super().__init__(f"{where}: expected {expected}, got {found}")
        self.where, self.expected, self.found = where, expected, found


class SVGUnavailableError(AgentloopError, RuntimeError):
    """No SVG renderer is installed; the message says what to install."""


class LedgerError(AgentloopError, RuntimeError):
    """A ledger could not be read or written: damaged, from another version, or failing.

    The message names the ledger and what was found. Nothing recorded is
    ever changed or dropped on the way to this error.
    """


class RunNotFoundError(LedgerError, LookupError):
    """``resume`` was asked for a run id the ledger has never recorded."""


class RunExistsError(LedgerError, ValueError):
    """``start`` or ``run`` was given a run id the ledger has already recorded."""


class ConversationBusyError(RunExistsError):
    """Another process began the conversation's next turn first: read it and go on from it.

    Nothing of the turn that lost is written; ``turn`` and ``conversation_id`` name the one taken.
    """

    def __init__(self, message: str, conversation_id: str, turn: int) -> None:
        super().__init__(message)
        self.conversation_id, self.turn = conversation_id, turn

    def __reduce__(self) -> tuple[type[ConversationBusyError], tuple[str, str, int]]:
        return type(self), (str(self), self.conversation_id, self.turn)


class RunBusyError(LedgerError):
    """Another writer (another process, or another open run in this one) drives the run."""


class ConfigurationMismatchError(LedgerError, ValueError):
    """The ``Loop`` that would resume a run is not configured as the run was recorded.

    ``differences`` lists each field that differs, by its path in the fingerprint
    (``'budget.max_steps: recorded 8, now 10'``,
    ``"tools.add.parameters.properties.b.type: recorded 'integer', now 'string'"``).
    """

    def __init__(self, message: str, differences: list[str]) -> None:
        super().__init__(message)
        self.differences = differences

    def __reduce__(self) -> tuple[type[ConfigurationMismatchError], tuple[str, list[str]]]:
        # Exception pickles by ``args``, the message alone (a DBOS workflow's error is pickled).
        return type(self), (str(self), self.differences)
