"""A replay's plan and where its tasks keep their state, in ``<target>.replay-progress``.

The topic is compacted and has one partition; every key starts with the replay id, so
several replays into the same target never mix:

=================================  =================================================
``<id>/plan``                      the offset range of every raw partition (JSON),
                                   written once, before any output
``<id>/p/<p>/position/next``       raw partition p's next offset and running totals
``<id>/p/<p>/run/<run_id>``        the ordering guard's state of one run of p (its
                                   changelog format); tombstoned when p is done
=================================  =================================================

The plan is written in a transaction of its own before the engine starts, so a rerun
replays exactly the same records even when no end was given and the raw topic has grown
since. Everything under ``<id>/p/<p>/`` is the state store of raw partition p's task,
written in the same transactions as its outputs (:mod:`symfonic_stream.engine.transaction`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import restore_consumer_kwargs, transactional_producer_kwargs

_POLL_MS = 500


def progress_topic(to_topic: str) -> str:
    return f"{to_topic}.replay-progress"


def plan_key(replay_id: str) -> bytes:
    return f"{replay_id}/plan".encode()


def task_prefix(replay_id: str, partition: int) -> bytes:
    """Where raw partition ``partition``'s task keeps its state store."""
    return f"{replay_id}/p/{partition}/".encode()


async def read_plan(settings: Settings, topic: str, replay_id: str) -> dict[str, Any] | None:
    """The replay's plan, if an earlier run committed one (read_committed, to the end)."""
    consumer = AIOKafkaConsumer(**restore_consumer_kwargs(settings, f"replay-{replay_id}"))
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        key = plan_key(replay_id)
        plan: bytes | None = None
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=_POLL_MS, max_records=10_000)
            for record in batch.get(tp, ()):
                if record.offset < end and record.key == key:
                    plan = record.value  # the last write wins, as compaction keeps
    finally:
        await consumer.stop()
    return orjson.loads(plan) if plan else None


async def write_plan(
    settings: Settings, topic: str, replay_id: str, plan: dict[str, Any], transactional_id: str
) -> None:
    """Commit the plan in a transaction of its own (fencing an earlier planner)."""
    producer = AIOKafkaProducer(**transactional_producer_kwargs(settings, transactional_id))
    timeout = settings.transaction_timeout_ms / 1000
    await asyncio.wait_for(producer.start(), timeout)
    try:
        await producer.begin_transaction()
        future = await producer.send(topic, key=plan_key(replay_id), value=orjson.dumps(plan),
                                     partition=0)
        await asyncio.wait_for(future, timeout)
        await asyncio.wait_for(producer.commit_transaction(), timeout)
    finally:
        await producer.stop()
