"""The gateway between tenants on the real broker (issue 33 items 3 and 4): real
projectors write the topics, a real gateway serves them to tokens of two tenants.

What each token may read is the reference oracle's projection of what was sent
(:mod:`tests.reference.oracle`): a run is its first event's tenant's (contract §9), the
projectors dead-letter another tenant's events under its id, and the gateway serves a run
to its tenant's tokens only (docs/gateway.md, "Who may read").
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
import orjson
import pytest

from symfonic_stream.config import Settings
from tests.reference import oracle

from .gateway_harness import (
    bearer,
    jwt_settings,
    read_sse,
    running_gateway,
    spy_on_waits,
    until_waiting,
)
from .harness import (  # noqa: F401  (prefix_fixture provides the ``prefix`` fixture)
    TopicReader,
    create_topics,
    prefix_fixture,
    produce,
    settings_for,
)
from .test_gateway_live import projectors

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

FOREIGN_LOG = "a record of another tenant than its run's"


def _token(tenant: str) -> dict[str, str]:
    return bearer(tenant, scope="runs:read")


def _settings(prefix: str, **overrides: Any) -> Settings:
    return settings_for(prefix, **{"gateway_port": 0, "gateway_host": "127.0.0.1",
                                   **jwt_settings(), "gateway_run_wait_s": 2.0, **overrides})


def _event(run_id: str, index: int, tenant: str | None, kind: str = "text_delta",
           **fields: Any) -> dict[str, Any]:
    scope = {"scope": {"tenant": tenant, "principal": "p"}} if tenant is not None else {}
    return {"run_id": run_id, "index": index, "kind": kind, "timestamp": 1.0 + index,
            "text": f"t{index}", **scope, **fields}


def _done(run_id: str, index: int, tenant: str) -> dict[str, Any]:
    return _event(run_id, index, tenant, "done", result={"text": "fin", "duration_ms": 5.0})


async def _publish_committed(prefix: str, events: list[dict[str, Any]]) -> None:
    """Send ``events`` (one run, ending ``done``) and wait until both projectors
    committed its end."""
    await produce(f"{prefix}.agent-events",
                  [(e["run_id"].encode(), orjson.dumps(e), []) for e in events])
    for topic in ("stream-events", "stream-chunks"):
        async with TopicReader(f"{prefix}.{topic}") as reader:
            deadline = time.monotonic() + 60
            while not any("end" in orjson.loads(r.value or b"{}") for r in reader.records):
                assert time.monotonic() < deadline, f"the run's end not on {topic}"
                await reader.poll()


async def test_another_tenants_events_under_a_run_id_never_reach_its_viewers(
    prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Item 3, then issue 43: globex's and tenant-less events under acme's run id are
    dead-lettered by the projectors (contract §9), so every record of the run is acme's
    and says so; the gateway serves them all to acme's token, from memory or read back from
    Kafka, and globex's token finds no run."""
    await create_topics(prefix)
    shared = [_event("shared", 0, "acme"), _event("shared", 1, "acme"),
              _event("shared", 2, "globex"), _event("shared", 3, None),
              _event("shared", 4, "acme"), _done("shared", 5, "acme")]
    caplog.set_level(logging.WARNING, logger="symfonic_stream.gateway.tail")
    async with projectors(prefix):
        await _publish_committed(prefix, shared)
    for cache_bytes in (10**8, 1024):  # held in memory, then read back from Kafka
        async with running_gateway(_settings(prefix, gateway_cache_bytes=cache_bytes)) as (
                gateway, base), httpx.AsyncClient(timeout=30) as client:
            streams: list[tuple[str, oracle.ProjectionName]] = [("events", "typed"),
                                                                ("chunks", "chunks")]
            for stream, projection in streams:
                want, dead = oracle.project((orjson.dumps(e) for e in shared), projection)
                assert dead == [("foreign_tenant", 3), ("foreign_tenant", 4)]
                status, got = await read_sse(client, f"{base}/v1/runs/shared/{stream}",
                                             headers=_token("acme"))
                assert status == 200
                assert [orjson.loads(m["data"]) for m in got] == want, stream
                status, resumed = await read_sse(
                    client, f"{base}/v1/runs/shared/{stream}",
                    headers={**_token("acme"), "Last-Event-ID": "1"})
                assert [orjson.loads(m["data"]) for m in resumed] == [
                    e for e in want if e["seq"] > 1]
                status, body = await read_sse(client, f"{base}/v1/runs/shared/{stream}",
                                              headers=_token("globex"))
                assert status == 404 and "not_found" in body[0]["body"]
                foreign = gateway.metrics.registry.get_sample_value(
                    "symfonic_stream_gateway_records_total",
                    {"stream": stream, "outcome": "foreign"})
                assert not foreign, stream  # the projectors wrote no foreign record
            read_backs = gateway.metrics.registry.get_sample_value(
                "symfonic_stream_gateway_read_backs_total", {"stream": "events"})
            assert (read_backs or 0) >= (1 if cache_bytes == 1024 else 0)
        assert not [r for r in caplog.records if r.getMessage().startswith(FOREIGN_LOG)]


async def test_another_tenants_run_and_an_unknown_run_answer_alike(prefix: str) -> None:
    """Item 4: the same status and body, and the same wait: both requests wait on their
    run id's arrival in the store until SYMFONIC_GATEWAY_RUN_WAIT_S is up."""
    await create_topics(prefix)
    async with projectors(prefix):
        await _publish_committed(prefix, [_event("acme-run", 0, "acme"),
                                          _done("acme-run", 1, "acme")])
    async with running_gateway(_settings(prefix, gateway_run_wait_s=3.0)) as (gateway, base), \
            httpx.AsyncClient(timeout=30) as client:
        store = gateway.tails["events"].store
        entered = spy_on_waits(store)
        foreign = asyncio.create_task(read_sse(client, f"{base}/v1/runs/acme-run/events",
                                               headers=_token("globex")))
        unknown = asyncio.create_task(read_sse(client, f"{base}/v1/runs/acme-rum/events",
                                               headers=_token("globex")))
        await until_waiting(entered, 2, foreign, unknown)
        assert sorted(entered) == ["acme-rum", "acme-run"]
        assert (store.waiters("acme-run"), store.waiters("acme-rum")) == (1, 1)
        (status, body), (unknown_status, unknown_body) = await foreign, await unknown
        refused = {reason: gateway.metrics.registry.get_sample_value(
            "symfonic_stream_gateway_refused_total", {"stream": "events", "reason": reason})
            for reason in ("forbidden", "not_found")}
    assert (status, unknown_status) == (404, 404)
    assert body[0]["body"] == unknown_body[0]["body"].replace("acme-rum", "acme-run")
    # Issue 43: one count, or whoever scrapes /metrics learns that acme-run exists.
    assert refused == {"forbidden": 0.0, "not_found": 2.0}


async def test_one_tenants_waiting_requests_leave_slots_to_the_others(prefix: str) -> None:
    """Item 4: acme's requests waiting for runs that never come fill acme's slots, not the
    process's: globex's token still reads its run."""
    await create_topics(prefix)
    globex_run = [_event("globex-run", 0, "globex"), _done("globex-run", 1, "globex")]
    async with projectors(prefix):
        await _publish_committed(prefix, globex_run)
    settings = _settings(prefix, gateway_run_wait_s=60.0, gateway_max_clients=3,
                         gateway_max_clients_per_tenant=2)
    async with running_gateway(settings) as (gateway, base), \
            httpx.AsyncClient(timeout=30) as client:
        entered = spy_on_waits(gateway.tails["events"].store)
        waiting = [asyncio.create_task(read_sse(client, f"{base}/v1/runs/never-{i}/events",
                                                headers=_token("acme"), within=90))
                   for i in range(2)]
        await until_waiting(entered, 2, *waiting)
        status, body = await read_sse(client, f"{base}/v1/runs/never-2/events",
                                      headers=_token("acme"), within=10)
        assert status == 503 and "MAX_CLIENTS_PER_TENANT" in body[0]["body"]
        status, messages = await read_sse(client, f"{base}/v1/runs/globex-run/events",
                                          headers=_token("globex"), within=10)
        assert status == 200
        assert [orjson.loads(m["data"]) for m in messages] == oracle.project(
            (orjson.dumps(e) for e in globex_run), "typed")[0]
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


async def test_a_gateway_serving_without_auth_says_so_at_start(
    prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 43: nothing said that a gateway served every tenant's runs to whoever reached
    its port; now a warning at start, and none from a gateway that checks tokens."""
    await create_topics(prefix)
    caplog.set_level(logging.WARNING, logger="symfonic_stream.gateway.server")
    warned = "the gateway serves without auth"
    async with running_gateway(settings_for(prefix, gateway_port=0, gateway_host="127.0.0.1")):
        assert [r.levelname for r in caplog.records if r.getMessage().startswith(warned)] == [
            "WARNING"]
    caplog.clear()
    async with running_gateway(_settings(prefix)):
        assert not [r for r in caplog.records if r.getMessage().startswith(warned)]
