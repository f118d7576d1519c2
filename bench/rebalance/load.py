"""The benchmark's load and its check: open runs, their closing events, probes on every
partition, and the typed topic compared run by run with the reference oracle."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import client_kwargs, plain_producer_kwargs
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames
from tests.reference import oracle

PROBE_EVERY_S = 0.05


def event(run_id: str, index: int, kind: str, ts: float) -> bytes:
    event: dict[str, Any] = {"run_id": run_id, "index": index, "kind": kind, "timestamp": ts,
                             "scope": {"tenant": "acme"}}
    if kind == "text_delta":
        event["text"] = f"open run {run_id}"
    return orjson.dumps(event)


def opening(runs: int) -> Iterator[tuple[bytes, bytes]]:
    for n in range(runs):
        run_id = f"run-{n:07d}"
        yield run_id.encode(), event(run_id, 0, "text_delta", 1_764_480_000.0 + n / 1000)


def closing(runs: int) -> Iterator[tuple[bytes, bytes]]:
    for n in range(runs):
        run_id = f"run-{n:07d}"
        yield run_id.encode(), event(run_id, 1, "done", 1_764_490_000.0 + n / 1000)


def probe_keys(partitions: int) -> dict[int, str]:
    """One probe run id per partition, found by Kafka's default partitioner."""
    keys: dict[int, str] = {}
    n = 0
    while len(keys) < partitions:
        run_id = f"probe-{n}"
        keys.setdefault(partition_for_key(run_id, partitions), run_id)
        n += 1
    return keys


class Probes:
    """Publishes a probe event per partition every 50 ms; times their outputs."""

    def __init__(self, settings: Settings, names: TopicNames) -> None:
        self._settings = settings
        self._names = names
        self._keys = probe_keys(settings.partitions)
        self._next: dict[str, int] = dict.fromkeys(self._keys.values(), 0)
        self.sent: list[bytes] = []
        #: (partition, wall time readable) of every probe output.
        self.seen: list[tuple[int, float]] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        reader = AIOKafkaConsumer(**client_kwargs(self._settings, "bench-probe-reader"),
                                  group_id=None, isolation_level="read_committed",
                                  fetch_max_wait_ms=20)
        await reader.start()
        tps = [TopicPartition(self._names.stream_events, p)
               for p in range(self._settings.partitions)]
        reader.assign(tps)
        await reader.seek_to_end(*tps)
        self._tasks = [asyncio.create_task(self._read(reader)),
                       asyncio.create_task(self._publish())]

    async def _publish(self) -> None:
        producer = AIOKafkaProducer(**plain_producer_kwargs(self._settings, "bench-probes"))
        await producer.start()
        try:
            while not self._stop.is_set():
                now, sends = time.time(), []
                for partition, run_id in self._keys.items():
                    index = self._next[run_id]
                    self._next[run_id] = index + 1
                    value = event(run_id, index, "text_delta", now)
                    sends.append(await producer.send(self._names.agent_events, value,
                                                     key=run_id.encode(), partition=partition))
                    self.sent.append(value)
                await asyncio.gather(*sends)
                await asyncio.sleep(PROBE_EVERY_S)
        finally:
            await producer.stop()

    async def _read(self, reader: AIOKafkaConsumer) -> None:
        try:
            while not self._stop.is_set():
                batch = await reader.getmany(timeout_ms=100)
                now = time.time()
                for tp, records in batch.items():
                    self.seen.extend((tp.partition, now) for r in records
                                     if r.key and r.key.startswith(b"probe-"))
        finally:
            await reader.stop()

    def stalls(self, at: float, until: float) -> dict[int, float]:
        """Per partition, the longest wait between two probe outputs that ended in
        ``(at, until]``: how long the event kept it from producing."""
        last: dict[int, float] = {}
        longest: dict[int, float] = {}
        for partition, when in self.seen:
            if at < when <= until and partition in last:
                longest[partition] = max(longest.get(partition, 0.0), when - last[partition])
            last[partition] = when
        return longest

    def rate(self, since: float, until: float) -> float:
        """Probe outputs per second readable in ``[since, until)``."""
        return sum(1 for _, when in self.seen if since <= when < until) / (until - since)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def _read_typed(settings: Settings, names: TopicNames) -> dict[bytes, list[bytes]]:
    by_run: dict[bytes, list[bytes]] = defaultdict(list)
    consumer = AIOKafkaConsumer(**client_kwargs(settings, "bench-check"), group_id=None,
                                isolation_level="read_committed", auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(names.stream_events, p) for p in range(settings.partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(timeout_ms=500, max_records=50_000)
            for records in batch.values():
                for record in records:
                    if record.offset < ends[TopicPartition(record.topic, record.partition)]:
                        by_run[record.key].append(record.value)
    finally:
        await consumer.stop()
    return by_run


async def check(settings: Settings, names: TopicNames, runs: int,
                 probe_events: list[bytes]) -> tuple[int, str]:
    """Runs whose committed output is not the reference's projection of their input."""
    got = await _read_typed(settings, names)
    lines = [v for _, v in opening(runs)] + probe_events + [v for _, v in closing(runs)]
    expected, dead = oracle.project(lines, "typed")
    if dead:
        raise RuntimeError(f"the benchmark's own input has bad lines: {dead[:3]}")
    want: dict[bytes, list[bytes]] = defaultdict(list)
    for envelope in expected:
        want[str(envelope["run_id"]).encode()].append(oracle.encode(envelope))
    differing = [run for run in want.keys() | got.keys() if want.get(run) != got.get(run)]
    example = ""
    if differing:
        run = sorted(differing)[0]
        seqs = [orjson.loads(v).get("seq") for v in got.get(run, [])]
        example = f"{run.decode()}: seqs {seqs[:8]} (the reference has {len(want.get(run, []))})"
    return len(differing), example


