"""The demo's human-review step: answer one routed pause as a reviewer would.

The pause router has put every synthetic pause on ``<prefix>.human.default``; this step
reads that queue with the reviewer SDK, answers the first ticket (accepted, a resume for
the kernel), answers it a second time (rejected: first answer wins), and prints both
verdicts.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import orjson

from symfonic_stream.consumers import deployed
from symfonic_stream.models.pauses import Ticket
from symfonic_stream.sdk.reviewer import Reviewer
from symfonic_stream.tools.render import question_text

if TYPE_CHECKING:
    from symfonic_stream.tools.demo.context import DemoContext

QUEUE = "default"
#: The consumers a pause goes through to be answered: those that read the routing rules (the
#: router, which makes the ticket, and the validator, which checks the answer).
PAUSE_PATH = tuple(c.name for c in deployed()
                   if any("routing_rules" in e.settings for e in c.engines))


async def answer_a_pause(ctx: DemoContext) -> None:
    if not set(PAUSE_PATH) <= set(ctx.consumers):
        return
    console = ctx.console
    async with Reviewer(f"{ctx.settings.topic_prefix}-demo-reviewer", ctx.settings) as r:
        ticket = await _first_ticket(r, timeout_s=60.0)
        if ticket is None:
            console.print(f"  no ticket reached {ctx.names.human_queue(QUEUE)}")
            return
        what = ticket.kind if ticket.name == ticket.kind else f"{ticket.kind} {ticket.name!r}"
        console.print(f"  ticket {ticket.ticket_id} on {ctx.names.human_queue(QUEUE)}:",
                      markup=False, soft_wrap=True)
        console.print(f"    run {ticket.run_id} asks ({what})", markup=False)
        for question in ticket.questions or []:
            console.print(f"    ? {question_text(question)}", markup=False, soft_wrap=True)
        answer = {"approved": True, "note": "looks fine"}
        first = await r.answer(ticket, answer, responder="demo-reviewer")
        await r.commit()
        verdict = "accepted" if first.accepted else f"rejected ({first.reason})"
        console.print(f"  answer {orjson.dumps(answer).decode()} → {verdict}", markup=False,
                      soft_wrap=True)
        if first.accepted:
            console.print(f"    (a resume for the kernel, on {ctx.names.resumes})", markup=False,
                          soft_wrap=True)
        second = await r.answer(ticket, {"approved": False}, responder="second-reviewer")
        # (the reason only: its detail names the first answer's time in Unix seconds)
        verdict = ("accepted" if second.accepted
                   else f"rejected: {second.reason} (the first answer stands)")
        console.print(f"  a second answer → {verdict}", markup=False)


async def _first_ticket(reviewer: Reviewer, timeout_s: float) -> Ticket | None:
    async def first() -> Ticket | None:
        async for ticket in reviewer.tickets(QUEUE):
            return ticket
        return None

    try:
        return await asyncio.wait_for(first(), timeout_s)
    except TimeoutError:
        return None
