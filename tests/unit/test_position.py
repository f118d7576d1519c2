"""A stateful task's position in its changelog, and the offsets its group is told.

Where a task resumes is :func:`resume_offset` (pure). Every transaction tells the group the
offset of every task in it (commit step 6: that is what fences a zombie by generation),
tested here with a producer stand-in that records the offsets it is given: the broker side
is tests/integration/test_engine_position.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry

from symfonic_stream.config import Settings
from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.engine.setup import has_position
from symfonic_stream.engine.task import StreamTask, task_state
from symfonic_stream.engine.topology import GroupSource, RangeSource, Source, Topology
from symfonic_stream.engine.transaction import (
    POSITION,
    PROGRESS_CODEC,
    CommitOutcome,
    Progress,
    position_store,
    resume_offset,
)
from symfonic_stream.kafka.producer import PartitionWrites
from symfonic_stream.observability.metrics import ConsumerMetrics

from .helpers import committer_for

SOURCE = "agent-events"


# -- where a task resumes ---------------------------------------------------------------


def test_the_changelogs_position_wins_while_the_group_holds_what_it_last_wrote() -> None:
    saved = Progress(next_offset=120, group_offset=100)
    assert resume_offset(saved, group_offset=100) == 120


def test_a_group_offset_moved_by_someone_else_is_followed() -> None:
    saved = Progress(next_offset=120, group_offset=100)
    assert resume_offset(saved, group_offset=0) == 0  # an operator's reset
    assert resume_offset(saved, group_offset=500) == 500  # a reset forward


def test_a_group_that_never_committed_and_a_position_that_never_told_it_agree() -> None:
    saved = Progress(next_offset=42, group_offset=None)
    assert resume_offset(saved, group_offset=None) == 42


def test_without_a_position_the_group_decides_and_else_the_beginning() -> None:
    assert resume_offset(None, group_offset=30) == 30
    assert resume_offset(None, group_offset=None) is None  # the partition's beginning
    # A group whose offsets expired (or were deleted): the beginning, as before positions.
    assert resume_offset(Progress(50, group_offset=40), group_offset=None) is None


def test_the_position_record_carries_the_group_offset_and_older_records_read_as_none() -> None:
    record = Progress(next_offset=9, group_offset=5)
    assert PROGRESS_CODEC.decode(PROGRESS_CODEC.encode(record)) == record
    assert PROGRESS_CODEC.decode(b'{"next_offset": 9}').group_offset is None


def test_which_topologies_keep_a_position() -> None:
    settings = Settings()
    stateful, stateless = _topology(changelog="changelog"), _topology(changelog=None)
    assert has_position(settings, stateful)
    assert not has_position(settings, stateless)
    assert not has_position(Settings(group_offset_interval_ms=0), stateful)
    replay = _topology(changelog="progress", source=RangeSource(ranges={0: (0, 10)}))
    assert has_position(Settings(group_offset_interval_ms=0), replay)


# -- when the group is told -------------------------------------------------------------


class OffsetsProducer:
    """Commits every transaction at once; records what each wrote and the offsets it sent
    the group (the producer's steps 3-7, :meth:`ProcessProducer.transact`)."""

    transactional_id = "group-agent-events-0"
    usable = True

    def __init__(self) -> None:
        self.transactions: list[list[tuple[str, bytes | None, bytes | None]]] = []
        self.offsets: list[dict[int, int] | None] = []

    async def transact(self, writes: Sequence[PartitionWrites],
                       offsets: Mapping[TopicPartition, int] | None, group_id: str,
                       member: Any = None, steps: Any = None) -> dict[int, int]:
        written: list[tuple[str, bytes | None, bytes | None]] = []
        for each in writes:  # in step 4's order
            written.extend((r.topic, r.key, r.value) for r in each.outputs)
            written.extend((each.dead_letter_topic or "", key, value)
                           for key, value, _ in each.dead_letters)
            if each.changelog_place is not None:
                topic, _, prefix = each.changelog_place
                written.extend((topic, prefix + key, value)
                               for key, value in each.changelog.items())
        self.transactions.append(written)
        self.offsets.append(None if offsets is None
                            else {tp.partition: offset for tp, offset in offsets.items()})
        return {}

    async def close(self) -> None:
        pass


class _Copy:
    stores: tuple[()] = ()
    buffered_events = 0
    active_runs = 0

    def restored(self) -> None:
        pass

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        out.emit(OutputRecord(topic="out", key=record.key, value=record.value,
                              record_type="copy"))

    def punctuate(self, now: float, out: Collector) -> None:
        pass

    def end_of_input(self, out: Collector) -> None:
        pass


def _topology(changelog: str | None, source: Source | None = None) -> Topology:
    return Topology(
        consumer="typed", group_id="group", source_topic=SOURCE, output_topics=("out",),
        dead_letter_topic="dlq", changelog_topic=changelog,
        processor_factory=lambda partition: _Copy(), source=source or GroupSource(),
    )


def _tasks(partitions: int = 1, group_offset: int | None = None
           ) -> tuple[list[StreamTask], OffsetsProducer]:
    """Tasks of ``partitions`` partitions sharing one committer, as an engine's do."""
    producer = OffsetsProducer()
    topology = _topology("changelog")
    committer = committer_for(producer, topology)
    tasks = []
    for partition in range(partitions):
        position = position_store()
        position.put(POSITION, Progress(0, group_offset=group_offset))  # as set-up seeds it
        tasks.append(StreamTask(
            topology, partition, committer, task_state(_Copy(), position), 0,
            metrics=ConsumerMetrics("typed", CollectorRegistry()), max_record_bytes=1_000_000,
            group_offset=group_offset,
        ))
    return tasks, producer


def _records(first: int, count: int, partition: int = 0) -> list[Any]:
    return [ConsumerRecord(SOURCE, partition, first + i, 0, 0, b"run-1", b"v", None, 0, 1, ())
            for i in range(count)]


def _positions(producer: OffsetsProducer) -> list[Progress]:
    """The position records each transaction wrote to the changelog, in order."""
    return [PROGRESS_CODEC.decode(value or b"") for written in producer.transactions
            for topic, key, value in written if topic == "changelog" and key == b"position/next"]


async def test_one_transaction_tells_the_group_every_tasks_offset_and_each_position() -> None:
    (first, second), producer = _tasks(partitions=2)
    first.absorb(_records(0, 3))
    second.absorb(_records(0, 2, partition=1))
    assert await first.flush() is CommitOutcome.COMMITTED
    assert producer.offsets == [{0: 3, 1: 2}]  # one transaction, both offsets
    assert sorted((p.next_offset, p.group_offset) for p in _positions(producer)) == [
        (2, 2), (3, 3)]
    assert (first.group_offset, second.group_offset) == (3, 2)


async def test_a_punctuation_names_its_task_at_the_offset_it_already_had() -> None:
    """Every write of a partition commits with the generation that owns it: a transaction
    of timers alone still names its task's offset."""
    (task,), producer = _tasks(group_offset=0)
    task.absorb(_records(0, 4))
    assert await task.flush() is CommitOutcome.COMMITTED
    task.processor.punctuate = lambda now, out: out.emit(  # type: ignore[method-assign]
        OutputRecord(topic="out", key=b"run-1", value=b"timeout", record_type="copy"))
    task.punctuate(0.0)
    assert await task.flush() is CommitOutcome.COMMITTED
    assert producer.offsets == [{0: 4}, {0: 4}]
