"""The commit protocol: how what a process's tasks processed becomes one Kafka transaction.

One transaction at a time per process, across every task that has something to commit
(``exactly_once_v2``, KIP-447), written by the process's one producer. Every transaction of
every consumer, and of a replay, is :func:`commit`, in nine steps, each named again at its
line:

1. **take** what each task processed since its last transaction: outputs, dead letters,
   counts, and the offset after its last record (none for a punctuation alone)
   (``engine/committer.py``);
2. **prepare state**: each task's store partition prepares its state transaction: every
   changed key, encoded, into the Kafka transaction's changelog records, the task's position
   (its next input offset) too when it keeps one (:mod:`~symfonic_stream.state.position`);
   a new state transaction opens on top (:mod:`~symfonic_stream.state.store`);
3. **begin**, after creating any on-demand output topic the transaction is the first to write to;
4. **produce** every record, in whole batches per output partition: outputs, dead letters,
   changelog records, each partition's in the order they were written;
5. **await the sends**: every record batch acknowledged (aiokafka would commit around a failed one);
6. **send offsets**: every task's input offset, committed to the group inside the
   transaction (TxnOffsetCommit v3, with the member's generation: the coordinator refuses a
   zombie's, and its transaction can only abort), only once the records are written (sent
   beside a produce request, the broker refuses the write for 20 ms: docs/engine.md). Every
   task in the transaction is named, a punctuation's at the offset it already had, so no
   write of a partition commits without the generation that owns it;
7. **commit**: EndTxn;
8. **advance**: each task's committed offset moves, and its store partition flushes the
   prepared state into its backend with the changelog offset it reached;
9. **report** the committed transaction to the metrics, once (an aborted one counts only as
   an abort, so the counters agree with what read_committed readers see).

Every wait is bounded by the transaction timeout (:mod:`symfonic_stream.kafka.producer`).
A failure in steps 3-7 becomes an outcome in one place, :func:`transact`: a clean abort (or
nothing sent) is ABORTED, and the engine rolls every task of the transaction back (their
state transactions dropped, a seek: ``engine/assign.py`` ``rebuild_task``)
and the committer takes a new producer; a fenced or fatal producer, a generation that is
over, or a commit whose outcome is unknown, is UNUSABLE, and the partitions go back to the
group. docs/engine.md tells the whole story.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from aiokafka import TopicPartition

from symfonic_stream.engine.commit_metrics import report_commit
from symfonic_stream.engine.dead_letters import dead_letter_headers
from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.records import Collector
from symfonic_stream.engine.topology import Topology
from symfonic_stream.faults import fault_point
from symfonic_stream.kafka.group_fencing import GroupMetadata
from symfonic_stream.kafka.producer import ProcessProducer, ProducerUnusable, TransactionAborted
from symfonic_stream.kafka.record_batches import Sends, TransactionBatches
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.position import KEY as POSITION
from symfonic_stream.state.position import Progress
from symfonic_stream.state.store import StateStore, StorePartition

log = logging.getLogger(__name__)

#: Each commit step's wall-clock seconds, for ``symfonic_stream_commit_step_seconds_total``.
Steps = list[tuple[str, float]]


class CommitOutcome(enum.Enum):
    """What became of one transaction."""

    COMMITTED = "committed"
    #: Rolled back (or never begun); the processor ran ahead and must be rolled back.
    ABORTED = "aborted"
    #: The producer is fenced or fatal; the partition must be given back to the group.
    UNUSABLE = "unusable"


class Committing(Protocol):
    """What the protocol needs of each task it commits for (a ``StreamTask``)."""

    topology: Topology
    tp: TopicPartition
    metrics: ConsumerMetrics
    on_demand: OnDemandTopics | None
    position: StateStore[Progress] | None
    store_partition: StorePartition
    #: The offset of its next record (its committed one, until this transaction commits).
    next_offset: int

    @property
    def partition(self) -> int: ...

    def committed(self, next_offset: int | None, *, to_group: bool,
                  changelog_offset: int | None) -> None: ...

    def log_context(self) -> dict[str, object]: ...


@dataclass(slots=True)
class Taken:
    """Step 1's result for one task: what the transaction carries of it. (Words: the
    records a poll returns are *fetched*; Kafka's record batches are *record batches*,
    :class:`~symfonic_stream.kafka.record_batches.TransactionBatches`.)"""

    out: Collector
    next_offset: int | None
    consumed: int
    #: It carries what a bounded task's processor held back to the end of its input.
    ends_input: bool = False


#: One transaction's tasks, each with what was taken of it.
Turn = Sequence[tuple[Committing, Taken]]


async def commit(producer: ProcessProducer, turn: Turn, member: GroupMetadata | None = None
                 ) -> CommitOutcome:
    """Steps 2-9 for ``turn`` (step 1, the take, is the committer's); ``member``: the
    group member whose generation fences the offsets (None: a replay, without a group)."""
    started = time.monotonic()
    task = turn[0][0]
    context = {"transactional_id": producer.transactional_id,
               "partitions": [t.partition for t, _ in turn]}
    # 2. prepare state
    try:
        for each, taken in turn:
            _prepare_state(each, taken)
    except Exception:
        log.exception("preparing the state changes failed", extra=context)
        return _aborted(task, 0.0)
    steps: Steps = [("write_state", time.monotonic() - started)]
    if task.on_demand is not None:  # (before 3: topics a transaction cannot create)
        creating = time.monotonic()
        try:
            for _, taken in turn:
                await task.on_demand.ensure(taken.out)
        except Exception:
            log.exception("creating an on-demand output topic failed", extra=context)
            return _aborted(task, 0.0)
        steps.append(("create_topics", time.monotonic() - creating))
    offsets = ({each.tp: each.next_offset if taken.next_offset is None else taken.next_offset
                for each, taken in turn} if task.topology.source.grouped else None)
    try:
        written = await transact(producer, task.topology,
                                 [(each.partition, taken.out) for each, taken in turn],
                                 offsets, member, steps)  # 3-7
    except ProducerUnusable as unusable:
        log.warning("producer unusable; partitions given back to the group",
                    extra={**context, "fenced": unusable.fenced, "error": str(unusable)})
        task.metrics.observe_transaction(time.monotonic() - started, committed=False)
        if unusable.fenced:
            task.metrics.producer_fenced()
        return CommitOutcome.UNUSABLE
    except TransactionAborted as aborted:
        log.warning("transaction aborted; partitions will be rolled back",
                    extra={**context, "error": repr(aborted.__cause__)})
        return _aborted(task, time.monotonic() - started)
    # 8. advance
    for each, taken in turn:
        each.committed(taken.next_offset, to_group=offsets is not None,
                       changelog_offset=written.get(task.topology.changelog_place(
                           each.partition)[0]) if taken.out.state else None)
    # 9. report
    try:
        task.metrics.observe_transaction(time.monotonic() - started, committed=True)
        task.metrics.add_commit_steps(steps)
        for each, taken in turn:
            report_commit(each.metrics, each.tp.topic, taken.out, taken.consumed)
    except Exception:  # bookkeeping must never turn a commit into a failure
        log.exception("metrics update failed", extra=context)
    return CommitOutcome.COMMITTED


def _prepare_state(task: Committing, taken: Taken) -> None:
    position = task.position
    if position is not None and taken.next_offset is not None:
        progress = position.get(POSITION) or Progress(taken.next_offset)
        if not task.topology.source.grouped:  # a replay keeps its totals with it
            progress.add(taken.out, taken.consumed)
            progress.ended = progress.ended or taken.ends_input
        else:
            progress.group_offset = taken.next_offset
        progress.next_offset = taken.next_offset
        position.put(POSITION, progress)
    task.store_partition.prepare(taken.out.state)


async def transact(
    producer: ProcessProducer,
    topology: Topology,
    outs: Sequence[tuple[int, Collector]],
    offsets: Mapping[TopicPartition, int] | None,
    member: GroupMetadata | None = None,
    steps: Steps | None = None,
) -> dict[int, int]:
    """Steps 3-7: ``outs`` (each input partition's, its state changes written) and
    ``offsets`` in one transaction; for each changelog partition written to, the offset its
    stores hold everything before (``TransactionBatches.offset_after``).

    Raises :class:`TransactionAborted` when it was rolled back (the producer may go on),
    :class:`ProducerUnusable` when the producer must be dropped or the generation is over:
    the one place a failure becomes an outcome. ``steps`` receives each step's wall-clock
    seconds.
    """
    sends: Sends = []
    lap = _Lap(steps)
    try:
        # 3. begin
        batches = await producer.begin()
        lap("begin")
        sends = batches.sends
        # 4. produce
        state = await _produce(topology, producer, batches, outs)
        lap("produce")
        # 5. await the sends
        await producer.await_sends(sends)
        lap("await_sends")
        written: dict[int, int] = {}
        for partition, records in state.items():
            assert topology.changelog_topic is not None
            after = batches.offset_after(topology.changelog_topic, partition, records)
            if after is not None:
                written[partition] = after
        # 6. send offsets
        if topology.source.grouped and offsets:
            await producer.send_offsets(offsets, topology.group_id, member)
            lap("send_offsets")
        fault_point("in_transaction")
        # 7. commit
        await producer.commit()
        lap("commit")
        fault_point("commit_logged")
        return written
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise await producer.abort_after(exc, sends) from exc  # or raises ProducerUnusable


class _Lap:
    """Appends ``(step, seconds since the previous lap)`` to ``steps`` (if given)."""

    __slots__ = ("_mark", "_steps")

    def __init__(self, steps: Steps | None) -> None:
        self._steps = steps
        self._mark = time.monotonic()

    def __call__(self, step: str) -> None:
        if self._steps is not None:
            now = time.monotonic()
            self._steps.append((step, now - self._mark))
            self._mark = now


async def _produce(topology: Topology, producer: ProcessProducer,
                   batches: TransactionBatches, outs: Sequence[tuple[int, Collector]]
                   ) -> dict[int, int]:
    await producer.learn_partitions({r.topic for _, out in outs for r in out.outputs})
    if topology.dead_letter_topic is not None and any(out.dead_letters for _, out in outs):
        await producer.learn_partitions([topology.dead_letter_topic])
    state: dict[int, int] = {}
    for partition, out in outs:
        append_all(topology, producer, batches, partition, out)
        if out.state:
            place = topology.changelog_place(partition)[0]
            state[place] = state.get(place, 0) + len(out.state)
    await batches.send_all()
    return state


def append_all(topology: Topology, producer: ProcessProducer, batches: TransactionBatches,
               partition: int, out: Collector) -> None:
    """Step 4's records of input partition ``partition`` into ``batches``: outputs, dead
    letters, changelog records (every output topic's partition count learnt first).
    Synchronous: no await per record."""
    batches.append_outputs(out.outputs, lambda topic, key: producer.partition_for(
        topic, key, partition), producer.partition_counts, partition)
    dead_letter_topic = topology.dead_letter_topic
    if dead_letter_topic is not None and out.dead_letters:
        for letter in out.dead_letters:
            key = letter.record.key
            headers = dead_letter_headers(letter, topology.consumer)
            batches.append(dead_letter_topic,
                           producer.partition_for(dead_letter_topic, key, partition),
                           key, letter.record.value, headers)
    if out.state:
        if topology.changelog_topic is None:
            raise RuntimeError(f"{topology.consumer} is stateless but wrote state")
        place, prefix = topology.changelog_place(partition)
        batches.append_state(topology.changelog_topic, place, prefix, out.state)


def _aborted(task: Committing, seconds: float) -> CommitOutcome:
    """(The abort is counted once, by the committer, whatever failed.)"""
    if seconds:
        task.metrics.observe_transaction_duration(seconds)
    return CommitOutcome.ABORTED
