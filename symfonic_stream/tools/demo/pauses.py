"""The demo's human-review step: answer one routed pause as a reviewer would.

The pause router has put every synthetic pause on ``<prefix>.human.default``; this step
reads that queue with the reviewer SDK, answers the first ticket (accepted, a resume for
the kernel), answers it a second time (rejected: first answer wins), and prints both
verdicts.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from symfonic_stream.models.pauses import Ticket
from symfonic_stream.sdk.reviewer import Reviewer

if TYPE_CHECKING:
    from symfonic_stream.tools.demo.context import DemoContext

QUEUE = "default"


async def answer_a_pause(ctx: DemoContext) -> None:
    if not {"pauses", "resumes"} <= set(ctx.consumers):
        return
    console = ctx.console
    async with Reviewer(f"{ctx.settings.topic_prefix}-demo-reviewer", ctx.settings) as r:
        ticket = await _first_ticket(r, timeout_s=60.0)
        if ticket is None:
            console.print(f"  no ticket reached {ctx.names.human_queue(QUEUE)}")
            return
        console.print(
            f"  ticket {ticket.ticket_id} on {ctx.names.human_queue(QUEUE)}: run {ticket.run_id}, "
            f"{ticket.kind} {ticket.name!r}"
        )
        for question in ticket.questions or []:
            console.print(f"    question: {question}")
        answer = {"approved": True, "note": "looks fine"}
        first = await r.answer(ticket, answer, responder="demo-reviewer")
        await r.commit()
        verdict = "accepted" if first.accepted else f"rejected ({first.reason})"
        console.print(f"  answer {answer} → {verdict}; resume keyed by run {ticket.run_id}")
        second = await r.answer(ticket, {"approved": False}, responder="second-reviewer")
        verdict = "accepted" if second.accepted else f"rejected: {second.reason} ({second.detail})"
        console.print(f"  a second answer → {verdict}")


async def _first_ticket(reviewer: Reviewer, timeout_s: float) -> Ticket | None:
    async def first() -> Ticket | None:
        async for ticket in reviewer.tickets(QUEUE):
            return ticket
        return None

    try:
        return await asyncio.wait_for(first(), timeout_s)
    except TimeoutError:
        return None
