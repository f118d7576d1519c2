"""The engine for a source without a group: given offset ranges, read once (a replay).

It assigns the partitions itself instead of joining a group, resumes each task from the
position its own state store restored (:mod:`symfonic_stream.engine.transaction`), gives each
processor ``end_of_input`` once its partition's position reaches the range's end, and
returns when every task has committed that end. Everything else (processing, the commit
protocol, fencing, rebuilding after a failed transaction) is the group engine's.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from symfonic_stream.engine.engine import Engine
from symfonic_stream.engine.setup import EngineError, Prepared
from symfonic_stream.engine.task import StreamTask
from symfonic_stream.engine.topology import RangeSource
from symfonic_stream.engine.transaction import POSITION, Progress
from symfonic_stream.kafka.clients import restore_consumer_kwargs


class BoundedEngine(Engine):
    """Runs a topology with a range source to the end of its ranges."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._progress: dict[int, Progress] = {}

    @property
    def bounded(self) -> RangeSource:
        source = self.topology.source
        assert isinstance(source, RangeSource), "a BoundedEngine runs a range source"
        return source

    async def _start_consumer(self) -> AIOKafkaConsumer:
        self.punctuates = False  # its clock never moves: the end of its input is its timeout
        topology = self.topology
        consumer = AIOKafkaConsumer(**restore_consumer_kwargs(self.settings, topology.group_id))
        await self._started(consumer)
        tps = {TopicPartition(topology.source_topic, p) for p in self.bounded.ranges}
        consumer.assign(sorted(tps, key=lambda tp: tp.partition))
        await self._on_assigned(tps)
        return consumer

    def _task(self, tp: TopicPartition, ready: Prepared) -> StreamTask:
        task = super()._task(tp, ready)
        position = ready.state.position
        saved = position.get(POSITION) if position is not None else None
        task.input_done = saved is not None and saved.ended  # an earlier run finished it
        return task

    async def _absorb(self, consumer: AIOKafkaConsumer, fetched: dict[TopicPartition, Any]) -> None:
        ranges = self.bounded.ranges
        inside = {tp: [r for r in records if r.offset < ranges[tp.partition][1]]
                  for tp, records in fetched.items()}
        await super()._absorb(consumer, inside)

    async def _position_after(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
        return None  # the end of a range is the end (its position may be past it)

    async def _after_fetch(self, consumer: AIOKafkaConsumer) -> None:
        """A task whose position reached its range's end has its input ended."""
        ranges = self.bounded.ranges
        for tp, task in self.tasks.items():
            if not task.input_done and await consumer.position(tp) >= ranges[tp.partition][1]:
                task.end_input()

    def progress(self) -> dict[int, Progress]:
        """Each task's committed position and totals (the last known, once stopped)."""
        for tp, task in self.tasks.items():
            saved = task.position.get(POSITION) if task.position is not None else None
            if saved is not None:
                self._progress[tp.partition] = saved
        return dict(self._progress)

    def _finished(self) -> bool:
        if self._to_set_up or len(self.tasks) < len(self.bounded.ranges):
            return False
        # (``failed``, not ``failure()``: that reports a failure once, and the loop's
        # ``_settle_failures`` must be the one it is reported to.)
        done = all(t.input_done and t.idle and not t.failed for t in self.tasks.values())
        if done:
            self.progress()  # kept: the tasks are closed on the way out
        return done

    async def _drop(self, consumer: AIOKafkaConsumer, task: StreamTask) -> None:
        await super()._drop(consumer, task)
        raise EngineError(f"the producer of {task.tp} is fenced or broken: another process "
                          "runs the same replay")
