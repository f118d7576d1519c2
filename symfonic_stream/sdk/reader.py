"""The run reader SDK: one run's typed (or chunk) stream, checked and parsed.

Usage::

    async with RunReader("run-42", settings) as reader:
        async for record in reader:
            ...  # TypedEventRecord | ChunkEventRecord | EndRecord | GapRecord

The reader computes the run's partition with Kafka's default partitioner (murmur2 of the
run id, :mod:`symfonic_stream.kafka.partitioner`; the projectors key their output by run id),
reads only that partition with ``isolation_level=read_committed`` (so it sees what the
projectors committed, each record once), skips other runs' records, and checks that the
run's ``seq`` is dense: a hole or a repeat raises :class:`SequenceError` naming the run and
the seqs. It returns after the run's end record: ``completed``, ``error`` and ``cancelled``
always end it; ``paused`` ends it unless ``follow=True``, in which case it keeps reading the
next segment of the run. Until the end record arrives it waits for more, so a run that is
still being produced is read live.

Each record read carries the W3C trace context of its Kafka record as
``record.trace_context`` (a :class:`~symfonic_stream.models.trace.TraceContext`, or None:
the event it came of carried none; docs/metrics.md, "Tracing").

Where to start: by default at the partition's beginning. ``since`` (Unix seconds) seeks with
``offsets_for_times`` to the first record the projector *wrote* at or after that time (Kafka
record timestamps, not the kernel's ``ts``). ``from_seq`` yields only records with
``seq >= from_seq``; earlier ones are still read and checked. When reading from the
beginning, the first record of the run must be seq 0: a run whose beginning was deleted by
retention is reported as a hole rather than silently shortened.

Opening raises :class:`~symfonic_stream.kafka.retry.KafkaUnavailable` when Kafka cannot be
reached and :class:`TopicMissingError` when the topic does not exist; nothing is left open.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError
from pydantic import BaseModel, ValidationError

from symfonic_stream.config import Settings, load_settings
from symfonic_stream.kafka.admin import partition_counts
from symfonic_stream.kafka.clients import client_kwargs
from symfonic_stream.kafka.partitioner import partition_for_key
from symfonic_stream.kafka.retry import KafkaUnavailable
from symfonic_stream.models.envelope import (
    ChunkEventRecord,
    EndRecord,
    GapRecord,
    TypedEventRecord,
)
from symfonic_stream.models.names import TopicNames
from symfonic_stream.projections.declared import projection as declared_projection

__all__ = [
    "ReaderTimeout",
    "RunReadError",
    "RunReader",
    "RunRecord",
    "SequenceError",
    "TopicMissingError",
    "parse_run_record",
    "parse_time",
]

RunRecord = TypedEventRecord | ChunkEventRecord | EndRecord | GapRecord

#: How long one fetch waits for new records before checking the idle timeout again.
_POLL_MS = 500


class RunReadError(Exception):
    """The run's stream cannot be read (missing topic, a record that is not an envelope)."""


class TopicMissingError(RunReadError):
    """The output topic does not exist (wrong prefix, or the projectors never ran)."""


class SequenceError(RunReadError):
    """The run's ``seq`` is not dense: records were lost (a hole) or repeated."""

    def __init__(self, run_id: str, expected: int, got: int, offset: int) -> None:
        if got > expected:
            what = f"hole: seq {expected}" + (f"..{got - 1}" if got - 1 > expected else "")
            what += f" missing before seq {got}"
        else:
            what = f"repeat: seq {got} again where seq {expected} was due"
        super().__init__(f"run {run_id!r}: {what} (offset {offset})")
        self.run_id = run_id
        self.expected = expected
        self.got = got
        self.offset = offset


class ReaderTimeout(RunReadError):
    """No record of the run arrived within the reader's ``idle_timeout_s``."""


def parse_time(text: str) -> float:
    """A TIME option: Unix seconds (``1764480000.5``) or ISO-8601 (``2025-11-30T05:00:00Z``).

    An ISO time without a zone is UTC, so the same command means the same range anywhere.
    """
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"not a time: {text!r}")
        return value
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use ISO-8601 like 2025-11-30T05:00:00Z or Unix seconds)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_run_record(value: bytes | None, projection: str) -> RunRecord:
    """One output envelope (contract §5) as its pydantic model; raises :class:`RunReadError`."""
    if value is None:
        raise RunReadError("output record without a value")
    try:
        data: Any = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise RunReadError(f"output record is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RunReadError("output record is not a JSON object")
    model: type[BaseModel]
    if "event" in data:
        model = declared_projection(projection).event_record
    elif "end" in data:
        model = EndRecord
    elif "gap" in data:
        model = GapRecord
    else:
        raise RunReadError("output record has none of event, end, gap")
    try:
        record: RunRecord = model.model_validate(data)  # type: ignore[assignment]
    except ValidationError as exc:
        raise RunReadError(f"not a {model.__name__}: {exc}") from None
    return record


class RunReader:
    """Reads one run's output stream; an async iterator and an async context manager."""

    def __init__(
        self,
        run_id: str,
        settings: Settings | None = None,
        *,
        projection: str = "typed",
        topic: str | None = None,
        from_seq: int = 0,
        since: float | None = None,
        follow: bool = False,
        idle_timeout_s: float | None = None,
    ) -> None:
        self.run_id = run_id
        self.settings = settings or load_settings()
        names = TopicNames(self.settings.topic_prefix)
        self.projection: str = projection
        self.topic = topic or declared_projection(projection).topic.name(names)
        self.from_seq = from_seq
        self.since = since
        self.follow = follow
        self.idle_timeout_s = idle_timeout_s
        self.partition: int | None = None
        self._key = run_id.encode()
        self._consumer: AIOKafkaConsumer | None = None
        self._finished = False

    async def __aenter__(self) -> RunReader:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[RunRecord]:
        return self.records()

    async def open(self) -> None:
        """Connect, find the run's partition and seek to where reading starts."""
        consumer = AIOKafkaConsumer(
            **client_kwargs(self.settings, f"reader-{self.run_id[:64]}"),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            # Only what the projectors committed: never a record of an aborted transaction.
            isolation_level="read_committed",
        )
        self._consumer = consumer
        try:
            # First the topic's partitions: the admin client waits for Kafka as long as a
            # start does (SYMFONIC_STARTUP_TIMEOUT_S), where the consumer tries once.
            partitions = (await partition_counts(self.settings, [self.topic])).get(self.topic)
            if not partitions:
                raise TopicMissingError(f"topic {self.topic} does not exist")
            try:
                await consumer.start()
            except KafkaConnectionError as exc:
                raise KafkaUnavailable(f"reader of {self.run_id}: {exc}") from exc
            self.partition = partition_for_key(self._key, partitions)
            tp = TopicPartition(self.topic, self.partition)
            consumer.assign([tp])
            if self.since is None:
                await consumer.seek_to_beginning(tp)
            else:
                found = await consumer.offsets_for_times({tp: int(self.since * 1000)})
                if found.get(tp) is None:
                    await consumer.seek_to_end(tp)  # nothing written since then yet
                else:
                    consumer.seek(tp, found[tp].offset)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def records(self) -> AsyncIterator[RunRecord]:
        """Yield the run's records until its end record (see the module docstring)."""
        if self._consumer is None:
            await self.open()
        consumer = self._consumer
        assert consumer is not None and self.partition is not None
        tp = TopicPartition(self.topic, self.partition)
        # From the beginning the run must start at seq 0; after a time seek, wherever it is.
        expected: int | None = 0 if self.since is None else None
        loop = asyncio.get_running_loop()
        last_seen = loop.time()
        # The idle timeout counts only once the history present at the start has been read:
        # catching up on a long partition is not the run being silent.
        history_end = (await consumer.end_offsets([tp]))[tp]
        while not self._finished:
            batch = await consumer.getmany(tp, timeout_ms=_POLL_MS)
            mine = [r for r in batch.get(tp, ()) if r.key == self._key]
            if not mine:
                if await consumer.position(tp) < history_end:
                    last_seen = loop.time()
                elif (
                    self.idle_timeout_s is not None
                    and loop.time() - last_seen > self.idle_timeout_s
                ):
                    raise ReaderTimeout(
                        f"run {self.run_id!r}: no record in {self.idle_timeout_s:g} s "
                        f"on {self.topic} partition {self.partition}"
                    )
                continue
            last_seen = loop.time()
            for raw in mine:
                try:
                    record = parse_run_record(raw.value, self.projection)
                except RunReadError as exc:
                    raise RunReadError(
                        f"run {self.run_id!r}, {self.topic}/{self.partition}/{raw.offset}: {exc}"
                    ) from None
                record.traced(raw.headers)
                if record.run_id != self.run_id:
                    raise RunReadError(
                        f"{self.topic}/{self.partition}/{raw.offset}: key {self.run_id!r} "
                        f"holds a record of run {record.run_id!r}"
                    )
                if expected is not None and record.seq != expected:
                    raise SequenceError(self.run_id, expected, record.seq, raw.offset)
                expected = record.seq + 1
                if record.seq >= self.from_seq:
                    yield record
                if isinstance(record, EndRecord) and self._ends_reading(record):
                    self._finished = True
                    break

    def _ends_reading(self, end: EndRecord) -> bool:
        if end.end.status != "paused":
            return True  # nothing ever follows a closing end record
        # A pause before from_seq is history the caller asked to skip, not the end.
        return not self.follow and end.seq >= self.from_seq
