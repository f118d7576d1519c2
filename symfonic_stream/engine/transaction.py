"""The commit protocol: how what a process's tasks processed becomes one Kafka transaction.

One transaction at a time per process, across every task that has something to commit
(``exactly_once_v2``, KIP-447), written by the process's one producer. Every transaction of
every consumer, and of a replay, goes through these nine steps, each named again at its
line: step 1 and step 9 in the committer (``engine/task.py``), which owns the tasks;
steps 2 and 8 in :meth:`Transactions.commit`, here; steps 3 to 7, the Kafka transaction
itself, in :meth:`ProcessProducer.transact <symfonic_stream.kafka.producer.ProcessProducer.
transact>`, which does each against aiokafka and bounds every wait
(``tests/unit/test_docs_links.py`` checks that each number is named once, in this order):

1. **take** what each task processed since its last transaction: outputs, dead letters,
   counts, and the offset after its last record (none for a punctuation alone);
2. **prepare state**: each task's store partition prepares its state transaction: every
   changed key, encoded, into the Kafka transaction's changelog records, and the task's
   position (its next input offset) when it keeps one; a new state transaction opens on
   top (:mod:`~symfonic_stream.state.store`);
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
8. **report** the committed transaction to the metrics, once (an aborted one counts only as
   an abort, so the counters agree with what read_committed readers see);
9. **advance**: each task's committed offset moves, and its store partition flushes the
   prepared state into its backend with the changelog offset it reached.

A failure in steps 3-7 becomes an outcome in one place, :meth:`Transactions.commit`: a
clean abort (or nothing sent) is ABORTED, and the engine rolls every task of the
transaction back (their state transactions dropped, a seek: ``engine/setup.py``
``rebuild_task``) and the committer takes a new producer; a fenced or fatal producer, a
generation that is over, or a commit whose outcome is unknown, is UNUSABLE, and the
partitions go back to the group. docs/engine.md tells the whole story.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import operator
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson
from aiokafka import TopicPartition

from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.processor import Collector, DeadLetter
from symfonic_stream.engine.topology import Topology
from symfonic_stream.kafka.group import GroupMetadata
from symfonic_stream.kafka.producer import (
    PartitionWrites,
    ProcessProducer,
    ProducerUnusable,
    Steps,
    TransactionAborted,
)
from symfonic_stream.models.dead_letter import (
    DETAIL_MAX_BYTES,
    HEADER_CONSUMER,
    HEADER_DETAIL,
    HEADER_REASON,
    HEADER_SOURCE,
)
from symfonic_stream.models.trace import trace_headers, without_trace
from symfonic_stream.observability import tracing
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.state.store import Codec, StateStore, StorePartition

log = logging.getLogger(__name__)


class CommitOutcome(enum.Enum):
    """What became of one transaction."""

    COMMITTED = "committed"
    #: Rolled back (or never begun); the processor ran ahead and must be rolled back.
    ABORTED = "aborted"
    #: The producer is fenced or fatal; the partition must be given back to the group.
    UNUSABLE = "unusable"


@dataclass(slots=True)
class Taken:
    """What step 1 (take) found of one task: what the transaction carries of it. (Words: the
    records a poll returns are *fetched*; Kafka's record batches are *record batches*,
    :class:`~symfonic_stream.kafka.producer.TransactionBatches`.)"""

    out: Collector
    next_offset: int | None
    consumed: int
    #: It carries what a bounded task's processor held back to the end of its input.
    ends_input: bool = False


@dataclass(slots=True)
class TaskTurn:
    """One task's part of a transaction: what was taken of it (step 1, take), where its state
    lives, the offset its group is told; and what step 9 (advance) moves it to."""

    tp: TopicPartition
    taken: Taken
    store_partition: StorePartition
    #: Where the task keeps its position, if it does (:func:`position_store`), and the
    #: position its last committed transaction wrote (None: none yet).
    position: StateStore[Progress] | None
    progress: Progress | None
    #: Its group's offset after this transaction (a punctuation's: the one it had).
    offset: int
    #: Where its changelog records go: (changelog partition, key prefix).
    place: tuple[int, bytes]
    #: What step 2 (prepare state) and step 7 (commit) found, for step 9 (advance): the
    #: position it wrote, and the changelog offset its state changes reach (None: none
    #: written, or not known).
    written_progress: Progress | None = None
    changelog_offset: int | None = None

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
        """Steps 2-8 for ``turn`` (the committer does step 1, take, and step 9, advance, on
        COMMITTED); ``member``: the group member whose generation fences the offsets
        (None: a replay, without a group). When tracing is on, the transaction's span
        (docs/metrics.md, "Tracing")."""
        if tracing.TRACER is None:
            return (await self._commit(producer, turn, member))[0]
        start_ns = time.time_ns()
        outcome, label = await self._commit(producer, turn, member)
        try:
            self._span(turn, label, start_ns)
        except Exception:  # a span must never turn a commit into a failure
            log.exception("recording the transaction's span failed")
        return outcome

    def _span(self, turn: Sequence[TaskTurn], outcome: str, start_ns: int) -> None:
        topology = self.topology
        partitions = {each.partition for each in turn}
        context = tracing.transaction_span(
            topology.consumer, topology.group_id if topology.source.grouped else None,
            sorted({each.tp.topic for each in turn}),
            next(iter(partitions)) if len(partitions) == 1 else None,
            [each.taken.out.links for each in turn],
            sum(each.taken.consumed for each in turn),
            sum(len(each.taken.out.outputs) + len(each.taken.out.dead_letters)
                for each in turn),
            outcome, start_ns)
        if outcome == CommitOutcome.COMMITTED.value:
            for each in turn:
                tracing.record_spans(each.taken.out.noted, context)

    async def _commit(self, producer: ProcessProducer, turn: Sequence[TaskTurn],
                      member: GroupMetadata | None) -> tuple[CommitOutcome, str]:
        """Steps 2-8; the outcome, and its word on the span (``fenced`` for a fenced
        producer)."""
        started = time.monotonic()
        topology, metrics = self.topology, self.metrics
        grouped = topology.source.grouped
        context = {"transactional_id": producer.transactional_id,
                   "partitions": [each.partition for each in turn]}
        # 2. prepare state
        try:
            for each in turn:
                progress = each.written_progress = _progress_after(each, grouped=grouped)
                each.store_partition.prepare(
                    each.taken.out.changelog,
                    None if progress is None or each.position is None
                    else (each.position, POSITION, progress))
        except Exception:
            log.exception("preparing the state changes failed", extra=context)
            return CommitOutcome.ABORTED, CommitOutcome.ABORTED.value
        steps: Steps = [("prepare_state", time.monotonic() - started)]
        if self.on_demand is not None:  # (before 3: topics a transaction cannot create)
            creating = time.monotonic()
            try:
                for each in turn:
                    await self.on_demand.ensure(each.taken.out)
            except Exception:
                log.exception("creating an on-demand output topic failed", extra=context)
                return CommitOutcome.ABORTED, CommitOutcome.ABORTED.value
            steps.append(("create_topics", time.monotonic() - creating))
        try:
            written = await transact(producer, topology,
                                     [(each.partition, each.taken.out) for each in turn],
                                     {each.tp: each.offset for each in turn} if grouped
                                     else None, member, steps,
                                     {each.partition: each.place for each in turn})  # 3-7
        except ProducerUnusable as unusable:
            log.warning("producer unusable; partitions given back to the group",
                        extra={**context, "fenced": unusable.fenced, "error": str(unusable)})
            metrics.observe_transaction(time.monotonic() - started, committed=False)
            if unusable.fenced:
                metrics.producer_fenced()
            return CommitOutcome.UNUSABLE, "fenced" if unusable.fenced else "unusable"
        except TransactionAborted as aborted:
            log.warning("transaction aborted; partitions will be rolled back",
                        extra={**context, "error": repr(aborted.__cause__)})
            metrics.observe_transaction_duration(time.monotonic() - started)
            return CommitOutcome.ABORTED, CommitOutcome.ABORTED.value
        for each in turn:
            if each.taken.out.changelog:
                each.changelog_offset = written.get(each.place[0])
        # 8. report
        try:
            metrics.observe_transaction(time.monotonic() - started, committed=True)
            metrics.add_commit_steps(steps)
            for each in turn:
                report_commit(metrics, each.tp.topic, each.taken.out, each.taken.consumed)
        except Exception:  # bookkeeping must never turn a commit into a failure
            log.exception("metrics update failed", extra=context)
        return CommitOutcome.COMMITTED, CommitOutcome.COMMITTED.value


def _progress_after(each: TaskTurn, *, grouped: bool) -> Progress | None:
    """The position record this transaction writes for the task, if it keeps one: its next
    offset, and what its group is told (a replay, without a group, keeps its totals with
    it instead). A new record: the committed one stays as it was, should this abort."""
    position, taken = each.position, each.taken
    if position is None or taken.next_offset is None:
        return None
    before = each.progress
    if before is None:
        progress = Progress(taken.next_offset)
    else:
        progress = dataclasses.replace(before, by_type=dict(before.by_type),
                                       counts=dict(before.counts))
    if grouped:
        progress.group_offset = taken.next_offset
    else:
        progress.add(taken.out, taken.consumed)
        progress.ended = progress.ended or taken.ends_input
    progress.next_offset = taken.next_offset
    return progress


async def transact(
    producer: ProcessProducer,
    topology: Topology,
    outs: Sequence[tuple[int, Collector]],
    offsets: Mapping[TopicPartition, int] | None,
    member: GroupMetadata | None = None,
    steps: Steps | None = None,
    places: Mapping[int, tuple[int, bytes]] | None = None,
) -> dict[int, int]:
    """Steps 3-7 (:meth:`ProcessProducer.transact`) for ``outs`` (each input partition's,
    its state prepared) and ``offsets``; for each changelog partition written to, the
    offset its stores hold everything before. ``places``: each input partition's changelog
    place, when the caller knows them (else the topology says). Raises what the producer
    raises: :class:`TransactionAborted`, :class:`ProducerUnusable`."""
    places = places or {}
    writes = [writes_of(topology, partition, out, places.get(partition))
              for partition, out in outs]
    return await producer.transact(writes, offsets if topology.source.grouped else None,
                                   topology.group_id, member, steps)


def writes_of(topology: Topology, partition: int, out: Collector,
              place: tuple[int, bytes] | None = None) -> PartitionWrites:
    """What step 4 (produce) writes of input partition ``partition``: ``out``'s outputs, its dead
    letters with their headers, and its state changes at ``place`` (else where the
    topology says)."""
    changelog_place = None
    if out.changelog:
        if topology.changelog_topic is None:
            raise RuntimeError(f"{topology.consumer} is stateless but wrote state")
        changelog, prefix = place or topology.changelog_place(partition)
        changelog_place = (topology.changelog_topic, changelog, prefix)
    letters = [(letter.record.key, letter.record.value,
                dead_letter_headers(letter, topology.consumer))
               for letter in out.dead_letters] if topology.dead_letter_topic else []
    return PartitionWrites(partition, out.outputs, letters, topology.dead_letter_topic,
                           out.changelog, changelog_place)


# -- dead letters (contract §6) ------------------------------------------------------------

def truncate_detail(detail: str) -> bytes:
    """UTF-8 ``detail`` cut to at most 1 KB without splitting a character."""
    raw = detail.encode("utf-8", errors="replace")
    if len(raw) <= DETAIL_MAX_BYTES:
        return raw
    return raw[:DETAIL_MAX_BYTES].decode("utf-8", errors="ignore").encode("utf-8")


def dead_letter_headers(letter: DeadLetter, consumer: str) -> list[tuple[str, bytes]]:
    """A dead letter's record keeps its original key, value and headers whole (it can be
    replayed to its source unchanged once the cause is fixed), but for its trace headers,
    carried checked like every output's (an invalid one is dropped: docs/metrics.md,
    "Tracing"); four headers follow, which say why, where from and which consumer gave up
    on it."""
    record = letter.record
    headers = record.headers
    return [
        *(without_trace(headers) + trace_headers(headers) if headers else ()),
        (HEADER_REASON, str(letter.reason).encode("utf-8")),
        (HEADER_DETAIL, truncate_detail(letter.detail)),
        (HEADER_SOURCE, record.source.encode("utf-8")),
        (HEADER_CONSUMER, consumer.encode("utf-8")),
    ]


# -- step 8, report: what a committed transaction tells the metrics ------------------------------

_TOPIC = operator.attrgetter("topic")
_RECORD_TYPE = operator.attrgetter("record_type")
_SOURCE_TS = operator.attrgetter("source_ts")

#: The ``type`` of records in that the processor did not classify.
UNCLASSIFIED_INPUT = "unclassified"


def report_commit(metrics: ConsumerMetrics, topic: str, out: Collector, consumed: int) -> None:
    """Count one committed transaction of ``consumed`` records read from ``topic``: records
    in by type, records out by type, end-to-end latency, dead letters, tickets, resumes and
    claims, the processors' counts. Once per committed transaction, never per record on the way: a
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
    for (queue, outcome), n in out.claims.items():
        metrics.claim(queue, outcome, n)


# -- the position record --------------------------------------------------------------------

#: The one key of a task's position store.
POSITION = "next"


@dataclass(slots=True)
class Progress:
    """Where a task stands, kept as one record of its changelog and written at step 2
    (prepare state) of every transaction beside its state, so the position and the outputs
    commit together: its next offset; a bounded task's running totals (a replay's summary);
    what its group was told.

    A consumer's group is told the same offset in the same transaction (step 6, send offsets), and
    the record carries it: set-up resumes at the changelog's position unless the two disagree,
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
