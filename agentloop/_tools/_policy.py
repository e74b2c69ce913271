"""Permission policies: ``policy(call)`` answers ``allow()`` or ``deny(reason)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

__all__ = ["Decision", "Policy", "allow", "deny"]


@attrs.frozen
class Decision:
    """A policy's answer: ``allow()``, or ``deny(reason)`` with the reason for the model."""

    allowed: bool
    reason: str = ""

    def __attrs_post_init__(self) -> None:
        # Checked here, so that a policy cannot answer with a truthy "no" or an empty denial.
        if type(self.allowed) is not bool:
            raise TypeError(f"expected Decision.allowed to be a bool, got {self.allowed!r:.80}")
        if not isinstance(self.reason, str) or not (self.allowed or self.reason):
            what = "Decision.reason" if self.allowed else "a denial's reason"
            empty = "" if self.allowed else "non-empty "
            raise TypeError(f"expected {what} to be a {empty}str, got {self.reason!r:.80}")


_ALLOW: Final = Decision(allowed=True)

#: A permission policy: sees a copy of the call, answers ``allow()`` or ``deny(reason)``.
Policy = Callable[[dict[str, Any]], Decision]


def allow() -> Decision:
    """The policy answer that lets a call run."""
    return _ALLOW


def deny(reason: str) -> Decision:
    """The policy answer that refuses a call; ``reason`` becomes the ``denied`` content."""
    return Decision(allowed=False, reason=reason)
