"""The core bench's workload, and the engine's cost per model step in any checkout.

``scripted(k)`` (k calls, then an answer) and ``Typed(echo)`` (a dispatcher
that checks argument types against the handler's annotations) are what
``bench_core.py`` times the engine and the hand-written loops with. They use
no agentloop name, and ``per_step`` only its public ``Loop`` and
``CancelToken``, so that the same code times another checkout's engine:

    python bench/engine_step.py <checkout> <repeats> <k>,<k>...

imports agentloop from ``<checkout>`` (a clone or ``git worktree`` of another
commit: its own modules, this environment's dependencies) and prints the best
µs per model step at each K, as ``bench_core.py``'s ceiling compares them.
"""

from __future__ import annotations

import inspect
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

Message = dict[str, Any]


def echo(n: int) -> int:
    """The tool: as cheap as a tool can be, so the bench measures the loop."""
    return n


class Typed:
    """A dispatcher that checks argument types against the handler's annotations, as the
    hand-written loop does: the cheapest dispatcher that keeps the tool's promise."""

    def __init__(self, handler: Callable[..., Any]) -> None:
        self.handler = handler
        self.types = {
            name: {"int": int, "str": str, "float": float}[p.annotation]
            for name, p in inspect.signature(handler).parameters.items()
        }

    def dispatch(self, call: Message) -> Message:
        arguments = call["arguments"]
        for name, kind in self.types.items():
            if type(arguments.get(name)) is not kind:
                return {"status": "invalid_arguments", "content": name}
        return {"status": "ok", "content": self.handler(**arguments)}


def scripted(k: int) -> Any:
    """A model that makes ``k`` calls, then answers; it looks at the history like a real one."""

    def model(history: list[Message]) -> Message:
        done = (len(history) - 1) // 2
        if done < k:
            return {"kind": "call", "id": f"c{done}", "name": "echo", "arguments": {"n": done}}
        return {"kind": "final", "text": "ok"}

    return model


def per_step(k: int, repeats: int) -> float:
    """Best µs per model step of ``Loop.run`` (a ``CancelToken`` to check, ``Typed(echo)``).

    CPU time, in short rounds: the best of many is the code's own cost, where a
    busy machine's neighbours only ever add to a round.
    """
    from agentloop import CancelToken, Loop

    loop = Loop(scripted(k), tools=Typed(echo), max_steps=k + 1, max_calls=k)
    runs = max(1, 500 // (k + 1))
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time_ns()
        for _ in range(runs):
            result = loop.run("go", cancel=CancelToken())
        best = min(best, time.process_time_ns() - start)
        assert result.status == "finished", result
    return best / (runs * (k + 1) * 1000)


def main() -> None:
    """Print the best µs per model step at each K, with ``sys.argv[1]``'s agentloop."""
    checkout, repeats, ks = Path(sys.argv[1]).resolve(), int(sys.argv[2]), sys.argv[3]
    sys.path.insert(0, str(checkout))
    import agentloop

    where = Path(agentloop.__file__).resolve()
    assert where.is_relative_to(checkout), f"agentloop from {where}, not from {checkout}"
    print(*(per_step(int(k), repeats) for k in ks.split(",")))


if __name__ == "__main__":
    main()
