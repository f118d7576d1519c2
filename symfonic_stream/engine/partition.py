"""One assigned input partition: its processor, its producer and where it stands.

Records are processed as soon as they are fetched (:meth:`PartitionTask.absorb`) into the
partition's *pending* Collector; a background *committer* turns what is pending into one
transaction at a time:

1. A transaction begins once its first pending record has waited
   ``SYMFONIC_BATCH_MAX_LATENCY_MS`` for company (the producer's ``linger.ms``, per
   transaction); at once when ``SYMFONIC_BATCH_MAX_RECORDS`` are pending or the engine
   has stopped fetching for lack of room (:meth:`PartitionTask.hurry`).
2. The committer takes everything pending, lets the processor write its state changes
   (``checkpoint``), and commits outputs, dead letters, changelog writes and the next
   offset in one transaction.
3. Records fetched meanwhile keep being processed into a new pending Collector; when the
   transaction has committed, the next one takes all of them, as soon as the first of
   them has lingered (usually already: it arrived during the commit).

So processing overlaps the commit round trips instead of adding to them, and a busy
partition's batch is whatever arrived during the previous commit. (Starting the next
transaction the moment the previous one commits, without the linger, made transactions
smaller and more frequent, and the typed projector's median latency at the benchmark's
shared load 3-4 times higher: ``bench/results/experiment-no-linger-after-commit.log``
against ``recheck-final.log``.)
At most one transaction per partition is in flight, and each begins after the previous
committed: outputs, changelog writes and offsets stay in order. Timers
(:meth:`PartitionTask.punctuate`) write into the same pending Collector.

When a transaction fails, what was processed meanwhile is dropped unsent (the processor
ran ahead on state that was rolled back), records fetched later are ignored, and
:meth:`PartitionTask.finished` reports the failure; the engine rebuilds the processor and
seeks back to the committed offset (see :mod:`symfonic_stream.engine.engine`).

A processor that raises on a record (a bug: processors dead-letter what they cannot
project) fails the partition the same way. Processors are deterministic, so the retry
would raise again, forever: the record's offset is remembered, and on the retry that
record is dead-lettered (``invalid_event``, the exception in the detail) instead of
processed. The partition goes on, exactly once, and the record is not lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from symfonic_stream.engine.commit_metrics import report_commit
from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.records import (
    Collector,
    DeadLetterReason,
    InputRecord,
    Processor,
)
from symfonic_stream.engine.topology import Topology
from symfonic_stream.engine.transactions import (
    PartitionProducer,
    ProducerUnusable,
    TransactionAborted,
)
from symfonic_stream.models.agent_event import INVALID_INPUT_LABEL
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)


# One InputRecord per record consumed: built with ``tuple.__new__``, as the guard builds
# its OutputRecords (the NamedTuple's keyword ``__new__`` costs more than the tuple).
_new_input = tuple.__new__
if InputRecord._fields != (
    "topic", "partition", "offset", "key", "value", "headers", "timestamp_ms"
):
    raise RuntimeError("InputRecord changed its fields: update symfonic_stream/engine/partition.py")


class Outcome(enum.Enum):
    """What became of one transaction attempt."""

    COMMITTED = "committed"
    #: Rolled back; the processor ran ahead and must be rebuilt, the offset re-sought.
    ABORTED = "aborted"
    #: The producer is fenced or fatal; the partition must be given back to the group.
    UNUSABLE = "unusable"


class PartitionTask:
    """The engine's handle on one input partition it owns."""

    def __init__(
        self,
        topology: Topology,
        partition: int,
        producer: PartitionProducer,
        processor: Processor,
        next_offset: int,
        *,
        metrics: ConsumerMetrics,
        max_record_bytes: int,
        max_records: int = 1000,
        linger_s: float = 0.0,
        on_taken: asyncio.Event | None = None,
        on_demand: OnDemandTopics | None = None,
    ) -> None:
        self.topology = topology
        self.tp = TopicPartition(topology.source_topic, partition)
        self.producer = producer
        self.processor = processor
        #: The offset of the next record to process (the committed offset after a commit).
        self.next_offset = next_offset
        #: Consecutive failed transactions, for the back-off before retrying.
        self.failures = 0
        #: While ``time.monotonic()`` is below this, the partition stays paused.
        self.paused_until = 0.0
        #: Offsets of records the processor raised on: dead-lettered when met again.
        self._poison: dict[int, str] = {}
        self._on_demand = on_demand
        self._metrics = metrics
        self._max_record_bytes = max_record_bytes
        self._max_records = max_records
        self._linger_s = linger_s
        #: Set whenever the committer takes pending records (room to fetch more).
        self._on_taken = on_taken
        # Processed, not yet handed to a transaction.
        self._pending: Collector | None = None
        self._pending_records = 0
        self._pending_offset: int | None = None
        self._pending_since = 0.0
        self._committer: asyncio.Task[None] | None = None
        # Cuts the committer's linger short (a full batch, or the engine out of room).
        self._wake = asyncio.Event()
        #: Why the partition must be rebuilt (or dropped); set until :meth:`reset`.
        self._failure: Outcome | None = None
        self._failure_reported = False

    @property
    def partition(self) -> int:
        partition: int = self.tp.partition
        return partition

    @property
    def pending_records(self) -> int:
        """Records processed and not yet in a transaction."""
        return self._pending_records

    def absorb(self, records: Sequence[Any]) -> None:
        """Process ``records`` (aiokafka ConsumerRecords, in offset order) into what is
        pending, and make sure the committer runs. Ignored while a failure is unsettled:
        the rebuild seeks back and they are fetched again."""
        if self._failure is not None or not records:
            return
        out = self._pending if self._pending is not None else Collector()
        now = time.time()
        record: Any = None
        try:
            for record in records:
                self._process_one(record, now, out)
        except Exception as exc:
            # A bug must not kill the consumer: the engine rebuilds the processor and
            # the records are read again, this one dead-lettered.
            log.exception("processor failed", extra=self._log_context())
            self._poison[record.offset] = f"{type(exc).__name__}: {exc}"
            self._fail(Outcome.ABORTED)
            return
        self._add_pending(out, len(records), records[-1].offset + 1)

    def punctuate(self, now: float) -> None:
        """Fire timers (gap timeouts, grace expiry) into what is pending."""
        if self._failure is not None:
            return
        out = self._pending if self._pending is not None else Collector()
        try:
            self.processor.punctuate(now, out)
            if self._pending is None:
                self.processor.checkpoint(out)
        except Exception:
            log.exception("processor punctuation failed", extra=self._log_context())
            self._fail(Outcome.ABORTED)
            return
        if self._pending is None:
            if not (out.outputs or out.dead_letters or out.state):
                self._count(out)
                return
            # Nothing to wait for: the timers already waited.
            self._add_pending(out, 0, None, since=time.monotonic() - self._linger_s)

    def hurry(self) -> None:
        """End a linger now: the engine stopped fetching until something is committed."""
        self._wake.set()

    def finished(self) -> Outcome | None:
        """The failure the engine must act on, once the committer stopped; else None."""
        committer = self._committer
        if committer is not None:
            if not committer.done():
                return None
            self._committer = None
            committer.result()  # a bug in the committer surfaces here
        if self._failure is None or self._failure_reported:
            return None
        self._failure_reported = True
        return self._failure

    async def flush(self) -> Outcome:
        """Commit everything pending; COMMITTED, or the failure the engine must act on."""
        committer = self._committer
        if committer is not None:
            await committer
        return self.finished() or Outcome.COMMITTED

    def reset(self, processor: Processor, next_offset: int) -> None:
        """After a failure: a processor rebuilt from the changelog, the committed offset."""
        if self._committer is not None and not self._committer.done():
            raise RuntimeError("reset while a transaction is in flight")
        self._committer = None
        self._drop_pending()
        self._failure = None
        self._failure_reported = False
        self.processor = processor
        self.next_offset = next_offset

    async def close(self) -> None:
        """Commit what is pending (the partition is still ours), then stop the producer."""
        try:
            await self.flush()
        except Exception:
            log.exception("the last transaction failed while closing", extra=self._log_context())
        await self.producer.close()

    # -- pending work and the committer -------------------------------------------------

    def _add_pending(
        self, out: Collector, records: int, next_offset: int | None, *, since: float | None = None
    ) -> None:
        if self._pending is None:
            self._pending = out
            self._pending_since = time.monotonic() if since is None else since
        self._pending_records += records
        if next_offset is not None:
            self._pending_offset = next_offset
        if self._pending_records >= self._max_records:
            self._wake.set()
        if self._committer is None or self._committer.done():
            if self._committer is not None:
                self._committer.result()  # finished cleanly (a failure stops absorb)
            self._committer = asyncio.create_task(
                self._commit_pending(), name=f"commit-{self.producer.transactional_id}"
            )

    def _drop_pending(self) -> None:
        self._pending = None
        self._pending_records = 0
        self._pending_offset = None

    def _fail(self, outcome: Outcome) -> None:
        """Stop: drop what is pending and remember why (a fenced producer outranks).

        One failure episode counts once towards the back-off, however many parts of it
        fail (a processor exception and then the transaction that was in flight)."""
        self._drop_pending()
        if self._on_taken is not None:
            self._on_taken.set()  # what was pending is gone: room to fetch again
        if self._failure is None:
            self.failures += 1
        if self._failure is not Outcome.UNUSABLE:
            self._failure = outcome
            self._failure_reported = False

    async def _commit_pending(self) -> None:
        """One transaction after another, until nothing is pending (steps 1-3 above)."""
        while self._pending is not None:
            wait = self._pending_since + self._linger_s - time.monotonic()
            if wait > 0 and self._pending_records < self._max_records:
                # The first pending record waits for company (steps 1 and 3).
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                if self._pending is None:  # dropped by a failure meanwhile
                    return
            out = self._pending
            consumed, next_offset = self._pending_records, self._pending_offset
            self._drop_pending()
            if self._on_taken is not None:
                self._on_taken.set()
            try:
                self.processor.checkpoint(out)
            except Exception:
                log.exception("processor checkpoint failed", extra=self._log_context())
                self._fail(Outcome.ABORTED)
                return
            outcome = await self._commit(out, next_offset, consumed=consumed)
            if outcome is not Outcome.COMMITTED:
                self._fail(outcome)
                return

    def _process_one(self, record: Any, now: float, out: Collector) -> None:
        value: bytes | None = record.value
        headers = record.headers
        item: InputRecord = _new_input(InputRecord, (
            record.topic,
            record.partition,
            record.offset,
            record.key,
            value,
            tuple((k, v if v is not None else b"") for k, v in headers) if headers else (),
            record.timestamp or 0,
        ))
        poison = self._poison.get(item.offset) if self._poison else None
        if poison is not None:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(
                item,
                DeadLetterReason.INVALID_EVENT,
                f"the {self.topology.consumer} processor failed on this record: {poison}",
            )
            return
        # SPEC §6 checks too_large first, before any decoding, for every consumer.
        if value is not None and len(value) > self._max_record_bytes:
            out.count_input(INVALID_INPUT_LABEL)
            out.dead_letter(
                item,
                DeadLetterReason.TOO_LARGE,
                f"value is {len(value)} bytes, limit {self._max_record_bytes}",
            )
            return
        self.processor.process(item, now, out)

    async def _commit(self, out: Collector, next_offset: int | None, *, consumed: int) -> Outcome:
        started = time.monotonic()
        offsets = None if next_offset is None else {self.tp: next_offset}
        if self._on_demand is not None:
            try:
                await self._on_demand.ensure(out)
            except Exception:
                # Nothing was sent: like an abort, the batch is processed again (with the
                # back-off), until the topic can be created.
                log.exception("creating an on-demand output topic failed",
                              extra=self._log_context())
                return self._failed(0.0)
        try:
            await self.producer.commit(out, offsets)
        except TransactionAborted as exc:
            log.warning("transaction aborted; partition will be rebuilt",
                        extra={**self._log_context(), "error": repr(exc.__cause__)})
            return self._failed(time.monotonic() - started)
        except ProducerUnusable as exc:
            log.warning("producer unusable; partition given back to the group",
                        extra={**self._log_context(), "fenced": exc.fenced, "error": str(exc)})
            self._metrics.observe_transaction(time.monotonic() - started, committed=False)
            if exc.fenced:
                self._metrics.producer_fenced()
            return Outcome.UNUSABLE
        if next_offset is not None:
            if self._failure is None:  # records got past whatever failed before
                self.failures = 0
            self.next_offset = next_offset
            if self._poison:
                self._poison = {o: e for o, e in self._poison.items() if o >= next_offset}
        try:
            self._after_commit(out, time.monotonic() - started, consumed)
        except Exception:  # bookkeeping must never turn a commit into a failure
            log.exception("metrics update failed", extra=self._log_context())
        return Outcome.COMMITTED

    def _failed(self, seconds: float) -> Outcome:
        if seconds:
            self._metrics.observe_transaction(seconds, committed=False)
        return Outcome.ABORTED

    def _after_commit(self, out: Collector, seconds: float, consumed: int) -> None:
        self._metrics.observe_transaction(seconds, committed=True)
        report_commit(self._metrics, self.tp.topic, out, consumed)

    def _count(self, out: Collector) -> None:
        if out.counts:
            self._metrics.add_counts(out.counts)

    def _log_context(self) -> dict[str, object]:
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "transactional_id": self.producer.transactional_id,
        }

