"""One instance on many partitions (256 in issue 36): how long from its start to its first
output, and how many transactions a second a trickle of events costs it.

The time to the first output is split where the consumer's log says its partitions were
assigned: before, the process's start and the group's join (on a new group the broker
waits ``group.initial.rebalance.delay.ms``, 3 s by default, for more members); after, the
engine's set-up (fencing, stable offsets, restore) and first transaction."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench.consumers import Consumer
from bench.kafka_io import cleanup, create_topics, prefix_settings, publish, publish_at_rate
from bench.progress import say
from bench.rebalance.load import event
from bench.rebalance.scenarios import metric_sum
from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import client_kwargs
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.models.names import TopicNames

TRICKLE_RATE = 200.0
TRICKLE_S = 20.0
TRANSACTIONS = 'symfonic_stream_transactions_total{consumer="typed",outcome="committed"}'


@dataclass
class PartitionsOutcome:
    partitions: int
    first_output_s: float = 0.0
    #: From the start to the log's "partitions assigned" (the process and the group's join).
    assigned_s: float = 0.0
    rate: float = TRICKLE_RATE
    transactions_per_s: float = 0.0


def _one_run_per_partition(partitions: int) -> dict[int, str]:
    runs: dict[int, str] = {}
    n = 0
    while len(runs) < partitions:
        runs.setdefault(partition_for_key(f"p-{n}", partitions), f"p-{n}")
        n += 1
    return runs


async def _first_output(settings: Settings, names: TopicNames) -> float:
    """Wall time the first typed record becomes readable."""
    reader = AIOKafkaConsumer(**client_kwargs(settings, "bench-first"), group_id=None,
                              isolation_level="read_committed", fetch_max_wait_ms=20)
    await reader.start()
    try:
        reader.assign([TopicPartition(names.stream_events, p)
                       for p in range(settings.partitions)])
        while not await reader.getmany(timeout_ms=100):
            pass
        return time.time()
    finally:
        await reader.stop()


def _logged_at(log: Path, message: str) -> float:
    """The wall time of the first line of ``log`` with ``message``."""
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry.get("message") == message:
                return datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
    raise RuntimeError(f"{log} has no line {message!r}")


async def many_partitions(base: Settings, partitions: int, log_dir: Path) -> PartitionsOutcome:
    settings = prefix_settings(base, f"rp{uuid.uuid4().hex[:8]}", partitions)
    names = TopicNames(settings.topic_prefix)
    outcome = PartitionsOutcome(partitions)
    await create_topics(settings)
    runs = _one_run_per_partition(partitions)
    instance = Consumer("typed", settings, log_dir)
    instance.env["SYMFONIC_LOG_LEVEL"] = "INFO"  # (its "partitions assigned" line)
    try:
        await publish(settings, [(r.encode(), event(r, 0, "text_delta", time.time()))
                                 for r in runs.values()])
        reading = asyncio.create_task(_first_output(settings, names))
        started = time.time()
        instance.start()
        outcome.first_output_s = await asyncio.wait_for(reading, 600) - started
        await instance.wait_ready(within=600)
        outcome.assigned_s = _logged_at(instance.log_path, "partitions assigned") - started
        say(f"{partitions} partitions: first output after {outcome.first_output_s:.2f} s, "
            f"{outcome.first_output_s - outcome.assigned_s:.2f} s after the assignment")
        ids = list(runs.values())
        before = metric_sum(instance, TRANSACTIONS)
        count = int(TRICKLE_RATE * TRICKLE_S)

        def encode(i: int, now: float) -> tuple[bytes, bytes]:
            run = ids[i % len(ids)]
            return run.encode(), event(run, 1 + i // len(ids), "text_delta", now)

        _, achieved = await publish_at_rate(settings, count, encode, TRICKLE_RATE)
        await asyncio.sleep(2.0)  # the last transactions of the trickle
        outcome.rate = achieved
        outcome.transactions_per_s = (metric_sum(instance, TRANSACTIONS) - before) / (
            count / achieved + 2.0)
    finally:
        instance.stop()
        await cleanup(base, [settings.topic_prefix])
    return outcome
