"""A header with a null value (Kafka allows it; aiokafka hands it over as ``None``) never
stops a consumer or a replay: every one reads such records through the same conversion
(``engine/task.py``, ``to_input``), which makes the value ``b""``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from symfonic_stream.consumers.resumes import INTAKE
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.replay.replay import replay

from .conftest import read_to_end
from .harness import (
    BOOTSTRAP,
    ConsumerProcess,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    produce,
    wait_caught_up,
)
from .observe import quiesce, stop_gracefully, wait_consumed

NULL_HEADERS: list[tuple[str, bytes]] = [("trace", None), ("kept", b"v")]  # type: ignore[list-item]


def _run(run_id: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    events = [
        {"run_id": run_id, "index": 0, "kind": "text_delta", "timestamp": 1.0, "text": "hi"},
        {"run_id": run_id, "index": 1, "kind": "ask_user", "timestamp": 2.0,
         "interrupt": {"name": "ask_user", "kind": "ask_user", "payload": {"questions": []},
                       "token": "t", "tool_call_id": "c", "interrupt_id": f"{run_id}-i",
                       "run_id": run_id, "session_id": "s", "expires_at": 4_102_444_800.0,
                       "resumable": True}},
    ]
    return [(run_id.encode(), orjson.dumps(e), NULL_HEADERS) for e in events]


@pytest.mark.parametrize(
    ("consumer", "output"),
    [("copier", "copier_output"), ("typed", "stream_events"), ("chunks", "stream_chunks"),
     ("pauses", "pause_registrations")],
)
async def test_a_null_valued_header_is_read_as_empty_by_every_consumer(
    consumer: str, output: str, prefix: str, tmp_path: Path, bootstrap_servers: str
) -> None:
    await create_topics(prefix, with_copier=True)
    names = TopicNames(prefix)
    process = ConsumerProcess(consumer, prefix, tmp_path).start()
    try:
        await process.wait_ready()
        await produce(names.agent_events, _run("r1") + _run("r2"))
        await wait_caught_up(names.group(consumer), names.agent_events)
        await quiesce(names.group(consumer), names.agent_events, [process])
    finally:
        process.stop()
    written = await read_to_end(BOOTSTRAP, getattr(names, output))
    dead = await read_to_end(BOOTSTRAP, names.dead_letter)
    assert dead == [], "a null header is not a bad record"
    if consumer == "copier":
        assert [r.headers for r in written] == [(("trace", b""), ("kept", b"v"))] * 4
    elif consumer == "pauses":
        assert sorted(r.key or b"" for r in written) == [b"r1-i", b"r2-i"]  # registrations
    else:
        assert {orjson.loads(r.value or b"")["run_id"] for r in written} == {"r1", "r2"}
        assert len(written) == 6  # per run: its text, its pause, its end record


async def test_a_null_valued_header_is_read_as_empty_by_the_validator(
    prefix: str, tmp_path: Path, bootstrap_servers: str
) -> None:
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    answer = orjson.dumps({"ticket_id": "nope", "token": "t", "answer": 1, "responder": "x"})
    process = ConsumerProcess("resumes", prefix, tmp_path).start()
    try:
        await process.wait_ready()
        await produce(names.resume_requests, [(b"nope", answer, NULL_HEADERS)])
        await wait_consumed(names.group(INTAKE), names.resume_requests)
        await wait_consumed(names.group("resumes"), names.pause_registrations)
        await stop_gracefully(process)
    finally:
        process.stop()
    [rejection] = await read_to_end(BOOTSTRAP, names.resume_rejections)
    assert orjson.loads(rejection.value or b"")["reason"] == "unknown_ticket"


async def test_a_null_valued_header_does_not_stop_a_replay(
    prefix: str, bootstrap_servers: str
) -> None:
    settings = await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    await produce(names.agent_events, _run("r1") + _run("r2"))
    target = f"{prefix}.replayed"
    summary = await asyncio.wait_for(
        replay(settings, projection="typed", from_offsets=0, to_topic=target), 120
    )
    assert summary.total("records_in") == 4
    written = await read_to_end(BOOTSTRAP, target)
    assert {orjson.loads(r.value or b"")["run_id"] for r in written} == {"r1", "r2"}
