"""What a ``Loop`` owns (``owns=``): context managers it opens and closes, MCP servers say.

``with loop:`` (or ``async with loop:``) opens each in order and closes them in reverse.
"""

from __future__ import annotations

import contextlib
from typing import Any, Self

__all__ = ["Owner", "checked_owned"]


class Owner:
    """Opens what it owns on ``with`` (or ``async with``) and closes it on the way out."""

    def __init__(self, owns: object) -> None:
        self._owns = checked_owned(owns)
        self._open: contextlib.ExitStack | contextlib.AsyncExitStack | None = None

    def __enter__(self) -> Self:
        """Open what the Loop owns (``owns=``), in order; one that fails closes the rest."""
        with contextlib.ExitStack() as stack:
            for owned in self._owns:
                stack.enter_context(owned)  # type: ignore[arg-type]  # checked_owned said so
            self._open = stack.pop_all()
        return self

    def __exit__(self, *exc_info: Any) -> bool | None:
        """Close what the Loop owns, in reverse."""
        opened, self._open = self._open, None
        return None if opened is None else opened.__exit__(*exc_info)  # type: ignore[union-attr]

    async def __aenter__(self) -> Self:
        """``__enter__`` under asyncio: what has ``__aenter__`` is entered with it."""
        async with contextlib.AsyncExitStack() as stack:
            for owned in self._owns:
                if hasattr(owned, "__aenter__"):
                    await stack.enter_async_context(owned)  # type: ignore[arg-type]
                else:
                    stack.enter_context(owned)  # type: ignore[arg-type]
            self._open = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        """Close what the Loop owns, in reverse."""
        opened, self._open = self._open, None
        if opened is None:
            return None
        return await opened.__aexit__(*exc_info)  # type: ignore[union-attr]


def checked_owned(owns: object) -> tuple[object, ...]:
    """What a Loop owns (``owns=``): context managers, sync or async (MCP servers, say)."""
    if isinstance(owns, str | bytes) or not hasattr(owns, "__iter__"):
        raise TypeError(
            "expected owns to be an iterable of context managers (say [server]), "
            f"got {type(owns).__name__}"
        )
    taken = tuple(owns)
    for index, owned in enumerate(taken):
        if not (hasattr(owned, "__enter__") or hasattr(owned, "__aenter__")):
            raise TypeError(
                f"expected owns[{index}] to be a context manager (with __enter__ or "
                f"__aenter__), got {type(owned).__name__}"
            )
    return taken
