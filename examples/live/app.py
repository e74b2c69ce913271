"""A live page for a run, as a user of agentloop would build one.

One page streams a run over Server-Sent Events: the model's tokens as they
arrive, each transition as it happens (beside the run's path so far, its
current state lit), tool calls with their results, and, when a policy holds
calls, a choice per call and one button that sends the decisions. Closing the
page cancels the run, whatever state it is in.

    make live                          # a scripted streaming model, no key needed
    OPENAI_API_KEY=... make live       # the same page over OpenAI (Chat Completions)
    ANTHROPIC_API_KEY=... make live    # or over Anthropic (Messages)

Then open http://127.0.0.1:8000. The pieces:

- ``POST /runs`` starts a run and answers with its events (``text/event-stream``);
  the run lives as long as that response. ``run.astream()`` yields deltas and
  transitions in order; when it stops in ``awaiting_approval`` the page shows
  the held calls.
- ``POST /runs/{id}/decisions`` decides every held call at once, each decision
  bound to the call's fingerprint, and ``run.adecide`` goes on. A held call of
  a child run (an agent tool's, ``Loop.as_tool``) is shown under its path and
  named by it (``"c1/k1"``); its decision is keyed by ``PendingCall.key``.
- ``GET /runs/{id}`` reads a run's state.

The page can move money, so nothing in a browser's reach is trusted: every
request must name a host of this app (no DNS rebinding), and every request
that changes anything must come from this app's own page (Origin), as JSON
(so that another site's page cannot send it without asking first), with the
token this page was served with, by POST. Those checks stop other sites'
pages; they do not tell people apart: any program on this machine can fetch
the page and its token. Serve it beyond loopback only behind a login.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import uuid
from typing import TYPE_CHECKING, Any, assert_never

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import agentloop
import agentloop.review
from agentloop import AsyncRun, Loop, PendingCall, State, ToolRegistry, Transition
from agentloop.streaming import (
    ArgumentsDelta,
    Delta,
    Discard,
    Nested,
    TextDelta,
    ToolCallStart,
    ToolProgress,
    UsageDelta,
    chunked,
)
from agentloop.testing import batch, call, final

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from starlette.requests import Request

Message = dict[str, Any]

# -- the agent: two tools, one of which a person must approve -------------------------------------

tools = ToolRegistry()


@tools.tool
def balance() -> int:
    """The account's balance, in euros."""
    return 1200


@tools.tool(policy=lambda call: agentloop.ask(f"send {call['arguments'].get('amount')} euros?"))
def transfer(amount: int, to: str) -> str:
    """Send ``amount`` euros to ``to``."""
    return f"sent {amount} euros to {to}"


def scripted(delay: float) -> Any:
    """A streaming model that plays a short story, one small chunk every ``delay`` seconds.

    It looks at the balance, then asks for two transfers in one reply: both
    wait for a person, who decides each.
    """

    async def model(history: list[Message]) -> AsyncIterator[Delta | Message]:
        results = [m for m in history if m["kind"] == "tool_result"]
        if not results:
            reply = batch(
                call("c1", "balance"), text="Let me look at the balance before I send anything."
            )
        elif len(results) == 1:
            reply = batch(
                call("c2", "transfer", amount=42, to="Ada"),
                call("c3", "transfer", amount=10, to="Bob"),
            )
        else:
            sent = [m["content"] for m in results[1:] if m["status"] == "ok"]
            reply = final(
                f"Done: {' and '.join(sent)}."
                if sent
                else "Nothing was approved, so nothing was sent."
            )
        for item in chunked(reply, size=3):
            await asyncio.sleep(delay)
            yield item

    return model


def model_from_environment(delay: float) -> Any:
    """OpenAI or Anthropic when a key is set (streaming), else the scripted model."""
    if os.environ.get("OPENAI_API_KEY"):
        import openai

        from agentloop.providers.openai import openai_chat

        return openai_chat(openai.AsyncOpenAI(), "gpt-4.1-mini", stream=True)
    if os.environ.get("ANTHROPIC_API_KEY"):
        import anthropic

        from agentloop.providers.anthropic import anthropic_messages

        return anthropic_messages(anthropic.AsyncAnthropic(), "claude-sonnet-4-5", stream=True)
    return scripted(delay)


# -- what a request must carry to change anything -------------------------------------------------


def page_tokens() -> tuple[Callable[[], str], Callable[[str], bool]]:
    """A maker of per-page tokens, and their check.

    A token is a random nonce and its HMAC under a key only this process
    knows: the server keeps no list of the tokens it handed out, and nobody
    else can make one.
    """
    key = secrets.token_bytes(32)

    def signed(nonce: str) -> str:
        return hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()

    def make() -> str:
        nonce = secrets.token_urlsafe(16)
        return f"{nonce}.{signed(nonce)}"

    def genuine(token: str) -> bool:
        nonce, _, mac = token.partition(".")
        return hmac.compare_digest(mac, signed(nonce))

    return make, genuine


async def posted(request: Request, token_ok: Callable[[str], bool]) -> Any:
    """The JSON this app's own page posted; else an ``HTTPException``, before anything changes.

    Starlette routes a GET to a POST-only route to 405, so a link, an image
    or a redirect changes nothing; the Host check is the middleware's.
    """
    # A browser names the page a request comes from in Origin, and no script can change it:
    # another site's page cannot pass for ours. None (not a browser's page) or "null" (a
    # sandboxed frame, a file) is refused too.
    origin = f"{request.url.scheme}://{request.headers.get('host')}"
    if request.headers.get("origin") != origin:
        got = request.headers.get("origin")
        raise HTTPException(403, f"expected a request from this page (Origin {origin}), got {got}")
    # A page may send text/plain or a form to any site without asking first; application/json
    # it may not: the browser asks this server first (a CORS preflight), and it never agrees.
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise HTTPException(415, f"expected Content-Type application/json, got {media or None}")
    # The token this page was served with: only a script on the page itself can read it.
    if not token_ok(request.headers.get("x-page-token", "")):
        raise HTTPException(403, "expected this page's token in X-Page-Token")
    try:
        return await request.json()
    except ValueError:
        raise HTTPException(400, "expected a JSON body") from None


# -- one run on the page --------------------------------------------------------------------------


@attrs.define
class Live:
    """A run the page shows: the token of the page that started it, and its decision."""

    run: AsyncRun
    token: str
    decided: asyncio.Queue[Transition] = attrs.field(factory=asyncio.Queue)


def sse(event: str, data: object) -> str:
    """One Server-Sent Event."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def described(item: Delta | ToolProgress | Nested | Transition) -> tuple[str, object]:
    """A delta, a child run's item or a transition as the page's event name and data."""
    if isinstance(item, TextDelta):
        return "text", item.text
    if isinstance(item, ToolCallStart):
        return "call", {"index": item.index, "id": item.id, "name": item.name}
    if isinstance(item, ArgumentsDelta):
        return "arguments", {"index": item.index, "text": item.text}
    if isinstance(item, UsageDelta):
        return "usage", attrs.asdict(item)
    if isinstance(item, Discard):  # the reply streamed so far failed: the page drops it
        return "discard", {"error": item.error}
    if isinstance(item, ToolProgress):
        return "progress", {"id": item.call_id, "progress": item.progress, "total": item.total}
    if isinstance(item, Nested):  # a child run's (an agent tool's), under the calls it came by
        name, data = described(item.item)
        return "child", {"path": list(item.path), "event": name, "data": data}
    if isinstance(item, Transition):
        return "transition", {
            "source": item.source.value,
            "dest": item.dest.value,
            "trigger": item.trigger.value,
            # The results it put in the history: a batch's, all at once, when its last call returns.
            "results": [
                {key: m[key] for key in ("id", "name", "status", "content")}
                for m in item.appended
                if m["kind"] == "tool_result"
            ],
        }
    assert_never(item)  # mypy: every kind of item has its event


def named(pending: PendingCall) -> str:
    """How the page names a held call: its id, or a child run's call's path (``"c1/k1"``)."""
    return "/".join((*pending.path, pending.call_id))


def drawn(run: AsyncRun) -> str:
    """The run's path so far, drawn as the report draws it; its states as boxes without Graphviz.

    A drawing takes a millisecond or two, so it is made in place, after each transition.
    """
    try:
        svg = agentloop.review.path_svg(run)
        return svg[svg.index("<svg") :]  # inlined: no XML prolog
    except agentloop.review.SVGUnavailableError:
        states = dict.fromkeys([State.AWAITING_MODEL, *(event.dest for event in run.events)])
        return "".join(f'<span class="box">{state.value}</span>' for state in states)


def create_app(
    *,
    delay: float = 0.05,
    model: Any = None,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    tools: ToolRegistry = tools,
) -> Starlette:
    """The app: the page, its runs and their decisions. ``hosts``: the names it answers to.

    ``app.state.runs`` holds every run it started, by id. ``tools``: its runs' tools.
    """
    loop = Loop(model or model_from_environment(delay), tools=tools)
    runs: dict[str, Live] = {}
    new_token, genuine = page_tokens()

    async def page(request: Request) -> HTMLResponse:
        headers = {
            # No other site may frame the page, and so trick a click on its buttons.
            "content-security-policy": "frame-ancestors 'none'",
            "cache-control": "no-store",  # a token per page served
        }
        return HTMLResponse(PAGE.replace("{token}", new_token()), headers=headers)

    async def start(request: Request) -> StreamingResponse:
        said = await posted(request, genuine)
        question = said.get("question") if isinstance(said, dict) else None
        if not isinstance(question, str) or not question.strip():
            raise HTTPException(400, f"expected {{'question': text}}, got {said!r:.80}")
        token = request.headers["x-page-token"]
        headers = {"cache-control": "no-store"}
        return StreamingResponse(
            events(question, token), media_type="text/event-stream", headers=headers
        )

    async def events(question: str, token: str) -> AsyncIterator[str]:
        """The run's events. It starts here, so whatever ends this response ends the run."""
        run_id, cancel = uuid.uuid4().hex, agentloop.CancelToken()
        live = runs[run_id] = Live(loop.astart(question, cancel=cancel), token)
        run = live.run
        try:
            yield sse("run", {"id": run_id, "question": question})
            yield sse("path", drawn(run))
            while True:
                # Closing it at once (aclosing) ends a run left mid-reply, not later.
                async with contextlib.aclosing(run.astream()) as items:
                    async for item in items:
                        yield sse(*described(item))
                        if isinstance(item, Transition):
                            yield sse("path", drawn(run))
                if run.state is not State.AWAITING_APPROVAL:
                    break
                yield sse(
                    "pending",
                    [
                        {
                            "id": named(p),
                            "path": list(p.path),  # a child run's call: the calls it is under
                            "name": p.name,
                            "arguments": p.arguments,
                            "why": p.reason,
                            "fingerprint": p.fingerprint,
                        }
                        for p in run.pending
                    ],
                )
                yield sse(*described(await live.decided.get()))
                yield sse("path", drawn(run))
            result = run.result()
            yield sse("done", {"status": result.status.value, "output": result.output})
        finally:
            # The page went away (closed, reloaded, or it started another run). A run that
            # streams or runs a tool was interrupted above; one that waits for a person awaits
            # nothing here, so the token ends it, at the step afinish() takes at once.
            if not run.done:
                cancel.cancel()
                await run.afinish()

    async def decide(request: Request) -> Response:
        said = await posted(request, genuine)
        # Only the page that started a run decides it; other pages' runs are not even named.
        live = runs.get(request.path_params["run_id"])
        if live is None or not hmac.compare_digest(request.headers["x-page-token"], live.token):
            raise HTTPException(404, "this page started no run of that id")
        # Each decision names the fingerprint of the call it is about: never "whatever waits".
        if not isinstance(said, dict) or not all(
            isinstance(each, dict)
            and type(each.get("approve")) is bool
            and type(each.get("fingerprint")) is str
            for each in said.values()
        ):
            expected = "{call_id: {'approve': true | false, 'fingerprint': the call's}}"
            raise HTTPException(400, f"expected {expected}, got {said!r:.80}")
        # adecide checks the rest, and refuses without changing anything: an undecided or
        # unknown call, a fingerprint that is not the held call's (a decision is about
        # exactly the call the page showed), a run that no longer waits.
        keys = {named(p): p.key for p in live.run.pending}  # a child's call: by its path
        try:
            transition = await live.run.adecide(
                {
                    keys.get(name, name): agentloop.approve(fingerprint=each["fingerprint"])
                    if each["approve"]
                    else agentloop.deny("denied on the page", fingerprint=each["fingerprint"])
                    for name, each in said.items()
                }
            )
        except (agentloop.InvalidStateError, ValueError) as exc:
            raise HTTPException(409, str(exc)) from None
        live.decided.put_nowait(transition)
        return Response(status_code=204)

    async def state(request: Request) -> JSONResponse:
        live = runs.get(request.path_params["run_id"])
        if live is None:
            raise HTTPException(404, "no such run")
        events = live.run.events
        return JSONResponse(
            {
                "state": live.run.state.value,
                "partial_text": events[-1].partial_text if events else None,
            }
        )

    app = Starlette(
        routes=[
            Route("/", page),
            Route("/runs", start, methods=["POST"]),
            Route("/runs/{run_id}/decisions", decide, methods=["POST"]),
            Route("/runs/{run_id}", state),
        ],
        # A page that rebinds its own name to this machine's address reaches the app as
        # same-origin: only the name it was asked by (Host) tells it apart.
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts))],
    )
    app.state.runs = runs
    return app


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentloop, live</title>
<meta name="page-token" content="{token}">
<style>
 body { font: 15px system-ui, sans-serif; margin: 1.5em; max-width: 75em;
        display: grid; grid-template-columns: minmax(0, 1fr) 30em; gap: 0 2em; }
 main { grid-column: 1; } aside { grid-column: 2; grid-row: 1 / span 2; }
 #diagram svg { display: block; max-width: 100%; height: auto; }
 .lit polygon, .lit ellipse, .lit path { fill: #ffd54f; }
 .box { display: inline-block; border: 1px solid #888; padding: .2em .5em; margin: .1em; }
 .lit.box { background: #ffd54f; }
 #log li { font-family: ui-monospace, monospace; font-size: 13px; }
 .reply { white-space: pre-wrap; border-left: 3px solid #4a90d9; padding-left: .6em; }
 .ask label { margin-left: .8em; }
</style></head>
<body>
<main>
<h1>agentloop, live</h1>
<form id="ask"><input name="question" size="50" value="Send 42 euros to Ada and 10 to Bob.">
<button>Run</button></form>
<p>State: <b id="state">(not started)</b></p>
<div id="replies"></div>
<form id="decide" hidden><div id="pending"></div>
<button id="send">Send the decisions</button></form>
<ol id="log"></ol>
<p id="done"></p>
</main>
<aside><div id="diagram"></div></aside>
<script>
"use strict";
// Every request that changes something carries this page's token, as JSON, by POST.
const HEADERS = {"content-type": "application/json",
                 "x-page-token": document.querySelector("meta[name=page-token]").content};
let running = null, runId = null, reply = null, calls = {}, pending = [];
const $ = (id) => document.getElementById(id);
function light(state) {
  $("state").textContent = state;
  for (const node of document.querySelectorAll("#diagram .node, #diagram .box")) {
    const title = node.querySelector("title");
    node.classList.toggle("lit", (title ? title.textContent : node.textContent) === state);
  }
}
function line(text) {
  const li = document.createElement("li"); li.textContent = text; $("log").append(li);
}
function currentReply() {
  if (!reply) {
    reply = document.createElement("p"); reply.className = "reply"; $("replies").append(reply);
  }
  return reply;
}
const on = {  // what each event of the run does to the page
  run(r) { runId = r.id; light("awaiting_model"); },
  path(svg) { $("diagram").innerHTML = svg; light($("state").textContent); },
  text(t) { currentReply().append(t); },
  call(c) {  // name(arguments): the arguments stream into their own span, between the brackets
    const code = document.createElement("code"), args = document.createElement("span");
    code.append(" " + c.name + "(", args, ")");
    calls[c.index] = args; currentReply().append(code);
  },
  arguments(a) { calls[a.index].textContent += a.text; },
  transition(t) {
    if (t.trigger === "model_replied") { reply = null; calls = {}; }
    line(t.source + " → " + t.dest + " (" + t.trigger + ")");
    for (const r of t.results) {
      line(r.name + " (" + r.id + ") " + r.status + ": " + JSON.stringify(r.content));
    }
    light(t.dest);
  },
  pending(held) {  // one choice per held call; the run goes on once every call is decided
    pending = held; $("pending").textContent = "";
    for (const p of held) {
      const div = document.createElement("div"); div.className = "ask";
      const under = p.path.length ? " (in " + p.path.join(" / ") + ")" : "";  // a child's call
      div.append(p.name + " " + JSON.stringify(p.arguments) + under + ": " + p.why);
      for (const what of ["approve", "deny"]) {
        const label = document.createElement("label"), input = document.createElement("input");
        Object.assign(input, {type: "radio", name: p.id, value: what, id: what + "-" + p.id,
                              required: true});
        label.append(input, what === "approve" ? " Approve" : " Deny"); div.append(label);
      }
      $("pending").append(div);
    }
    $("decide").hidden = false;
  },
  usage() {},
  progress() {},
  child(c) {  // a child run's item (an agent tool's): its transitions, under its call
    if (c.event === "transition") {
      line("  " + c.path.join("/") + ": " + c.data.source + " → " + c.data.dest);
    }
  },
  discard(d) {  // the reply streamed so far failed mid-way: drop its text; a retry streams afresh
    if (reply) reply.remove();
    reply = null; calls = {};
    line("reply dropped: " + d.error);
  },
  done(d) {
    light(d.status); $("done").textContent = "Run " + d.status + (d.output ? ": " + d.output : "");
  },
};
async function decide(event) {
  event.preventDefault();
  const chosen = new FormData($("decide")), decisions = {};
  for (const p of pending) {  // each decision names its call's fingerprint: exactly the call shown
    decisions[p.id] = {approve: chosen.get(p.id) === "approve", fingerprint: p.fingerprint};
  }
  const answer = await fetch("/runs/" + runId + "/decisions",
                             {method: "POST", headers: HEADERS, body: JSON.stringify(decisions)});
  if (answer.ok) { $("decide").hidden = true; } else { line("refused: " + await answer.text()); }
}
async function start(question) {
  if (running) running.abort();  // the old run's response closes, and the server cancels it
  running = new AbortController();
  for (const id of ["replies", "log", "done", "diagram"]) $(id).textContent = "";
  $("decide").hidden = true; reply = null; calls = {};
  try {
    const answer = await fetch("/runs", {method: "POST", headers: HEADERS, signal: running.signal,
                                         body: JSON.stringify({question})});
    if (!answer.ok) { $("done").textContent = "Refused: " + await answer.text(); return; }
    // Server-Sent Events over a POST: "event: name\\ndata: json\\n\\n", read as they come.
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += value;
      for (let end; (end = buffer.indexOf("\\n\\n")) >= 0; buffer = buffer.slice(end + 2)) {
        const [name, data] = buffer.slice(0, end).split("\\n");
        on[name.slice("event: ".length)](JSON.parse(data.slice("data: ".length)));
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") throw error;
  }
}
$("ask").onsubmit = (e) => { e.preventDefault(); start(new FormData(e.target).get("question")); };
$("decide").onsubmit = decide;
if (new URLSearchParams(location.search).has("go")) start($("ask").question.value);
</script>
</body></html>
"""

app = create_app()

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
