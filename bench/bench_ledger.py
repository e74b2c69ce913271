"""Durable runs: what the SQLite ledger costs per model step, and what a resume costs.

1. µs per model step of ``run`` with ``SQLiteLedger(synchronous="NORMAL")``
   and ``"FULL"`` beside the same run without a ledger (in memory), at K = 1,
   10 and 100 tool calls a run (K + 1 model steps; each call step commits three
   records: the reply, ``tool_started``, ``tool_finished``). Interleaved, best
   of the repeats.
2. Resuming a 1,000-call run: one that ended (read and replayed, nothing
   runs), and one cut off before its last reply (replayed, then one live
   model step and the end recorded). Median of the repeats.

Targets: a resume of a 1,000-call run within 250 ms; with ``NORMAL``, a step
costs at most 1 ms more than in memory (a commit without a sync). ``FULL``
syncs to the disk three times a step: its cost is the disk's, reported only.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine_step import scripted  # the same model as the core bench: k calls, then a final

from agentloop import Loop
from agentloop.ledger import LedgerError, SQLiteLedger

if TYPE_CHECKING:
    from agentloop.ledger import LedgerRecord, LedgerWriter

Message = dict[str, Any]

RESUME_TARGET_MS = 250.0
NORMAL_TARGET_US = 1000.0


class Echo:
    """The cheapest dispatcher, so the bench measures the ledger."""

    def dispatch(self, call: Message) -> Message:
        return {"status": "ok", "content": call["arguments"]}


def per_step(k: int, repeats: int, directory: Path) -> dict[str, float]:
    """Best µs per model step: in memory, NORMAL, FULL."""
    loops = {
        "memory": Loop(scripted(k), tools=Echo(), max_steps=k + 1, max_calls=k),
        **{
            sync: Loop(
                scripted(k),
                tools=Echo(),
                max_steps=k + 1,
                max_calls=k,
                ledger=SQLiteLedger(directory / f"k{k}-{sync}.db", synchronous=sync),
            )
            for sync in ("NORMAL", "FULL")
        },
    }
    runs = {"memory": max(1, 2000 // (k + 1)), "NORMAL": max(1, 300 // (k + 1))}
    runs["FULL"] = max(1, 100 // (k + 1))
    best = dict.fromkeys(loops, float("inf"))
    for _ in range(repeats):
        for name, loop in loops.items():
            start = time.perf_counter_ns()
            for _ in range(runs[name]):
                result = loop.run("go")
            elapsed = time.perf_counter_ns() - start
            assert result.status == "finished"
            best[name] = min(best[name], elapsed / (runs[name] * (k + 1) * 1000))
    return best


def resume_times(calls: int, repeats: int, directory: Path) -> tuple[float, float, int]:
    """Median ms to resume a ``calls``-call run: (ended, cut off before its last reply)."""
    ledger = SQLiteLedger(directory / "resume.db")
    loop = Loop(scripted(calls), tools=Echo(), max_steps=calls + 1, max_calls=calls, ledger=ledger)
    ended = loop.run("go", run_id="ended")
    assert ended.calls == calls

    def stop_at_the_end(history: list[Message]) -> Message:
        if (len(history) - 1) // 2 == calls:
            raise KeyboardInterrupt  # a crash, as far as the ledger can tell: no reply recorded
        return scripted(calls)(history)  # type: ignore[no-any-return]

    cut = Loop(
        stop_at_the_end,
        tools=Echo(),
        max_steps=calls + 1,
        max_calls=calls,
        ledger=_DiesBeforeTheEnd(ledger),
    )
    ended_ms, cut_ms = [], []
    for index in range(repeats):
        start = time.perf_counter()
        again = loop.resume("ended")
        ended_ms.append((time.perf_counter() - start) * 1000)
        assert again == ended
        run = cut.start("go", run_id=f"cut{index}")
        with contextlib.suppress(KeyboardInterrupt):
            run.finish()  # no reply for the last step, no end: a crash, as far as the ledger knows
        del run
        start = time.perf_counter()
        resumed = loop.resume(f"cut{index}")
        cut_ms.append((time.perf_counter() - start) * 1000)
        assert resumed.status == "finished"
        assert resumed.calls == calls
    records = len(ledger.read("ended")[1])
    return statistics.median(ended_ms), statistics.median(cut_ms), records


class _DiesBeforeTheEnd:
    """A ledger whose process "dies" before the run's end is recorded: that write fails."""

    def __init__(self, inner: SQLiteLedger) -> None:
        self.inner = inner

    def create(self, run_id: str, header: bytes) -> LedgerWriter:
        writer = self.inner.create(run_id, header)

        class Writer:
            def append(self, record: LedgerRecord) -> None:
                if record.kind == "end":
                    raise LedgerError("the process died")
                writer.append(record)

            def release(self) -> None:
                writer.release()

        return Writer()

    def claim(self, run_id: str) -> LedgerWriter:
        return self.inner.claim(run_id)

    def read(self, run_id: str) -> tuple[bytes, list[LedgerRecord]]:
        return self.inner.read(run_id)


def main() -> int:
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        print("µs per model step (best of 7): in memory | SQLite NORMAL | SQLite FULL")
        for k in (1, 10, 100):
            best = per_step(k, 7, directory)
            extra = best["NORMAL"] - best["memory"]
            print(
                f"  K={k:<4} {best['memory']:8.1f} | {best['NORMAL']:8.1f} (+{extra:.0f}) "
                f"| {best['FULL']:9.1f} (+{best['FULL'] - best['memory']:.0f})"
            )
            if extra > NORMAL_TARGET_US:
                print(f"    MISSED: NORMAL adds more than {NORMAL_TARGET_US:.0f} µs a step")
                failed = True
        ended, cut, records = resume_times(1000, 7, directory)
        print(f"resume of a 1,000-call run ({records} records), median of 7:")
        print(f"  ended (read and replayed):                     {ended:6.1f} ms")
        print(f"  cut off before its last reply (then one step): {cut:6.1f} ms")
        for name, ms in (("ended", ended), ("cut off", cut)):
            if ms > RESUME_TARGET_MS:
                print(f"    MISSED: resume ({name}) over {RESUME_TARGET_MS:.0f} ms")
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
