"""The test kit's driver against the live consumers, once, on the real broker.

The run of tests/unit/test_testing_kit_public.py (projected, a hole expired into a gap,
paused, its ticket answered with its token, every consumer killed with SIGKILL and
restarted, the run ended) goes to the four deployed consumers (``symfonic-stream run``
subprocesses) through the publisher and reviewer SDKs, and to a
:class:`~symfonic_stream.testing.TopologyTestDriver` under the same settings and partition
count. Every record of the projections is the same, on the same partition, with the same
key and headers, in the same order; the ticket, its registration and the resume are the
same but for what the clock or a random id decides (when it was routed or answered, the
request's id). Each step waits for its records to arrive, never for a time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import Ticket
from symfonic_stream.sdk import EventPublisher, Reviewer
from symfonic_stream.testing import TopologyTestDriver
from tests.unit.test_testing_kit_public import (
    after_the_resume,
    before_the_hole,
    pause,
    steps,
    take,
)

from .harness import (
    PARTITIONS,
    ConsumerProcess,
    Record,
    TopicReader,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    )

CONSUMERS = ("typed", "chunks", "pauses", "resumes")
#: Short, so the live hole becomes a gap within seconds (the driver's clock is told).
GAP_TIMEOUT_S = 2.0
#: What the clock or a random id decides: left out of the comparison.
CLOCK_FIELDS = ("routed_at", "answered_at", "request_id", "rejected_at", "at", "updated_at")


def without_clock(value: bytes | None) -> Any:
    data = orjson.loads(value or b"null")
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if k not in CLOCK_FIELDS}
    return data


def exact(records: list[Any]) -> list[tuple[int, bytes | None, bytes | None, tuple[Any, ...]]]:
    return [(r.partition, r.key, r.value, tuple(r.headers)) for r in records]


def loose(records: list[Any]) -> list[tuple[int, bytes | None, Any]]:
    return [(r.partition, r.key, without_clock(r.value)) for r in records]


async def read_until(reader: TopicReader, count: int, within: float = 90.0) -> list[Record]:
    records = await reader.until(count, within)
    assert len(records) >= count, f"{reader.topic}: {len(records)} of {count} records"
    return records


async def test_the_drivers_records_are_the_live_consumers(prefix: str, tmp_path: Path) -> None:
    settings = (await create_topics(prefix, with_copier=False)).model_copy(
        update={"gap_timeout_s": GAP_TIMEOUT_S})
    names = TopicNames(prefix)
    now = time.time()
    driver = TopologyTestDriver(*CONSUMERS, settings=settings, start=now, partitions=PARTITIONS)
    processes = [ConsumerProcess(c, prefix, tmp_path, gap_timeout_s=GAP_TIMEOUT_S).start()
                 for c in CONSUMERS]
    readers = {topic: TopicReader(topic) for topic in (
        names.stream_events, names.stream_chunks, names.human_queue("default"),
        names.pause_registrations, names.resumes, names.resume_rejections,
        names.dead_letter)}
    try:
        for process in processes:
            await process.wait_ready()
        for reader in readers.values():
            await reader.__aenter__()
        typed = readers[names.stream_events]
        async with EventPublisher(settings) as publisher, Reviewer(
                "symfonic-review.kit", settings) as reviewer:
            # The live side, step by step, each step waiting for what it makes.
            for event in before_the_hole(now):
                await publisher.send_and_wait(event)
            await read_until(typed, 2)  # index 3 waits behind the hole
            await read_until(typed, 4)  # the gap, then index 3
            await publisher.send_and_wait(pause(now, 4))
            [raw_ticket] = await read_until(readers[names.human_queue("default")], 1)
            ticket = Ticket.model_validate_json(raw_ticket.value or b"")
            outcome = await reviewer.answer(ticket, {"answers": ["yes"]}, responder="pat")
            assert outcome.accepted, outcome
            await read_until(readers[names.resumes], 1)
            for process in processes:
                process.kill()
            processes = [ConsumerProcess(c, prefix, tmp_path, "-again",
                                         gap_timeout_s=GAP_TIMEOUT_S).start()
                         for c in CONSUMERS]
            for process in processes:
                await process.wait_ready()
            for event in after_the_resume(now):
                await publisher.send_and_wait(event)
        # The driver, step by step.
        verdicts: list[Any] = []
        for step in steps(now):
            take(driver, step, verdicts)
        assert [verdict for verdict, _ in verdicts] == [
            "accepted" if outcome.accepted else str(outcome.reason)]
        expected_typed = driver.records(names.stream_events)
        await read_until(typed, len(expected_typed))
        await read_until(readers[names.stream_chunks], len(driver.records(names.stream_chunks)))
        for reader in readers.values():
            await reader.settle(quiet=2.0)
        assert len(expected_typed) == 9  # 2 events, gap, 1, pause and end, 2, end
        for topic in (names.human_queue("default"), names.resumes):
            assert len(driver.records(topic)) == 1, topic
        assert len(driver.records(names.pause_registrations)) == 2  # the ticket, the answer
        assert exact(readers[names.stream_events].records) == exact(expected_typed)
        assert exact(readers[names.stream_chunks].records) == exact(
            driver.records(names.stream_chunks))
        for topic in (names.human_queue("default"), names.pause_registrations, names.resumes,
                      names.resume_rejections, names.dead_letter):
            assert loose(readers[topic].records) == loose(driver.records(topic)), topic
    finally:
        driver.close()
        for process in processes:
            process.stop()
        for reader in readers.values():
            await reader.__aexit__()
