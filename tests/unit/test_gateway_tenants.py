"""The gateway between tenants, without a broker (issue 33 items 3 and 4): a request cannot
tell another tenant's run from an unknown one, and one tenant cannot take every slot.

The same cases on a live gateway and broker: tests/integration/test_gateway_live.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import httpx
import orjson

from symfonic_stream.config import Settings
from symfonic_stream.gateway.app import GatewayState, create_app
from symfonic_stream.gateway.auth import TokenCheck
from symfonic_stream.gateway.runs import RunStore
from symfonic_stream.gateway.sse import Envelope
from symfonic_stream.observability.gateway import GatewayMetrics
from tests.integration.gateway_harness import jwt_settings, mint, spy_on_waits, until_waiting


def _token(tenant: str) -> str:
    return mint(tenant, scope="runs:read")


def _gateway(**overrides: Any) -> tuple[GatewayState, RunStore]:
    settings = Settings(**jwt_settings(), **overrides)
    store = RunStore(cache_bytes=10**6, max_runs=100)
    tails: Any = {stream: SimpleNamespace(store=store) for stream in ("events", "chunks")}
    tokens = TokenCheck.from_settings(settings)
    return GatewayState(settings, tails, GatewayMetrics(), tokens), store


def _client(state: GatewayState) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)),
                             base_url="http://gateway", timeout=30)


def _file_run(store: RunStore, run_id: str, tenant: str) -> None:
    data = orjson.dumps({"run_id": run_id, "seq": 0, "source_index": 0, "ts": 1.0,
                         "end": {"status": "completed", "error": None}})
    store.append(0, 0, Envelope(run_id, 0, "end", True), data, tenant)


def _refused(state: GatewayState, reason: str) -> float | None:
    return state.metrics.registry.get_sample_value(
        "symfonic_stream_gateway_refused_total", {"stream": "events", "reason": reason})


async def test_another_tenants_run_is_answered_as_an_unknown_one() -> None:
    state, store = _gateway(gateway_run_wait_s=0.5)
    _file_run(store, "acme-run", "acme")
    auth = {"Authorization": f"Bearer {_token('globex')}"}
    async with _client(state) as client:
        own = await client.get("/v1/runs/acme-run/events",
                               headers={"Authorization": f"Bearer {_token('acme')}"})
        assert own.status_code == 200 and "event: end" in own.text
        entered = spy_on_waits(store)
        foreign = asyncio.create_task(client.get("/v1/runs/acme-run/events", headers=auth))
        unknown = asyncio.create_task(client.get("/v1/runs/acme-rum/events", headers=auth))
        # The same path: both wait on their run id's arrival (RunStore.wait_for).
        await until_waiting(entered, 2, foreign, unknown)
        assert sorted(entered) == ["acme-rum", "acme-run"]
        assert (store.waiters("acme-run"), store.waiters("acme-rum")) == (1, 1)
        answers = [await foreign, await unknown]
    assert [a.status_code for a in answers] == [404, 404]
    assert answers[0].json() == {**answers[1].json(), "detail": answers[1].json()["detail"]
                                 .replace("acme-rum", "acme-run")}
    assert answers[0].headers.items() == answers[1].headers.items()
    # Issue 43: one count, or whoever scrapes /metrics learns that acme-run exists.
    assert (_refused(state, "forbidden"), _refused(state, "not_found")) == (0.0, 2.0)
    assert state.slots.taken == 0


async def test_one_tenant_cannot_take_every_slot() -> None:
    state, store = _gateway(gateway_run_wait_s=30, gateway_max_clients=3,
                            gateway_max_clients_per_tenant=2)
    _file_run(store, "globex-run", "globex")
    acme = {"Authorization": f"Bearer {_token('acme')}"}
    async with _client(state) as client:
        entered = spy_on_waits(store)
        waiting = [asyncio.create_task(client.get(f"/v1/runs/soon-{i}/events", headers=acme))
                   for i in range(2)]
        await until_waiting(entered, 2, *waiting)
        third = await asyncio.wait_for(client.get("/v1/runs/soon-2/events", headers=acme), 5)
        other = await client.get("/v1/runs/globex-run/events",
                                 headers={"Authorization": f"Bearer {_token('globex')}"})
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
    assert third.status_code == 503
    assert "SYMFONIC_GATEWAY_MAX_CLIENTS_PER_TENANT" in third.json()["detail"]
    assert _refused(state, "too_many_tenant_clients") == 1.0
    assert other.status_code == 200 and "event: end" in other.text
