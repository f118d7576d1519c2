"""A stream task's pipeline: records are processed as they arrive, while the previous
transaction runs; the next transaction begins only after it committed and carries
everything processed meanwhile, by every task of the process; a failed transaction drops
what was processed meanwhile.

The producer here is a stand-in whose transactions finish when the test says so: what is
tested is the order of processing and transactions, not Kafka (the engine's transactions
against the broker are in tests/integration). The committer's and the tasks' clock (the
linger) is the test's own too: it moves only when a test moves it, so every test waits for
the event it names, never for time to pass (issue 45).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry

from symfonic_stream.engine import task as task_module
from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord
from symfonic_stream.engine.task import Committer, StreamTask, task_state, to_input
from symfonic_stream.engine.topology import Topology
from symfonic_stream.engine.transaction import CommitOutcome as Outcome
from symfonic_stream.engine.transaction import Transactions
from symfonic_stream.kafka.producer import PartitionWrites, ProducerUnusable, TransactionAborted
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.store import Codec, StateStore

from .helpers import committer_for

SOURCE = "agent-events"
T = TypeVar("T")


class Clock:
    """``time.monotonic`` of the committer and the tasks, and the committer's timed wait
    (its linger), on a clock that moves only when the test moves it."""

    def __init__(self) -> None:
        self.now = 0.0
        self._moved = asyncio.Event()
        self._lingering = asyncio.Event()

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._moved.set()

    async def lingering(self) -> None:
        """Until the committer waits for its linger to end."""
        async with asyncio.timeout(5):  # a hang guard, not a margin
            await self._lingering.wait()

    async def wait_for(self, awaitable: Awaitable[T], timeout: float) -> T:  # noqa: ASYNC109
        """``asyncio.wait_for`` on this clock: the timeout ends when the test moved the
        clock past it."""
        deadline = self.now + timeout
        waiting = asyncio.ensure_future(awaitable)
        self._lingering.set()
        try:
            while not waiting.done():
                if self.now >= deadline:
                    raise TimeoutError
                self._moved.clear()
                moved = asyncio.ensure_future(self._moved.wait())
                await asyncio.wait({waiting, moved}, return_when=asyncio.FIRST_COMPLETED)
                moved.cancel()
            return waiting.result()
        finally:
            self._lingering.clear()
            waiting.cancel()


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    made = Clock()
    monkeypatch.setattr(task_module, "time", made)
    with_clock = types.SimpleNamespace(**{name: getattr(asyncio, name) for name in dir(asyncio)
                                          if not name.startswith("_")})
    with_clock.wait_for = made.wait_for
    monkeypatch.setattr(task_module, "asyncio", with_clock)
    yield made


class Timeline(list[str]):
    """What happened, in order: ``process <offset>``, ``begin <first offset>``, …"""


class RecordingProcessor:
    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline

    stores: tuple[()] = ()

    def restored(self) -> None:
        pass

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        self.timeline.append(f"process {record.offset}")
        if record.value == b"boom":
            raise ValueError("cannot project this")
        out.emit(OutputRecord(topic="out", key=record.key, value=record.value,
                              record_type="copy"))

    def punctuate(self, now: float, out: Collector) -> None:
        self.timeline.append("punctuate")

    def end_of_input(self, out: Collector) -> None:
        pass

    @property
    def buffered_events(self) -> int:
        return 0

    @property
    def active_runs(self) -> int:
        return 0


class GatedProducer:
    """Each transaction waits for its gate; ``fail`` decides how it ends (the producer's
    steps 3-7, :meth:`ProcessProducer.transact`, as the committer sees them)."""

    transactional_id = "group-agent-events-0"
    usable = True

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.gates: list[asyncio.Event] = []
        self.fail: dict[int, Exception] = {}
        self.committed: list[list[bytes | None]] = []
        self.committed_state: list[list[bytes]] = []
        self.offsets: list[dict[TopicPartition, int]] = []
        self.closed = False
        self.begun = asyncio.Event()

    async def transact(self, writes: Sequence[PartitionWrites],
                       offsets: Mapping[TopicPartition, int] | None, group_id: str,
                       member: Any = None, steps: Any = None) -> dict[int, int]:
        number = len(self.gates)
        self.timeline.append(f"begin {number}")  # 3.
        self.gates.append(asyncio.Event())
        self.begun.set()
        values = [r.value for each in writes for r in each.outputs if r.topic == "out"]
        state_keys = [key for each in writes for key in each.changelog]  # 4.
        self.offsets.append(dict(offsets or {}))  # 6.
        await self.gates[number].wait()
        failure = self.fail.get(number)
        if failure is not None:
            self.timeline.append(f"failed {number}")
            raise failure
        self.committed.append(values)  # 7.
        self.committed_state.append(state_keys)
        self.timeline.append(f"commit {number}")
        return {}

    async def close(self) -> None:
        self.closed = True


def _tasks(timeline: Timeline, partitions: int, *, linger_s: float = 0.0,
           max_records: int = 1000) -> tuple[list[StreamTask], GatedProducer]:
    """Tasks of one process: one committer, one producer."""
    topology = Topology(
        consumer="copier", group_id="group", source_topic=SOURCE, output_topics=("out",),
        dead_letter_topic="dlq", changelog_topic=None,
        processor_factory=lambda partition: RecordingProcessor(timeline),
    )
    producer = GatedProducer(timeline)
    metrics = ConsumerMetrics("copier", CollectorRegistry())
    committer = committer_for(producer, topology, linger_s=linger_s, max_records=max_records,
                              metrics=metrics)
    tasks = [StreamTask(topology, partition, committer,
                        task_state(RecordingProcessor(timeline), None), 0,
                        metrics=metrics, max_record_bytes=1_000_000)
             for partition in range(partitions)]
    return tasks, producer


def _task(
    timeline: Timeline, *, linger_s: float = 0.0, max_records: int = 1000
) -> tuple[StreamTask, GatedProducer]:
    (task,), producer = _tasks(timeline, 1, linger_s=linger_s, max_records=max_records)
    return task, producer


def _records(first: int, values: list[bytes], partition: int = 0) -> list[Any]:
    return [
        ConsumerRecord(SOURCE, partition, first + i, 0, 0, b"run-1", value, None, 0,
                       len(value), ())
        for i, value in enumerate(values)
    ]


async def _until_begun(producer: GatedProducer, count: int) -> None:
    async with asyncio.timeout(5):
        while len(producer.gates) < count:
            producer.begun.clear()
            await producer.begun.wait()


async def test_records_are_processed_while_the_previous_transaction_runs() -> None:
    timeline = Timeline()
    task, producer = _task(timeline)

    task.absorb(_records(0, [b"a", b"b"]))
    await _until_begun(producer, 1)
    # Two fetches arrive while transaction 0 is open: processed at once, not sent.
    task.absorb(_records(2, [b"c"]))
    task.absorb(_records(3, [b"d", b"e"]))
    assert timeline == ["process 0", "process 1", "begin 0",
                        "process 2", "process 3", "process 4"]
    assert task.pending_records == 3
    assert task.failure() is None  # transaction 0 still running

    producer.gates[0].set()
    await _until_begun(producer, 2)  # the next one begins as soon as 0 committed
    assert timeline[-2:] == ["commit 0", "begin 1"]
    assert task.pending_records == 0
    producer.gates[1].set()
    assert await task.flush() is Outcome.COMMITTED
    # Everything processed during transaction 0 went out in one transaction.
    assert producer.committed == [[b"a", b"b"], [b"c", b"d", b"e"]]
    assert task.next_offset == 5


async def test_a_failed_transaction_drops_what_was_processed_meanwhile() -> None:
    timeline = Timeline()
    task, producer = _task(timeline)
    producer.fail[0] = TransactionAborted("broker said no")

    task.absorb(_records(0, [b"a"]))
    await _until_begun(producer, 1)
    task.absorb(_records(1, [b"b"]))
    producer.gates[0].set()
    assert await task.flush() is Outcome.ABORTED
    assert len(producer.gates) == 1  # record 1 never reached the producer
    assert producer.committed == []
    assert task.failures == 1
    assert task.next_offset == 0  # still the committed offset
    assert task.failure() is None  # reported once

    # Until the engine has rebuilt it, the partition ignores what it fetched.
    task.absorb(_records(2, [b"c"]))
    assert task.pending_records == 0
    task.reset(task_state(RecordingProcessor(timeline), None), 0)
    task.absorb(_records(0, [b"a", b"b"]))
    await _until_begun(producer, 2)
    producer.gates[1].set()
    assert await task.flush() is Outcome.COMMITTED
    assert producer.committed == [[b"a", b"b"]]
    assert task.failures == 0


@pytest.mark.parametrize(("error", "outcome"), [
    (TransactionAborted("aborted"), Outcome.ABORTED),
    (ProducerUnusable("fenced", fenced=True), Outcome.UNUSABLE),
])
async def test_a_failed_transaction_is_reported_once_it_finished(
    error: Exception, outcome: Outcome
) -> None:
    timeline = Timeline()
    task, producer = _task(timeline)
    producer.fail[0] = error
    task.absorb(_records(0, [b"a"]))
    await _until_begun(producer, 1)
    assert task.failure() is None
    producer.gates[0].set()
    await task.committer.flush()  # the transaction finished
    assert task.failure() is outcome
    assert task.failure() is None


async def test_a_processor_failure_lets_the_transaction_in_flight_commit_first() -> None:
    timeline = Timeline()
    task, producer = _task(timeline)
    task.absorb(_records(0, [b"a"]))
    await _until_begun(producer, 1)
    task.absorb(_records(1, [b"b", b"boom", b"c"]))
    assert task.pending_records == 0  # dropped: the processor ran ahead
    assert task.failure() is None  # transaction 0 is still running
    producer.gates[0].set()
    assert await task.flush() is Outcome.ABORTED
    assert producer.committed == [[b"a"]]  # transaction 0 landed; rebuilt from there
    assert task.next_offset == 1

    # The retry dead-letters the record the processor raised on, and goes on.
    task.reset(task_state(RecordingProcessor(timeline), None), 1)
    task.absorb(_records(1, [b"b", b"boom", b"c"]))
    await _until_begun(producer, 2)
    producer.gates[1].set()
    assert await task.flush() is Outcome.COMMITTED
    assert producer.committed == [[b"a"], [b"b", b"c"]]
    assert task.next_offset == 4


async def test_after_a_commit_the_next_transaction_begins_once_its_first_record_lingered(
    clock: Clock,
) -> None:
    timeline = Timeline()
    task, producer = _task(timeline, linger_s=0.3)
    task.absorb(_records(0, [b"a"]))
    task.committer.hurry()  # skip the first linger; what follows is about the later transactions
    await _until_begun(producer, 1)
    task.absorb(_records(1, [b"b"]))
    clock.advance(0.35)  # b lingered while transaction 0 was still open
    producer.gates[0].set()
    # So transaction 1 begins as soon as 0 committed, the clock standing still (lingering,
    # the committer would wait for the clock, and _until_begun's guard would fail).
    await _until_begun(producer, 2)

    task.absorb(_records(2, [b"c"]))  # arrives just before transaction 1 commits
    producer.gates[1].set()
    await clock.lingering()
    assert len(producer.gates) == 2  # c has not lingered yet
    clock.advance(0.3)
    await _until_begun(producer, 3)
    producer.gates[2].set()
    assert await task.flush() is Outcome.COMMITTED
    assert producer.committed == [[b"a"], [b"b"], [b"c"]]


async def test_one_failure_episode_counts_once_towards_the_back_off() -> None:
    timeline = Timeline()
    task, producer = _task(timeline)
    task.absorb(_records(0, [b"a"]))
    await _until_begun(producer, 1)
    task.absorb(_records(1, [b"boom"]))  # the processor fails while transaction 0 runs
    producer.fail[0] = TransactionAborted("and the transaction fails too")
    producer.gates[0].set()
    assert await task.flush() is Outcome.ABORTED
    assert task.failures == 1


async def test_a_commit_in_flight_does_not_reset_the_back_off_records_past_the_failure_do(
) -> None:
    timeline = Timeline()
    task, producer = _task(timeline)
    task.failures = 1  # an earlier episode
    task.absorb(_records(0, [b"a"]))
    await _until_begun(producer, 1)
    task.absorb(_records(1, [b"boom"]))
    producer.gates[0].set()  # transaction 0 commits after the processor failed
    assert await task.flush() is Outcome.ABORTED
    assert producer.committed == [[b"a"]]
    assert task.failures == 2  # the engine backs off from the second failure on

    task.reset(task_state(RecordingProcessor(timeline), None), 1)
    task.absorb(_records(1, [b"boom", b"c"]))  # dead-lettered on the retry
    await _until_begun(producer, 2)
    producer.gates[1].set()
    assert await task.flush() is Outcome.COMMITTED
    assert producer.committed == [[b"a"], [b"c"]]
    assert task.failures == 0


async def test_the_first_record_waits_the_linger_for_more_unless_the_batch_is_full(
    clock: Clock,
) -> None:
    timeline = Timeline()
    task, producer = _task(timeline, linger_s=0.2, max_records=3)
    task.absorb(_records(0, [b"a"]))
    await clock.lingering()
    assert producer.gates == []
    task.absorb(_records(1, [b"b"]))
    clock.advance(0.2)
    await _until_begun(producer, 1)
    producer.gates[0].set()
    assert await task.flush() is Outcome.COMMITTED
    assert producer.committed == [[b"a", b"b"]]

    task.absorb(_records(2, [b"c", b"d", b"e"]))  # full: no linger (the clock stands still)
    await _until_begun(producer, 2)
    producer.gates[1].set()
    assert await task.flush() is Outcome.COMMITTED

    task.absorb(_records(5, [b"f"]))
    await clock.lingering()
    assert len(producer.gates) == 2
    task.absorb(_records(6, [b"g", b"h"]))  # fills the batch while it lingers
    await _until_begun(producer, 3)
    producer.gates[2].set()
    assert await task.flush() is Outcome.COMMITTED

    task.absorb(_records(8, [b"i"]))
    await clock.lingering()
    task.committer.hurry()  # the engine ran out of room to fetch
    await _until_begun(producer, 4)
    producer.gates[3].set()
    assert await task.flush() is Outcome.COMMITTED
    assert producer.committed[1:] == [[b"c", b"d", b"e"], [b"f", b"g", b"h"], [b"i"]]


async def test_timers_write_into_what_is_pending_and_close_commits_it() -> None:
    timeline = Timeline()
    task, producer = _task(timeline)
    task.absorb(_records(0, [b"a"]))
    await _until_begun(producer, 1)
    task.absorb(_records(1, [b"b"]))
    task.punctuate(0.0)
    assert timeline[-2:] == ["process 1", "punctuate"]

    closing = asyncio.create_task(task.close())
    await asyncio.sleep(0)  # one turn of the loop: closing waits for transaction 0
    assert not closing.done()  # closing commits what is pending first
    producer.gates[0].set()
    await _until_begun(producer, 2)
    producer.gates[1].set()
    assert await closing
    assert producer.committed == [[b"a"], [b"b"]]
    assert task.next_offset == 2
    await task.committer.close()  # (the engine's, once no task is left)
    assert producer.closed


async def test_close_commits_what_is_pending_without_waiting_out_the_linger() -> None:
    """A partition given back (a rebalance, SIGTERM) commits its pending records at once:
    a linger longer than the shutdown timeout would otherwise abandon them."""
    timeline = Timeline()
    task, producer = _task(timeline, linger_s=600.0)
    task.absorb(_records(0, [b"a", b"b"]))
    closing = asyncio.create_task(task.close())
    async with asyncio.timeout(1):
        await _until_begun(producer, 1)
    producer.gates[0].set()
    async with asyncio.timeout(1):
        await closing
    assert producer.committed == [[b"a", b"b"]]
    assert task.next_offset == 2


async def test_one_transaction_carries_every_task_and_its_failure_fails_them_all() -> None:
    """One producer, one transaction at a time for the process (exactly_once_v2): what
    two tasks processed goes out together, with both offsets; an abort rolls both back and
    counts once, and the next transaction takes a new producer."""
    timeline = Timeline()
    (first, second), producer = _tasks(timeline, 2)
    first.absorb(_records(0, [b"a"]))
    second.absorb(_records(0, [b"x", b"y"], partition=1))
    await _until_begun(producer, 1)
    producer.gates[0].set()
    assert await first.flush() is Outcome.COMMITTED
    assert producer.committed == [[b"a", b"x", b"y"]]
    assert producer.offsets == [{TopicPartition(SOURCE, 0): 1, TopicPartition(SOURCE, 1): 2}]
    assert producer.started_for == 0  # the id of its lowest partition

    producer.fail[1] = TransactionAborted("no")
    first.absorb(_records(1, [b"b"]))
    second.absorb(_records(2, [b"z"], partition=1))
    await _until_begun(producer, 2)
    producer.gates[1].set()
    assert await first.flush() is Outcome.ABORTED
    assert second.failure() is Outcome.ABORTED
    assert _aborts(first) == 1  # one transaction aborted
    assert producer.closed  # replaced before the next transaction
    assert (first.next_offset, second.next_offset) == (1, 2)


class RememberingProcessor(RecordingProcessor):
    """Remembers each record's value in a state store (one changelog key per record)."""

    def __init__(self, timeline: Timeline) -> None:
        super().__init__(timeline)
        self.seen: StateStore[bytes] = StateStore("seen", Codec(bytes, bytes))
        self.stores = (self.seen,)  # type: ignore[assignment]

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        super().process(record, now, out)
        self.seen.put(str(record.offset), record.value or b"")


async def test_records_processed_while_the_producer_starts_go_with_their_state_next(
) -> None:
    """The producer starts before the take: a transaction's state changes (step 2) are
    those of the records it carries, never of records processed while it waited (their
    state would commit ahead of their outputs)."""
    timeline = Timeline()
    topology = Topology(
        consumer="typed", group_id="group", source_topic=SOURCE, output_topics=("out",),
        dead_letter_topic="dlq", changelog_topic="changelog",
        processor_factory=lambda partition: RememberingProcessor(timeline))
    producer = GatedProducer(timeline)
    starting, asked = asyncio.Event(), asyncio.Event()

    async def slow_start(partition: int) -> GatedProducer:
        asked.set()
        await starting.wait()
        producer.closed = False
        return producer

    committer = Committer(slow_start,
                          Transactions(topology, ConsumerMetrics("typed", CollectorRegistry())))
    processor = RememberingProcessor(timeline)
    task = StreamTask(topology, 0, committer, task_state(processor, None), 0,
                      metrics=ConsumerMetrics("typed", CollectorRegistry()),
                      max_record_bytes=1_000_000)
    task.absorb(_records(0, [b"a"]))
    await asked.wait()  # the committer waits for its producer
    task.absorb(_records(1, [b"b"]))
    starting.set()
    await _until_begun(producer, 1)
    producer.gates[0].set()
    assert await task.flush() is Outcome.COMMITTED
    assert producer.committed == [[b"a", b"b"]]  # both waited for the producer
    assert sorted(producer.committed_state[0]) == [b"seen/0", b"seen/1"]


def _aborts(task: StreamTask) -> float:
    registry = task.metrics._f._registry  # type: ignore[attr-defined]
    value = registry.get_sample_value("symfonic_stream_transactions_total",
                                      {"consumer": "copier", "outcome": "aborted"})
    return value or 0.0


async def test_a_processor_failure_counts_as_one_abort_and_an_aborted_commit_once() -> None:
    """Issue 16: failures outside a transaction were never counted, so
    ``transactions_total{outcome="aborted"}`` stayed 0 while a partition kept failing."""
    timeline = Timeline()
    task, producer = _task(timeline)
    task.absorb(_records(0, [b"boom"]))
    assert await task.flush() is Outcome.ABORTED
    assert _aborts(task) == 1
    task.reset(task_state(RecordingProcessor(timeline), None), 0)
    task.absorb(_records(0, [b"boom", b"x"]))  # dead-lettered now; the commit fails
    await _until_begun(producer, 1)
    producer.fail[0] = TransactionAborted("no")
    producer.gates[0].set()
    assert await task.flush() is Outcome.ABORTED
    assert _aborts(task) == 2


@pytest.mark.parametrize(("headers", "expected"), [
    (None, ()),
    ([], ()),
    ([("tenant", b"acme")], (("tenant", b"acme"),)),
    ([("a", b"1"), ("b", None), ("c", b"")], (("a", b"1"), ("b", b""), ("c", b""))),
])
def test_to_input_keeps_headers_as_a_tuple_and_a_null_value_becomes_empty(
    headers: list[tuple[str, bytes | None]] | None, expected: tuple[tuple[str, bytes], ...]
) -> None:
    record = ConsumerRecord("in", 2, 7, 1_700_000_000_000, 0, b"k", b"v", None, 1, 1,
                            headers)  # type: ignore[arg-type]
    item = to_input(record)
    assert item == InputRecord("in", 2, 7, b"k", b"v", expected, 1_700_000_000_000)
    assert type(item.headers) is tuple
