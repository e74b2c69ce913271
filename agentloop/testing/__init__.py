"""agentloop.testing: a scripted model and the contract's invariants as assertions.

``ScriptedModel`` (and ``AsyncScriptedModel`` for the asyncio driver) replays
a script of replies; ``call``, ``batch``, ``final``, ``with_usage`` and
``cancel`` build its entries. The
``assert_*`` functions check a ``RunResult`` (or a ``Run``/``AsyncRun``)
against the contract and fail with ``ContractViolation``, an
``AssertionError`` that says where, what was expected and what was found.
Hypothesis strategies that play a misbehaving model live in
``agentloop.testing.strategies`` (it needs ``hypothesis``; this module does not).
"""

from __future__ import annotations

from agentloop._names import publish
from agentloop.testing._contract import (
    ContractViolation,
    assert_chained,
    assert_contract,
    assert_paired,
    assert_requests_fit,
    assert_transcript_is_input_plus_appended,
    assert_within_budget,
)
from agentloop.testing._script import (
    AsyncScriptedModel,
    Cancel,
    ScriptedModel,
    ScriptExhausted,
    batch,
    call,
    cancel,
    final,
    with_usage,
)

__all__ = [
    "AsyncScriptedModel",
    "Cancel",
    "ContractViolation",
    "ScriptExhausted",
    "ScriptedModel",
    "assert_chained",
    "assert_contract",
    "assert_paired",
    "assert_requests_fit",
    "assert_transcript_is_input_plus_appended",
    "assert_within_budget",
    "batch",
    "call",
    "cancel",
    "final",
    "with_usage",
]

publish(__name__, globals(), __all__)
