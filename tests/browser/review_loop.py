"""The pause loop of issue 38 against the real broker, for the browser tests: the typed
projector, the pause router, the resume intake and validator in the test's loop, a gateway
with tokens, a kernel that goes on when its pause is answered, tokens of two tenants, and
a page of another origin that loads the stock ``@ag-ui/client`` (bundled by ``make web``
into web/build/agui-client.js, unmodified)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer

from symfonic_stream.app.topics import required_topics
from symfonic_stream.app.topologies import projector_topology, router_topology, topologies
from symfonic_stream.config import Settings
from symfonic_stream.gateway.server import Gateway
from symfonic_stream.kafka.admin import ensure_topics
from symfonic_stream.runtime.workers import free_port
from tests.integration.gateway_harness import jwt_settings, mint, running_gateway
from tests.integration.harness import (
    BOOTSTRAP,
    InProcessEngine,
    create_topics,
    produce,
    settings_for,
)

ROOT = Path(__file__).resolve().parents[2]
AGUI_CLIENT = ROOT / "web" / "build" / "agui-client.js"
ARTEFACTS = ROOT / "build" / "test-artefacts"
SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"},
                                            "note": {"type": "string"}},
          "required": ["approved"]}
#: The queue the rules route the tests' approvals to.
QUEUE = "payments"
RULES = f"""
rules:
  - match: {{name: approve_payment}}
    queue: {QUEUE}
"""


def token(tenant: str, sub: str, scope: str | None = "runs:read reviews:answer",
          queues: list[str] | None = None) -> str:
    """A token for the loop's gateway: of ``tenant``, answering as ``sub``, reviewing
    ``queues``."""
    return mint(tenant, sub, scope, queues)


def event(run_id: str, index: int, kind: str, tenant: str, principal: str = "kernel",
          **fields: Any) -> dict[str, Any]:
    return {"run_id": run_id, "index": index, "kind": kind, "timestamp": time.time(),
            "scope": {"tenant": tenant, "principal": principal}, **fields}


def up_to_a_pause(run_id: str, tenant: str, interrupt_id: str,
                  principal: str = "kernel") -> list[dict[str, Any]]:
    """A run's text, a tool call, then an approval it waits on (with its response schema)."""
    pending = {"name": "approve_payment", "kind": "interrupt", "token": f"secret-{interrupt_id}",
               "interrupt_id": interrupt_id, "tool_call_id": "call-1", "run_id": run_id,
               "session_id": "s", "expires_at": time.time() + 3600, "resumable": True,
               "payload": {"amount": 120, "response_schema": SCHEMA}}
    call = {"id": "call-1", "name": "pay", "arguments": {"amount": 120}}
    return [event(run_id, 0, "text_delta", tenant, principal, text="I will pay the invoice. "),
            event(run_id, 1, "tool_call", tenant, principal, tool_call=call),
            event(run_id, 2, "interrupt", tenant, principal, interrupt=pending)]


async def publish(prefix: str, events: list[dict[str, Any]]) -> None:
    await produce(f"{prefix}.agent-events",
                  [(e["run_id"].encode(), orjson.dumps(e), []) for e in events])


@dataclass
class Kernel:
    """The runs' kernel: on each accepted answer (symfonic.resumes) it goes on with the
    run it resumes, text then done, as a kernel would."""

    prefix: str
    tenants: dict[str, str] = field(default_factory=dict)  # run id -> its tenant
    resumed: list[dict[str, Any]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        consumer = AIOKafkaConsumer(f"{self.prefix}.resumes", bootstrap_servers=BOOTSTRAP,
                                    isolation_level="read_committed",
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            async for record in consumer:
                resume = orjson.loads(record.value or b"{}")
                self.resumed.append(resume)
                run_id = resume["run_id"]
                tenant = self.tenants.get(run_id, "acme")
                approved = resume["answer"].get("approved") if isinstance(
                    resume["answer"], dict) else resume["answer"]
                await publish(self.prefix, [
                    event(run_id, 3, "text_delta", tenant, text=f"Approved: {approved}. "),
                    event(run_id, 4, "done", tenant, result={"text": "paid", "duration_ms": 5.0}),
                ])
        finally:
            await consumer.stop()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def page_server(directory: Path) -> Any:
    """A static server of the test page on another origin than the gateway's."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Loop:
    prefix: str
    gateway: Gateway
    url: str
    page_origin: str
    kernel: Kernel


@contextlib.asynccontextmanager
async def review_loop(prefix: str, tmp_path: Path, *, lease_s: float = 300.0
                      ) -> AsyncIterator[Loop]:
    assert AGUI_CLIENT.exists(), f"{AGUI_CLIENT} missing: run `make web`"
    await create_topics(prefix)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    settings = settings_for(prefix, routing_rules=rules, review_claim_lease_s=lease_s)
    assert (await ensure_topics(settings, required_topics(settings))).ok  # the rules' queues
    site = tmp_path / "site"
    site.mkdir()
    (site / "agui-client.js").write_bytes(AGUI_CLIENT.read_bytes())
    (site / "index.html").write_text(
        '<!doctype html><meta charset="utf-8"><title>AG-UI client</title>'
        '<script src="agui-client.js"></script><body data-loaded="yes"></body>')
    kernel = Kernel(prefix)
    with page_server(site) as origin:
        gateway_settings: Settings = settings_for(
            prefix, gateway_port=free_port(), gateway_host="127.0.0.1", **jwt_settings(),
            gateway_run_wait_s=2.0, gateway_cors_origins=origin, gateway_verdict_wait_s=30.0)
        async with contextlib.AsyncExitStack() as stack:
            for topology in (projector_topology("typed", settings), router_topology(settings),
                             *topologies("resumes", settings)):
                await stack.enter_async_context(InProcessEngine(topology, settings))
            gateway, url = await stack.enter_async_context(running_gateway(gateway_settings))
            task = asyncio.create_task(kernel.run())
            try:
                yield Loop(prefix, gateway, url, origin, kernel)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
