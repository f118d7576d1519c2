"""AG-UI resume through the gateway, driven by the stock ``@ag-ui/client`` ``HttpAgent`` in
headless Chromium, against the real broker (issues 38 and 43): the run's own principal
watches it to its interrupt; a resume refused by the validator (another reviewer holds the
claim; an invalid answer) is a ``RUN_ERROR`` with the validator's code and nothing else, a
valid one the verdict and the kernel's continuation to ``RUN_FINISHED`` success, and a
replay of it changes nothing. A token that may only read cannot answer, one of the tenant
that is neither the run's principal nor a reviewer of its queue answers nothing, and
another tenant's sees nothing. The page is of another origin than the gateway (CORS), as
an application's would be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.review_loop import QUEUE, Loop, publish, review_loop, token, up_to_a_pause
from tests.browser.test_gateway_page import Browser
from tests.integration.harness import (
    count_records,
    prefix_fixture,  # noqa: F401  (the ``prefix`` fixture)
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

RUN = "run-agui-1"


async def run_agent(browser: Browser, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """``agents[name].runAgent(parameters)`` in the page: its events' types and codes, its
    pending interrupts, and how it ended (``ok`` or the error it threw)."""
    expression = f"""(async () => {{
      const agent = window.agents[{json.dumps(name)}];
      const seen = [];
      const subscriber = {{ onEvent: ({{ event }}) => {{ seen.push(event); }} }};
      try {{
        await agent.runAgent({json.dumps(parameters)}, subscriber);
        return {{ ok: true, events: seen, pending: agent.pendingInterrupts }};
      }} catch (error) {{
        return {{ ok: false, error: String(error), events: seen,
                  pending: agent.pendingInterrupts }};
      }}
    }})()"""
    result = await browser.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                                returnByValue=True)
    assert "exceptionDetails" not in result, result
    value: dict[str, Any] = result["result"]["value"]
    return value


async def new_agent(browser: Browser, loop: Loop, name: str, bearer: str) -> None:
    url = f"{loop.url}/v1/runs/{RUN}/events"
    await browser.evaluate(f"""(window.agents = window.agents || {{}},
      window.agents[{json.dumps(name)}] = new HttpAgent({{ url: {json.dumps(url)},
        threadId: {json.dumps(RUN)},
        headers: {{ Authorization: {json.dumps("Bearer " + bearer)} }} }}), true)""")


def types(result: dict[str, Any]) -> list[str]:
    return [e["type"] for e in result["events"]]


async def test_the_stock_http_agent_watches_answers_and_replays_a_pause(
    prefix: str, tmp_path: Path
) -> None:
    Browser.require()
    async with review_loop(prefix, tmp_path) as loop, Browser(tmp_path / "chromium") as browser:
        loop.kernel.tenants[RUN] = "acme"
        await publish(prefix, up_to_a_pause(RUN, "acme", "intr-agui-1", principal="ana"))
        await browser.call("Page.navigate", url=loop.page_origin + "/index.html")
        await browser.wait_for(lambda s: s.get("loaded") == "yes", "the page")
        await new_agent(browser, loop, "reviewer", token("acme", "ana"))  # the run's own
        await new_agent(browser, loop, "reader", token("acme", "rita", scope="runs:read"))
        await new_agent(browser, loop, "mallory", token("acme", "mallory"))  # no queue of it
        await new_agent(browser, loop, "stranger", token("globex", "gus"))

        # Watched to its interrupt: the response ends at its RUN_FINISHED.
        watched = await run_agent(browser, "reviewer", {})
        assert watched["ok"], watched
        assert types(watched)[0] == "RUN_STARTED" and types(watched)[-1] == "RUN_FINISHED"
        finished = watched["events"][-1]
        assert finished["outcome"]["type"] == "interrupt"
        [interrupt] = finished["outcome"]["interrupts"]
        assert interrupt["id"] == "intr-agui-1" and interrupt["responseSchema"] == {
            "type": "object", "properties": {"approved": {"type": "boolean"},
                                             "note": {"type": "string"}},
            "required": ["approved"]}
        assert "token" not in json.dumps(watched["events"]), "a ticket token reached the page"
        assert [p["id"] for p in watched["pending"]] == ["intr-agui-1"]

        # Only reading: refused before anything is written. Another tenant: no such run.
        read_only = await run_agent(browser, "reader", {"resume": [
            {"interruptId": "intr-agui-1", "status": "resolved", "payload": {"approved": True}}]})
        assert not read_only["ok"] and "HTTP 403" in read_only["error"], read_only
        stranger = await run_agent(browser, "stranger", {})
        assert not stranger["ok"] and "HTTP 404" in stranger["error"], stranger
        # Of the tenant, but neither the run's principal nor a reviewer of its queue.
        foreign = await run_agent(browser, "mallory", {"resume": [
            {"interruptId": "intr-agui-1", "status": "resolved", "payload": {"approved": True}}]})
        assert types(foreign) == ["RUN_ERROR"], foreign
        assert foreign["events"][0]["code"] == "not_permitted"
        assert await count_records(f"{prefix}.resume-requests") == 0

        # Another reviewer (of the queue) holds the claim: the validator refuses the answer
        # with reason ``claimed``, spelt as a claim's success; it is a RUN_ERROR, and only.
        bo = {"Authorization": f"Bearer {token('acme', 'bo', queues=[QUEUE])}"}
        async with httpx.AsyncClient(base_url=loop.url, timeout=60) as http:
            held = await http.post("/v1/reviews/tickets/intr-agui-1/claim", headers=bo)
            assert (held.status_code, held.json()["outcome"]) == (200, "claimed"), held.text
            claimed = await run_agent(browser, "reviewer", {"resume": [
                {"interruptId": "intr-agui-1", "status": "resolved",
                 "payload": {"approved": True}}]})
            assert types(claimed) == ["RUN_ERROR"], claimed
            assert claimed["events"][0]["code"] == "claimed"
            released = await http.post("/v1/reviews/tickets/intr-agui-1/release", headers=bo)
            assert (released.status_code, released.json()["outcome"]) == (200, "released")
        assert [p["id"] for p in claimed["pending"]] == ["intr-agui-1"]

        # An invalid answer: RUN_ERROR with the validator's code; the pause stays open.
        invalid = await run_agent(browser, "reviewer", {"resume": [
            {"interruptId": "intr-agui-1", "status": "resolved", "payload": {"approved": "yes"}}]})
        assert types(invalid) == ["RUN_ERROR"], invalid
        assert invalid["events"][0]["code"] == "invalid_answer"
        assert "approved: fails 'type'" in invalid["events"][0]["message"]
        assert [p["id"] for p in invalid["pending"]] == ["intr-agui-1"]

        # A valid answer: the verdict, then the kernel's continuation to RUN_FINISHED success.
        resume = {"resume": [{"interruptId": "intr-agui-1", "status": "resolved",
                              "payload": {"approved": True}}]}
        answered = await run_agent(browser, "reviewer", resume)
        assert answered["ok"], answered
        assert types(answered)[:2] == ["RUN_STARTED", "CUSTOM"]
        verdict = answered["events"][1]
        assert verdict["name"] == "verdict" and verdict["value"] == {
            "interruptId": "intr-agui-1", "outcome": "accepted", "replayed": False}
        assert answered["events"][-1]["type"] == "RUN_FINISHED"
        assert answered["events"][-1]["outcome"] == {"type": "success"}
        texts = [e["delta"] for e in answered["events"] if e["type"] == "TEXT_MESSAGE_CONTENT"]
        assert texts == ["Approved: True. "]
        assert answered["pending"] == []
        [resumed] = loop.kernel.resumed
        assert (resumed["responder"], resumed["answer"]) == ("ana", {"approved": True})

        # The same resume again: accepted as it was, nothing written, the same continuation.
        requests = await count_records(f"{prefix}.resume-requests")
        replayed = await run_agent(browser, "reviewer", resume)
        assert replayed["ok"], replayed
        assert replayed["events"][1]["value"]["replayed"] is True
        assert types(replayed)[-1] == "RUN_FINISHED" and texts == [
            e["delta"] for e in replayed["events"] if e["type"] == "TEXT_MESSAGE_CONTENT"]
        assert await count_records(f"{prefix}.resume-requests") == requests
        assert await count_records(f"{prefix}.resumes") == 1
        assert len(loop.kernel.resumed) == 1
        assert requests == 5  # bo's claim and release; ana's refused, invalid, accepted answers
        # (the client logs each refused request itself: the 403 and the 404, nothing else)
        assert [line.split(":", 3)[2].strip() for line in browser.console] == [
            "HTTP 403", "HTTP 404"], browser.console
