"""The gateway's delivery metrics (docs/metrics.md, "The gateway"): the lag of live records
behind their Kafka timestamp, and the streams that resume after a seq (pure: no broker)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from types import SimpleNamespace
from typing import Any

import httpx
import orjson

from symfonic_stream.config import Settings
from symfonic_stream.gateway.app import GatewayState, create_app
from symfonic_stream.gateway.runs import Held, Run, RunStore
from symfonic_stream.gateway.sse import Envelope
from symfonic_stream.gateway.viewer import Viewing, records
from symfonic_stream.observability.gateway import GatewayMetrics

RUN = "run-1"


def _file(store: RunStore, seq: int, ts: float, closes: bool = False) -> None:
    data = orjson.dumps({"run_id": RUN, "seq": seq, "source_index": seq, "ts": 1.0,
                         **({"end": {"status": "completed", "error": None}} if closes
                            else {"text_delta": {"text": "x"}})})
    store.append(0, seq, Envelope(RUN, seq, "end" if closes else "text_delta", closes),
                 data, None, ts)


class Watched(asyncio.Event):
    """A run's ``changed`` that says when a viewer waits on it: the stream has caught up."""

    def __init__(self) -> None:
        super().__init__()
        self.waited = asyncio.Event()

    async def wait(self) -> bool:
        self.waited.set()
        return await super().wait()


async def caught_up(run: Run) -> None:
    """Until a viewer of ``run`` waits for its next record."""
    watched = run.changed = Watched()
    await asyncio.wait_for(watched.waited.wait(), 10)


async def test_only_records_that_come_after_the_stream_caught_up_are_delivered_live() -> None:
    store = RunStore(cache_bytes=10**6, max_runs=10)
    _file(store, 0, ts=100.0)
    _file(store, 1, ts=101.0)
    run = store.get(RUN)
    assert run is not None
    delivered: list[list[int]] = []
    viewing = Viewing(delivered=lambda batch: delivered.append([h.seq for h in batch]))
    stream = records(SimpleNamespace(), run, -1, viewing)  # type: ignore[arg-type]
    async with contextlib.aclosing(stream):
        history = await anext(stream)
        assert [item.seq for item in history if isinstance(item, Held)] == [0, 1]
        following = asyncio.ensure_future(anext(stream))
        await caught_up(run)
        assert delivered == []  # the history it replayed is no delivery
        _file(store, 2, ts=time.time())
        _file(store, 3, ts=time.time(), closes=True)
        live = await following
    assert [item.seq for item in live if isinstance(item, Held)] == [2, 3]
    assert delivered == [[2, 3]]
    assert [h.ts for h in run.held][:2] == [100.0, 101.0]  # (each record keeps its own)


def _gateway() -> tuple[GatewayState, RunStore]:
    store = RunStore(cache_bytes=10**6, max_runs=100)
    tails: Any = {stream: SimpleNamespace(store=store) for stream in ("events", "chunks")}
    return GatewayState(Settings(), tails, GatewayMetrics()), store


def _client(state: GatewayState) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)),
                             base_url="http://gateway", timeout=30)


def _sample(state: GatewayState, name: str, stream: str = "events") -> float | None:
    return state.metrics.registry.get_sample_value(
        f"symfonic_stream_gateway_{name}", {"stream": stream})


async def test_a_live_record_s_lag_behind_its_timestamp_is_observed_once_per_viewer() -> None:
    state, store = _gateway()
    _file(store, 0, ts=time.time() - 3600)  # an hour old: history, never a lag
    run = store.get(RUN)
    assert run is not None
    async with _client(state) as client:
        response = asyncio.ensure_future(client.get(f"/v1/runs/{RUN}/events"))
        await caught_up(run)
        sent_at = time.time()
        _file(store, 1, ts=sent_at - 2.0)  # written two seconds ago
        _file(store, 2, ts=sent_at - 2.0, closes=True)
        answer = await response
    assert answer.status_code == 200 and "event: end" in answer.text
    assert _sample(state, "delivery_lag_seconds_count") == 2
    lag = _sample(state, "delivery_lag_seconds_sum")
    assert lag is not None and 4.0 <= lag < 4.0 + 2 * (time.time() - sent_at)
    assert state.metrics.registry.get_sample_value(
        "symfonic_stream_gateway_delivery_lag_seconds_bucket",
        {"stream": "events", "le": "1.0"}) == 0
    assert _sample(state, "resumes_total") == 0  # from the start: not a resume


async def test_a_stream_from_after_a_seq_is_a_resume_served() -> None:
    state, store = _gateway()
    for seq in range(3):
        _file(store, seq, ts=time.time(), closes=seq == 2)
    async with _client(state) as client:
        again = await client.get(f"/v1/runs/{RUN}/events", headers={"Last-Event-ID": "0"})
        after = await client.get(f"/v1/runs/{RUN}/chunks?after_seq=1")
        whole = await client.get(f"/v1/runs/{RUN}/events")
    assert [r.status_code for r in (again, after, whole)] == [200, 200, 200]
    assert "id: 0\n" not in again.text and "id: 1\n" in again.text
    assert (_sample(state, "resumes_total"), _sample(state, "resumes_total", "chunks")) == (1, 1)
    # Nothing sent was live: each stream replayed what the run held.
    assert _sample(state, "delivery_lag_seconds_count") == 0
