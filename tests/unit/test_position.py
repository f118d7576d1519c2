"""A stateful task's position in its changelog, and when its group is told its offset.

Where a task resumes is :func:`resume_offset` (pure). When a transaction also commits the
offset to the group is the task's decision, tested here with a producer stand-in that
records the offsets it is given: the broker side is tests/integration/test_engine_position.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry

from symfonic_stream.config import Settings
from symfonic_stream.engine.commit import CommitOutcome
from symfonic_stream.engine.records import Collector, InputRecord, OutputRecord
from symfonic_stream.engine.restoring import TaskState, keeps_position
from symfonic_stream.engine.task import QUIET_S, StreamTask
from symfonic_stream.engine.topology import GroupSource, RangeSource, Source, Topology
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.position import (
    KEY,
    PROGRESS_CODEC,
    Progress,
    position_store,
    resume_offset,
)

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
    assert keeps_position(settings, stateful)
    assert not keeps_position(settings, stateless)
    assert not keeps_position(Settings(group_offset_interval_ms=0), stateful)
    replay = _topology(changelog="progress", source=RangeSource(ranges={0: (0, 10)}))
    assert keeps_position(Settings(group_offset_interval_ms=0), replay)


# -- when the group is told -------------------------------------------------------------


class _Recorder:
    """The TransactionBatches stand-in: what one transaction wrote, by topic."""

    def __init__(self, written: list[tuple[str, bytes | None, bytes | None]]) -> None:
        self.sends: list[Any] = []
        self._written = written

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: Any) -> None:
        self._written.append((topic, key, value))

    def append_outputs(self, records: list[OutputRecord], *_: Any) -> None:
        self._written.extend((record.topic, record.key, record.value) for record in records)

    def append_state(self, topic: str, partition: int, prefix: bytes,
                     changes: dict[bytes, bytes | None]) -> None:
        self._written.extend((topic, prefix + key, value) for key, value in changes.items())

    async def send_all(self) -> None:
        pass

    def offset_after(self, topic: str, partition: int, records: int) -> int | None:
        return None


class OffsetsProducer:
    """Commits every transaction at once; records the offsets each one sent the group."""

    transactional_id = "group-agent-events-0"
    partition = 0

    def __init__(self) -> None:
        self.transactions: list[list[tuple[str, bytes | None, bytes | None]]] = []
        self.offsets: list[int | None] = []

    async def begin(self) -> _Recorder:
        self.transactions.append([])
        self.offsets.append(None)
        return _Recorder(self.transactions[-1])

    async def learn_partitions(self, topics: Any) -> None:
        pass

    def partition_for(self, topic: str, key: bytes | None) -> int:
        return 0

    @property
    def partition_counts(self) -> dict[str, int]:
        return {}

    async def send_offsets(self, offsets: Mapping[TopicPartition, int], group_id: str) -> None:
        self.offsets[-1] = offsets[TopicPartition(SOURCE, 0)]

    async def await_sends(self, sends: list[Any]) -> None:
        pass

    async def commit(self) -> None:
        pass

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


def _task(interval_s: float, group_offset: int | None = None) -> tuple[StreamTask,
                                                                        OffsetsProducer]:
    producer = OffsetsProducer()
    position = position_store()
    position.put(KEY, Progress(0, group_offset=group_offset))  # as set-up seeds it
    task = StreamTask(
        _topology("changelog"), 0, producer,  # type: ignore[arg-type]
        TaskState(_Copy(), position), 0,
        metrics=ConsumerMetrics("typed", CollectorRegistry()), max_record_bytes=1_000_000,
        group_offset=group_offset, group_interval_s=interval_s,
    )
    return task, producer


def _records(first: int, count: int) -> list[Any]:
    return [ConsumerRecord(SOURCE, 0, first + i, 0, 0, b"run-1", b"v", None, 0, 1, ())
            for i in range(count)]


def _positions(producer: OffsetsProducer) -> list[Progress]:
    """The position records each transaction wrote to the changelog, in order."""
    return [PROGRESS_CODEC.decode(value or b"") for written in producer.transactions
            for topic, key, value in written if topic == "changelog" and key == b"position/next"]


async def test_every_transaction_moves_the_position_and_the_group_waits_for_the_interval(
) -> None:
    task, producer = _task(interval_s=3600)
    task.absorb(_records(0, 3))
    assert await task.flush() is CommitOutcome.COMMITTED
    task.absorb(_records(3, 2))
    assert await task.flush() is CommitOutcome.COMMITTED
    assert producer.offsets == [None, None]  # no TxnOffsetCommit yet
    assert [(p.next_offset, p.group_offset) for p in _positions(producer)] == [(3, None),
                                                                               (5, None)]
    assert task.next_offset == 5 and task.group_offset is None

    await task.close()  # a revocation or a stop tells the group, in one more transaction
    assert producer.offsets == [None, None, 5]
    assert producer.transactions[-1] == [("changelog", b"position/next",
                                          PROGRESS_CODEC.encode(Progress(5, group_offset=5)))]
    assert task.group_offset == 5


async def test_once_the_interval_passed_the_next_transaction_tells_the_group() -> None:
    task, producer = _task(interval_s=0.05, group_offset=0)
    task.absorb(_records(0, 2))
    assert await task.flush() is CommitOutcome.COMMITTED
    await asyncio.sleep(0.06)
    task.absorb(_records(2, 2))
    assert await task.flush() is CommitOutcome.COMMITTED
    assert producer.offsets == [None, 4]
    assert _positions(producer)[-1] == Progress(4, group_offset=4)
    task.absorb(_records(4, 1))  # the interval starts again
    assert await task.flush() is CommitOutcome.COMMITTED
    assert producer.offsets == [None, 4, None]


async def test_an_idle_task_tells_its_lagging_group_once_quiet() -> None:
    task, producer = _task(interval_s=3600, group_offset=0)
    task.absorb(_records(0, 2))
    assert await task.flush() is CommitOutcome.COMMITTED
    task.tell_group_when_due()  # the engine's loop, right after the commit: not quiet yet
    assert task.idle and len(producer.transactions) == 1
    await asyncio.sleep(QUIET_S + 0.01)
    task.tell_group_when_due()
    assert await task.flush() is CommitOutcome.COMMITTED
    assert producer.offsets == [None, 2]  # a transaction of the offset alone
    assert [t for t, _, _ in producer.transactions[-1]] == ["changelog"]
    await asyncio.sleep(QUIET_S + 0.01)
    task.tell_group_when_due()  # the group is where the position is: nothing to tell
    assert await task.flush() is CommitOutcome.COMMITTED
    assert len(producer.transactions) == 2


async def test_the_group_is_never_told_while_a_transaction_is_in_flight() -> None:
    task, producer = _task(interval_s=0.0, group_offset=0)
    gate = asyncio.Event()
    committed = producer.commit

    async def held() -> None:
        await gate.wait()
        await committed()

    producer.commit = held  # type: ignore[method-assign]
    task.absorb(_records(0, 3))
    await asyncio.sleep(0.01)  # transaction 0 is waiting to commit; next_offset is still 0
    task.tell_group_when_due()  # would carry offset 0, behind the one in flight
    gate.set()
    assert await task.flush() is CommitOutcome.COMMITTED
    assert producer.offsets == [3]
    assert len(producer.transactions) == 1
