"""The gateway's built-in page (``GET /?run=ID``) in a real browser: headless Chromium
(Debian's package) driven over the Chrome DevTools Protocol, against the real broker, the
typed projector and a Gateway running in the test's loop.

The run's first part is on the page when the gateway is stopped mid-run and a new one
started on the same port: the browser's own EventSource reconnects, sends Last-Event-ID,
and the page must end with every seq exactly once, in order, the closing ``end`` having
closed its EventSource (else it would reconnect forever). A pause in between must not close
it. The last screenshot is kept in build/test-artefacts/gateway-page.png.

Chromium missing is a failure, not a skip: ``.ci/run`` installs it (apt-get install
chromium); ``SYMFONIC_TEST_CHROMIUM`` names another Chromium or Chrome binary.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.runtime.workers import free_port
from tests.integration.gateway_harness import running_gateway
from tests.integration.harness import (
    InProcessEngine,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    settings_for,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

CHROMIUM = os.environ.get("SYMFONIC_TEST_CHROMIUM", "/usr/bin/chromium")
ARTEFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artefacts"
FAR_FUTURE = 4_102_444_800.0
Dataset = dict[str, str]


class Browser:
    """One headless Chromium, and a CDP connection to its page (``call``, ``evaluate``)."""

    def __init__(self, profile: Path) -> None:
        self.profile = profile
        self.log_path = profile.with_suffix(".log")
        self.process: asyncio.subprocess.Process | None = None
        self.ws: ClientConnection | None = None
        self.console: list[str] = []  # the page's console messages and uncaught exceptions
        self._id = 0

    @staticmethod
    def require() -> None:
        """Fail (never skip) when there is no Chromium to run."""
        if not os.access(CHROMIUM, os.X_OK):
            pytest.fail(f"no Chromium at {CHROMIUM}: install Debian's package "
                        "(`apt-get install chromium`; .ci/run does), or set "
                        "SYMFONIC_TEST_CHROMIUM to a Chromium or Chrome binary", pytrace=False)

    async def __aenter__(self) -> Browser:
        self.require()
        self.profile.mkdir(parents=True)
        with self.log_path.open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                CHROMIUM, "--headless=new", "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}", "--no-sandbox", "--no-first-run",
                "--no-default-browser-check", "--no-proxy-server", "--disable-gpu",
                "--window-size=1280,900", "about:blank",
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)  # its own group: its helpers go with it
        try:
            port = await self._devtools_port()
            self.ws = await connect(await self._page_socket(port), max_size=None)
            await self.call("Runtime.enable")
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                os.killpg(self.process.pid, signal.SIGKILL)
                await self.process.wait()

    def _log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    async def _devtools_port(self, within: float = 30.0) -> int:
        """The port Chromium chose, from <profile>/DevToolsActivePort (its first line)."""
        assert self.process is not None
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + within
        while True:
            lines = active.read_text().splitlines() if active.exists() else []
            if lines and lines[0].isdigit():
                return int(lines[0])
            if self.process.returncode is not None:
                raise AssertionError(f"chromium exited with {self.process.returncode}:\n"
                                     f"{self._log()}")
            assert time.monotonic() < deadline, (
                f"chromium wrote no DevToolsActivePort:\n{self._log()}")
            await asyncio.sleep(0.1)

    async def _page_socket(self, port: int, within: float = 30.0) -> str:
        deadline = time.monotonic() + within
        while True:
            async with httpx.AsyncClient(timeout=5) as client:
                targets = (await client.get(f"http://127.0.0.1:{port}/json/list")).json()
            pages = [t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page"]
            if pages:
                return str(pages[0])
            assert time.monotonic() < deadline, f"chromium shows no page target: {targets}"
            await asyncio.sleep(0.1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One CDP command and its result; the events read meanwhile go to ``console``."""
        assert self.ws is not None
        self._id += 1
        await self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            reply = json.loads(await asyncio.wait_for(self.ws.recv(), 30))
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise AssertionError(f"CDP {method} failed: {reply['error']}")
                result: dict[str, Any] = reply["result"]
                return result
            if reply.get("method") == "Runtime.consoleAPICalled":
                args = reply["params"]["args"]
                self.console.append(" ".join(str(a.get("value", a.get("description")))
                                             for a in args))
            elif reply.get("method") == "Runtime.exceptionThrown":
                self.console.append(str(reply["params"]["exceptionDetails"]))

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def dataset(self) -> Dataset:
        state: Dataset = await self.evaluate(
            "document.body ? {...document.body.dataset} : {}") or {}
        return state

    async def wait_for(self, done: Callable[[Dataset], bool], what: str,
                       within: float = 30.0) -> Dataset:
        """Poll the page's ``document.body.dataset`` until ``done`` says so."""
        deadline = time.monotonic() + within
        while True:
            state = await self.dataset()
            if done(state):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {what} within {within:g} s: "
                                     f"{state}; its console: {self.console[-10:]}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png")
        path.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))


def _event(run_id: str, index: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"run_id": run_id, "index": index, "kind": kind, "timestamp": 1.0 + index, **fields}


def _texts(run_id: str, start: int, count: int) -> list[dict[str, Any]]:
    return [_event(run_id, i, "text_delta", text=f"t{i} ") for i in range(start, start + count)]


async def _publish(prefix: str, events: list[dict[str, Any]]) -> None:
    await produce(f"{prefix}.agent-events",
                  [(e["run_id"].encode(), orjson.dumps(e), []) for e in events])


def _seqs(last: int) -> str:
    return ",".join(str(seq) for seq in range(last + 1))


async def test_the_page_shows_a_run_live_across_a_cut_connection(
    prefix: str, tmp_path: Path
) -> None:
    Browser.require()
    await create_topics(prefix)
    run_id = "run-in-a-browser"
    call = {"id": "c1", "name": "search"}
    ask = {"name": "ask_user", "kind": "ask_user", "payload": {"questions": ["Go on?"]},
           "token": "t", "tool_call_id": None, "interrupt_id": f"{run_id}-8",
           "run_id": run_id, "session_id": "s", "expires_at": FAR_FUTURE, "resumable": True}
    # seqs 0-4: text deltas
    before_the_cut = _texts(run_id, 0, 5)
    # 5 thinking, 6-7 tool_call_start and _delta, 8-9 tool_result and its tool_timing
    # extension, 10 ask_user, 11 the paused end
    up_to_a_pause = [
        _event(run_id, 5, "thinking", text="<b>not bold</b> & <script>alert(1)</script>"),
        _event(run_id, 6, "tool_call", tool_call={**call, "arguments": {"q": "<kafka>"}}),
        _event(run_id, 7, "tool_result", tool_call={**call, "result": "3 hits"}),
        _event(run_id, 8, "ask_user", interrupt=ask),
    ]
    # 12-14 text deltas, 15 usage, 16 response_complete, 17 the completed end
    after_the_pause = [*_texts(run_id, 9, 3), _event(run_id, 12, "done", result={
        "text": "fin", "duration_ms": 5.0,
        "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}})]
    screenshot = ARTEFACTS / "gateway-page.png"
    screenshot.unlink(missing_ok=True)
    port = free_port()
    gateway_settings = settings_for(prefix, gateway_port=port, gateway_host="127.0.0.1",
                                    gateway_run_wait_s=20.0)
    typed = settings_for(prefix)
    async with InProcessEngine(projector_topology("typed", typed), typed), \
            Browser(tmp_path / "chromium") as browser:
        try:
            await _publish(prefix, before_the_cut)
            async with running_gateway(gateway_settings):
                await browser.call("Page.navigate", url=f"http://127.0.0.1:{port}/?run={run_id}")
                state = await browser.wait_for(lambda s: s.get("seqs") == _seqs(4), "seqs 0-4")
                assert state["status"] == "open"
            # The gateway is gone mid-run: the browser sees its stream cut...
            await browser.wait_for(lambda s: s.get("status") == "reconnecting", "the cut")
            async with running_gateway(gateway_settings):
                # ...and its EventSource reconnects to the new one by itself.
                await browser.wait_for(lambda s: s.get("status") == "open", "a reconnection")
                await _publish(prefix, up_to_a_pause)
                state = await browser.wait_for(lambda s: s.get("seqs") == _seqs(11),
                                               "seqs 0-11 (up to the pause)", within=60)
                assert state["status"] == "open", "a paused end must not close the stream"
                assert await browser.evaluate("es.readyState") == 1  # OPEN
                await _publish(prefix, after_the_pause)
                state = await browser.wait_for(
                    lambda s: s.get("status", "").startswith("ended"), "the end", within=60)
                # Every seq exactly once, in order: the reconnection resumed after the last
                # one received (Last-Event-ID), it did not start the run over.
                assert state == {"seqs": _seqs(17), "status": "ended:completed"}
                assert await browser.evaluate("es.readyState") == 2  # CLOSED: no reconnecting
            shown = await browser.evaluate("""({
                text: document.getElementById("text").textContent,
                thinking: document.getElementById("thinking").textContent,
                tools: document.getElementById("tools").textContent,
                notes: document.getElementById("notes").textContent,
                elements: document.querySelectorAll("main b, main script").length,
            })""")
            assert shown["text"] == "".join(f"t{i} " for i in (0, 1, 2, 3, 4, 9, 10, 11))
            assert shown["thinking"] == "<b>not bold</b> & <script>alert(1)</script>"
            assert "search" in shown["tools"] and '{"q":"<kafka>"}' in shown["tools"]
            assert "→ 3 hits" in shown["tools"]
            assert "Go on?" in shown["notes"] and "run paused" in shown["notes"]
            assert "run completed" in shown["notes"]
            # the tool's name is the one <b> the page makes; the data made no element
            assert shown["elements"] == 1, shown
            assert browser.console == [], browser.console
        finally:  # also of a failure: what the page showed then
            with contextlib.suppress(Exception):
                await browser.screenshot(screenshot)
        assert screenshot.stat().st_size > 0, "no screenshot"
