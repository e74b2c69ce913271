"""A durable parent's agent tools' child runs from the command line: runs and show.

``runs`` lists top runs, each with how many child runs it has; ``show`` prints
each child run indented under the row of the call it answered (a grandchild
under its child's), and ``show`` of a child's id begins with whose child it is.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

import agentloop
from agentloop.__main__ import main
from agentloop.testing import batch, call, final
from tests.durable.test_durable import by_history

if TYPE_CHECKING:
    from pathlib import Path


def lookup(q: str) -> str:
    """Look a question up."""
    return f"found {q}"


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Run ``w``: a batch of two agent calls, the first one's child with a child of its own;
    and run ``plain``, with none."""
    path = tmp_path / "runs.db"
    with agentloop.ledger.SQLiteLedger(path) as opened:
        grandchild = agentloop.Loop(by_history([final("deep")]))
        child = agentloop.Loop(
            by_history([call("k1", "dig", input="deeper"), final("dug")]),
            tools=[grandchild.as_tool("dig", "Dig.")],
        )
        parent = agentloop.Loop(
            by_history(
                [
                    batch(call("c1", "research", input="a"), call("c2", "lookup", q="b")),
                    final("done"),
                ]
            ),
            tools=[child.as_tool("research", "Research."), lookup],
            ledger=opened,
        )
        assert parent.run("go", run_id="w").status == "finished"
        plain = agentloop.Loop(by_history([final("hello")]), ledger=opened)
        assert plain.run("hi", run_id="plain").status == "finished"
        assert sorted(opened.run_ids()) == ["plain", "w", "w:c1", "w:c1:k1"]
    return path


def run_main(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, list[str]]:
    code = main(list(map(str, argv)))
    return code, capsys.readouterr().out.splitlines()


def test_runs_lists_top_runs_with_their_child_counts(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = run_main(capsys, "runs", ledger)

    assert code == 0
    rows = [re.split(r"  +", line) for line in lines]
    assert rows[0] == ["run", "state", "steps", "calls", "last change", "pending", "children"]
    assert [row[:4] for row in rows[1:]] == [
        ["w", "finished", "2", "2"],
        ["plain", "finished", "1", "0"],
    ]
    assert [row[5:] for row in rows[1:]] == [["1"], []]
    # --flat lists every run as recorded, the children too, each with its own count.
    code, lines = run_main(capsys, "runs", ledger, "--flat")
    assert [re.split(r"  +", line)[0] for line in lines[1:]] == ["w", "w:c1", "w:c1:k1", "plain"]
    assert lines[2].endswith("  1")  # w:c1 has the grandchild


def test_runs_without_children_has_no_children_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "runs.db"
    with agentloop.ledger.SQLiteLedger(path) as opened:
        agentloop.Loop(by_history([final("hello")]), ledger=opened).run("hi", run_id="plain")
    _, lines = run_main(capsys, "runs", path)
    assert lines[0].split() == ["run", "state", "steps", "calls", "last", "change", "pending"]


def test_show_prints_each_child_under_its_call(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = run_main(capsys, "show", ledger, "w")

    assert code == 0
    assert lines[0] == "agentloop run w: finished"
    answered = next(i for i, line in enumerate(lines) if "research#c1" in line and "ok:" in line)
    indent = "      "
    assert lines[answered + 1 : answered + 6] == [
        "",
        f"{indent}child w:c1 (call c1): finished",
        "",
        f"{indent}input",
        f"{indent}  #0  user  a",
    ]
    # The grandchild, under the child's call that it answered: indented twice.
    deep = lines.index(f"{indent * 2}child w:c1:k1 (call k1): finished")
    assert "dig#k1" in lines[deep - 2]
    assert f"{indent * 2}output   deep" in lines
    assert f"{indent}output   dug" in lines
    # The parent's rows go on after its child's lines, and its own end is last.
    after = lines.index(f"{indent}output   dug")
    assert "lookup#c2" in lines[after + 2]
    assert lines[-1] == "output   done"


def test_show_of_a_child_begins_with_whose_child_it_is(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = run_main(capsys, "show", ledger, "w:c1")

    assert code == 0
    assert lines[:2] == ["child of w, call c1", "agentloop run w:c1: finished"]
    assert "      child w:c1:k1 (call k1): finished" in lines
    _, lines = run_main(capsys, "show", ledger, "w:c1:k1")
    assert lines[:2] == ["child of w:c1, call k1", "agentloop run w:c1:k1: finished"]


def test_report_of_a_ledger_run_nests_its_children(
    ledger: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report reads the children from the ledger, as show does: the child and its child."""
    page = tmp_path / "w.html"
    code, _ = run_main(capsys, "report", ledger, "w", "-o", page)

    assert code == 0
    html = page.read_text()
    assert html.count('<details class="child"') == 2
    assert html.index("call k1 · dig") > html.index("call c1 · research")


def run_file_with_a_child(tmp_path: Path) -> Path:
    """A run file whose call ``c1`` its child answered: a run without a ledger."""
    child = agentloop.Loop(by_history([final("kid")]))
    parent = agentloop.Loop(
        by_history([call("c1", "research", input="x"), final("done")]),
        tools=[child.as_tool("research", "Research.")],
    )
    path = tmp_path / "run.json"
    agentloop.review.save_run(parent.run("go"), path)
    return path


def test_show_of_a_run_file_prints_its_children_under_their_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run file holds the child runs of a run without a ledger: show nests them as well."""
    path = run_file_with_a_child(tmp_path)
    code, lines = run_main(capsys, "show", path)

    assert code == 0
    answered = next(i for i, line in enumerate(lines) if "research#c1" in line and "ok:" in line)
    assert lines[answered + 1 : answered + 3] == ["", "      child (call c1): finished"]
    assert "      output   kid" in lines
    assert lines[-1] == "output   done"


# -- a child that asks a person: decided on the top run, by path key ----------------------------

sent: list[str] = []


def send(to: str) -> str:
    """Send a letter."""
    sent.append(to)
    return f"sent to {to}"


def office(ledger: agentloop.ledger.Ledger) -> agentloop.Loop:
    """Run ``o``'s Loop: its agent call c1's child asks a person before its send k1 runs."""
    clerk = agentloop.Loop(
        by_history([call("k1", "send", to="bob"), final("it went out")]),
        tools=[agentloop.Tool(send, policy=lambda call: agentloop.ask("a letter leaves"))],
    )
    return agentloop.Loop(
        by_history([call("c1", "post", input="Write to Bob."), final("Bob has it.")]),
        tools=[clerk.as_tool("post", "Post.")],
        ledger=ledger,
    )


def test_pending_and_decide_take_a_childs_call_by_its_path_on_the_top_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pending lists c1/k1 under o (the child's own run is not listed apart); decide on o
    records it there; deciding on the child is refused, naming its parent; a resume goes on."""
    path = tmp_path / "runs.db"
    with agentloop.ledger.SQLiteLedger(path) as opened:
        assert office(opened).run("Tell Bob", run_id="o").status == "awaiting_approval"
    code, lines = run_main(capsys, "pending", path)
    assert code == 0
    rows = [re.split(r"  +", line) for line in lines[: lines.index("")]]
    assert rows == [
        ["run", "call", "tool", "reason", "arguments"],
        ["o", "c1/k1", "send", "a letter leaves", '{"to":"bob"}'],
    ]

    code = main(["decide", str(path), "o:c1", "k1=approve"])
    _, err = capsys.readouterr()
    assert code != 0
    assert "run 'o:c1' is the child of 'o', which waits on it: decide on 'o' with c1/k1=" in err

    code, lines = run_main(capsys, "decide", path, "o", "c1/k1=approve")
    assert (code, lines[0]) == (0, "recorded for run o: c1/k1 approved")
    with agentloop.ledger.SQLiteLedger(path) as opened:
        result = office(opened).resume("o")
    assert (result.status, result.output, sent) == ("finished", "Bob has it.", ["bob"])
    assert result.children["c1"].run_id == "o:c1"


def waiting_tree(ledger: agentloop.ledger.Ledger | None) -> agentloop.Loop:
    """Run ``t``'s Loop: its batch holds agent call c1 and a plain call c2; c1's child calls
    an agent k1 whose child's send, c2 too, asks a person."""
    clerk = agentloop.Loop(
        by_history([call("c2", "send", to="bob"), final("sent")]),
        tools=[agentloop.Tool(send, policy=lambda call: agentloop.ask("a letter leaves"))],
    )
    child = agentloop.Loop(
        by_history([call("k1", "mail", input="m"), final("mailed")]),
        tools=[clerk.as_tool("mail", "Mail.")],
    )
    return agentloop.Loop(
        by_history(
            [batch(call("c1", "post", input="p"), call("c2", "lookup", q="x")), final("ok")]
        ),
        tools=[child.as_tool("post", "Post."), lookup],
        ledger=ledger,
    )


def test_show_names_the_top_run_and_path_keys_to_decide_a_waiting_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """show of the top run, and of its grandchild that asks, say to decide c1/k1/c2 on t (the
    one run decide takes it on); the top's own c2 is held, its agent call c1 waits on its child
    (not "no person needed"); the hint, followed, is recorded, and a resume goes on."""
    path = tmp_path / "runs.db"
    with agentloop.ledger.SQLiteLedger(path) as opened:
        assert waiting_tree(opened).run("go", run_id="t").status == "awaiting_approval"
    hint = f"decide {path} t c1/k1/c2=approve|deny:REASON"
    for run_id in ("t", "t:c1:k1"):
        code, lines = run_main(capsys, "show", path, run_id)
        assert code == 0
        assert lines[-1].endswith(hint), (run_id, lines[-1])
    _, lines = run_main(capsys, "show", path, "t", "--depth", "0")
    assert [line for line in lines if line.startswith(("pending ", "held "))] == [
        'pending  post#c1 {"input":"p"}: its child run waits for a person: '
        "send#c1/k1/c2 (a letter leaves)",
        'held     lookup#c2 {"q":"x"}  (no person needed)',
    ]
    code, lines = run_main(capsys, "decide", path, "t", "c1/k1/c2=approve")
    assert (code, lines[0]) == (0, "recorded for run t: c1/k1/c2 approved")
    with agentloop.ledger.SQLiteLedger(path) as opened:
        assert waiting_tree(opened).resume("t").output == "ok"


def test_the_report_of_a_waiting_parent_lists_its_held_calls_by_their_own_ids() -> None:
    """A parent's held plain call c2 is not taken for its child's pending call c2: the report's
    pending table has c1 (waiting on its child, by path key) and c2 (held), one row each."""
    waiting = waiting_tree(None).run("go")
    page = agentloop.review.report_html(waiting, svg=False)
    rows = re.findall(r'<tr class="(held|pending)"><td>([^<]*)</td><td>([^<]*)</td>', page)
    assert rows[:2] == [("pending", "c1", "post"), ("held", "c2", "lookup")]
    assert "send#c1/k1/c2 (a letter leaves)" in page


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_show_depth_nests_that_many_generations_and_counts_the_rest(
    ledger: Path, capsys: pytest.CaptureFixture[str], depth: int
) -> None:
    """w has a child w:c1, which has its own w:c1:k1: --depth cuts the tree below depth N."""
    _, whole = run_main(capsys, "show", ledger, "w")
    code, lines = run_main(capsys, "show", ledger, "w", "--depth", depth)

    assert code == 0
    indent = "      "
    child, grandchild = f"{indent}child w:c1 (call c1): finished", f"{indent * 2}output   deep"
    assert (child in lines, grandchild in lines) == (depth >= 1, depth >= 2)
    left_out = {0: "2 child runs", 1: "1 child run"}.get(depth)
    if left_out is None:  # every generation shown: as without --depth
        assert lines == whole
    else:
        assert (
            lines[-1]
            == f"{left_out} below --depth {depth} not shown (--depth {depth + 1} shows more)"
        )
        # Lines of the whole show, in its order: only the deeper runs' lines are left out.
        rest = iter(whole)
        assert all(line in rest for line in lines[:-1])
        assert len(whole) - len(lines) > 10
        assert "output   done" in lines
        assert (
            f"{indent}output   dug" in lines if depth == 1 else f"{indent}output   dug" not in lines
        )
    # Of a child's id, the depth counts from the child.
    _, lines = run_main(capsys, "show", ledger, "w:c1", "--depth", "0")
    assert lines[:2] == ["child of w, call c1", "agentloop run w:c1: finished"]
    assert lines[-1] == "1 child run below --depth 0 not shown (--depth 1 shows more)"
    assert not any("child w:c1:k1" in line for line in lines)


def test_show_depth_on_a_run_file_and_a_run_without_children(
    tmp_path: Path, ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = run_file_with_a_child(tmp_path)
    _, lines = run_main(capsys, "show", path, "--depth", "0", "--full")
    assert "      child (call c1): finished" not in lines
    assert lines[-2:] == [
        "output   done",
        "1 child run below --depth 0 not shown (--depth 1 shows more)",
    ]
    _, lines = run_main(capsys, "show", path, "--depth", "1")
    assert "      child (call c1): finished" in lines
    assert lines[-1] == "output   done"
    # Nothing is left out of a run without children: no closing count.
    _, whole = run_main(capsys, "show", ledger, "plain")
    assert run_main(capsys, "show", ledger, "plain", "--depth", "0") == (0, whole)


@pytest.mark.parametrize("given", ["-1", "one", "1.5"])
def test_show_depth_refuses_what_is_not_a_number_of_generations(
    ledger: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["show", str(ledger), "w", "--depth", given])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"expected a number of generations >= 0 (0: the run alone), got '{given}'" in err
