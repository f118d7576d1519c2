"""One assigned input partition: its processor, its producer and where it stands.

A :class:`PartitionTask` turns one fetched batch (or one punctuation) into one
transaction and reports what happened as an :class:`Outcome`; the engine decides what an
abort or a fenced producer means for the partition (see :mod:`symfonic_stream.engine.engine`).
Processing happens before the transaction opens, so a transaction stays as short as the
writes themselves.

A processor that raises on a record (a bug: processors dead-letter what they cannot
project) fails the batch, and the engine rebuilds the processor from the changelog and
retries. Processors are deterministic, so the retry would raise again, forever: the
record's offset is remembered, and on the retry that record is dead-lettered
(``invalid_event``, the exception in the detail) instead of processed. The partition goes
on, exactly once, and the record is not lost.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition

from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.records import (
    Collector,
    DeadLetterReason,
    Headers,
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
from symfonic_stream.models.headers import KIND_HEADER, OUTCOME_HEADER, QUEUE_HEADER
from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)

#: The ``type`` of records in that the processor did not classify.
UNCLASSIFIED_INPUT = "unclassified"


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

    @property
    def partition(self) -> int:
        partition: int = self.tp.partition
        return partition

    async def process(self, records: Sequence[Any]) -> Outcome:
        """Process ``records`` (aiokafka ConsumerRecords, in offset order) in one transaction."""
        out = Collector()
        now = time.time()
        record: Any = None
        try:
            for record in records:
                self._process_one(record, now, out)
            record = None
            self.processor.checkpoint(out)
        except Exception as exc:
            # A bug must not kill the consumer. Nothing was sent yet: the engine rebuilds
            # the processor and retries the batch, which dead-letters this record.
            log.exception("processor failed", extra=self._log_context())
            if record is not None:
                self._poison[record.offset] = f"{type(exc).__name__}: {exc}"
            return self._failed(0.0)
        next_offset = records[-1].offset + 1
        return await self._commit(out, next_offset, consumed=len(records))

    async def punctuate(self, now: float) -> Outcome:
        """Fire timers (gap timeouts, grace expiry); commit what they produced, if anything."""
        out = Collector()
        try:
            self.processor.punctuate(now, out)
            self.processor.checkpoint(out)
        except Exception:
            log.exception("processor punctuation failed", extra=self._log_context())
            return self._failed(0.0)
        if not (out.outputs or out.dead_letters or out.state):
            self._count(out)
            return Outcome.COMMITTED
        return await self._commit(out, None, consumed=0)

    async def close(self) -> None:
        await self.producer.close()

    def _process_one(self, record: Any, now: float, out: Collector) -> None:
        value: bytes | None = record.value
        item = InputRecord(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=value,
            headers=tuple((k, v if v is not None else b"") for k, v in record.headers or ()),
            timestamp_ms=record.timestamp or 0,
        )
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
        self.failures = 0
        if next_offset is not None:
            self.next_offset = next_offset
            if self._poison:
                self._poison = {o: e for o, e in self._poison.items() if o >= next_offset}
        try:
            self._after_commit(out, time.monotonic() - started, consumed)
        except Exception:  # bookkeeping must never turn a commit into a failure
            log.exception("metrics update failed", extra=self._log_context())
        return Outcome.COMMITTED

    def _failed(self, seconds: float) -> Outcome:
        self.failures += 1
        if seconds:
            self._metrics.observe_transaction(seconds, committed=False)
        return Outcome.ABORTED

    def _after_commit(self, out: Collector, seconds: float, consumed: int) -> None:
        metrics = self._metrics
        metrics.observe_transaction(seconds, committed=True)
        if consumed:
            for record_type, n in out.inputs.items():
                metrics.record_in(self.tp.topic, record_type, n)
            unread = consumed - sum(out.inputs.values())
            if unread > 0:  # a processor that does not say what it read
                metrics.record_in(self.tp.topic, UNCLASSIFIED_INPUT, unread)
        now = time.time()
        produced: Counter[tuple[str, str]] = Counter()
        for record in out.outputs:
            produced[record.topic, record.record_type] += 1
            if record.source_ts is not None:
                metrics.observe_end_to_end(now - record.source_ts)
            if record.headers:
                _observe_pause_output(metrics, record.headers)
        for (topic, record_type), n in produced.items():  # one increment per type, not record
            metrics.record_out(topic, record_type, n)
        for letter in out.dead_letters:
            metrics.dead_letter(str(letter.reason))
        self._count(out)

    def _count(self, out: Collector) -> None:
        if out.counts:
            self._metrics.add_counts(out.counts)

    def _log_context(self) -> dict[str, object]:
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "transactional_id": self.producer.transactional_id,
        }


def _observe_pause_output(metrics: ConsumerMetrics, headers: Headers) -> None:
    """Tickets by queue and kind, resumes by outcome: read off the records' own headers."""
    found = {name: value.decode() for name, value in headers}
    if QUEUE_HEADER in found and KIND_HEADER in found:
        metrics.ticket_routed(found[QUEUE_HEADER], found[KIND_HEADER])
    if OUTCOME_HEADER in found:
        metrics.resume(found[OUTCOME_HEADER])
