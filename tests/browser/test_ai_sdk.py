"""The AI SDK's clients read, resume and answer a run through the gateway (issue 48), with
the official npm packages (``web/package-lock.json``), against the real broker and the real
consumers:

- ``readUIMessageStream`` of ``ai`` in Node (``web/test/read-run.mjs``) reads a whole run
  (``?format=ai-sdk``), every chunk valid against the package's own ``uiMessageChunkSchema``,
  and rebuilds its message: text, reasoning, a tool call with its input and result, a pause
  as a ``data-pause`` part, the usage as metadata; cut after any seq and resumed with
  ``Last-Event-ID``, it rebuilds the same message from exactly the rest.
- ``useChat`` of ``@ai-sdk/react`` with ``DefaultChatTransport`` (a React page bundled by
  ``make web``, of another origin than the gateway's) in headless Chromium shows the run,
  resumes it after its connection is cut mid-run (the transport's replay, or the rest after
  the last SSE id), with no part twice and none missing, and answers its tool approval: an
  invalid answer shows the validator's reason, the approval is accepted once, and the same
  request again changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from symfonic_stream.app.topologies import projector_topology
from tests.browser.review_loop import ROOT, publish, review_loop, token, up_to_a_pause
from tests.browser.test_gateway_page import Browser
from tests.integration.gateway_harness import read_sse, running_gateway
from tests.integration.harness import (
    InProcessEngine,
    count_records,
    create_topics,
    prefix_fixture,  # noqa: F401  (the ``prefix`` fixture)
    settings_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

WEB = ROOT / "web"
CHAT_PAGE = WEB / "build" / "aisdk-chat.js"
READ_RUN = WEB / "test" / "read-run.mjs"


def _event(run_id: str, index: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"run_id": run_id, "index": index, "kind": kind, "timestamp": 100.0 + index,
            "scope": {"tenant": "acme", "principal": "ana"}, **fields}


def whole_run(run_id: str) -> list[dict[str, Any]]:
    """Reasoning, text, a tool call and its result, a question it waits on (no tool
    approval: a data-pause), its answer's continuation, and the end with its usage."""
    call = {"id": "call-1", "name": "search"}
    ask = {"name": "ask_user", "kind": "ask_user", "token": "secret-ask",
           "payload": {"questions": ["Which city?"], "response_schema": {"type": "string"}},
           "tool_call_id": None, "interrupt_id": f"{run_id}-ask", "run_id": run_id,
           "session_id": "s", "expires_at": 4_102_444_800.0, "resumable": True}
    return [
        _event(run_id, 0, "thinking", text="let me think"),
        _event(run_id, 1, "thinking", text=" more"),
        _event(run_id, 2, "text_delta", text="Hello"),
        _event(run_id, 3, "text_delta", text=" world. "),
        _event(run_id, 4, "tool_call", tool_call={**call, "arguments": {"q": "x"}}),
        _event(run_id, 5, "tool_result", tool_call={**call, "result": {"hits": 2}},
               duration_ms=12.5),
        _event(run_id, 6, "ask_user", interrupt=ask),
        _event(run_id, 7, "text_delta", text="Paris it is."),
        _event(run_id, 8, "done", result={"text": "Hello world. Paris it is.",
                                          "duration_ms": 40.0,
                                          "usage": {"input_tokens": 5, "output_tokens": 7,
                                                    "total_tokens": 12}}),
    ]


async def node_read(spec: dict[str, Any]) -> dict[str, Any]:
    """web/test/read-run.mjs's report (the official ``ai`` package reading the run)."""
    process = await asyncio.create_subprocess_exec(
        "node", str(READ_RUN), json.dumps(spec), cwd=WEB, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-3000:]
    report: dict[str, Any] = json.loads(out)
    return report


async def test_the_ai_package_reads_a_whole_run_and_resumes_it_exactly(prefix: str) -> None:
    assert READ_RUN.exists() and (WEB / "node_modules" / "ai").exists(), "run `make web`"
    await create_topics(prefix)
    run_id = "run-ai-sdk-node"
    typed = settings_for(prefix)
    gateway_settings = settings_for(prefix, gateway_host="127.0.0.1", gateway_port=0,
                                    gateway_run_wait_s=20.0)
    async with InProcessEngine(projector_topology("typed", typed), typed), \
            running_gateway(gateway_settings) as (_gateway, url):
        await publish(prefix, whole_run(run_id))
        async with httpx.AsyncClient(timeout=60) as client:  # the whole run is in
            status, envelopes = await read_sse(client, f"{url}/v1/runs/{run_id}/events",
                                               within=60)
        assert status == 200 and envelopes[-1]["event"] == "end"
        last_seq = int(envelopes[-1]["id"])
        report = await node_read({"url": f"{url}/v1/runs/{run_id}/events?format=ai-sdk",
                                  "headers": {}, "cuts": "every"})

    assert report["header"] == "v1"
    assert report["invalid"] == [] and report["errors"] == []
    events = report["events"]
    assert events[-1] == {"id": None, "data": "[DONE]"}
    ids = [int(e["id"]) for e in events if e["id"] is not None]
    assert ids == sorted(set(ids)) and ids[-1] == last_seq  # one id per envelope, in order
    assert "secret" not in json.dumps(events)  # the ticket's token never leaves
    kinds = [c["type"] for c in report["chunks"]]
    assert kinds[0] == "start" and kinds[-1] == "finish"
    assert kinds.count("start-step") == kinds.count("finish-step") == 2  # the pause's two

    [message] = report["messages"]
    assert message["id"] == run_id and message["role"] == "assistant"
    parts = [p for p in message["parts"] if p["type"] != "step-start"]
    assert [p["type"] for p in parts] == ["reasoning", "text", "tool-search",
                                          "data-extension", "data-pause", "text"]
    assert parts[0]["text"] == "let me think more" and parts[1]["text"] == "Hello world. "
    tool = parts[2]
    assert (tool["toolCallId"], tool["state"], tool["input"], tool["output"]) == (
        "call-1", "output-available", {"q": "x"}, {"hits": 2})
    assert parts[3]["data"]["name"] == "tool_timing"  # (the result's duration_ms)
    pause = parts[4]
    assert pause["id"] == f"{run_id}-ask" and pause["data"]["questions"] == ["Which city?"]
    assert parts[5]["text"] == "Paris it is."
    assert message["metadata"]["usage"] == {"inputTokens": 5, "outputTokens": 7}
    assert message["metadata"]["status"] == "completed"

    # Cut after any seq and resumed with Last-Event-ID: exactly the rest, the same message.
    assert [r["cut"] for r in report["resumed"]] == ids[:-1]
    for resumed in report["resumed"]:
        cut = resumed["cut"]
        assert resumed["invalid"] == [] and resumed["errors"] == [], resumed
        assert [e["id"] for e in resumed["events"] if e["id"] is not None] == [
            str(i) for i in ids if i > cut], cut
        assert resumed["messages"] == [message], cut


# -- useChat in a browser -----------------------------------------------------------------


class Cutter:
    """A TCP proxy in front of the gateway whose connections the test can cut, as a network
    would: the browser's streams through it end without their last chunk."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self.writers -= {writer, up_writer}

    def cut(self) -> int:
        """Reset every open connection; how many there were."""
        count = len(self.writers)
        for writer in list(self.writers):
            writer.transport.abort()
        return count

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            self.server.close()
            self.cut()


async def chat_state(browser: Browser) -> dict[str, Any]:
    state: dict[str, Any] = await browser.evaluate(
        "({status: window.chat && window.chat.status, error: window.chat && window.chat.error"
        " ? window.chat.error.message : null, messages: window.chat ? window.chat.messages : [],"
        " seen: window.seen})")
    return state


async def wait_chat(browser: Browser, done: Any, what: str, within: float = 60.0
                    ) -> dict[str, Any]:
    """Poll the chat's state until ``done`` says so (the page's own state, nothing timed)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        state = await chat_state(browser)
        if done(state):
            return state
        assert asyncio.get_running_loop().time() < deadline, (
            f"the chat never showed {what}: {json.dumps(state)[:3000]}; "
            f"its console: {browser.console[-10:]}")
        await asyncio.sleep(0.1)


def parts_of(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of the chat's one assistant message (there must be one)."""
    assistants = [m for m in state["messages"] if m["role"] == "assistant"]
    assert len(assistants) == 1, state["messages"]
    return [p for p in assistants[0]["parts"] if p["type"] != "step-start"]


def tool_state(state: dict[str, Any]) -> str | None:
    tools = [p for p in state["messages"][-1]["parts"] if p["type"] == "tool-pay"] if state[
        "messages"] else []
    return tools[0]["state"] if tools else None


@pytest.mark.parametrize("mode", ["replay", "cursor"])
async def test_use_chat_shows_resumes_and_answers_a_run(prefix: str, tmp_path: Path,
                                                        mode: str) -> None:
    assert CHAT_PAGE.exists(), f"{CHAT_PAGE} missing: run `make web`"
    run_id, interrupt = f"run-ai-sdk-{mode}", f"intr-ai-sdk-{mode}"
    events = up_to_a_pause(run_id, "acme", interrupt, principal="ana")
    async with review_loop(prefix, tmp_path) as loop, Browser(tmp_path / "chromium") as browser:
        loop.kernel.tenants[run_id] = "acme"
        site = tmp_path / "site"  # (what the loop's page server serves, of another origin)
        (site / "aisdk-chat.js").write_bytes(CHAT_PAGE.read_bytes())
        (site / "chat.html").write_text(
            '<!doctype html><meta charset="utf-8"><title>useChat</title>'
            '<script src="aisdk-chat.js"></script>'  # (run before the body says it is loaded)
            '<body data-loaded="yes"><div id="root"></div></body>')
        gateway_port = int(loop.url.rsplit(":", 1)[1])
        cutter = Cutter(gateway_port)
        async with cutter.running() as proxy:
            await publish(prefix, events[:1])  # the run's first text; then it goes on
            assert await loop.gateway.tails["events"].store.wait_for(
                run_id, lambda run: True, 60) is not None
            await browser.call("Page.navigate", url=loop.page_origin + "/chat.html")
            await browser.wait_for(lambda s: s.get("loaded") == "yes", "the page")
            await browser.evaluate(f"""window.startChat({json.dumps({
                "api": f"{proxy}/api/chat", "runId": run_id, "mode": mode,
                "token": token("acme", "ana")})}), true""")
            first = "I will pay the invoice. "
            await wait_chat(browser, lambda s: s["messages"] and any(
                p.get("text") == first for p in s["messages"][-1]["parts"])
                and s["seen"]["ids"], "the first text (and its SSE id)")

            # The connection is cut mid-run; the page resumes it; the run goes on meanwhile.
            assert cutter.cut() >= 1
            await wait_chat(browser, lambda s: s["seen"]["resumes"] >= 1, "a resume")
            await publish(prefix, events[1:])
            state = await wait_chat(browser, lambda s: tool_state(s) == "approval-requested"
                                    and s["status"] == "ready", "the approval asked")
            parts = parts_of(state)
            assert [p["type"] for p in parts] == ["text", "tool-pay"], parts
            assert parts[0]["text"] == first  # once: no part twice, none missing
            assert parts[1]["input"] == {"amount": 120}
            assert parts[1]["approval"]["id"] == interrupt
            assert "secret" not in json.dumps(state)  # the ticket's token never reaches it
            ids = [int(i) for i in state["seen"]["ids"]]
            if mode == "cursor":  # the wire carried each envelope once
                assert ids == sorted(set(ids)), ids
            else:  # the replay sent the run again from its start: the client rebuilt it
                assert ids.count(0) == 2, ids

            # An invalid answer: the validator's reason, and nothing changes in the message.
            await browser.evaluate(f"""window.chat.sendMessage(undefined, {{ body: {{ answers:
                [{{ interruptId: {json.dumps(interrupt)}, answer: {{ approved: "yes" }} }}]
                }} }}), true""")
            state = await wait_chat(browser, lambda s: s["status"] == "error", "the refusal")
            assert state["error"].startswith("invalid_answer: "), state["error"]
            assert "approved: fails 'type'" in state["error"]
            assert parts_of(state) == parts

            # The approval: accepted, then the kernel's continuation in the same message.
            await browser.evaluate(f"""window.chat.addToolApprovalResponse({{
                id: {json.dumps(interrupt)}, approved: true }}), true""")
            state = await wait_chat(browser, lambda s: s["status"] == "ready" and any(
                p.get("text") == "Approved: True. " for p in s["messages"][-1]["parts"]),
                "the continuation")
            parts = parts_of(state)
            assert [p["type"] for p in parts] == ["text", "tool-pay", "text"], parts
            assert parts[1]["state"] == "approval-responded"
            verdicts = state["seen"]["verdicts"]
            assert [v["data"] for v in verdicts] == [
                {"interruptId": interrupt, "outcome": "accepted", "replayed": False}]
            [resumed] = loop.kernel.resumed
            assert (resumed["responder"], resumed["answer"]) == ("ana", {"approved": True})

            # The same request again: accepted as it was, nothing written, nothing resumed.
            requests = await count_records(f"{prefix}.resume-requests")
            replayed = await browser.call("Runtime.evaluate", awaitPromise=True,
                                          returnByValue=True, expression="""(async () => {
                const post = window.seen.posts[window.seen.posts.length - 1];
                const response = await fetch(post.url, post.init);
                return await response.text(); })()""")
            body = replayed["result"]["value"]
            assert '"replayed":true' in body and "Approved: True. " in body, body
            assert body.rstrip().endswith("data: [DONE]")
            assert await count_records(f"{prefix}.resume-requests") == requests == 2
            assert await count_records(f"{prefix}.resumes") == 1
            assert len(loop.kernel.resumed) == 1
