"""A run file's child runs (agent tools'), checked against what their parent's record says.

A run file embeds each child run under ``children``, by the id of the call it
answered (``runencode.py``). The parent's own events vouch for each. As
the run is read (``children_agree``): the call it is under was answered
from it or waits on it, an answered child's tokens are those its call's
outcome reported, and a waiting one waits on the calls the parent lists
under it. Once the whole file is known to be what its replay writes
(``answers_agree``): an answered child's output, or how it ended, is what
its call's outcome holds (``child_answers.py``), cut to
``max_result_chars`` as any result (``cuts.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from agentloop._core.replay import Mismatch
from agentloop._core.table import State, Trigger
from agentloop._drivers.child_answers import ended_content
from agentloop._drivers.cuts import cut_of

if TYPE_CHECKING:
    from agentloop._core.values import RunResult, Transition

__all__ = ["answers_agree", "children_agree"]


def children_agree(
    result: RunResult, events: list[Transition], children: dict[str, RunResult]
) -> None:
    """Refuse children the run's own record does not vouch for (``Mismatch``).

    A child must be under a call the run answered or waits on (or one its
    cancelled end answered or rejected: a cancel cut it); an answered one's tokens are
    those its call's outcome reported; a waiting one waits on the calls the
    run lists under it, so what a person is shown is what would run.
    """
    answers = {
        e.call_id: e for e in events if e.trigger in (Trigger.TOOL_RETURNED, Trigger.CALL_WAITS)
    }
    cut = (  # the calls a cancel cut: answered cancelled by the run's end, or its reply
        # rejected by it (a resumed run's, whose record had started the call)
        {m["id"] for m in result.transcript if m.get("status") == "cancelled"}
        | {e.call_id for e in events if e.call_id is not None}
        if result.status is State.CANCELLED
        else set()
    )
    for call_id, child in children.items():
        where, answer = f"$.children.{call_id}", answers.get(call_id)
        if answer is None and call_id not in cut:
            raise Mismatch(
                where, "the child run of a call the run answered or waits on", "no such call"
            )
        if (
            answer is not None
            and answer.trigger is Trigger.TOOL_RETURNED
            and answer.usage != child.usage
        ):
            raise Mismatch(
                where,
                f"a child whose tokens its call's outcome reported ({answer.usage})",
                f"one of {child.usage}",
            )
        listed = [p._replace(path=p.path[1:]) for p in result.pending if p.path[:1] == (call_id,)]
        if listed and listed != list(child.pending):
            raise Mismatch(
                where,
                "a child waiting on the calls its parent lists under it",
                f"one waiting on {[p.key for p in child.pending]!r:.120}, "
                "other calls or other arguments",
            )


def answers_agree(result: RunResult, where: str = "$") -> None:
    """Refuse a child, at any depth, whose output (or end) is not what its call's outcome holds.

    Checked once the file is known to hold what replaying it gives
    (``check_written``), so a child's own damage is named first, where it is.
    """
    answers = {e.call_id: e for e in result.events if e.trigger is Trigger.TOOL_RETURNED}
    for call_id, child in result.children.items():
        here, answer = f"{where}.children.{call_id}", answers.get(call_id)
        if answer is not None:
            _answered_by(here, answer, child)
        answers_agree(child, here)


def _answered_by(where: str, answer: Transition, child: RunResult) -> None:
    """Refuse an answered child whose output (or end) is not what its call's outcome holds.

    A cancelled child answers nothing of its own: the cancel answers its call
    (or a tool timeout does, which cancelled it), so it is not compared.
    """
    if child.status is State.CANCELLED or answer.input_json is None:
        return
    if child.status is State.FINISHED:
        status, content, what = "ok", child.output, "output"
    else:
        status, what = "error", f"end ({child.status.value})"
        content, _ = ended_content(str(answer.tool), child)
    found: Any = orjson.loads(answer.input_json)
    if answer.result_status == status and (found == content or cut_of(found, content)):
        return
    raise Mismatch(
        where,
        f"a child whose {what} its call's outcome holds ({answer.result_status} {_shown(found)})",
        f"one whose {what} answers {status} {_shown(content)}",
    )


def _shown(value: object) -> str:
    """``value``'s JSON, cut to 80 characters."""
    text = orjson.dumps(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."
