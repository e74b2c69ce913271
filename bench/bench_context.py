"""Long conversations: the cost of fitting a request to a context window, and the counters.

1. Per model step, the engine's whole step (``next()`` handing out ``AskModel``,
   the reply, the call, its result) with ``keep_last`` beside the same step
   with no policy, for histories of 100, 1,000 and 10,000 messages, the budget
   half the history: the difference is what the reduction costs a step, and
   the ratio shows how it grows. Target: under 1 ms a step at 1,000 messages
   with the default counter.
2. The default counter's accuracy, beside OpenAI's own encodings
   (``o200k_base``, ``cl100k_base``) over this repository's docs and source as
   messages, when an encoding can be loaded here (``tiktoken`` with its file
   cached, or ``bpe-openai``, which ships them); else it says so.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import orjson

from agentloop.context import approx_tokens, keep_last
from agentloop.engine import AskModel, Engine, RunTool

Message = dict[str, Any]
ROOT = Path(__file__).resolve().parent.parent


def history(size: int) -> list[Message]:
    """A user message, then calls with results of about 200 bytes each, ``size`` in all."""
    messages: list[Message] = [{"kind": "user", "text": "Work through the list."}]
    for i in range((size - 1) // 2):
        messages.append({"kind": "call", "id": f"h{i}", "name": "read", "arguments": {"n": i}})
        messages.append(
            {
                "kind": "tool_result",
                "id": f"h{i}",
                "name": "read",
                "status": "ok",
                "content": "r" * 150,
            }
        )
    return messages


def per_step(size: int, policy: bool, steps: int) -> float:
    """Best-of-three µs per model step (ask, reply, call, result) on a ``size``-message history."""
    messages = history(size)
    tokens = sum(approx_tokens(orjson.dumps(m)) for m in messages) // 2
    best = float("inf")
    for _ in range(3):
        engine = Engine(
            messages,
            context=keep_last(tokens=tokens) if policy else None,
            budget=__import__("agentloop").Budget(max_steps=steps + 1, max_calls=steps + 1),
        )
        start = time.perf_counter_ns()
        for step in range(steps):
            need = engine.next()
            assert type(need) is AskModel
            engine.replied({"kind": "call", "id": f"s{step}", "name": "read", "arguments": {}})
            engine.next()  # validate
            tool = engine.next()
            assert type(tool) is RunTool
            engine.returned({"status": "ok", "content": "r" * 150})
        best = min(best, (time.perf_counter_ns() - start) / steps / 1000)
    return best


def reduction() -> list[str]:
    lines = ["history   no policy   keep_last   reduction/step   ratio"]
    for size in (100, 1_000, 10_000):
        steps = 200 if size < 10_000 else 50
        plain, fitted = per_step(size, False, steps), per_step(size, True, steps)
        lines.append(
            f"{size:>7}   {plain:>7.1f} µs  {fitted:>7.1f} µs   {fitted - plain:>9.1f} µs"
            f"     {fitted / plain:>5.1f}x"
        )
    return lines


def samples() -> list[bytes]:
    """Messages made of this repository's docs (prose) and source (code), 2,000 chars each."""
    made = []
    for pattern, kind in (("docs/*.md", "user"), ("agentloop/_core/*.py", "tool_result")):
        for path in sorted(ROOT.glob(pattern)):
            text = path.read_text()
            for start in range(0, len(text) - 2000, 2000):
                chunk = text[start : start + 2000]
                if kind == "user":
                    made.append(orjson.dumps({"kind": "user", "text": chunk}))
                else:
                    made.append(
                        orjson.dumps(
                            {
                                "kind": "tool_result",
                                "id": "c",
                                "name": "read",
                                "status": "ok",
                                "content": chunk,
                            }
                        )
                    )
    return made


def encodings() -> list[Any]:
    for loader in ("tiktoken", "bpe_openai"):
        try:
            module = __import__(loader)
            return [module.get_encoding(name) for name in ("o200k_base", "cl100k_base")]
        except Exception:  # noqa: BLE001 - not installed, or its file is not cached here
            continue
    return []


def accuracy() -> list[str]:
    found = encodings()
    if not found:
        return ["counter accuracy: skipped (no tiktoken encoding can be loaded here)"]
    messages = samples()
    lines = ["counter accuracy, approx / encoding, per message (prose, code as JSON messages):"]
    for encoding in found:
        ratios = sorted(
            approx_tokens(data) / (len(encoding.encode(data.decode(), disallowed_special=())) + 4)
            for data in messages
        )
        n = len(ratios)
        lines.append(
            f"  {encoding.name}: median {ratios[n // 2]:.2f}, min {ratios[0]:.2f}, "
            f"max {ratios[-1]:.2f} over {n} messages"
        )
    return lines


def main() -> int:
    lines = reduction()
    print("\n".join(lines))
    at_1000 = float(lines[2].split("µs")[2].split()[0])
    print(f"target: reduction under 1000 µs a step at 1,000 messages: {at_1000:.1f} µs")
    print("\n".join(accuracy()))
    return 0 if at_1000 < 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
