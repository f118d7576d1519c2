"""Helpers of the gateway's tests against the real broker (tests/integration and
tests/browser): a gateway in the test's event loop, an SSE reader, a spy on the requests
that wait for a run, and the tests' tokens (tests/unit's gateway tests too)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt

from symfonic_stream.config import Settings
from symfonic_stream.gateway.app import GatewayState
from symfonic_stream.gateway.runs import RunStore
from symfonic_stream.gateway.server import Gateway, http_server


async def read_sse(client: httpx.AsyncClient, url: str, *, headers: dict[str, str] | None = None,
                   until_seq: int | None = None, within: float = 30.0,
                   messages: list[dict[str, str]] | None = None,
                   ) -> tuple[int, list[dict[str, str]]]:
    """(status, messages) of one stream, read until the server closes it (or ``until_seq``).
    ``messages``: a list each message is appended to as it arrives (a test can watch it)."""
    messages = [] if messages is None else messages
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            async with client.stream("GET", url, headers=headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    return response.status_code, [{"body": response.text}]
                current: dict[str, str] = {}
                async for line in response.aiter_lines():
                    if line == "":
                        if current:
                            messages.append(current)
                            if until_seq is not None and current.get("id") == str(until_seq):
                                return 200, messages
                        current = {}
                    elif not line.startswith(":"):
                        name, _, value = line.partition(": ")
                        current[name] = value
                return 200, messages
    raise AssertionError(f"stream of {url} still open after {within} s: {messages[-3:]}")


@contextlib.asynccontextmanager
async def running_gateway(settings: Settings) -> AsyncIterator[tuple[Gateway, str]]:
    gateway = Gateway(settings)
    await gateway.start()
    serving = asyncio.create_task(gateway.serve())
    try:
        deadline = time.monotonic() + 30
        while not gateway.health.ready:
            assert time.monotonic() < deadline, "gateway not ready"
            await asyncio.sleep(0.05)
        yield gateway, f"http://127.0.0.1:{gateway.port}"
    finally:
        gateway.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, 15)
        await gateway.close()


@contextlib.asynccontextmanager
async def serving(state: GatewayState) -> AsyncIterator[str]:
    """``state``'s routes on the gateway's own HTTP server (its edge's limits included),
    on a free port of 127.0.0.1, in the test's loop, without Kafka: its base URL."""
    server = http_server(state)
    listening = socket.create_server(("127.0.0.1", 0))
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        while not server.started:
            assert not serving.done(), "the server stopped at start"
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, 15)
        listening.close()


#: The tests' HS256 key and audience (``jwt`` needs an audience: config.py).
KEY = "a-test-key-of-at-least-32-bytes-for-hs256"
AUDIENCE = "symfonic-gateway"
#: What a token may do unless a test says otherwise: read runs and review.
READ_AND_REVIEW = "runs:read reviews:answer"


def jwt_settings() -> dict[str, Any]:
    """The settings of a gateway checking the tests' tokens."""
    return {"gateway_auth": "jwt", "gateway_jwt_key": KEY, "gateway_jwt_audience": AUDIENCE}


def mint(tenant: str | None, sub: str | None = None, scope: str | None = READ_AND_REVIEW,
         queues: list[str] | None = None, **claims: Any) -> str:
    """A token of the tests' key for ``tenant`` (each claim given, ``None`` ones left out),
    living five minutes."""
    now = int(time.time())
    given = {"tenant": tenant, "sub": sub, "scope": scope, "queues": queues}
    return jwt.encode({"aud": AUDIENCE, "iat": now, "exp": now + 300, **claims,
                       **{k: v for k, v in given.items() if v is not None}},
                      KEY, algorithm="HS256")


def bearer(tenant: str | None, sub: str | None = None, scope: str | None = READ_AND_REVIEW,
           queues: list[str] | None = None, **claims: Any) -> dict[str, str]:
    """The ``Authorization`` header of :func:`mint`'s token."""
    return {"Authorization": f"Bearer {mint(tenant, sub, scope, queues, **claims)}"}


def spy_on_waits(store: RunStore) -> list[str]:
    """The run ids requests began to wait for (RunStore.wait_for), in order."""
    entered: list[str] = []
    wait_for = store.wait_for

    async def spy(run_id: str, *args: Any) -> Any:
        entered.append(run_id)
        return await wait_for(run_id, *args)

    store.wait_for = spy  # type: ignore[method-assign,assignment]
    return entered


async def until_waiting(entered: list[str], count: int, *requests: asyncio.Task[Any]) -> None:
    while len(entered) < count:
        assert not any(r.done() for r in requests), "answered before the wait"
        await asyncio.sleep(0.005)
