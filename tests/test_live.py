"""examples/live end to end: the page in headless Chromium, the app served by uvicorn.

Tokens appear before the reply is whole, the Approve and Deny buttons decide
the held call and the run goes on, and closing the page cancels the run.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .test_report import browser  # noqa: F401 - a fixture

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Browser, Page

#: True once the first tokens of a reply are on the page.
STREAMING = "(document.querySelector('.reply')?.textContent.length ?? 0) > 0"
APP = Path(__file__).parent.parent / "examples" / "live" / "app.py"


def load_app_module() -> Any:
    """examples/live/app.py, imported from its path (examples are not a package)."""
    spec = importlib.util.spec_from_file_location("live_app", APP)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The app on a free port of 127.0.0.1, served by uvicorn in a thread; its base URL."""
    uvicorn = pytest.importorskip("uvicorn")
    app = load_app_module().create_app(delay=0.03)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    serving = uvicorn.Server(config)
    thread = threading.Thread(target=serving.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if serving.started:
            break
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}"
    serving.should_exit = True
    thread.join(5)
    sock.close()


def opened(browser: Browser, server: str) -> Page:  # noqa: F811 - the fixture's name
    """The page, its run started."""
    page = browser.new_page()
    page.on("pageerror", lambda error: pytest.fail(f"page error: {error}"))
    page.goto(f"{server}/?go=1")
    return page


def run_state(server: str, run_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{server}/runs/{run_id}") as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


@pytest.mark.slow
def test_tokens_arrive_before_the_reply_and_approve_goes_on(
    browser: Browser,  # noqa: F811 - the fixture
    server: str,
) -> None:
    """The first tokens show while the model still streams; Approve runs the transfer."""
    page = opened(browser, server)
    page.wait_for_function(STREAMING)
    log = page.inner_text("#log")
    assert "model_replied" not in log  # the reply is not whole yet
    assert page.inner_text("#state") == "awaiting_model"
    assert page.evaluate("document.querySelector('#diagram .lit') !== null")
    page.click("#approve-c2", timeout=10_000)
    page.wait_for_function("document.querySelector('#done').textContent.length > 0", timeout=10_000)
    assert page.inner_text("#done").startswith("Run finished: Done: 42 euros went to Ada")
    log = page.inner_text("#log")
    assert 'tool_returned): transfer → "sent 42 euros to Ada"' in log
    assert "awaiting_approval → dispatching (approval_decided)" in log
    assert page.inner_text("#state") == "finished"
    page.close()


@pytest.mark.slow
def test_deny_goes_on_without_the_call(browser: Browser, server: str) -> None:  # noqa: F811
    """Deny answers the held call ``denied``; the model says nothing was sent."""
    page = opened(browser, server)
    page.click("#deny-c2", timeout=10_000)
    page.wait_for_function("document.querySelector('#done').textContent.length > 0", timeout=10_000)
    assert "nothing was sent" in page.inner_text("#done")
    page.close()


@pytest.mark.slow
def test_closing_the_page_cancels_the_run(
    browser: Browser,  # noqa: F811 - the fixture
    server: str,
) -> None:
    """Closing the page while a reply streams ends the run cancelled, its text kept."""
    page = opened(browser, server)
    page.wait_for_function(STREAMING)
    run_id = page.evaluate("runId")
    page.close()
    for _ in range(300):
        state = run_state(server, run_id)
        if state["state"] != "awaiting_model":
            break
        time.sleep(0.01)
    assert state["state"] == "cancelled"
    assert state["partial_text"].startswith("Let me")
