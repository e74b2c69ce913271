"""The run report: one self-contained, escaped HTML page, checked in a real headless browser."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop
from agentloop import Loop, RunResult
from agentloop._cli.demo import QUESTION, demo_loop
from agentloop._core.messages import NOT_STARTED
from agentloop._review.answers import result_of
from agentloop._review.diagram import visited
from agentloop._review.report import report_html
from agentloop._review.text import HEADERS, describe
from agentloop.review import NotJSON, SVGUnavailableError, to_mermaid
from agentloop.testing import ScriptedModel, batch
from tests.review.test_runfile import REPLIES, random_run
from tests.review.test_trace import renderer  # noqa: F401 - a fixture
from tests.support.helpers import call, final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from playwright.sync_api import Browser, ConsoleMessage, Dialog, Page, Request

SCRIPT = "<script>alert('boom')</script>"


def hostile_run() -> RunResult:
    """A run whose tool result, user text and answer are full of markup."""

    def fetch(url: str) -> str:
        return SCRIPT + ' & "quotes" <b>bold</b>'

    model = ScriptedModel(
        [call("c1", name="fetch", url="<img src=x onerror=alert(1)>"), final("</pre>ok")]
    )
    return Loop(model, tools={"fetch": fetch}).run("Is <this> & that </p> safe?")


def test_report_is_self_contained() -> None:
    """No scripts, stylesheets, fonts or links to load; a CSP forbids any that slip in."""
    page = report_html(demo_loop().run("go"))

    assert "<script" not in page
    assert "<link" not in page
    assert "@import" not in page
    assert "url(" not in page
    assert not re.search(r"\b(src|href)\s*=", page)
    # The only URLs are SVG namespace names, which are never fetched.
    for match in re.finditer(r"https?://[^\s\"'<>]+", page):
        assert match.group() in {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert (
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
    ) in page


def test_report_escapes_every_part_of_the_run() -> None:
    """Markup in the input, arguments, tool results and answer is text, never tags."""
    page = report_html(hostile_run(), svg=False)

    assert "<script" not in page
    assert "<img" not in page
    assert "<b>" not in page
    assert "&lt;script&gt;alert(&#x27;boom&#x27;)&lt;/script&gt;" in page
    assert "Is &lt;this&gt; &amp; that &lt;/p&gt; safe?" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;/pre&gt;ok" in page


def test_each_call_sits_beside_its_result() -> None:
    """A lone call and its result share one row of the timeline; so does each call of a batch."""
    page = report_html(demo_loop().run("go"), svg=False)
    pairs = re.findall(r'<li class="pair">(.*?)</li>', page, re.DOTALL)
    batches = re.findall(r'<li class="batch">(.*?)</li>', page, re.DOTALL)

    assert len(pairs) == len(batches) == 1
    assert 'data-entry="4"' in pairs[0]
    assert 'data-entry="5"' in pairs[0]
    assert "#4 call convert · id c3" in pairs[0]
    assert "#5 result of convert · id c3 · ok" in pairs[0]
    head, lisbon, porto = batches[0].split('<div class="pair">')
    assert "#1 batch of 2 calls" in head
    assert "Looking up both cities at once." in head
    assert "call weather · id c1" in lisbon
    assert "#2 result of weather · id c1 · ok" in lisbon
    assert "call weather · id c2" in porto
    assert "#3 result of weather · id c2 · ok" in porto


def batch_run() -> RunResult:
    """A reply of two calls with text beside them, markup in every part, then a final."""
    reply = batch(
        call("c1", name="fetch", url="a"),
        call("c2", name="fetch", url="<b>x</b>"),
        text="Fetching <both> & more",
    )
    return Loop(ScriptedModel([reply, final()]), tools={"fetch": lambda url: f"page {url}"}).run(
        "go"
    )


def test_a_batch_is_one_group_with_each_call_beside_its_result() -> None:
    """The reply's text heads the group; each call of it sits beside its own result."""
    page = report_html(batch_run(), svg=False)
    groups = re.findall(r'<li class="batch">(.*?)</li>', page, re.DOTALL)

    assert len(groups) == 1
    head, *pairs = groups[0].split('<div class="pair">')
    assert head.strip() == (
        '<div class="entry calls" data-entry="1"><div class="who">#1 batch of 2 calls</div>'
        '<p class="text">Fetching &lt;both&gt; &amp; more</p></div>'
    )
    assert len(pairs) == 2
    for number, pair in enumerate(pairs, 1):
        assert pair.startswith(f'<div class="entry call" data-call="c{number}">')
        assert f'data-entry="{number + 1}"><div class="who">#{number + 1} result of fetch' in pair
        assert f"· id c{number} · ok" in pair
    assert "&lt;b&gt;x&lt;/b&gt;" in pairs[1]  # the arguments, escaped
    assert "page &lt;b&gt;x&lt;/b&gt;" in pairs[1]  # the result, escaped
    assert '<li class="pair">' not in page
    assert page.count("data-entry=") == 5  # user, the batch, two results, final


def test_a_batch_without_text_and_a_result_given_later() -> None:
    """No text: the group has no commentary. A result further on stays on its own."""
    history = [
        batch(call("a1", a=1, b=1), call("a2", a=2, b=2)),
        {"kind": "tool_result", "id": "a1", "name": "add", "status": "ok", "content": 2},
        {"kind": "user", "text": "meanwhile"},
        {"kind": "tool_result", "id": "a2", "name": "add", "status": "ok", "content": 4},
    ]
    page = report_html(Loop(ScriptedModel([final()])).run(history), svg=False)
    group = re.findall(r'<li class="batch">(.*?)</li>', page, re.DOTALL)

    assert len(group) == 1
    assert '<div class="who">#0 batch of 2 calls · input</div></div>' in group[0]
    assert 'data-call="a1"' in group[0]
    assert 'data-entry="1"' in group[0]
    assert 'data-call="a2"' in group[0]
    assert 'data-entry="3"' not in group[0]
    assert re.search(r'<li><div class="entry tool_result input" data-entry="3">', page)


def test_input_history_is_marked_as_input() -> None:
    """Messages given as input are marked so; those the run appended are not."""
    history = [
        {"kind": "user", "text": "hi"},
        call("old", a=1, b=1),
        {"kind": "tool_result", "id": "old", "name": "add", "status": "ok", "content": 2},
        {"kind": "user", "text": "again"},
    ]
    result = Loop(ScriptedModel([final("done")])).run(history)
    page = report_html(result, svg=False)

    for index in range(4):
        assert re.search(rf'data-entry="{index}"><div class="who">#{index} [^<]* · input<', page)
    assert re.search(r'data-entry="4"><div class="who">#4 final</div>', page)


def test_rejected_reply_is_shown() -> None:
    """A malformed reply is shown in its own section, escaped, as JSON."""
    reply = {"kind": "final", "text": "<i>x</i>", "extra": 1}
    page = report_html(Loop(ScriptedModel([reply])).run("go"), svg=False)

    assert '<h2 id="rejected">Rejected reply</h2>' in page
    assert "&quot;text&quot;: &quot;&lt;i&gt;x&lt;/i&gt;&quot;" in page
    assert "not JSON" not in page


def test_non_json_rejected_reply_is_shown_by_repr() -> None:
    """A rejected reply that was not JSON shows its repr, live or loaded from a file."""
    result = Loop(ScriptedModel([{"kind": "final", "text": {1, 2}}])).run("go")
    loaded = agentloop.review.run_from_json(agentloop.review.run_to_json(result))
    assert isinstance(loaded.rejected_value, NotJSON)

    for run in (result, loaded):
        page = report_html(run, svg=False)
        assert "{&#x27;kind&#x27;: &#x27;final&#x27;, &#x27;text&#x27;: {1, 2}}" in page
        assert "not JSON" in page


def test_a_finished_run_has_no_rejected_section() -> None:
    """Nothing was rejected in a finished run, so there is no such section."""
    assert 'id="rejected"' not in report_html(demo_loop().run("go"), svg=False)


def test_without_svg_the_mermaid_source_is_shown() -> None:
    """svg=False puts the traced Mermaid source in a readable <pre> block, escaped."""
    result = demo_loop().run("go")
    page = report_html(result, svg=False)

    block = re.search(r'<pre id="diagram" class="mermaid-source">(.*?)</pre>', page, re.DOTALL)
    assert block is not None
    assert "awaiting_model --&gt; validating: model_replied (3x)" in block.group(1)
    assert block.group(1).count("\n") == to_mermaid(result).count("\n")
    assert "<svg" not in page


@pytest.mark.usefixtures("renderer")
def test_with_svg_the_diagram_is_inline() -> None:
    """With pygraphviz the trace is inline SVG, without the standalone file's prolog."""
    page = report_html(demo_loop().run("go"))

    assert '<figure id="diagram"><svg' in page
    assert "<?xml" not in page
    assert "<!DOCTYPE svg" not in page
    assert ">model_replied (3x)</text>" in page


def test_svg_required_but_missing_raises(no_pygraphviz: None) -> None:
    """svg=True insists on SVG: without a renderer it raises instead of falling back."""
    result = demo_loop().run("go")
    with pytest.raises(SVGUnavailableError):
        report_html(result, svg=True)
    assert 'class="mermaid-source"' in report_html(result)  # svg=None falls back


@pytest.mark.parametrize(
    ("replies", "budget", "cells"),
    [
        pytest.param(
            [ValueError("x")],
            (3, 3),
            (
                "1",
                "awaiting_model → failed",
                "model_raised",
                "1/3",
                "0/3",
                "",
                "the model raised ValueError: x",
            ),
            id="error",
        ),
        pytest.param(
            [call("c1", a=1, b=2)],
            (3, 0),
            (
                "2",
                "validating → exhausted",
                "validate [calls_exhausted]",
                "1/3",
                "0/0",
                "add#c1",
                "budget spent: max_calls",
            ),
            id="reason",
        ),
        pytest.param(
            [final("fine")],
            (3, 3),
            (
                "2",
                "validating → finished",
                "validate [reply_is_final]",
                "1/3",
                "0/3",
                "",
                "final: fine",
            ),
            id="final",
        ),
    ],
)
def test_describe_says_what_came_of_a_transition(
    replies: list[object], budget: tuple[int, int], cells: tuple[str, ...]
) -> None:
    """The last transition's cells: number, path, trigger [guard], counters, call, outcome."""
    result = Loop(
        ScriptedModel(replies),
        tools={"add": lambda a, b: a + b},
        max_steps=budget[0],
        max_calls=budget[1],
    ).run("go")
    made = describe(result, len(result.events) - 1)
    assert (*made[:5], *made[6:]) == cells
    # took: the model's step, when the row answers it (a loaded machine may take over 1 ms)
    assert re.fullmatch(r"|\d+ (µs|ms)", made[5])


def test_describe_shortens_long_content() -> None:
    """A long tool result is cut to a readable length in the outcome cell."""
    result = Loop(
        ScriptedModel([call("c1", n=1), final()]), tools={"add": lambda n: "x" * 500}, max_calls=1
    ).run("go")
    outcome = describe(result, 2)[-1]
    assert outcome.startswith('ok: "xxx')
    assert len(outcome) == len("ok: ") + 80
    assert outcome.endswith("…")


def outcomes(result: RunResult) -> list[tuple[str, str, str]]:
    """(trigger [guard], call, outcome) of each event that names a call's result."""
    rows = [describe(result, index) for index, e in enumerate(result.events) if e.result_status]
    return [(row[2], row[6], row[7]) for row in rows]


def test_each_call_of_a_batch_shows_its_own_result() -> None:
    """Events before a batch's last call append nothing; their rows show each call's result."""
    reply = batch(call("c1", a=1, b=0), call("c2", a=2, b=0), call("c3", a=3, b=0))
    result = Loop(ScriptedModel([reply, final()]), tools={"add": lambda a, b: f"sum {a + b}"}).run(
        "go"
    )

    assert outcomes(result) == [
        ("tool_returned [batch_open]", "add#c1", 'ok: "sum 1"'),
        ("tool_returned [batch_open]", "add#c2", 'ok: "sum 2"'),
        ("tool_returned", "add#c3", 'ok: "sum 3"'),
    ]


async def test_calls_run_at_once_show_their_results_in_completion_order() -> None:
    """Completion order: the batch closes on c1, whose result is not the last appended."""

    async def add(a: int, b: int) -> str:
        await asyncio.sleep({1: 0.03, 2: 0.0, 3: 0.01}[a])
        return f"sum {a + b}"

    reply = batch(call("c1", a=1, b=0), call("c2", a=2, b=0), call("c3", a=3, b=0))
    loop = Loop(ScriptedModel([reply, final()]), tools={"add": add}, max_concurrency=3)
    result = await loop.arun("go")

    assert outcomes(result) == [
        ("tool_returned [batch_open]", "add#c2", 'ok: "sum 2"'),
        ("tool_returned [batch_open]", "add#c3", 'ok: "sum 3"'),
        ("tool_returned", "add#c1", 'ok: "sum 1"'),
    ]
    page = report_html(result, svg=False)
    assert (
        '<td data-label="call">add#c1</td><td data-label="outcome">ok: &quot;sum 1&quot;</td>'
        in page
    )


@settings(max_examples=150, deadline=None)
@given(
    replies=st.lists(REPLIES, max_size=10),
    max_calls=st.integers(0, 4),
    cancel_after=st.none() | st.integers(0, 12),
)
def test_every_row_naming_a_result_shows_that_result(
    replies: list[object], max_calls: int, cancel_after: int | None
) -> None:
    """Random runs with batches, cancels and interruptions: each call's row has its answer."""
    result = random_run(replies, 7, max_calls, cancel_after)
    answers = {m["id"]: m for m in result.transcript[1:] if m["kind"] == "tool_result"}

    for index, event in enumerate(result.events):
        if event.result_status:
            answer = answers[event.call_id]
            assert result_of(result.events, index) == answer
            assert answer["status"] == event.result_status
            content = orjson.dumps(answer["content"]).decode()
            outcome = describe(result, index, limit=None)[-1]
            shown, _, also = outcome.partition("; also ")
            assert shown == f"{event.result_status}: {content}"
            # A cancellation's row lists the other calls it answered, each cancelled.
            others = [
                f"{m['name']}#{m['id']} "
                + ("never started" if m["content"] == NOT_STARTED else "cancelled")
                for m in event.appended
                if m["kind"] == "tool_result"
                and m["status"] == "cancelled"
                and m["id"] != event.call_id
            ]
            assert also == ", ".join(others)


def test_an_interrupted_batch_shows_the_result_of_the_call_each_row_names() -> None:
    """Interrupted in c2 of three: its row shows c2's cancelled result first, then c3's."""

    def interrupt_at_the_second(a: int, b: int) -> int:
        if a == 2:
            raise KeyboardInterrupt
        return a

    reply = batch(call("c1", a=1, b=0), call("c2", a=2, b=0), call("c3", a=3, b=0))
    run = Loop(ScriptedModel([reply]), tools={"add": interrupt_at_the_second}).start("go")
    with pytest.raises(KeyboardInterrupt):
        run.finish()

    assert outcomes(run.result()) == [
        ("tool_returned [batch_open]", "add#c1", "ok: 1"),
        (
            "tool_interrupted",
            "add#c2",
            'cancelled: {"type":"KeyboardInterrupt","message":""}; also add#c3 never started',
        ),
    ]


def test_a_cancelled_batch_row_lists_every_call_it_answered() -> None:
    """Cancelled at c2's checkpoint: the row names c2 and lists c3; the accept row, the text."""
    token = agentloop.CancelToken()

    def cancel_then_answer(a: int, b: int) -> int:
        token.cancel()
        return a

    reply = batch(call("c1", a=1, b=0), call("c2", a=2, b=0), call("c3", a=3, b=0), text="three")
    result = Loop(ScriptedModel([reply]), tools={"add": cancel_then_answer}).run("go", cancel=token)

    assert describe(result, 1)[-1] == "batch of 3: three"
    assert describe(result, len(result.events) - 1)[-1] == (
        'cancelled: "never started: the run was cancelled before this call could run"; '
        "also add#c3 never started"
    )


# -- in a real browser -------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
# As root in a sandboxed machine with no network: no sandbox, no GPU, no background traffic.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.contextmanager
def chromium(*extra: str) -> Iterator[Browser]:
    """Debian's chromium driven by Playwright, with ``extra`` switches; skipped if absent."""
    if not shutil.which(CHROMIUM):
        message = f"{CHROMIUM} is not installed (apt-get install chromium; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser test: {message}")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra]
        )
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium driven by Playwright; skipped only where it is not installed."""
    with chromium() as launched:
        yield launched


def open_report(browser: Browser, path: Path) -> tuple[Page, list[str]]:
    """Load ``path`` via file://; return the page and every problem the browser reported."""
    page = browser.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type in {"error", "warning"}:
            problems.append(f"console {message.type}: {message.text}")

    def on_dialog(dialog: Dialog) -> None:
        problems.append(f"a script opened a dialog: {dialog.message}")
        dialog.dismiss()

    def on_request(request: Request) -> None:
        if not request.url.startswith(("file://", "data:")):
            problems.append(f"request to {request.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("dialog", on_dialog)
    page.on("request", on_request)
    page.goto(path.as_uri(), wait_until="load")
    return page, problems


@pytest.mark.slow
@pytest.mark.parametrize("svg", [None, False], ids=["svg-if-available", "mermaid-source"])
def test_report_in_headless_chromium(browser: Browser, tmp_path: Path, svg: bool | None) -> None:
    """The page loads with no console errors or requests; the status and every entry show."""
    result = hostile_run()
    path = tmp_path / "run.html"
    path.write_text(report_html(result, svg=svg), encoding="utf-8")

    started = time.perf_counter()
    page, problems = open_report(browser, path)

    status = page.locator("#status")
    assert status.is_visible()
    assert status.inner_text() == "finished"
    assert page.locator("#diagram").is_visible()
    assert page.locator("script").count() == 0
    transcript = result.transcript
    assert page.locator("[data-entry]").count() == len(transcript)
    for index, message in enumerate(transcript):
        entry = page.locator(f'[data-entry="{index}"]')
        assert entry.is_visible(), index
        assert entry.bounding_box() is not None
        text = entry.inner_text()
        for expected in {
            "user": [message.get("text")],
            "call": [message.get("name"), message.get("id")],
            "tool_result": [message.get("name"), message.get("status")],
            "final": [message.get("text")],
        }[message["kind"]]:
            assert str(expected) in text, (index, expected, text)
    # The script in the tool result is shown as text, and never ran.
    assert SCRIPT in page.locator('[data-entry="2"]').inner_text()
    assert "<img src=x onerror=alert(1)>" in page.locator('[data-entry="1"]').inner_text()
    assert problems == []
    page.close()
    print(f"browser check took {time.perf_counter() - started:.2f} s")


def test_unprintable_rejected_reply_does_not_break_the_report() -> None:
    """A live run's rejected reply whose repr raises is shown by the run file's placeholder."""

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    result = Loop(ScriptedModel([{"kind": "final", "text": Broken()}])).run("go")
    page = report_html(result, svg=False)

    assert "&lt;unprintable: RuntimeError&gt;" in page


def test_an_interrupted_call_is_not_said_to_be_outside_the_transcript() -> None:
    """The call an interruption stopped is in the transcript (with a cancelled result)."""

    def halt(**arguments: Any) -> None:
        raise KeyboardInterrupt

    run = Loop(ScriptedModel([call("c1", name="halt")]), tools={"halt": halt}).start("go")
    with pytest.raises(KeyboardInterrupt):
        for _ in run:
            pass
    result = run.result()
    assert result.rejected is None  # the call was recorded, so nothing was rejected
    page = report_html(result, svg=False)

    assert "never entered the transcript" not in page
    assert "result of halt · id c1 · cancelled" in page


# -- layout: everything fits its column, on a desktop and on a phone ---------------------

# Every element of the page that lies outside the body's content box (the column),
# and whether the page scrolls sideways.
OUTSIDE_THE_COLUMN = """() => {
  const style = getComputedStyle(document.body);
  const box = document.body.getBoundingClientRect();
  const left = box.left + parseFloat(style.paddingLeft);
  const right = box.right - parseFloat(style.paddingRight);
  const outside = [];
  for (const element of document.body.querySelectorAll("*")) {
    const rect = element.getBoundingClientRect();
    if (rect.width === 0 && rect.height === 0) continue;
    if (rect.left < left - 0.5 || rect.right > right + 0.5) {
      outside.push(`${element.tagName} ${Math.round(rect.left)}..${Math.round(rect.right)}`);
    }
    // Content wider than its own box (a long word that does not wrap) spills out too.
    const html = element instanceof HTMLElement;
    if (html && element.scrollWidth > element.clientWidth + 1 && element.clientWidth > 0) {
      outside.push(`${element.tagName} holds ${element.scrollWidth} px in ${element.clientWidth}`);
    }
  }
  const root = document.documentElement;
  return {outside, scrolls: root.scrollWidth > root.clientWidth, column: right - left};
}"""

# The diagram's box, and every drawn text in it that is not wholly inside that box.
DIAGRAM = """() => {
  const figure = document.querySelector("#diagram").getBoundingClientRect();
  const svg = document.querySelector("#diagram svg").getBoundingClientRect();
  const cut = [];
  for (const text of document.querySelectorAll("#diagram svg text")) {
    const rect = text.getBoundingClientRect();
    if (rect.left < figure.left || rect.right > figure.right) cut.push(text.textContent);
  }
  const natural = document.querySelector("#diagram svg").width.baseVal.value;
  return {figure: figure.width, svg: svg.width, natural, cut};
}"""

# Headers whose text takes more than one line.
BROKEN_HEADERS = """() => [...document.querySelectorAll("th")].filter(th => {
  const range = document.createRange();
  range.selectNodeContents(th);
  return new Set([...range.getClientRects()].map(rect => Math.round(rect.top))).size > 1;
}).map(th => th.textContent)"""


def long_run() -> RunResult:
    """A run with long unbreakable values, long names and ids, and many transitions."""
    word = "x" * 300
    replies: list[object] = [
        call(f"call-{i}-{word[:40]}", name="echo", text=word) for i in range(4)
    ]
    model = ScriptedModel([*replies, final(word)])
    return Loop(model, tools={"echo": lambda text: text}, max_calls=4).run(word)


def cancelled_run() -> RunResult:
    """A run cancelled while the model worked: the cancelled state is on the path."""
    token = agentloop.CancelToken()

    def model(history: list[dict[str, Any]]) -> dict[str, Any]:
        token.cancel()
        return final("late")

    return Loop(model).run("go", cancel=token)


LAYOUT_RUNS: dict[str, Callable[[], RunResult]] = {
    "demo": lambda: demo_loop().run(QUESTION),
    "hostile": hostile_run,
    "batch": batch_run,
    "long": long_run,
    "cancelled": cancelled_run,
    "failed": lambda: Loop(ScriptedModel([ValueError("no")])).run("go"),
}


@pytest.mark.slow
@pytest.mark.usefixtures("renderer")
@pytest.mark.parametrize("width", [1400, 390], ids=["desktop", "phone"])
@pytest.mark.parametrize("name", list(LAYOUT_RUNS))
def test_report_fits_its_column(browser: Browser, tmp_path: Path, name: str, width: int) -> None:
    """At 1400 and 390 px: nothing overflows the column, the diagram fits it, labels whole."""
    result = LAYOUT_RUNS[name]()
    path = tmp_path / "run.html"
    path.write_text(report_html(result, svg=True), encoding="utf-8")
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(path.as_uri(), wait_until="load")

    layout = page.evaluate(OUTSIDE_THE_COLUMN)
    assert layout["outside"] == []
    assert not layout["scrolls"]
    diagram = page.evaluate(DIAGRAM)
    assert diagram["cut"] == []
    assert diagram["svg"] <= diagram["figure"]
    if diagram["natural"] <= layout["column"]:
        assert diagram["svg"] == pytest.approx(diagram["natural"], abs=1)  # never blown up
    else:
        assert diagram["svg"] >= 0.5 * diagram["natural"]  # shrunk, but still legible
    for state in visited(result):
        assert page.locator("#diagram svg text", has_text=state.value).first.is_visible()
    assert page.evaluate(BROKEN_HEADERS) == []
    # Every transition's cells can be read, as a table row or as a card.
    for cell in page.locator("td").all():
        if cell.inner_text():
            assert cell.is_visible()
    page.close()


# Where each call of a batch and its result are drawn: (call box, result box) per pair.
BATCH_BOXES = """() => [...document.querySelectorAll("li.batch .pair")].map(pair => {
  const [call, result] = pair.children;
  return [call.getBoundingClientRect().toJSON(), result.getBoundingClientRect().toJSON()];
})"""


@pytest.mark.slow
@pytest.mark.parametrize("width", [1400, 390], ids=["desktop", "phone"])
def test_a_batchs_calls_sit_beside_their_results(
    browser: Browser, tmp_path: Path, width: int
) -> None:
    """On a desktop each call is to the left of its result; on a phone, right above it."""
    path = tmp_path / "run.html"
    path.write_text(report_html(batch_run(), svg=False), encoding="utf-8")
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(path.as_uri(), wait_until="load")

    assert page.locator('[data-entry="1"]').inner_text().endswith("Fetching <both> & more")
    boxes = page.evaluate(BATCH_BOXES)
    assert len(boxes) == 2
    for call_box, result_box in boxes:
        if width == 1400:
            assert call_box["top"] == result_box["top"]
            assert call_box["right"] < result_box["left"]
        else:
            assert call_box["left"] == result_box["left"]
            assert call_box["bottom"] < result_box["top"]
    assert boxes[0][1]["bottom"] < boxes[1][0]["top"]  # the calls in emission order
    page.close()


@pytest.mark.slow
def test_a_phone_shows_each_transition_as_a_card(browser: Browser, tmp_path: Path) -> None:
    """At 390 px the table's rows become cards: each cell under its header's name."""
    result = demo_loop().run("go")
    path = tmp_path / "run.html"
    path.write_text(report_html(result, svg=False), encoding="utf-8")
    page = browser.new_page(viewport={"width": 390, "height": 900})
    page.goto(path.as_uri(), wait_until="load")

    assert not page.locator("thead").is_visible()
    cards = page.locator("tbody tr")
    assert cards.count() == len(result.events)
    last = cards.last.locator("td")
    displays = last.evaluate_all("cells => cells.map(c => getComputedStyle(c).display)")
    # Neither a duration nor a call: those cells take no line.
    assert displays == ["grid"] * 5 + ["none", "none", "grid"]
    # Each cell is labelled with its header's name (a ::before, so not in inner_text).
    labels = last.evaluate_all(
        "cells => cells.map(c => getComputedStyle(c, '::before').content.slice(1, -1))"
    )
    assert labels == list(HEADERS)
    assert last.nth(1).inner_text() == "validating → finished"
    page.close()


def test_the_report_shows_controls_and_bidi_characters_escaped() -> None:
    """A run's text cannot reorder (U+202E, U+2066) or hide (ESC, BEL) what the page shows:
    they appear as escapes, as in `agentloop show`; newlines and tabs are kept."""
    text = "paid\u202e01$ \u2066x\u2069 \x1b[2J\x07 line\nnext\tcell"
    result = Loop(ScriptedModel([final(text)])).run("go\u202ein")
    page = report_html(result, svg=False)
    for char in ("\u202e", "\u2066", "\u2069", "\x1b", "\x07"):
        assert char not in page
    assert "paid\\u202e01$ \\u2066x\\u2069 \\x1b[2J\\x07 line\nnext\tcell" in page
    assert "go\\u202ein" in page


def family() -> RunResult:
    """A parent calling its agent tool twice; the child calls one of its own (``<`` in its id)."""
    grandchild = Loop(lambda history: final("deep <down>"))

    def middle(history: list[Any]) -> Any:  # plays for each child run, not once as a script
        answered = any(message["kind"] == "tool_result" for message in history)
        return final("mid") if answered else call("g<1", "dig", input="x")

    child = Loop(middle, tools=[grandchild.as_tool("dig", "Dig deeper.")])
    parent = Loop(
        ScriptedModel(
            [
                call("c1", "research", input="go"),
                call("c2", "research", input="again"),
                final("top"),
            ]
        ),
        tools=[child.as_tool("research", "Research one question.")],
    )
    return parent.run("write")


def test_report_nests_each_child_run_under_its_call() -> None:
    result = family()
    page = report_html(result, svg=False)

    ids = re.findall(r'id="([^"]*)"', page)
    assert ids.index("children") < ids.index("c1-run") < ids.index("c1-g&lt;1-run")
    assert ids.index("c1-g&lt;1-run") < ids.index("c2-run")  # c1's own children first
    assert "c1-summary-status" in ids
    assert len(ids) == len(set(ids))  # no id twice
    opened = page.index('id="c1-run"')
    assert page.count("<details") == page.count("</details>") == 4  # c1, its g<1, c2, its g<1
    assert "call c1 · research · " in page[opened : page.index("</summary>", opened)]
    # The child's own transcript and counters, inside its block.
    block = page[opened : page.index('id="c2-run"')]
    assert f'id="c1-summary-steps">{result.children["c1"].steps} of ' in block
    assert "deep &lt;down&gt;" in block  # the grandchild's answer, escaped
    assert "<down>" not in page


def test_report_of_a_run_without_children_has_no_child_section() -> None:
    page = report_html(demo_loop().run("go"), svg=False)

    assert 'id="children"' not in page
    assert "<details" not in page
