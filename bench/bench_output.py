"""Typed output and the loop guard, measured side by side in one run.

1. A run of K distinct tool calls then a final, with ``max_identical_calls``
   set beside the default (off): what the loop guard costs per step, at K = 1,
   10 and 100 (the guard reads the history at each batch).
2. A run whose final is a typed output (``output=City``, checked by
   ``jsonschema-rs`` and converted to an attrs class) beside a text final:
   what validation and conversion cost per run.
3. The defaults beside a Loop with ``on_exhausted='answer'`` and
   ``max_output_retries=3`` that never use them: what the new rows cost when
   their guards are false (target: within noise, 1.05x).

Run with ``make bench``. Ratios are what count; absolute times vary.
"""

from __future__ import annotations

import time
from typing import Any

import attrs

from agentloop import Loop

Message = dict[str, Any]


@attrs.frozen
class City:
    name: str
    population: int


class Echo:
    """The cheapest dispatcher, so the bench measures the engine."""

    def dispatch(self, call: Message) -> Message:
        return {"status": "ok", "content": call["arguments"]}


def script(k: int, final: str) -> list[Message]:
    calls: list[Message] = [
        {"kind": "call", "id": f"c{i}", "name": "echo", "arguments": {"i": i}} for i in range(k)
    ]
    return [*calls, {"kind": "final", "text": final}]


def side_by_side(loops_of: list[Any], replies: list[Message], repeats: int) -> list[float]:
    """µs per run of each ``loop_of(model)``, their rounds interleaved; the best of 7 each.

    Each Loop is made once (deriving and compiling a schema is its cost, not a
    run's); the best round is the least disturbed on a shared machine.
    """
    script_now = [iter(replies)]
    loops = [loop_of(lambda history: next(script_now[0])) for loop_of in loops_of]
    best = [float("inf")] * len(loops)
    for _ in range(7):
        for index, loop in enumerate(loops):
            start = time.perf_counter()
            for _ in range(repeats):
                script_now[0] = iter(replies)
                loop.run("go")
            best[index] = min(best[index], (time.perf_counter() - start) / repeats * 1e6)
    return best


def main() -> None:
    print("1. the loop guard (max_identical_calls=3) beside none, per run")
    for k, repeats in ((1, 2000), (10, 400), (100, 20)):
        replies = script(k, "done")
        steps = k + 1
        off, on = side_by_side(
            [
                lambda m: Loop(m, tools=Echo(), max_steps=200, max_calls=200),
                lambda m: Loop(
                    m, tools=Echo(), max_steps=200, max_calls=200, max_identical_calls=3
                ),
            ],
            replies,
            repeats,
        )
        print(
            f"   K={k:3}: off {off / steps:6.1f} µs/step, on {on / steps:6.1f} µs/step, "
            f"ratio {on / off:.2f}x"
        )

    print("2. a typed final (output=City) beside a text final, per run of one step")
    typed_text = '{"name": "Paris", "population": 2100000}'
    text, typed = side_by_side(
        [lambda m: Loop(m), lambda m: Loop(m, output=City)], script(0, typed_text), 4000
    )
    print(f"   text {text:6.1f} µs, typed {typed:6.1f} µs, ratio {typed / text:.2f}x")

    print("3. the new rows with their guards false, K=10")
    replies = script(10, "done")
    plain, armed = side_by_side(
        [
            lambda m: Loop(m, tools=Echo()),
            lambda m: Loop(m, tools=Echo(), on_exhausted="answer", max_output_retries=3),
        ],
        replies,
        400,
    )
    print(f"   defaults {plain:6.1f} µs, armed {armed:6.1f} µs, ratio {armed / plain:.2f}x")


if __name__ == "__main__":
    main()
