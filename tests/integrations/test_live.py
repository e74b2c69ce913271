"""examples/live end to end: served by uvicorn on loopback, driven by raw requests and Chromium.

Raw HTTP requests (the fast tier) try, one check at a time, each way another
site could act through a visitor's browser: another host name (DNS
rebinding), another or no Origin, a body that is not JSON, a GET, a missing or
wrong token, and a decision about another call than the held one. Each is
refused, and nothing changes: no run starts, a waiting run still waits. They
also play the page's own flow: two held calls decided at once, the page
closed while a run waits for a person, which cancels it, and a reply that
broke off mid-stream followed by its ``discard``.

Headless Chromium (the long tier) plays the page itself: tokens appear before
the reply is whole, the run's path is drawn and its state lit, two held calls
are decided from the page, a reply that broke off is dropped from the page,
and closing the page cancels the run. A page of
another site (another loopback address) and a page on a rebound name try to
start and approve runs, and fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import http.server
import importlib.util
import json
import re
import socket
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from agentloop import Loop, ToolRegistry
from agentloop._core.approval import call_fingerprint
from agentloop.models import fallback
from agentloop.streaming import TextDelta
from agentloop.testing import ScriptedModel, call, final
from tests.review.test_report import chromium
from tests.review.test_trace import renderer  # noqa: F401 - a fixture
from tests.support import ROOT

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from playwright.sync_api import Browser, Page, Response

APP = ROOT / "examples" / "live" / "app.py"
#: True once the first tokens of a reply are on the page.
STREAMING = "(document.querySelector('.reply')?.textContent.length ?? 0) > 0"
#: True once the run is over on the page.
DONE = "document.querySelector('#done').textContent.length > 0"


def load_app_module() -> Any:
    """examples/live/app.py, imported from its path (examples are not a package)."""
    spec = importlib.util.spec_from_file_location("live_app", APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytest.importorskip("starlette")  # the live extra; the test tools have it
LIVE = load_app_module()


@attrs.frozen
class Served:
    """The app, served by uvicorn on ``port`` of 127.0.0.1."""

    app: Any
    port: int

    @property
    def url(self) -> str:
        """Its address, which is also its pages' Origin."""
        return f"http://127.0.0.1:{self.port}"

    def runs(self) -> dict[str, Any]:
        """Every run it started, by id."""
        return self.app.state.runs  # type: ignore[no-any-return]


@contextlib.contextmanager
def serving(app: Any) -> Iterator[int]:
    """``app`` (ASGI) on a free port of 127.0.0.1, served by uvicorn in a thread; the port."""
    uvicorn = pytest.importorskip("uvicorn")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()


@pytest.fixture(scope="module")
def quick() -> Iterator[Served]:
    """The app over the scripted model with no delay: raw requests drive it."""
    app = LIVE.create_app(delay=0)
    with serving(app) as port:
        yield Served(app, port)


@pytest.fixture(scope="module")
def server() -> Iterator[Served]:
    """The app over the scripted model, a chunk every 30 ms: a page can watch it stream."""
    app = LIVE.create_app(delay=0.03)
    with serving(app) as port:
        yield Served(app, port)


# -- raw requests ---------------------------------------------------------------------------------


@attrs.frozen
class Answer:
    """What the app answered a request."""

    status: int
    headers: dict[str, str]
    body: str


def send(
    served: Served,
    method: str,
    path: str,
    body: object = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """One request, exactly as given (``Host`` too, when ``headers`` has one); its answer."""
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        data = None if body is None else body if isinstance(body, str) else json.dumps(body)
        connection.request(method, path, data, headers or {})
        response = connection.getresponse()
        got = {name.lower(): value for name, value in response.getheaders()}
        return Answer(response.status, got, response.read().decode())
    finally:
        connection.close()


def page_token(served: Served) -> str:
    """The token of a page freshly served."""
    answer = send(served, "GET", "/")
    found = re.search(r'<meta name="page-token" content="([^"]+)">', answer.body)
    assert found is not None
    return found[1]


def from_page(served: Served, token: str) -> dict[str, str]:
    """What the page's own requests carry: its Origin, JSON, its token."""
    return {"Origin": served.url, "Content-Type": "application/json", "X-Page-Token": token}


class Stream:
    """A run started as the page starts one (``POST /runs``), its events read as they come."""

    def __init__(
        self, served: Served, token: str, question: str = "Send 42 euros to Ada and 10 to Bob."
    ) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        self.connection.request(
            "POST", "/runs", json.dumps({"question": question}), from_page(served, token)
        )
        self.response = self.connection.getresponse()
        assert self.response.status == 200
        assert self.response.getheader("content-type", "").startswith("text/event-stream")
        #: Every event read so far, in order.
        self.seen: list[tuple[str, Any]] = []

    def until(self, wanted: str) -> Any:
        """Read events up to the next ``wanted`` one; its data."""
        while True:
            lines = []
            while line := self.response.readline().decode().rstrip("\n"):
                lines.append(line)
            assert lines, f"the stream ended before {wanted!r}; read {self.seen[-3:]}"
            name, data = lines[0].removeprefix("event: "), lines[1].removeprefix("data: ")
            self.seen.append((name, json.loads(data)))
            if name == wanted:
                return self.seen[-1][1]

    def close(self) -> None:
        """Hang up, as a closed page does."""
        self.response.close()
        self.connection.close()


@attrs.frozen
class Waiting:
    """A run that waits for a person to decide its two held calls."""

    stream: Stream
    token: str
    run_id: str
    held: list[dict[str, Any]]

    def decisions(self, **approve: bool) -> dict[str, Any]:
        """A decision per held call (approve it unless told), each naming its fingerprint."""
        return {
            p["id"]: {"approve": approve.get(p["id"], True), "fingerprint": p["fingerprint"]}
            for p in self.held
        }


@pytest.fixture
def waiting(quick: Served) -> Iterator[Waiting]:
    """A run of ``quick`` stopped where a person must decide c2 and c3."""
    token = page_token(quick)
    stream = Stream(quick, token)
    run_id = stream.until("run")["id"]
    held = stream.until("pending")
    yield Waiting(stream, token, run_id, held)
    stream.close()


def still_waiting(served: Served, waiting: Waiting) -> None:
    """The run still waits on the same two calls, and no transfer ran."""
    run = served.runs()[waiting.run_id].run
    assert run.state == "awaiting_approval"
    assert [p.fingerprint for p in run.pending] == [p["fingerprint"] for p in waiting.held]
    assert [m["name"] for m in run.transcript if m["kind"] == "tool_result"] == ["balance"]


def state_when_settled(served: Served, run_id: str, leaving: str) -> str:
    """The run's state once it has left ``leaving`` (within 5 s)."""
    run = served.runs()[run_id].run
    for _ in range(500):
        if run.state != leaving:
            break
        time.sleep(0.01)
    return str(run.state.value)


def test_the_page_has_a_fresh_token_and_no_other_site_may_frame_it(quick: Served) -> None:
    """Each page served has its own token; a frame-ancestors policy forbids framing it."""
    answer = send(quick, "GET", "/")

    assert answer.status == 200
    assert answer.headers["content-security-policy"] == "frame-ancestors 'none'"
    assert answer.headers["cache-control"] == "no-store"
    assert page_token(quick) != page_token(quick)


def test_two_held_calls_are_decided_together(quick: Served, waiting: Waiting) -> None:
    """Both held calls are shown with their fingerprints; one decision each, sent at once.

    A decision about one of the two is refused (the run would wait for ever):
    the run still waits, and goes on once each call is decided.
    """
    assert [(p["id"], p["arguments"], p["fingerprint"]) for p in waiting.held] == [
        (
            "c2",
            {"amount": 42, "to": "Ada"},
            call_fingerprint("transfer", {"amount": 42, "to": "Ada"}),
        ),
        (
            "c3",
            {"amount": 10, "to": "Bob"},
            call_fingerprint("transfer", {"amount": 10, "to": "Bob"}),
        ),
    ]
    url = f"/runs/{waiting.run_id}/decisions"
    headers = from_page(quick, waiting.token)

    partial = {"c2": waiting.decisions()["c2"]}
    refused = send(quick, "POST", url, partial, headers)
    assert (refused.status, "missing: ['c3']" in refused.body) == (409, True)
    still_waiting(quick, waiting)

    assert send(quick, "POST", url, waiting.decisions(c3=False), headers).status == 204
    assert waiting.stream.until("done") == {
        "status": "finished",
        "output": "Done: sent 42 euros to Ada.",
    }
    results = [m for m in quick.runs()[waiting.run_id].run.transcript if m["kind"] == "tool_result"]
    assert [(m["id"], m["status"], m["content"]) for m in results] == [
        ("c1", "ok", 1200),
        ("c2", "ok", "sent 42 euros to Ada"),
        ("c3", "denied", "denied on the page"),
    ]
    again = send(quick, "POST", url, waiting.decisions(), headers)
    assert (again.status, "not awaiting approval" in again.body) == (409, True)


@pytest.fixture
def clerk() -> Iterator[Served]:
    """The app whose one tool is an agent (``Loop.as_tool``) that makes a transfer to approve."""
    child = Loop(
        ScriptedModel([call("k1", "transfer", amount=42, to="Ada"), final("sent it")]),
        tools=LIVE.tools,
    )
    model = ScriptedModel([call("c1", "clerk", input="send 42 to Ada"), final("The clerk did.")])
    tools = ToolRegistry([child.as_tool("clerk", "Ask the clerk to pay.")])
    app = LIVE.create_app(model=model, tools=tools)
    with serving(app) as port:
        yield Served(app, port)


def test_a_child_runs_held_call_is_shown_under_its_path_and_decided(clerk: Served) -> None:
    """The agent tool's child waits: its call is held on the page as c1/k1, decided as such."""
    token = page_token(clerk)
    stream = Stream(clerk, token)
    run_id = stream.until("run")["id"]
    (held,) = stream.until("pending")
    assert (held["id"], held["path"], held["name"], held["arguments"]) == (
        "c1/k1",
        ["c1"],
        "transfer",
        {"amount": 42, "to": "Ada"},
    )
    decision = {"approve": True, "fingerprint": held["fingerprint"]}
    url = f"/runs/{run_id}/decisions"
    refused = send(clerk, "POST", url, {"k1": decision}, from_page(clerk, token))
    assert (refused.status, "missing: [('c1', 'k1')]" in refused.body) == (409, True)
    assert send(clerk, "POST", url, {"c1/k1": decision}, from_page(clerk, token)).status == 204
    assert stream.until("done") == {"status": "finished", "output": "The clerk did."}
    stream.close()
    result = clerk.runs()[run_id].run.result()
    assert result.transcript[2]["content"] == "sent it"
    kid = result.children["c1"]
    assert [(m["id"], m["status"]) for m in kid.transcript if m["kind"] == "tool_result"] == [
        ("k1", "ok")
    ]


def test_the_page_draws_the_runs_path_as_it_goes(quick: Served, waiting: Waiting) -> None:
    """After each transition the page gets the run's path so far, as the report draws it."""
    paths = [data for name, data in waiting.stream.seen if name == "path"]
    transitions = [data for name, data in waiting.stream.seen if name == "transition"]

    assert len(paths) == len(transitions) + 1  # and one before the first
    assert paths[0].startswith("<svg")
    assert "<title>awaiting_approval</title>" not in paths[-2]  # drawn once the run is there
    last = paths[-1]
    for state in ("awaiting_model", "validating", "dispatching", "awaiting_approval"):
        assert f"<title>{state}</title>" in last
    assert "<title>finished</title>" not in last  # only the states the run was in
    width, height = (
        float(n) for n in re.findall(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"', last)[0]
    )
    assert width < 600
    assert height < 900


def test_without_graphviz_the_path_is_its_states_as_boxes(
    no_pygraphviz: None, quick: Served
) -> None:
    """With no SVG renderer the page still gets the states the run was in, in order."""
    stream = Stream(quick, page_token(quick))
    stream.until("pending")
    stream.close()

    paths = [data for name, data in stream.seen if name == "path"]
    assert paths[0] == '<span class="box">awaiting_model</span>'
    assert paths[-1] == "".join(
        f'<span class="box">{state}</span>'
        for state in ("awaiting_model", "validating", "dispatching", "awaiting_approval")
    )


def test_closing_the_page_while_calls_wait_cancels_the_run(quick: Served) -> None:
    """A run that waits for a person awaits nothing: the page going away still ends it cancelled.

    Both held calls are answered ``cancelled``, and neither runs.
    """
    stream = Stream(quick, page_token(quick))
    run_id = stream.until("run")["id"]
    stream.until("pending")
    stream.close()

    assert state_when_settled(quick, run_id, leaving="awaiting_approval") == "cancelled"
    results = [m for m in quick.runs()[run_id].run.transcript if m["kind"] == "tool_result"]
    assert [(m["id"], m["status"]) for m in results] == [
        ("c1", "ok"),
        ("c2", "cancelled"),
        ("c3", "cancelled"),
    ]


def test_closing_the_page_while_the_model_is_asked_cancels_the_run() -> None:
    """The page going away while the model thinks interrupts it: the run ends cancelled."""
    asked = threading.Event()

    async def unanswered(history: list[dict[str, Any]]) -> dict[str, Any]:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    app = LIVE.create_app(model=unanswered)
    with serving(app) as port:
        served = Served(app, port)
        stream = Stream(served, page_token(served))
        run_id = stream.until("run")["id"]
        assert asked.wait(5)
        stream.close()

        assert state_when_settled(served, run_id, leaving="awaiting_model") == "cancelled"
        assert served.runs()[run_id].run.steps == 1


#: What the model that fails mid-reply streams before its connection drops.
DROPPED = "I will send 500 euros to"


@pytest.fixture(scope="module")
def flaky() -> Iterator[Served]:
    """The app over a model whose reply breaks off mid-stream, then the scripted model (a
    fallback, asked at once): a reply's text is streamed, then void."""

    async def breaking(history: list[dict[str, Any]]) -> AsyncIterator[TextDelta]:
        yield TextDelta(text=DROPPED)
        raise ConnectionError("the peer closed the connection")

    app = LIVE.create_app(model=fallback(breaking, LIVE.scripted(0), names=["flaky", "scripted"]))
    with serving(app) as port:
        yield Served(app, port)


def test_a_reply_that_fails_mid_stream_is_discarded_before_the_next_one(flaky: Served) -> None:
    """The text of a reply that broke off is followed by a ``discard`` event naming why, before
    the failed step's transition; the next model's reply streams after it."""
    stream = Stream(flaky, page_token(flaky))
    stream.until("pending")
    stream.close()

    names = [name for name, _ in stream.seen]
    assert names[:5] == ["run", "path", "text", "discard", "transition"]
    assert stream.seen[2][1] == DROPPED
    assert stream.seen[3][1] == {"error": "ConnectionError: the peer closed the connection"}
    assert stream.seen[4][1]["trigger"] == "model_raised"
    retried = names.index("transition", 5)
    text = "".join(data for name, data in stream.seen[5:retried] if name == "text")
    assert text == "Let me look at the balance before I send anything."
    assert names.count("discard") == 1


def tried(served: Served, waiting: Waiting, headers: dict[str, str]) -> tuple[Answer, Answer]:
    """Start a run, and approve both waiting calls, with ``headers``; nothing may change."""
    before = len(served.runs())
    started = send(served, "POST", "/runs", {"question": "Send 500 euros to Eve."}, headers)
    url = f"/runs/{waiting.run_id}/decisions"
    decided = send(served, "POST", url, waiting.decisions(), headers)

    assert len(served.runs()) == before
    still_waiting(served, waiting)
    return started, decided


def replaced(headers: dict[str, str], name: str, value: str | None) -> dict[str, str]:
    """``headers`` with ``name`` set to ``value``, or left out for None."""
    changed = {key: given for key, given in headers.items() if key != name}
    if value is not None:
        changed[name] = value
    return changed


def test_another_host_name_is_refused(quick: Served, waiting: Waiting) -> None:
    """DNS rebinding: a page whose own name now points here is same-origin, but its Host says so.

    It can neither read a page (and its token), nor start a run, nor read
    one, nor decide one, even holding a genuine token and the fingerprints.
    """
    rebound = f"rebound.example:{quick.port}"
    headers = {**from_page(quick, waiting.token), "Host": rebound, "Origin": f"http://{rebound}"}

    page = send(quick, "GET", "/", headers={"Host": rebound})
    assert (page.status, "page-token" in page.body) == (400, False)
    assert send(quick, "GET", f"/runs/{waiting.run_id}", headers={"Host": rebound}).status == 400
    started, decided = tried(quick, waiting, headers)
    assert (started.status, decided.status) == (400, 400)
    # The names it answers to: 127.0.0.1 and localhost.
    assert send(quick, "GET", "/", headers={"Host": f"localhost:{quick.port}"}).status == 200


@pytest.mark.parametrize(
    "origin",
    [
        None,
        "null",
        "http://127.0.0.2:{port}",
        "http://127.0.0.1:1",
        "http://localhost:{port}",
        "https://127.0.0.1:{port}",
    ],
)
def test_another_or_no_origin_is_refused(
    origin: str | None, quick: Served, waiting: Waiting
) -> None:
    """A request not sent by this page (another site's, a sandboxed frame's, none) is refused."""
    given = origin and origin.format(port=quick.port)
    headers = replaced(from_page(quick, waiting.token), "Origin", given)

    started, decided = tried(quick, waiting, headers)
    assert (started.status, decided.status) == (403, 403)
    assert started.body == f"expected a request from this page (Origin {quick.url}), got {given}"


@pytest.mark.parametrize(
    "media",
    [
        None,
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
    ],
)
def test_a_body_that_is_not_declared_json_is_refused(
    media: str | None, quick: Served, waiting: Waiting
) -> None:
    """A page may send these to any site without asking first: JSON text in them is not read."""
    headers = replaced(from_page(quick, waiting.token), "Content-Type", media)

    started, decided = tried(quick, waiting, headers)
    assert (started.status, decided.status) == (415, 415)
    assert started.body.startswith("expected Content-Type application/json, got ")


def test_a_get_changes_nothing(quick: Served, waiting: Waiting) -> None:
    """A link, an image or a redirect (GET) starts no run and decides nothing."""
    before = len(quick.runs())
    question = urllib.parse.quote("Send 500 euros to Eve.")
    decisions = urllib.parse.quote(json.dumps(waiting.decisions()))

    assert send(quick, "GET", f"/runs?question={question}").status == 405
    assert send(quick, "GET", f"/events?question={question}").status == 404
    assert send(quick, "GET", f"/?question={question}").status == 200
    url = f"/runs/{waiting.run_id}/decisions?decisions={decisions}"
    assert send(quick, "GET", url).status == 405
    assert json.loads(send(quick, "GET", f"/runs/{waiting.run_id}").body)["state"] == (
        "awaiting_approval"
    )

    assert len(quick.runs()) == before
    still_waiting(quick, waiting)


def test_a_missing_or_wrong_token_is_refused(quick: Served, waiting: Waiting) -> None:
    """Only this app's pages have its tokens; a run is decided only by the page that started it."""
    nonce = waiting.token.partition(".")[0]
    made_elsewhere = LIVE.page_tokens()[0]()  # under another process's key
    for token in (None, "", "garbage", f"{nonce}.{'0' * 64}", nonce, made_elsewhere):
        headers = replaced(from_page(quick, waiting.token), "X-Page-Token", token)
        started, decided = tried(quick, waiting, headers)
        assert (started.status, decided.status) == (403, 403)
        assert started.body == "expected this page's token in X-Page-Token"

    another_page = from_page(quick, page_token(quick))
    url = f"/runs/{waiting.run_id}/decisions"
    decided = send(quick, "POST", url, waiting.decisions(), another_page)
    assert (decided.status, decided.body) == (404, "this page started no run of that id")
    still_waiting(quick, waiting)


def test_a_decision_names_the_held_call(quick: Served, waiting: Waiting) -> None:
    """A decision must carry its call's fingerprint: not another call's, not none."""
    url = f"/runs/{waiting.run_id}/decisions"
    headers = from_page(quick, waiting.token)
    right = waiting.decisions()
    swapped = {
        "c2": {**right["c2"], "fingerprint": right["c3"]["fingerprint"]},
        "c3": {**right["c3"], "fingerprint": right["c2"]["fingerprint"]},
    }
    changed = {
        **right,
        "c2": {
            "approve": True,
            "fingerprint": call_fingerprint("transfer", {"amount": 4200, "to": "Eve"}),
        },
    }
    extra = {**right, "c9": right["c2"]}

    for wrong in (swapped, changed, extra):
        refused = send(quick, "POST", url, wrong, headers)
        assert refused.status == 409, refused.body
        still_waiting(quick, waiting)
    unbound: list[object] = [
        {**right, "c2": {"approve": True}},
        {**right, "c2": {"approve": True, "fingerprint": None}},
        {**right, "c2": {"approve": "yes", "fingerprint": right["c2"]["fingerprint"]}},
        {**right, "c2": "approve"},
        ["c2", "c3"],
    ]
    for shape in unbound:
        refused = send(quick, "POST", url, shape, headers)
        assert (refused.status, "expected {call_id: {'approve'" in refused.body) == (400, True)
        still_waiting(quick, waiting)

    assert send(quick, "POST", url, right, headers).status == 204
    assert (
        waiting.stream.until("done")["output"]
        == "Done: sent 42 euros to Ada and sent 10 euros to Bob."
    )


# -- in Chromium ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium in which rebound.test resolves to 127.0.0.1: an attacker's name, rebound here."""
    with chromium("--host-resolver-rules=MAP rebound.test 127.0.0.1") as launched:
        yield launched


def opened(browser: Browser, served: Served) -> Page:
    """The page, its run started."""
    page = browser.new_page()
    page.on("pageerror", lambda error: pytest.fail(f"page error: {error}"))
    page.goto(f"{served.url}/?go=1")
    return page


@pytest.mark.slow
def test_the_page_streams_and_decides_two_held_calls(
    browser: Browser,
    server: Served,
) -> None:
    """Tokens show while the model still streams; both held calls are decided, then sent at once."""
    page = opened(browser, server)
    # Read in the page as the first tokens show (it polls every frame): the reply is not whole.
    first = page.wait_for_function(
        f"({STREAMING}) && {{log: document.querySelector('#log').textContent, "
        "state: document.querySelector('#state').textContent}"
    ).json_value()
    assert first == {"log": "", "state": "awaiting_model"}

    page.wait_for_selector("#approve-c3", timeout=10_000)
    calls = page.eval_on_selector_all(".reply code", "codes => codes.map(c => c.textContent)")
    assert calls == [
        " balance({})",
        ' transfer({"amount":42,"to":"Ada"})',
        ' transfer({"amount":10,"to":"Bob"})',
    ]
    lit = page.eval_on_selector_all(
        "#diagram .lit title", "titles => titles.map(t => t.textContent)"
    )
    assert lit == ["awaiting_approval"]
    box = page.locator("#diagram svg").bounding_box()
    assert box is not None
    assert box["height"] < page.viewport_size["height"]  # type: ignore[index]

    posts: list[str] = []
    page.on("request", lambda request: posts.append(request.url))
    page.click("#approve-c2")
    page.click("#send")  # c3 is not decided yet: the form is not sent
    assert posts == []
    page.click("#deny-c3")
    page.click("#send")
    page.wait_for_function(DONE, timeout=10_000)

    assert page.inner_text("#done") == "Run finished: Done: sent 42 euros to Ada."
    log = page.inner_text("#log")
    assert 'transfer (c2) ok: "sent 42 euros to Ada"' in log
    assert 'transfer (c3) denied: "denied on the page"' in log
    assert "awaiting_approval → dispatching (approval_decided)" in log
    assert page.inner_text("#state") == "finished"
    page.close()


@pytest.mark.slow
def test_the_page_drops_a_reply_that_failed_mid_stream(browser: Browser, flaky: Served) -> None:
    """The text of a reply that broke off leaves the page at its ``discard``, which the log
    names; the next model's reply is shown in its place."""
    page = opened(browser, flaky)
    page.wait_for_selector("#approve-c3", timeout=10_000)

    replies = page.eval_on_selector_all(".reply", "replies => replies.map(r => r.textContent)")
    assert replies == [
        "Let me look at the balance before I send anything. balance({})",
        ' transfer({"amount":42,"to":"Ada"}) transfer({"amount":10,"to":"Bob"})',
    ]
    log = page.inner_text("#log")
    assert "reply dropped: ConnectionError: the peer closed the connection" in log
    assert DROPPED not in page.inner_text("body")
    page.close()


@pytest.fixture(scope="module")
def stalled() -> Iterator[Served]:
    """The app over a model that streams a few words, then nothing: a reply that never ends."""

    async def model(history: list[dict[str, Any]]) -> AsyncIterator[TextDelta]:
        yield TextDelta(text="Let me look")
        await asyncio.Event().wait()

    app = LIVE.create_app(model=model)
    with serving(app) as port:
        yield Served(app, port)


@pytest.mark.slow
def test_closing_the_page_mid_reply_in_chromium_cancels_the_run(
    browser: Browser, stalled: Served
) -> None:
    """Closing the page while a reply streams ends the run cancelled, its text kept."""
    page = opened(browser, stalled)
    page.wait_for_function(STREAMING)
    run_id = page.evaluate("runId")
    page.close()

    assert state_when_settled(stalled, run_id, leaving="awaiting_model") == "cancelled"
    assert stalled.runs()[run_id].run.events[-1].partial_text == "Let me look"


@pytest.mark.slow
def test_closing_the_page_while_calls_wait_in_chromium_cancels_the_run(
    browser: Browser, server: Served
) -> None:
    """Closing the page while both calls wait for a person ends the run cancelled."""
    page = opened(browser, server)
    page.wait_for_selector("#approve-c3", timeout=10_000)
    run_id = page.evaluate("runId")
    page.close()

    assert state_when_settled(server, run_id, leaving="awaiting_approval") == "cancelled"
    assert server.runs()[run_id].run.events[-1].source == "awaiting_approval"


#: A page of another site. It learns (as if leaked) a waiting run's id, its calls'
#: fingerprints and even a genuine token, then tries every way a page has to start a
#: run and to approve those calls; ``outcomes`` is what it could tell of each.
ATTACK = """<!doctype html><html><head><meta charset="utf-8"><title>attack</title></head><body>
<iframe name="sink"></iframe><iframe id="framed"></iframe>
<script>
const q = new URLSearchParams(location.search), target = q.get("target");
const json = {"content-type": "application/json", "x-page-token": q.get("token")};
const start = JSON.stringify({question: "Send 500 euros to Eve."});
const decisions = q.get("decisions"), decide = target + "/runs/" + q.get("run") + "/decisions";
const outcomes = {};
async function attempt(name, url, init) {
  try {
    const answer = await fetch(url, init);
    outcomes[name] = answer.type === "opaque" ? "opaque" : answer.status;
  } catch (error) { outcomes[name] = error.name; }
}
function posted(action, name, value) {  // a form: sent anywhere, in text/plain without asking
  return new Promise((done) => {
    const form = Object.assign(document.createElement("form"),
                               {method: "POST", action, enctype: "text/plain", target: "sink"});
    form.append(Object.assign(document.createElement("input"), {name, value}));
    document.body.append(form);
    document.getElementsByName("sink")[0].onload = done; form.submit();
  });
}
(async () => {
  await attempt("read the page", target + "/", {});
  await attempt("read the run", target + "/runs/" + q.get("run"), {});
  await attempt("start, JSON", target + "/runs", {method: "POST", headers: json, body: start});
  const plain = {method: "POST", mode: "no-cors", headers: {"content-type": "text/plain"}};
  await attempt("start, text/plain", target + "/runs", {...plain, body: start});
  await attempt("start, GET", target + "/runs?question=Send+500+euros+to+Eve.", {mode: "no-cors"});
  await attempt("approve, JSON", decide, {method: "POST", headers: json, body: decisions});
  await attempt("approve, text/plain", decide, {...plain, body: decisions});
  await posted(target + "/runs", start.slice(0, -1) + ', "x": "', '"}');
  await posted(decide, decisions.slice(0, -1) + ', "x": "', '"}');
  await new Promise((done) => {  // the page in a frame, to trick a click on Approve
    const framed = document.getElementById("framed");
    framed.onload = done; framed.src = target + "/";
  });
  document.title = "done";
})();
</script></body></html>
"""


@contextlib.contextmanager
def attacker(host: str) -> Iterator[str]:
    """A plain web server on ``host`` that answers every GET with ``ATTACK``; its address."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = ATTACK.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    web = http.server.ThreadingHTTPServer((host, 0), Handler)
    thread = threading.Thread(target=web.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{web.server_address[1]}"
    finally:
        web.shutdown()
        web.server_close()


def attack(page: Page, where: str, target: str, waiting: Waiting) -> dict[str, Any]:
    """Open the attack page at ``where`` against ``target``; what it could tell of each try."""
    query = urllib.parse.urlencode(
        {
            "target": target,
            "run": waiting.run_id,
            "token": waiting.token,
            "decisions": json.dumps(waiting.decisions()),
        }
    )
    page.goto(f"{where}/attack?{query}")
    page.wait_for_function("document.title === 'done'", timeout=10_000)
    return page.evaluate("outcomes")  # type: ignore[no-any-return]


@pytest.mark.slow
def test_another_site_cannot_start_or_approve_a_run(
    browser: Browser,
    quick: Served,
    waiting: Waiting,
) -> None:
    """A page of another loopback origin can read nothing, start nothing and approve nothing."""
    before = len(quick.runs())
    page = browser.new_page()
    seen: dict[str, int] = {}

    def answered(response: Response) -> None:
        seen.setdefault(f"{response.request.method} {response.url}", response.status)

    page.on("response", answered)
    with attacker("127.0.0.2") as where:
        outcomes = attack(page, where, quick.url, waiting)

    assert outcomes == {
        "read the page": "TypeError",  # no CORS: another origin reads nothing here
        "read the run": "TypeError",
        "start, JSON": "TypeError",  # the preflight is not granted: never sent
        "start, text/plain": "opaque",  # sent, and refused: another Origin
        "start, GET": "opaque",
        "approve, JSON": "TypeError",
        "approve, text/plain": "opaque",
    }
    decide = f"{quick.url}/runs/{waiting.run_id}/decisions"
    assert seen[f"POST {quick.url}/runs"] == 403
    assert seen[f"GET {quick.url}/runs?question=Send+500+euros+to+Eve."] == 405
    assert seen[f"POST {decide}"] == 403
    framed = page.query_selector("#framed").content_frame()  # type: ignore[union-attr]
    assert framed is not None
    assert "page-token" not in framed.content()  # frame-ancestors 'none': not shown
    assert len(quick.runs()) == before
    still_waiting(quick, waiting)
    page.close()


@pytest.mark.slow
def test_a_rebound_name_cannot_start_or_approve_a_run(
    browser: Browser, quick: Served, waiting: Waiting
) -> None:
    """DNS rebinding: the attacker's page, then its name pointed here; same-origin, but refused.

    The attacker's own server (127.0.0.2) answers the first request for
    rebound.test; every later one reaches the app, under the rebound name, as
    same-origin: no preflight, and the answers readable. Host refuses them all.
    """
    before = len(quick.runs())
    rebound = f"http://rebound.test:{quick.port}"
    page = browser.new_page()
    with attacker("127.0.0.2") as where:
        page.route(f"{rebound}/attack*", lambda route: route.continue_(url=f"{where}/attack"))
        outcomes = attack(page, rebound, rebound, waiting)

    assert outcomes == {
        "read the page": 400,
        "read the run": 400,
        "start, JSON": 400,
        "start, text/plain": 400,
        "start, GET": 400,
        "approve, JSON": 400,
        "approve, text/plain": 400,
    }
    assert len(quick.runs()) == before
    still_waiting(quick, waiting)
    page.close()
