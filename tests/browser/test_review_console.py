"""The review console in headless Chromium against the real broker (issue 38): two reviewers
of one tenant, each in a browser of their own, race to claim one ticket; exactly one claim
wins and both consoles show it; the other's answer is refused; when the lease runs out (the
validator's expiry, on review-tickets) the other claims it and answers it through the form
JSON Editor renders from its response_schema. Another tenant's reviewer sees none of it.
Screenshots in build/test-artefacts/: the queue, the claimed ticket, the form, the verdict."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.browser.review_loop import (
    ARTEFACTS,
    QUEUE,
    Loop,
    publish,
    review_loop,
    token,
    up_to_a_pause,
)
from tests.browser.test_gateway_page import Browser, Dataset
from tests.integration.harness import prefix_fixture  # noqa: F401  (the ``prefix`` fixture)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

TICKET = "intr-console-1"
LEASE_S = 8.0


async def open_console(browser: Browser, loop: Loop, tenant: str, sub: str) -> None:
    """The console opened as a reviewer of the tests' queue would: the token in the URL's
    fragment, which the page moves to its tab's storage and out of the address bar."""
    await browser.call("Page.navigate", url=f"{loop.url}/review#access_token="
                                            f"{token(tenant, sub, queues=[QUEUE])}")
    await browser.wait_for(lambda s: s.get("status") == "live", f"{sub}'s console")
    kept = await browser.evaluate("[location.href, history.length, "
                                  "sessionStorage.getItem('symfonic-console-token') !== null]")
    assert "access_token" not in kept[0] and kept[2], kept


def listed(ticket: str) -> Any:
    return lambda s: ticket in s.get("tickets", "").split(",")


async def select(browser: Browser, ticket: str) -> Dataset:
    await browser.evaluate(f"document.querySelector('tr[data-ticket=\"{ticket}\"]').click()")
    return await browser.wait_for(
        lambda s: s.get("selected") == ticket and s.get("context") == "paused"
        and s.get("form") == "schema", "the ticket, its run and its form")


async def click(browser: Browser, button: str) -> None:
    await browser.evaluate(f"document.getElementById({button!r}).click()")


async def verdict(browser: Browser, action: str) -> tuple[str, int]:
    """The verdict's outcome and HTTP status (a refusal spelt as a success, ``claimed``,
    must still be 409)."""
    state = await browser.wait_for(lambda s: s.get("verdict", "").startswith(action + ":"),
                                   f"the verdict on {action}")
    _, outcome, status = state["verdict"].split(":")
    return outcome, int(status)


async def test_two_reviewers_race_for_a_claim_and_the_lease_runs_out(
    prefix: str, tmp_path: Path
) -> None:
    Browser.require()
    shots = {name: ARTEFACTS / f"review-console-{name}.png"
             for name in ("queue", "claimed", "form", "verdict")}
    for shot in shots.values():
        shot.unlink(missing_ok=True)
    async with review_loop(prefix, tmp_path, lease_s=LEASE_S) as loop, \
            Browser(tmp_path / "ana") as ana, Browser(tmp_path / "bo") as bo, \
            Browser(tmp_path / "gus") as gus:
        await publish(prefix, up_to_a_pause("run-console-1", "acme", TICKET)
                      + up_to_a_pause("run-console-2", "acme", "intr-console-2")
                      + up_to_a_pause("run-console-3", "globex", "intr-globex-1"))
        for browser, tenant, sub in ((ana, "acme", "ana"), (bo, "acme", "bo"),
                                     (gus, "globex", "gus")):
            await open_console(browser, loop, tenant, sub)
        for browser in (ana, bo):
            state = await browser.wait_for(listed("intr-console-2"), "both acme tickets")
            assert sorted(state["tickets"].split(",")) == [TICKET, "intr-console-2"]
        state = await gus.wait_for(listed("intr-globex-1"), "globex's ticket")
        assert state["tickets"] == "intr-globex-1", "another tenant's tickets were shown"
        await select(ana, TICKET)
        await select(bo, TICKET)
        await ana.screenshot(shots["queue"])
        page_text = await ana.evaluate("document.body.innerText")
        assert "secret-" not in page_text, "a ticket token reached the console"

        # The race: both click Claim at once; the validator takes one first.
        await asyncio.gather(click(ana, "claim"), click(bo, "claim"))
        outcomes = {"ana": await verdict(ana, "claim"), "bo": await verdict(bo, "claim")}
        assert sorted(outcomes.values()) == [("claimed", 200), ("held", 409)], outcomes
        winner = next(who for who, outcome in outcomes.items() if outcome[0] == "claimed")
        loser = bo if winner == "ana" else ana
        for browser in (ana, bo):  # both consoles show the one claim
            await browser.wait_for(lambda s: s.get("claim") == winner, f"claimed by {winner}")
        await loser.screenshot(shots["claimed"])

        # The loser's answer is refused while the lease holds.
        await click(loser, "submit")
        assert await verdict(loser, "answer") == ("claimed", 409)  # refused: held by another

        # The lease runs out: the validator's expiry, then the loser claims and answers.
        expired = await loop.gateway.reviews.wait(
            "acme", lambda: _lease_expired(loop), LEASE_S + 30)
        assert expired, "no lease_expired on the ticket's history"
        await loser.wait_for(lambda s: s.get("claim") == "", "the claim gone")
        await click(loser, "claim")
        assert await verdict(loser, "claim") == ("claimed", 200)
        await loser.evaluate("""(() => {
          const approved = document.querySelector('#form select');
          approved.value = [...approved.options].find((o) => o.text === 'true').value;
          approved.dispatchEvent(new Event('change', { bubbles: true }));
          return true; })()""")
        await loser.screenshot(shots["form"])
        await click(loser, "submit")
        assert await verdict(loser, "answer") == ("accepted", 200)
        await loser.wait_for(lambda s: TICKET not in s.get("tickets", "").split(","),
                             "the answered ticket gone from the queue")
        await loser.screenshot(shots["verdict"])
        [resumed] = [r for r in await _resumed(loop) if r["ticket_id"] == TICKET]
        assert resumed["answer"]["approved"] is True
        assert resumed["responder"] == ("bo" if winner == "ana" else "ana")
        for browser in (ana, bo, gus):
            assert browser.console == [], browser.console
    for shot in shots.values():
        assert shot.stat().st_size > 0, shot


def _lease_expired(loop: Loop) -> bool:
    reviewed = loop.gateway.reviews.get("acme", TICKET)
    return reviewed is not None and any(
        step["event"] == "lease_expired" for step in reviewed.state["history"])


async def _resumed(loop: Loop) -> list[dict[str, Any]]:
    deadline = asyncio.get_running_loop().time() + 30
    while not loop.kernel.resumed:
        assert asyncio.get_running_loop().time() < deadline, "the kernel got no resume"
        await asyncio.sleep(0.1)
    return loop.kernel.resumed
