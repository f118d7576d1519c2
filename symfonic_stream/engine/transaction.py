"""The commit protocol: how what a process's tasks processed becomes one Kafka transaction.

One transaction at a time per process, across every task that has something to commit
(``exactly_once_v2``, KIP-447), written by the process's one producer. Every transaction of
every consumer, and of a replay, is :meth:`Transactions.commit`, in nine steps, each named
again at its line:

1. **take** what each task processed since its last transaction: outputs, dead letters,
   counts, and the offset after its last record (none for a punctuation alone) (the
   committer, ``engine/task.py``);
2. **prepare state**: each task's store partition prepares its state transaction: every
   changed key, encoded, into the Kafka transaction's changelog records, the task's position
   (its next input offset) too when it keeps one; a new state transaction opens on top
   (:mod:`~symfonic_stream.state.store`);
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
state transactions dropped, a seek: ``engine/setup.py`` ``rebuild_task``) and the committer
takes a new producer; a fenced or fatal producer, a generation that is over, or a commit
whose outcome is unknown, is UNUSABLE, and the partitions go back to the group.
docs/engine.md tells the whole story.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import operator
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson
from aiokafka import TopicPartition

from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.processor import Collector, DeadLetter
from symfonic_stream.engine.topology import Topology
from symfonic_stream.faults import fault_point
from symfonic_stream.kafka.producer import (
    GroupMetadata,
    ProcessProducer,
    ProducerUnusable,
    Sends,
    TransactionAborted,
    TransactionBatches,
)
from symfonic_stream.models.dead_letter import (
    DETAIL_MAX_BYTES,
    HEADER_CONSUMER,
    HEADER_DETAIL,
    HEADER_REASON,
    HEADER_SOURCE,
)
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.store import Codec, StateStore, StorePartition

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


@dataclass(slots=True)
class Taken:
    """Step 1's result for one task: what the transaction carries of it. (Words: the
    records a poll returns are *fetched*; Kafka's record batches are *record batches*,
    :class:`~symfonic_stream.kafka.producer.TransactionBatches`.)"""

    out: Collector
    next_offset: int | None
    consumed: int
    #: It carries what a bounded task's processor held back to the end of its input.
    ends_input: bool = False


@dataclass(slots=True)
class TaskTurn:
    """One task's part of a transaction: what was taken of it (step 1), where its state
    lives, the offset its group is told, and how its task advances (step 8)."""

    tp: TopicPartition
    taken: Taken
    store_partition: StorePartition
    #: Where the task keeps its position, if it does (:func:`position_store`).
    position: StateStore[Progress] | None
    #: Its group's offset after this transaction (a punctuation's: the one it had).
    offset: int
    #: Step 8 for its task: ``advance(next offset, told the group, changelog offset)``.
    advance: Callable[[int | None, bool, int | None], None]

    @property
    def partition(self) -> int:
        partition: int = self.tp.partition
        return partition


@dataclass(frozen=True, slots=True)
class Transactions:
    """What every transaction of one engine shares: its topology (where records go), its
    metrics, and the output topics it may create on first use."""

    topology: Topology
    metrics: ConsumerMetrics
    on_demand: OnDemandTopics | None = None

    async def commit(self, producer: ProcessProducer, turn: Sequence[TaskTurn],
                     member: GroupMetadata | None = None) -> CommitOutcome:
        """Steps 2-9 for ``turn`` (step 1, the take, is the committer's); ``member``: the
        group member whose generation fences the offsets (None: a replay, without a
        group)."""
        started = time.monotonic()
        topology, metrics = self.topology, self.metrics
        context = {"transactional_id": producer.transactional_id,
                   "partitions": [each.partition for each in turn]}
        # 2. prepare state
        try:
            for each in turn:
                _write_position(each, grouped=topology.source.grouped)
                each.store_partition.prepare(each.taken.out.changelog)
        except Exception:
            log.exception("preparing the state changes failed", extra=context)
            return CommitOutcome.ABORTED
        steps: Steps = [("prepare_state", time.monotonic() - started)]
        if self.on_demand is not None:  # (before 3: topics a transaction cannot create)
            creating = time.monotonic()
            try:
                for each in turn:
                    await self.on_demand.ensure(each.taken.out)
            except Exception:
                log.exception("creating an on-demand output topic failed", extra=context)
                return CommitOutcome.ABORTED
            steps.append(("create_topics", time.monotonic() - creating))
        grouped = topology.source.grouped
        offsets = {each.tp: each.offset for each in turn} if grouped else None
        try:
            written = await transact(producer, topology,
                                     [(each.partition, each.taken.out) for each in turn],
                                     offsets, member, steps)  # 3-7
        except ProducerUnusable as unusable:
            log.warning("producer unusable; partitions given back to the group",
                        extra={**context, "fenced": unusable.fenced, "error": str(unusable)})
            metrics.observe_transaction(time.monotonic() - started, committed=False)
            if unusable.fenced:
                metrics.producer_fenced()
            return CommitOutcome.UNUSABLE
        except TransactionAborted as aborted:
            log.warning("transaction aborted; partitions will be rolled back",
                        extra={**context, "error": repr(aborted.__cause__)})
            metrics.observe_transaction_duration(time.monotonic() - started)
            return CommitOutcome.ABORTED
        # 8. advance
        for each in turn:
            place = topology.changelog_place(each.partition)[0]
            each.advance(each.taken.next_offset, grouped,
                         written.get(place) if each.taken.out.changelog else None)
        # 9. report
        try:
            metrics.observe_transaction(time.monotonic() - started, committed=True)
            metrics.add_commit_steps(steps)
            for each in turn:
                report_commit(metrics, each.tp.topic, each.taken.out, each.taken.consumed)
        except Exception:  # bookkeeping must never turn a commit into a failure
            log.exception("metrics update failed", extra=context)
        return CommitOutcome.COMMITTED


def _write_position(each: TaskTurn, *, grouped: bool) -> None:
    """The task's position record, when it keeps one: its next offset, and what its group
    is told (a replay, without a group, keeps its totals with it instead)."""
    position, taken = each.position, each.taken
    if position is None or taken.next_offset is None:
        return
    progress = position.get(POSITION) or Progress(taken.next_offset)
    if grouped:
        progress.group_offset = taken.next_offset
    else:
        progress.add(taken.out, taken.consumed)
        progress.ended = progress.ended or taken.ends_input
    progress.next_offset = taken.next_offset
    position.put(POSITION, progress)


async def transact(
    producer: ProcessProducer,
    topology: Topology,
    outs: Sequence[tuple[int, Collector]],
    offsets: Mapping[TopicPartition, int] | None,
    member: GroupMetadata | None = None,
    steps: Steps | None = None,
) -> dict[int, int]:
    """Steps 3-7: ``outs`` (each input partition's, its state prepared) and ``offsets`` in
    one transaction; for each changelog partition written to, the offset its stores hold
    everything before (``TransactionBatches.offset_after``).

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
        changelog = await _produce(topology, producer, batches, outs)
        lap("produce")
        # 5. await the sends
        await producer.await_sends(sends)
        lap("await_sends")
        written: dict[int, int] = {}
        for partition, records in changelog.items():
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
    changelog: dict[int, int] = {}
    for partition, out in outs:
        append_all(topology, producer, batches, partition, out)
        if out.changelog:
            place = topology.changelog_place(partition)[0]
            changelog[place] = changelog.get(place, 0) + len(out.changelog)
    await batches.send_all()
    return changelog


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
    if out.changelog:
        if topology.changelog_topic is None:
            raise RuntimeError(f"{topology.consumer} is stateless but wrote state")
        place, prefix = topology.changelog_place(partition)
        batches.append_state(topology.changelog_topic, place, prefix, out.changelog)


# -- dead letters (contract §6) ------------------------------------------------------------

def truncate_detail(detail: str) -> bytes:
    """UTF-8 ``detail`` cut to at most 1 KB without splitting a character."""
    raw = detail.encode("utf-8", errors="replace")
    if len(raw) <= DETAIL_MAX_BYTES:
        return raw
    return raw[:DETAIL_MAX_BYTES].decode("utf-8", errors="ignore").encode("utf-8")


def dead_letter_headers(letter: DeadLetter, consumer: str) -> list[tuple[str, bytes]]:
    """A dead letter's record keeps its original key, value and headers whole (it can be
    replayed to its source unchanged once the cause is fixed); four headers follow, which
    say why, where from and which consumer gave up on it."""
    record = letter.record
    return [
        *record.headers,
        (HEADER_REASON, str(letter.reason).encode("utf-8")),
        (HEADER_DETAIL, truncate_detail(letter.detail)),
        (HEADER_SOURCE, record.source.encode("utf-8")),
        (HEADER_CONSUMER, consumer.encode("utf-8")),
    ]


# -- step 9: what a committed transaction tells the metrics ------------------------------

_TOPIC = operator.attrgetter("topic")
_RECORD_TYPE = operator.attrgetter("record_type")
_SOURCE_TS = operator.attrgetter("source_ts")

#: The ``type`` of records in that the processor did not classify.
UNCLASSIFIED_INPUT = "unclassified"


def report_commit(metrics: ConsumerMetrics, topic: str, out: Collector, consumed: int) -> None:
    """Count one committed transaction of ``consumed`` records read from ``topic``: records
    in by type, records out by type, end-to-end latency, dead letters, tickets and resumes,
    the processors' counts. Once per committed transaction, never per record on the way: a
    transaction that aborts counts nothing."""
    if consumed:
        for record_type, n in out.inputs.items():
            metrics.record_in(topic, record_type, n)
        unread = consumed - sum(out.inputs.values())
        if unread > 0:  # a processor that does not say what it read
            metrics.record_in(topic, UNCLASSIFIED_INPUT, unread)
    # Per output record, the one per-record loop of a commit: C-level counting (map,
    # zip, Counter) and one comprehension, a Python loop with a Counter update per record
    # cost ~1 µs per record (docs/benchmarks.md).
    outputs = out.outputs
    produced = Counter(zip(map(_TOPIC, outputs), map(_RECORD_TYPE, outputs), strict=True))
    now = time.time()
    metrics.observe_end_to_end_many(
        [now - ts for ts in map(_SOURCE_TS, outputs) if ts is not None])
    for (out_topic, record_type), n in produced.items():  # one increment per type
        metrics.record_out(out_topic, record_type, n)
    for letter in out.dead_letters:
        metrics.dead_letter(str(letter.reason))
    if out.counts:
        metrics.add_counts(out.counts)
    for (queue, kind), n in out.tickets.items():
        metrics.ticket_routed(queue, kind, n)
    for outcome, n in out.resumes.items():
        metrics.resume(outcome, n)


# -- the position record --------------------------------------------------------------------

#: The one key of a task's position store.
POSITION = "next"


@dataclass(slots=True)
class Progress:
    """Where a task stands, kept as one record of its changelog and written at step 2 of
    every transaction beside its state, so the position and the outputs commit together:
    its next offset; a bounded task's running totals (a replay's summary); what its group
    was told.

    A consumer's group is told the same offset in the same transaction (step 6), and the
    record carries it: set-up resumes at the changelog's position unless the two disagree,
    when the restore missed the changelog's tail or someone else moved the group's offset
    (:func:`resume_offset`, docs/engine.md, "The position in the changelog")."""

    next_offset: int
    #: The end of its range was committed, with what the processor held back to the end.
    ended: bool = False
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    #: The group's committed offset as of this record (None: never committed), written by
    #: the same transactions that move it. A group offset that differs was moved by someone
    #: else (an operator's reset): set-up then follows the group (:func:`resume_offset`).
    group_offset: int | None = None

    def add(self, out: Collector, consumed: int) -> None:
        """Count one transaction's worth into the totals."""
        self.records_in += consumed
        self.records_out += len(out.outputs)
        self.dead_letters += len(out.dead_letters)
        types = Counter(record.record_type for record in out.outputs)
        for name, n in types.items():
            self.by_type[name] = self.by_type.get(name, 0) + n
        for name, n in out.counts.items():
            self.counts[name] = self.counts.get(name, 0) + n


def _decode_progress(data: bytes) -> Progress:
    saved = orjson.loads(data)
    return Progress(
        next_offset=int(saved["next_offset"]),
        ended=bool(saved.get("ended", False)),
        records_in=int(saved.get("records_in", 0)),
        records_out=int(saved.get("records_out", 0)),
        dead_letters=int(saved.get("dead_letters", 0)),
        by_type={str(k): int(v) for k, v in saved.get("by_type", {}).items()},
        counts={str(k): int(v) for k, v in saved.get("counts", {}).items()},
        group_offset=None if saved.get("group_offset") is None else int(saved["group_offset"]),
    )


#: A dataclass: its fields, as a JSON object.
PROGRESS_CODEC: Codec[Progress] = Codec(orjson.dumps, _decode_progress)


def position_store() -> StateStore[Progress]:
    return StateStore("position", PROGRESS_CODEC)


def resume_offset(saved: Progress | None, group_offset: int | None) -> int | None:
    """Where a group task resumes, from its changelog's position and its group's committed
    offset (both final once the task's producer fenced every earlier one). The changelog's
    position, when the group's offset is still the one it last wrote with it; else the
    group's (a reset by an operator, a changelog written before positions), or None, the
    partition's beginning, when the group never committed."""
    if saved is not None and saved.group_offset == group_offset:
        return saved.next_offset
    return group_offset
