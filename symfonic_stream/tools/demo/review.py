"""The demo's review loop, closed: a run pauses for an approval, a reviewer answers it
through the gateway's review console (scripted: the requests its page sends), the demo's
kernel resumes the run with the accepted answer, and the run finishes.

The gateway runs with tokens (``SYMFONIC_GATEWAY_AUTH=jwt``, a key of the demo's own): the
console answers under the token's subject, and the ticket's token never leaves the gateway.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import orjson
from aiokafka import AIOKafkaConsumer

from symfonic_stream.kafka.clients import client_kwargs
from symfonic_stream.sdk.publisher import EventPublisher

if TYPE_CHECKING:
    from symfonic_stream.tools.demo.context import DemoContext

TENANT = "acme"  # the synthetic runs' tenant (tools/synthetic.py)
REVIEWER = "demo-reviewer"
SCHEMA = {"type": "object", "required": ["approved"],
          "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}}}


#: The audience of the demo gateway's tokens (``SYMFONIC_GATEWAY_JWT_AUDIENCE``).
AUDIENCE = "symfonic-demo"


def reviewer_token(key: str, lifetime_s: float, *, reviews: bool = True) -> str:
    """A token of the demo's tenant that may read runs and, with ``reviews``, review every
    queue of the tenant (answer and claim its tickets)."""
    # Imported here: PyJWT is the [gateway] extra's, and the demo runs with [tools] alone
    # (then its gateway does not start, and no token is made).
    import jwt

    now = int(time.time())
    rights = ({"scope": "runs:read reviews:answer", "queues": ["*"]} if reviews
              else {"scope": "runs:read"})
    return jwt.encode({"tenant": TENANT, "sub": REVIEWER, "aud": AUDIENCE, **rights,
                       "iat": now, "exp": now + int(lifetime_s)}, key, algorithm="HS256")


def _paused_run(run_id: str) -> list[dict[str, Any]]:
    now = time.time()
    scope = {"tenant": TENANT, "principal": "user-1"}
    pending = {"name": "approve_payment", "kind": "interrupt", "token": f"kernel-{run_id}",
               "interrupt_id": f"{run_id}-approval", "tool_call_id": "call-pay",
               "run_id": run_id, "session_id": None, "expires_at": now + 3600,
               "resumable": True, "payload": {"amount": 120, "response_schema": SCHEMA}}
    call = {"id": "call-pay", "name": "pay_invoice", "arguments": {"amount": 120}}
    base = {"run_id": run_id, "timestamp": now, "scope": scope}
    return [{**base, "index": 0, "kind": "text_delta", "text": "Paying invoice 42. "},
            {**base, "index": 1, "kind": "tool_call", "tool_call": call},
            {**base, "index": 2, "kind": "interrupt", "interrupt": pending}]


async def answer_through_the_console(ctx: DemoContext) -> None:
    port = ctx.gateway_port
    if port is None or ctx.gateway_key is None or "resumes" not in ctx.consumers:
        ctx.console.print("  no gateway: skipped")
        return
    run_id = f"demo-{ctx.options.seed}-review"
    bearer = reviewer_token(ctx.gateway_key, 600)
    async with EventPublisher(ctx.settings, client_name="demo-kernel") as kernel:
        ended = asyncio.create_task(_kernel(ctx, kernel, run_id))
        for event in _paused_run(run_id):
            await kernel.send(event)
        ctx.console.print(f"  run {run_id} paused for approve_payment (tenant {TENANT})")
        ticket = await _ticket(port, bearer, f"{run_id}-approval")
        if ticket is None:
            ctx.console.print("  [red]the ticket never reached the console[/]")
            ended.cancel()
            return
        ctx.console.print(f"  the console lists ticket {ticket['ticket']['ticket_id']} (queue "
                          f"{ticket['ticket']['queue']}),")
        ctx.console.print("  without the ticket's token (it never reaches a browser)"
                          if "token" not in ticket["ticket"]
                          else "  [red]WITH the ticket's token[/]: it must never be shown")
        for action, body in (("claim", {}), ("answer", {"answer": {"approved": True,
                                                                   "note": "within budget"}})):
            status, verdict = await _post(port, bearer, f"/v1/reviews/tickets/"
                                          f"{ticket['ticket']['ticket_id']}/{action}", body)
            ctx.console.print(f"  {REVIEWER}: {action} → {verdict.get('outcome')} ({status})")
        try:
            end = await asyncio.wait_for(ended, 60)
            ctx.console.print(f"  the kernel resumed {run_id}: the run ended {end}")
            ctx.review_loop_closed = end == "completed"
        except TimeoutError:
            ctx.console.print(f"  [red]{run_id} did not finish within 60 s[/]")


async def _kernel(ctx: DemoContext, kernel: EventPublisher, run_id: str) -> str:
    """The kernel's side: on the accepted answer, go on and finish; the run's end status."""
    names = ctx.names
    consumer = AIOKafkaConsumer(names.resumes, names.stream_events,
                                **client_kwargs(ctx.settings, "demo-kernel"), group_id=None,
                                auto_offset_reset="earliest", isolation_level="read_committed")
    await consumer.start()
    try:
        async for record in consumer:
            value = orjson.loads(record.value or b"{}")
            if value.get("run_id") != run_id:
                continue
            if record.topic == names.resumes:
                approved = value["answer"].get("approved")
                base = {"run_id": run_id, "timestamp": time.time(),
                        "scope": {"tenant": TENANT, "principal": "user-1"}}
                await kernel.send({**base, "index": 3, "kind": "text_delta",
                                   "text": f"Approved by {value['responder']}: {approved}. "})
                await kernel.send({**base, "index": 4, "kind": "done",
                                   "result": {"text": "paid", "duration_ms": 1.0}})
            elif "end" in value and value["end"]["status"] != "paused":
                return str(value["end"]["status"])
    finally:
        await consumer.stop()
    return "unknown"


async def _ticket(port: int, bearer: str, ticket_id: str) -> dict[str, Any] | None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, listed = await _request(port, "GET", "/v1/reviews/tickets", bearer)
        for ticket in listed.get("tickets", []) if status == 200 else []:
            if ticket["ticket"]["ticket_id"] == ticket_id:
                return dict(ticket)
        await asyncio.sleep(0.5)
    return None


async def _post(port: int, bearer: str, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    return await _request(port, "POST", path, bearer, orjson.dumps(body))


async def _request(port: int, method: str, path: str, bearer: str,
                   body: bytes = b"") -> tuple[int, dict[str, Any]]:
    """One JSON request to the gateway, as the console's page sends it (no client library:
    the demo needs none)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     f"Authorization: Bearer {bearer}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()
    head, _, payload = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, orjson.loads(payload) if payload else {}
