"""A live page for a run, as a user of agentloop would build one.

One page streams a run over Server-Sent Events: the model's tokens as they
arrive, each transition as it happens (with the state diagram's current state
lit), tool calls with their results, and, when a policy holds a call, Approve
and Deny buttons that decide it. Closing the page cancels the run.

    make live                          # a scripted streaming model, no key needed
    OPENAI_API_KEY=... make live       # the same page over OpenAI (Chat Completions)
    ANTHROPIC_API_KEY=... make live    # or over Anthropic (Messages)

Then open http://127.0.0.1:8000. The pieces: ``run.astream()`` yields deltas
and transitions in order; when it stops in ``awaiting_approval`` the page's
buttons POST the decisions, and ``run.adecide`` goes on. Starlette cancels the
response's task when the browser goes away: the cancellation reaches the
streaming model, which closes its stream, and the run ends ``cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from typing import TYPE_CHECKING, Any

import attrs
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import agentloop
import agentloop.review
from agentloop import AsyncRun, Loop, State, ToolRegistry, Transition
from agentloop.streaming import ArgumentsDelta, Delta, TextDelta, ToolCallStart, chunked
from agentloop.testing import batch, call, final

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

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
    """A streaming model that plays a short story, one small chunk every ``delay`` seconds."""

    async def model(history: list[Message]) -> AsyncIterator[Delta | Message]:
        results = [m for m in history if m["kind"] == "tool_result"]
        if not results:
            reply = batch(
                call("c1", "balance"), text="Let me look at the balance before I send anything."
            )
        elif len(results) == 1:
            reply = call("c2", "transfer", amount=42, to="Ada")
        elif results[-1]["status"] == "ok":
            reply = final("Done: 42 euros went to Ada, and 1158 are left on the account.")
        else:
            reply = final("The transfer was not approved, so nothing was sent.")
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


# -- one run on the page --------------------------------------------------------------------------


@attrs.define
class Live:
    """A run the page shows, and the decisions its buttons send."""

    run: AsyncRun
    decisions: asyncio.Queue[dict[str, str]] = attrs.field(factory=asyncio.Queue)


def sse(event: str, data: object) -> str:
    """One Server-Sent Event."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def described(item: Delta | Transition) -> tuple[str, object]:
    """A delta or a transition as the page's event name and data."""
    if isinstance(item, TextDelta):
        return "text", item.text
    if isinstance(item, ToolCallStart):
        return "call", {"index": item.index, "id": item.id, "name": item.name}
    if isinstance(item, ArgumentsDelta):
        return "arguments", {"index": item.index, "text": item.text}
    if isinstance(item, Transition):
        results = [m for m in item.appended if m["kind"] == "tool_result"]
        return "transition", {
            "source": item.source.value,
            "dest": item.dest.value,
            "trigger": item.trigger.value,
            "tool": item.tool,
            "result": results[0]["content"] if results else None,
        }
    return "usage", attrs.asdict(item)


def create_app(*, delay: float = 0.05, model: Any = None) -> Starlette:
    """The app: the page, its event stream, the decisions, and each run's state."""
    loop = Loop(model or model_from_environment(delay), tools=tools)
    runs: dict[str, Live] = {}

    async def page(request: Request) -> HTMLResponse:
        try:
            diagram = agentloop.review.to_svg()
        except agentloop.review.SVGUnavailableError:  # no Graphviz: the states as boxes
            diagram = "".join(
                f'<g class="node"><title>{state.value}</title></g>'
                f'<span class="box">{state.value}</span>'
                for state in State
            )
        return HTMLResponse(PAGE.replace("<!--diagram-->", diagram))

    async def events(request: Request) -> StreamingResponse:
        question = request.query_params.get("question", "Send 42 euros to Ada.")
        run_id = uuid.uuid4().hex
        live = runs[run_id] = Live(loop.astart(question))

        async def stream() -> AsyncIterator[str]:
            yield sse("run", {"id": run_id, "question": question})
            run = live.run
            while True:
                # Closing it at once (aclosing) ends a run left mid-reply, not later.
                async with contextlib.aclosing(run.astream()) as items:
                    async for item in items:
                        yield sse(*described(item))
                if run.state is not State.AWAITING_APPROVAL:
                    break
                yield sse(
                    "pending",
                    [
                        {"id": p.call_id, "name": p.name, "arguments": p.arguments, "why": p.reason}
                        for p in run.pending
                    ],
                )
                said = await live.decisions.get()
                decided = {
                    call_id: agentloop.approve() if what == "approve" else agentloop.deny("no")
                    for call_id, what in said.items()
                }
                yield sse(*described(await run.adecide(decided)))
            result = run.result()
            yield sse("done", {"status": result.status.value, "output": result.output})

        headers = {"cache-control": "no-store"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    async def decide(request: Request) -> Response:
        live = runs.get(request.path_params["run_id"])
        if live is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        said = await request.json()
        if not isinstance(said, dict) or not all(v in ("approve", "deny") for v in said.values()):
            return JSONResponse(
                {"error": f"expected {{call_id: 'approve' | 'deny'}}, got {said!r:.80}"},
                status_code=400,
            )
        live.decisions.put_nowait(said)
        return Response(status_code=204)

    async def state(request: Request) -> JSONResponse:
        live = runs.get(request.path_params["run_id"])
        if live is None:
            return JSONResponse({"error": "no such run"}, status_code=404)
        events = live.run.events
        return JSONResponse(
            {
                "state": live.run.state.value,
                "partial_text": events[-1].partial_text if events else None,
            }
        )

    return Starlette(
        routes=[
            Route("/", page),
            Route("/events", events),
            Route("/decide/{run_id}", decide, methods=["POST"]),
            Route("/runs/{run_id}", state),
        ]
    )


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentloop, live</title>
<style>
 body { font: 15px system-ui, sans-serif; margin: 1.5em; max-width: 70em; }
 #diagram svg { max-width: 100%; height: 22em; }
 .lit polygon, .lit ellipse, .lit path { fill: #ffd54f; }
 .box { display: inline-block; border: 1px solid #888; padding: .2em .5em; margin: .1em; }
 .lit.box { background: #ffd54f; }
 #log li { font-family: ui-monospace, monospace; font-size: 13px; }
 .reply { white-space: pre-wrap; border-left: 3px solid #4a90d9; padding-left: .6em; }
 button { margin-right: .5em; }
</style></head>
<body>
<h1>agentloop, live</h1>
<form id="ask"><input name="question" size="50" value="Send 42 euros to Ada.">
<button>Run</button></form>
<p>State: <b id="state">(not started)</b></p>
<div id="diagram"><!--diagram--></div>
<div id="replies"></div>
<div id="pending"></div>
<ol id="log"></ol>
<p id="done"></p>
<script>
"use strict";
let source = null, runId = null, reply = null, calls = {};
const $ = (id) => document.getElementById(id);
function light(state) {
  $("state").textContent = state;
  for (const node of document.querySelectorAll("#diagram .node, #diagram .box")) {
    const title = node.querySelector("title");
    const name = title ? title.textContent : node.textContent;
    node.classList.toggle("lit", name === state);
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
function start(question) {
  if (source) source.close();
  $("replies").textContent = ""; $("log").textContent = ""; $("done").textContent = "";
  source = new EventSource("/events?question=" + encodeURIComponent(question));
  source.addEventListener("run", (e) => {
    runId = JSON.parse(e.data).id; light("awaiting_model");
  });
  source.addEventListener("text", (e) => { currentReply().append(JSON.parse(e.data)); });
  source.addEventListener("call", (e) => {
    const c = JSON.parse(e.data);
    const span = document.createElement("code"); span.textContent = " " + c.name + "(";
    calls[c.index] = span; currentReply().append(span);
  });
  source.addEventListener("arguments", (e) => {
    const a = JSON.parse(e.data); calls[a.index].textContent += a.text;
  });
  source.addEventListener("transition", (e) => {
    const t = JSON.parse(e.data);
    if (t.trigger === "model_replied") { reply = null; calls = {}; }
    line(t.source + " → " + t.dest + " (" + t.trigger + ")" +
         (t.trigger === "tool_returned" ? ": " + t.tool + " → " + JSON.stringify(t.result) : ""));
    light(t.dest);
  });
  source.addEventListener("pending", (e) => {
    light("awaiting_approval");
    for (const p of JSON.parse(e.data)) {
      const div = document.createElement("div"); div.className = "ask";
      div.append(p.name + " " + JSON.stringify(p.arguments) + ": " + p.why + " ");
      for (const what of ["approve", "deny"]) {
        const b = document.createElement("button");
        b.textContent = what === "approve" ? "Approve" : "Deny";
        b.id = what + "-" + p.id;
        b.onclick = () => {
          fetch("/decide/" + runId, {method: "POST", headers: {"content-type": "application/json"},
                                     body: JSON.stringify({[p.id]: what})});
          div.remove();
        };
        div.append(b);
      }
      $("pending").append(div);
    }
  });
  source.addEventListener("done", (e) => {
    const d = JSON.parse(e.data); light(d.status);
    $("done").textContent = "Run " + d.status + (d.output ? ": " + d.output : "");
    source.close();
  });
}
$("ask").onsubmit = (e) => { e.preventDefault(); start(new FormData(e.target).get("question")); };
if (new URLSearchParams(location.search).has("go")) start($("ask").question.value);
</script>
</body></html>
"""

app = create_app()

if __name__ == "__main__":
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")))
