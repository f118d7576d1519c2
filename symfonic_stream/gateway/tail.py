"""The gateway's Kafka side: one tail per output topic, and the read-back of a run.

:class:`TopicTail` reads every partition of one output topic with one consumer (no group:
every gateway replica reads all of it), ``read_committed``, from ``SYMFONIC_GATEWAY_
LOOKBACK_S`` ago (``offsets_for_times``), and files each record under its run
(:class:`~.runs.RunStore`). Opening a run is then a dictionary lookup, however many records
its partition holds before it.

:func:`read_back` reads one run's records that are no longer held in memory, from the
run's first offset in its partition up to where the tail has read: the only Kafka read a
viewer causes, and it never starts at offset 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from symfonic_stream.config import Settings
from symfonic_stream.gateway.runs import RunStore
from symfonic_stream.gateway.sse import Envelope, read_envelope, without_token
from symfonic_stream.kafka.admin import partition_counts
from symfonic_stream.kafka.clients import groupless_consumer_kwargs
from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.models.trace import trace_headers
from symfonic_stream.observability import tracing

log = logging.getLogger(__name__)

#: One fetch's wait for new records: bounds how late a stop is noticed.
POLL_MS = 500
FETCH_MAX_RECORDS = 2000


class TopicMissing(RuntimeError):
    """An output topic the gateway reads does not exist."""


def _consumer(settings: Settings, name: str) -> AIOKafkaConsumer:
    # read_committed: a viewer never sees a record that is later aborted.
    return AIOKafkaConsumer(**groupless_consumer_kwargs(settings, name))


class TopicTail:
    """One output topic, read from ``lookback_s`` ago to its end and then live."""

    def __init__(self, settings: Settings, topic: str, store: RunStore, *,
                 on_record: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.topic = topic
        self.store = store
        #: Per partition, the offset after the last record filed (read-back's end).
        self.positions: dict[int, int] = {}
        #: Set once every partition was read to the end offset it had at start.
        self.caught_up = asyncio.Event()
        self.last_progress = time.monotonic()
        self._on_record = on_record or (lambda outcome: None)
        self._consumer: AIOKafkaConsumer | None = None
        self._catch_up_to: dict[int, int] = {}

    async def start(self) -> None:
        """Connect, assign every partition and seek to the window's start."""
        counts = await partition_counts(self.settings, [self.topic],
                                        timeout_s=self.settings.admin_timeout_s)
        if self.topic not in counts:
            raise TopicMissing(f"topic {self.topic} does not exist (run `topics ensure`)")
        consumer = _consumer(self.settings, "gateway")
        await consumer.start()
        self._consumer = consumer
        try:
            tps = [TopicPartition(self.topic, p) for p in range(counts[self.topic])]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            since_ms = int((time.time() - self.settings.gateway_lookback_s) * 1000)
            found = await consumer.offsets_for_times({tp: since_ms for tp in tps})
            for tp in tps:
                start = found[tp].offset if found.get(tp) is not None else ends[tp]
                consumer.seek(tp, start)
                self.positions[tp.partition] = start
                if ends[tp] > start:
                    self._catch_up_to[tp.partition] = ends[tp]
        except BaseException:
            await self.stop()
            raise
        self._check_caught_up()

    async def run(self) -> None:
        """File records until cancelled; a poll error is logged and retried."""
        assert self._consumer is not None, "start() first"
        async for batch in polled(self._consumer, self.topic):
            self.last_progress = time.monotonic()
            for tp, records in batch.items():
                for record in records:
                    self._file(tp.partition, record.offset, record.key, record.value,
                               record.headers, record.timestamp / 1000)
                if records:
                    self.positions[tp.partition] = records[-1].offset + 1
            if self._catch_up_to:  # (commit markers move the position past the records)
                for partition in list(self._catch_up_to):
                    tp = TopicPartition(self.topic, partition)
                    self.positions[partition] = max(self.positions[partition],
                                                    await self._consumer.position(tp))
                self._check_caught_up()
            await asyncio.sleep(0)

    def _file(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
              headers: Sequence[tuple[str, bytes | None]] | None, ts: float) -> None:
        envelope = read_envelope(value)
        if envelope is None or key != envelope.run_id.encode():
            self._on_record("skipped")  # not an envelope of its key's run: never sent
            return
        assert value is not None
        trace = trace_headers(headers) if headers and tracing.TRACER is not None else ()
        filing = self.store.append(partition, offset, envelope, without_token(envelope, value),
                                   tenant_of(headers), ts, trace)
        self._on_record(filing)
        if filing == "foreign" and self._first_foreign(envelope.run_id):
            # Once per run; no run id or tenant in a log line: the offset finds the record.
            log.warning("a record of another tenant than its run's: not served (each one "
                        "counted in the records metric, outcome foreign)",
                        extra={"topic": self.topic, "partition": partition, "offset": offset})

    def _first_foreign(self, run_id: str) -> bool:
        run = self.store.get(run_id)
        return run is not None and run.foreign == 1

    def _check_caught_up(self) -> None:
        for partition, end in list(self._catch_up_to.items()):
            if self.positions.get(partition, 0) >= end:
                del self._catch_up_to[partition]
        if not self._catch_up_to:
            self.caught_up.set()

    async def stop(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()


async def polled(consumer: AIOKafkaConsumer, topic: str
                 ) -> AsyncGenerator[dict[TopicPartition, list[ConsumerRecord[Any, Any]]], None]:
    """``consumer``'s batches until cancelled; a poll error is logged and retried."""
    while True:
        try:
            yield await consumer.getmany(timeout_ms=POLL_MS, max_records=FETCH_MAX_RECORDS)
        except KafkaError as exc:
            log.warning("gateway poll failed", extra={"topic": topic, "error": repr(exc)})
            await asyncio.sleep(1.0)


def tenant_of(headers: Sequence[tuple[str, bytes | None]] | None) -> str | None:
    """The ``symfonic-tenant`` header's value (None when absent or not UTF-8)."""
    for name, value in headers or ():
        if name == TENANT_HEADER and value:
            try:
                return value.decode()
            except UnicodeDecodeError:
                return None
    return None


async def read_back(
    settings: Settings, topic: str, partition: int, run_id: str, start: int, until: int
) -> AsyncGenerator[tuple[int, Envelope, bytes, str | None], None]:
    """``run_id``'s records in ``[start, until)`` of one partition, with their offsets and
    tenants (whether one is the run's is the caller's to decide: :meth:`.runs.Run.serves`)."""
    if start >= until:
        return
    consumer = _consumer(settings, "gateway-read-back")
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        key = run_id.encode()
        while True:
            batch = await consumer.getmany(tp, timeout_ms=POLL_MS, max_records=FETCH_MAX_RECORDS)
            for record in batch.get(tp, ()):
                if record.offset >= until:
                    return
                envelope = read_envelope(record.value)
                if record.key == key and envelope is not None and envelope.run_id == run_id:
                    assert record.value is not None
                    yield (record.offset, envelope, without_token(envelope, record.value),
                           tenant_of(record.headers))
            if await consumer.position(tp) >= until:
                return
    finally:
        await consumer.stop()
