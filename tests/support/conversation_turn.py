"""One turn of a durable conversation, in a process of its own (the conversation tests).

``python -m tests.support.conversation_turn LEDGER CONVERSATION MESSAGE [BARRIER NAME]``
runs the conversation's next turn and prints its result's id, turn, status and output
as JSON, or ``{"busy": turn}`` when another process began that turn first. Its model
notes each new message with the tool ``note`` (which appends to ``LEDGER.effects``),
then answers; a message that starts with ``crash`` kills the process (SIGKILL) once
noted. With ``BARRIER``, the turn's ``create`` waits until every process named in
``BARRIER``'s ``expect`` file has reached its own: the processes race for one turn.
``--resume RUN_ID`` in place of ``CONVERSATION MESSAGE`` resumes that run instead.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from agentloop import Loop
from agentloop.ledger import ConversationBusyError, SQLiteLedger


class RacingLedger(SQLiteLedger):
    """A SQLite ledger whose ``create`` waits at a barrier of files first."""

    def __init__(self, path: Path, barrier: Path, name: str) -> None:
        super().__init__(path)
        self.barrier, self.name = barrier, name

    def create(self, run_id: str, header: bytes) -> Any:  # SQLiteLedger's own writer
        (self.barrier / self.name).touch()
        expected = (self.barrier / "expect").read_text().split()
        deadline = time.monotonic() + 30
        while not all((self.barrier / other).exists() for other in expected):
            if time.monotonic() > deadline:
                raise TimeoutError("the other process never reached the barrier")
            time.sleep(0.005)
        return super().create(run_id, header)


def main(argv: list[str]) -> None:
    path, conversation, message = Path(argv[0]), argv[1], argv[2]
    effects = path.with_suffix(".effects")

    def note(text: str) -> str:
        """Note a message."""
        with effects.open("a") as file:
            file.write(f"{conversation} {text}\n")
        if text.startswith("crash"):
            os.kill(os.getpid(), signal.SIGKILL)  # dies while its tool runs
        return "noted"

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        last = history[-1]
        if last["kind"] == "user":
            call = {"id": f"n{len(history)}", "name": "note", "arguments": {"text": last["text"]}}
            return {"kind": "calls", "calls": [call]}
        return {"kind": "final", "text": f"heard {history[-3]['text']}"}

    ledger = SQLiteLedger(path) if len(argv) == 3 else RacingLedger(path, Path(argv[3]), argv[4])
    loop = Loop(model, tools=[note], ledger=ledger)
    try:
        if conversation == "--resume":
            result = loop.resume(message)
        else:
            result = loop.run(message, conversation=conversation)
    except ConversationBusyError as exc:
        print(orjson.dumps({"busy": exc.turn}).decode())
        return
    print(
        orjson.dumps(
            {
                "run_id": result.run_id,
                "turn": result.turn,
                "continues": result.continues,
                "status": result.status.value,
                "output": result.output,
                "steps": result.steps,
                "calls": result.calls,
                "results": [m["status"] for m in result.transcript if m["kind"] == "tool_result"],
            }
        ).decode()
    )


if __name__ == "__main__":
    main(sys.argv[1:])
