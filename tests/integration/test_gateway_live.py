"""The SSE gateway against the real broker: real projectors write the topics, a real HTTP
server (uvicorn) serves them, an HTTP client reads the streams as a browser would."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.config import Settings

from .gateway_harness import (
    jwt_settings,
    mint,
    read_sse,
    running_gateway,
    spy_on_waits,
    until_waiting,
)
from .harness import (
    ConsumerProcess,
    InProcessEngine,
    TopicReader,
    consumer_env,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    run_cli,
    settings_for,
)
from .observe import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

FAR_FUTURE = 4_102_444_800.0


def _event(run_id: str, index: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"run_id": run_id, "index": index, "kind": kind, "timestamp": 1.0 + index, **fields}


def _ask(run_id: str, index: int) -> dict[str, Any]:
    return _event(run_id, index, "ask_user", interrupt={
        "name": "ask_user", "kind": "ask_user", "payload": {"questions": ["ok?"]},
        "token": "t", "tool_call_id": "c", "interrupt_id": f"{run_id}-{index}",
        "run_id": run_id, "session_id": "s", "expires_at": FAR_FUTURE, "resumable": True})


def _run(run_id: str, start: int, texts: int, *, done: bool = True) -> list[dict[str, Any]]:
    events = [_event(run_id, start + i, "text_delta", text=f"t{start + i}")
              for i in range(texts)]
    if done:
        events.append(_event(run_id, start + texts, "done",
                             result={"text": "fin", "duration_ms": 5.0,
                                     "usage": {"input_tokens": 3, "output_tokens": 4,
                                               "total_tokens": 7}}))
    return events


async def _publish(prefix: str, events: list[dict[str, Any]]) -> None:
    await produce(f"{prefix}.agent-events",
                  [(e["run_id"].encode(), orjson.dumps(e), []) for e in events])


def _gateway_settings(prefix: str, **overrides: Any) -> Settings:
    return settings_for(prefix, **{"gateway_port": 0, "gateway_host": "127.0.0.1",
                                   "gateway_run_wait_s": 20.0, **overrides})


@contextlib.asynccontextmanager
async def projectors(prefix: str) -> AsyncIterator[None]:
    settings = settings_for(prefix)
    async with InProcessEngine(projector_topology("typed", settings), settings), \
            InProcessEngine(projector_topology("chunks", settings), settings):
        yield


async def _topic_values(prefix: str, topic: str, run_id: str, count: int) -> list[bytes]:
    """The run's record values on ``topic``, once ``count`` of them were committed."""
    key = run_id.encode()
    async with TopicReader(f"{prefix}.{topic}") as reader:
        deadline = time.monotonic() + 60
        while sum(r.key == key for r in reader.records) < count:
            assert time.monotonic() < deadline, f"{run_id}: fewer than {count} on {topic}"
            await reader.poll()
    return [r.value for r in reader.records if r.key == key and r.value is not None]


async def test_resume_from_every_seq_gives_exactly_the_records_after_it(prefix: str) -> None:
    await create_topics(prefix)
    run_id = "run-resume"
    events = _run(run_id, 0, 12)
    async with projectors(prefix):
        await _publish(prefix, events)
        # 12 text deltas, usage, response_complete, end: seqs 0-14 on the typed topic.
        on_topic = await _topic_values(prefix, "stream-events", run_id, 15)
        async with running_gateway(_gateway_settings(prefix)) as (gateway, base), \
                httpx.AsyncClient(timeout=30) as client:
            url = f"{base}/v1/runs/{run_id}/events"
            for after in range(-1, 15):
                query = "" if after < 0 else f"?after_seq={after}"
                status, messages = await read_sse(client, url + query)
                assert status == 200
                assert [m["id"] for m in messages] == [str(s) for s in range(after + 1, 15)]
                assert [m["data"].encode() for m in messages] == on_topic[after + 1:]
            status, messages = await read_sse(client, url, headers={"Last-Event-ID": "11"})
            assert [m["event"] for m in messages] == ["usage", "response_complete", "end"]
            status, chunks = await read_sse(client, f"{base}/v1/runs/{run_id}/chunks")
            assert [m["event"] for m in chunks] == ["text"] * 12 + ["final", "end"]
            assert [orjson.loads(m["data"])["seq"] for m in chunks] == list(range(14))
            # Every stream from after a seq is a resume served (15 ?after_seq, one
            # Last-Event-ID); none of them, a replay of the history, had live records.
            resumes = _gateway_sample(gateway, "resumes_total")
            assert (resumes("events"), resumes("chunks")) == (16, 0)
            assert _gateway_sample(gateway, "delivery_lag_seconds_count")("events") == 0


async def test_a_run_published_while_a_client_waits_is_streamed(prefix: str) -> None:
    await create_topics(prefix)
    run_id = "run-late"
    async with projectors(prefix), \
            running_gateway(_gateway_settings(prefix)) as (gateway, base), \
            httpx.AsyncClient(timeout=30) as client:
        entered = spy_on_waits(gateway.tails["events"].store)
        reading = asyncio.create_task(read_sse(client, f"{base}/v1/runs/{run_id}/events"))
        await until_waiting(entered, 1, reading)  # the request waits for the unknown run
        assert entered == [run_id]
        await _publish(prefix, _run(run_id, 0, 3))
        status, messages = await reading
        assert status == 200
        assert [m["id"] for m in messages] == [str(s) for s in range(6)]
        assert orjson.loads(messages[-1]["data"])["end"]["status"] == "completed"


def _gateway_sample(gateway: Any, name: str) -> Any:
    def value(stream: str) -> float | None:
        found = gateway.metrics.registry.get_sample_value(
            f"symfonic_stream_gateway_{name}", {"stream": stream})
        return None if found is None else float(found)
    return value


async def test_a_paused_run_stays_open_and_goes_on_when_continued(prefix: str) -> None:
    """Also the delivery lag (docs/metrics.md): the viewer waits at the pause, so what the
    run writes after it is live, each record's lag behind its Kafka timestamp observed."""
    await create_topics(prefix)
    run_id = "run-paused"
    async with projectors(prefix), \
            running_gateway(_gateway_settings(prefix)) as (gateway, base), \
            httpx.AsyncClient(timeout=30) as client:
        await _publish(prefix, [*_run(run_id, 0, 2, done=False), _ask(run_id, 2)])
        seen: list[dict[str, str]] = []
        reading = asyncio.create_task(
            read_sse(client, f"{base}/v1/runs/{run_id}/events", messages=seen))

        async def paused() -> bool:
            assert not reading.done(), f"the stream ended at the pause: {seen}"
            return [m["event"] for m in seen][-2:] == ["ask_user", "end"]

        await wait_until(paused, "the pause and its end reached the viewer")
        lag = _gateway_sample(gateway, "delivery_lag_seconds_count")
        assert lag("events") == 0  # what it sent up to the pause was the run so far
        # The same stream goes on with what the kernel sends after the answer.
        published = time.time()
        await _publish(prefix, _run(run_id, 3, 2))
        status, messages = await reading
        read = time.time()
        # The five records after the pause, sent live; each lag under the time it took.
        assert lag("events") == 5
        total = _gateway_sample(gateway, "delivery_lag_seconds_sum")("events")
        assert total is not None and 0 <= total <= 5 * (read - published)
        assert _gateway_sample(gateway, "resumes_total")("events") == 0
        assert status == 200
        names = [m["event"] for m in messages]
        assert names == ["text_delta", "text_delta", "ask_user", "end",
                         "text_delta", "text_delta", "usage", "response_complete", "end"]
        assert [m["id"] for m in messages] == [str(s) for s in range(9)]
        ends = [orjson.loads(m["data"])["end"]["status"] for m in messages if m["event"] == "end"]
        assert ends == ["paused", "completed"]


async def test_records_no_longer_held_are_read_back_from_the_runs_first_offset(
    prefix: str,
) -> None:
    await create_topics(prefix)
    runs = [f"run-{i}" for i in range(6)]
    settings = _gateway_settings(prefix, gateway_cache_bytes=2048)
    async with projectors(prefix):
        await _publish(prefix, [e for r in runs for e in _run(r, 0, 8)])
        for run_id in runs:
            await _topic_values(prefix, "stream-events", run_id, 11)
        async with running_gateway(settings) as (gateway, base), \
                httpx.AsyncClient(timeout=30) as client:
            store = gateway.tails["events"].store
            assert store.held_bytes <= 2048
            first = store.get(runs[0])
            assert first is not None and first.held_from > 0  # it must come from Kafka
            for run_id in runs:
                status, messages = await read_sse(client, f"{base}/v1/runs/{run_id}/events")
                assert status == 200
                assert [m["id"] for m in messages] == [str(s) for s in range(11)], run_id
            read_backs = gateway.metrics.registry.get_sample_value(
                "symfonic_stream_gateway_read_backs_total", {"stream": "events"})
            assert read_backs is not None and read_backs >= 1


async def test_unknown_runs_and_bad_requests_are_refused(prefix: str) -> None:
    await create_topics(prefix)
    settings = _gateway_settings(prefix, gateway_run_wait_s=0.5)
    async with running_gateway(settings) as (gateway, base), \
            httpx.AsyncClient(timeout=30) as client:
        status, body = await read_sse(client, f"{base}/v1/runs/nobody/events")
        assert status == 404 and "not_found" in body[0]["body"]
        status, body = await read_sse(client, f"{base}/v1/runs/x/events?after_seq=-3")
        assert status == 400 and "after_seq" in body[0]["body"]
        status, body = await read_sse(client, f"{base}/v1/runs/x/chunks",
                                      headers={"Last-Event-ID": "one"})
        assert status == 400 and "Last-Event-ID" in body[0]["body"]
        refused = gateway.metrics.registry.get_sample_value(
            "symfonic_stream_gateway_refused_total", {"stream": "events", "reason": "not_found"})
        assert refused == 1.0


async def test_ag_ui_format_resumes_where_the_browser_left_off(prefix: str) -> None:
    await create_topics(prefix)
    run_id = "run-agui"
    async with projectors(prefix):
        await _publish(prefix, _run(run_id, 0, 4))
        await _topic_values(prefix, "stream-events", run_id, 7)
        async with running_gateway(_gateway_settings(prefix)) as (_, base), \
                httpx.AsyncClient(timeout=30) as client:
            url = f"{base}/v1/runs/{run_id}/events?format=ag-ui"
            status, whole = await read_sse(client, url)
            assert status == 200
            types = [orjson.loads(m["data"])["type"] for m in whole]
            assert types == ["RUN_STARTED", "TEXT_MESSAGE_START", *["TEXT_MESSAGE_CONTENT"] * 4,
                             "TEXT_MESSAGE_END", "CUSTOM", "RUN_FINISHED"]
            ids = [m.get("id") for m in whole]
            # seq 0 opens the run and the message; usage (seq 4) closes the message.
            assert ids == [None, None, "0", "1", "2", "3", None, "4", "6"]
            status, resumed = await read_sse(client, url, headers={"Last-Event-ID": "2"})
            assert [m["data"] for m in resumed] == [m["data"] for m in whole[5:]]
            status, body = await read_sse(client, f"{base}/v1/runs/{run_id}/chunks?format=ag-ui")
            assert status == 400 and "format" in body[0]["body"]


async def test_a_killed_and_restarted_projector_leaves_a_connected_viewer_whole(
    prefix: str, tmp_path: Any,
) -> None:
    await create_topics(prefix)
    run_id = "run-crash"
    events = _run(run_id, 0, 400)
    typed = ConsumerProcess("typed", prefix, tmp_path, batch_max_latency_ms=20).start()
    try:
        await typed.wait_ready()
        async with running_gateway(_gateway_settings(prefix)) as (gateway, base), \
                httpx.AsyncClient(timeout=60) as client:
            reading = asyncio.create_task(read_sse(client, f"{base}/v1/runs/{run_id}/events",
                                                   within=120))
            publishing = asyncio.create_task(produce(
                f"{prefix}.agent-events",
                [(e["run_id"].encode(), orjson.dumps(e), []) for e in events], rate=100))
            store = gateway.tails["events"].store
            while (run := store.get(run_id)) is None or run.next_seq < 50:
                assert not publishing.done(), "the run was projected before the kill"
                await asyncio.sleep(0.05)
            typed.kill()  # mid-run (50 of 403 seqs committed), transactions open
            typed = ConsumerProcess("typed", prefix, tmp_path, "-again").start()
            await typed.wait_ready()
            await publishing
            status, messages = await reading
        assert status == 200
        seqs = [int(m["id"]) for m in messages]
        assert seqs == list(range(403)), f"lost or repeated: {sorted(set(range(403)) ^ set(seqs))}"
    finally:
        typed.stop()


async def test_a_slow_viewer_is_dropped_and_the_others_go_on(prefix: str) -> None:
    await create_topics(prefix)
    run_id = "run-big"
    big = [_event(run_id, i, "text_delta", text="x" * 200_000) for i in range(60)]
    settings = _gateway_settings(prefix, gateway_send_timeout_s=1.0)
    async with projectors(prefix):
        await _publish(prefix, [*big, *_run(run_id, 60, 0)])
        await _topic_values(prefix, "stream-events", run_id, 63)
        async with running_gateway(settings) as (gateway, base), \
                httpx.AsyncClient(timeout=60) as client:
            # A viewer that never reads: the socket buffers (a small window here, at most
            # a few MB on the server's side) fill long before 12 MB, a send stalls past 1 s.
            slow = socket.socket()
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            slow.connect(("127.0.0.1", gateway.port))
            reader, writer = await asyncio.open_connection(sock=slow)
            writer.write(f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            await writer.drain()
            status, messages = await read_sse(client, f"{base}/v1/runs/{run_id}/events")
            assert status == 200 and len(messages) == 63
            dropped = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                dropped = gateway.metrics.registry.get_sample_value(
                    "symfonic_stream_gateway_streams_total",
                    {"stream": "events", "ending": "too_slow"})
                if dropped:
                    break
                await asyncio.sleep(0.2)
            assert dropped == 1.0
            # Reading what was in flight ends at the close (EOF), not at a timeout.
            await asyncio.wait_for(_drain(reader), 30)
            writer.close()


async def _drain(reader: asyncio.StreamReader) -> None:
    while await reader.read(1 << 20):
        pass


async def test_jwt_a_token_reads_only_its_tenants_runs(prefix: str) -> None:
    await create_topics(prefix)
    scope = {"tenant": "acme", "principal": "u1"}
    events = [{**e, "scope": scope} for e in _run("run-acme", 0, 2)]
    events += _run("run-nobody", 0, 1)  # no tenant: no token may read it
    settings = _gateway_settings(prefix, **jwt_settings(), gateway_run_wait_s=1.0)

    def token(tenant: str) -> str:
        return mint(tenant, scope="runs:read")

    async with projectors(prefix):
        await _publish(prefix, events)
        await _topic_values(prefix, "stream-events", "run-acme", 5)
        await _topic_values(prefix, "stream-events", "run-nobody", 4)
        async with running_gateway(settings) as (gateway, base), \
                httpx.AsyncClient(timeout=30) as client:
            url = f"{base}/v1/runs/run-acme/events"
            status, messages = await read_sse(
                client, url, headers={"Authorization": f"Bearer {token('acme')}"})
            assert status == 200 and [m["id"] for m in messages] == [str(s) for s in range(5)]
            # EventSource cannot set headers: the query parameter does the same.
            status, messages = await read_sse(client, f"{url}?access_token={token('acme')}")
            assert status == 200 and len(messages) == 5
            # Another tenant's run, or a run of no tenant, is as unknown (issue 33 item 4).
            status, body = await read_sse(
                client, url, headers={"Authorization": f"Bearer {token('globex')}"})
            assert status == 404 and "not_found" in body[0]["body"]
            status, body = await read_sse(client, url)
            assert status == 401
            status, body = await read_sse(
                client, f"{base}/v1/runs/run-nobody/events?access_token={token('acme')}")
            assert status == 404 and "not_found" in body[0]["body"]
            refused = {reason: gateway.metrics.registry.get_sample_value(
                "symfonic_stream_gateway_refused_total", {"stream": "events", "reason": reason})
                for reason in ("unauthorized", "forbidden", "not_found")}
            # (one count for a run not seen and one not this token's: issue 43)
            assert refused == {"unauthorized": 1.0, "forbidden": 0.0, "not_found": 2.0}


async def test_the_gateway_command_stops_when_its_topics_do_not_exist(prefix: str) -> None:
    env = consumer_env(prefix, gateway_port=0)
    result = await asyncio.to_thread(run_cli, ["gateway"], env, 90)
    assert result.returncode == 1
    assert f"topic {prefix}.stream-events does not exist" in result.stdout + result.stderr
