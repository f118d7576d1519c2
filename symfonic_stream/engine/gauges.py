"""The gauges the engine refreshes after each fetch and timer: buffered events, active
runs and consumer lag (per input partition, against the last stable offset)."""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from symfonic_stream.engine.task import StreamTask
from symfonic_stream.observability.metrics import ConsumerMetrics


def update_gauges(
    metrics: ConsumerMetrics, consumer: AIOKafkaConsumer, tasks: Iterable[StreamTask]
) -> None:
    tasks = list(tasks)
    metrics.set_buffered(sum(t.processor.buffered_events for t in tasks))
    metrics.set_active_runs(sum(t.processor.active_runs for t in tasks))
    for task in tasks:
        end = end_offset(consumer, task.tp)
        if end is not None:
            metrics.set_lag(task.tp.topic, task.tp.partition, end - task.next_offset)


def end_offset(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The LSO (read_committed) from the last fetch, else the high watermark."""
    try:
        lso = consumer.last_stable_offset(tp)
        if lso is not None and lso >= 0:
            return int(lso)
        highwater = consumer.highwater(tp)
        return None if highwater is None else int(highwater)
    except (AssertionError, KafkaError):  # no longer assigned
        return None
