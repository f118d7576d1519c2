"""The kernel-side publisher SDK: validated AgentEvents onto the raw topic.

Usage::

    async with EventPublisher() as publisher:      # SYMFONIC_* from the environment
        await publisher.send({"run_id": "run-1", "index": 0, "kind": "text_delta",
                              "timestamp": time.time(), "text": "Hello"})
    # leaving the block flushes and closes; delivery errors are raised there

Entering the block raises :class:`~symfonic_stream.kafka.retry.KafkaUnavailable` when Kafka
does not answer within ``SYMFONIC_STARTUP_TIMEOUT_S`` (``Settings.startup_wait_s``) and
:class:`PublishError` when the topic does not exist; either way nothing is left open.

Every event is checked exactly as the projectors will check it (``too_large``,
``invalid_json``, ``invalid_event``; contract §6) *before* anything is sent: an event the
projectors would dead-letter raises :class:`InvalidEventError` and nothing reaches Kafka.
The record key is the run id (UTF-8), so the default partitioner (murmur2) puts every event
of a run in one partition. The publisher assigns nothing: ``index`` is the kernel's.

Trace context: each event is sent with the caller's current OpenTelemetry context as W3C
``traceparent``/``tracestate`` headers when ``opentelemetry-api`` is installed (the
``tracing`` extra), or with the one ``send(..., trace=...)`` names; every record the
consumers project from it carries that context (docs/metrics.md, "Tracing").

Delivery guarantee: the producer is idempotent with ``acks=all``, so within one producer
session a retried send is written once and a run's events stay in send order. Across
sessions (a kernel that crashes and re-sends what it is not sure was written) Kafka may hold
an event twice; the projectors' ordering guard drops the second copy as a duplicate (an
index it has already released), so the output is still exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from symfonic_stream.config import Settings, load_settings
from symfonic_stream.kafka.admin import partition_counts
from symfonic_stream.kafka.clients import plain_producer_kwargs
from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.decoding import DecodeError, DecodeLimits, decode_agent_event
from symfonic_stream.models.names import TopicNames
from symfonic_stream.sdk.tracing import TraceLike, trace_context

__all__ = ["EventPublisher", "InvalidEventError", "PublishError", "encode_event"]

EventLike = AgentEvent | Mapping[str, Any] | bytes


class InvalidEventError(ValueError):
    """The event would be dead-lettered by the projectors; it was not sent.

    ``reason`` is the dead-letter reason it would get, ``detail`` names the bad fields.
    """

    def __init__(self, reason: DeadLetterReason, detail: str) -> None:
        super().__init__(f"invalid AgentEvent ({reason.value}): {detail}")
        self.reason = reason
        self.detail = detail


class PublishError(Exception):
    """Kafka did not acknowledge one or more sent events (see ``__cause__``)."""


def encode_event(event: EventLike, *, max_bytes: int | None = None) -> tuple[AgentEvent, bytes]:
    """Validate ``event`` and return it parsed together with the bytes to send.

    Bytes and mappings are sent as given (after validation), so fields this version does
    not know survive for newer consumers; an :class:`AgentEvent` is serialised from the
    model. Raises :class:`InvalidEventError`.
    """
    if isinstance(event, AgentEvent):
        value = event.model_dump_json().encode()
    elif isinstance(event, bytes | bytearray | memoryview):
        value = bytes(event)
    elif isinstance(event, Mapping):
        try:
            value = orjson.dumps(dict(event))
        except TypeError as exc:  # a value JSON cannot carry (a set, a datetime, NaN …)
            raise InvalidEventError(DeadLetterReason.INVALID_JSON, str(exc)) from None
    else:
        raise TypeError(
            f"an event is an AgentEvent, a mapping or bytes, not {type(event).__name__}"
        )
    try:
        parsed = decode_agent_event(value, limits=DecodeLimits(max_bytes=max_bytes))
    except DecodeError as exc:
        raise InvalidEventError(exc.reason, exc.detail) from None
    return parsed, value


class EventPublisher:
    """Publishes AgentEvents to ``<prefix>.agent-events`` (or ``topic``), keyed by run id.

    ``send`` validates and queues one event and returns the delivery future (await it for
    the broker's acknowledgement, or don't: :meth:`flush` waits for every event sent so
    far and raises :class:`PublishError` if any was not written).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        topic: str | None = None,
        client_name: str = "publisher",
        **producer_overrides: Any,
    ) -> None:
        self.settings = settings or load_settings()
        self.topic = topic or TopicNames(self.settings.topic_prefix).agent_events
        kwargs = plain_producer_kwargs(self.settings, client_name)
        # Idempotence and acks=all are the guarantee this class documents: not overridable.
        kwargs.update(producer_overrides)
        kwargs["enable_idempotence"] = True
        kwargs["acks"] = "all"
        self._producer_kwargs = kwargs
        # Made in start(): a producer made and never started warns "Unclosed AIOKafkaProducer"
        # when collected, as one did when the topic check failed before it started.
        self._producer: AIOKafkaProducer | None = None
        self._pending: set[asyncio.Future[RecordMetadata]] = set()
        self._failures: list[BaseException] = []
        self._closed = False
        self.sent = 0

    async def start(self) -> None:
        """Connect, and check that the topic exists: with Kafka's default settings a send
        to a missing topic would wait out a metadata timeout per record. Raises
        :class:`~symfonic_stream.kafka.retry.KafkaUnavailable` or :class:`PublishError`."""
        if self._producer is not None:
            return
        counts = await partition_counts(self.settings, [self.topic])
        if self.topic not in counts:
            raise PublishError(
                f"topic {self.topic} does not exist (run `symfonic-stream topics ensure`)"
            )
        producer = AIOKafkaProducer(**self._producer_kwargs)
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        self._producer = producer

    async def __aenter__(self) -> EventPublisher:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is None:
                await self.flush()
        finally:
            await self.close()

    async def send(self, event: EventLike, *, trace: TraceLike = None
                   ) -> asyncio.Future[RecordMetadata]:
        """Validate ``event`` and queue it; returns the future of its acknowledgement.

        ``trace``: the event's W3C trace context (a ``TraceContext`` or a ``traceparent``
        string; ``ValueError`` when it is not W3C); by default the caller's current
        OpenTelemetry context, if any. Raises :class:`InvalidEventError` (nothing is sent)
        for an event the projectors would dead-letter.
        """
        context = trace_context(trace)
        parsed, value = encode_event(event, max_bytes=self.settings.max_record_bytes)
        return await self.send_encoded(parsed, value, trace=context)

    async def send_encoded(
        self, parsed: AgentEvent, value: bytes, *, trace: TraceLike = None
    ) -> asyncio.Future[RecordMetadata]:
        """Queue what :func:`encode_event` returned (for callers that validate first);
        ``trace`` as :meth:`send` takes it."""
        if self._producer is None:
            await self.start()
        assert self._producer is not None
        context = trace_context(trace)
        future: asyncio.Future[RecordMetadata] = await self._producer.send(
            self.topic, value=value, key=parsed.run_id.encode(),
            headers=list(context.headers) if context is not None else None,
        )
        self.sent += 1
        self._pending.add(future)
        future.add_done_callback(self._settled)
        return future

    async def send_and_wait(self, event: EventLike, *, trace: TraceLike = None
                            ) -> RecordMetadata:
        """Send one event and wait for the broker's acknowledgement."""
        return await (await self.send(event, trace=trace))

    async def flush(self) -> None:
        """Wait until every event sent so far is acknowledged; raise if any failed."""
        if self._pending:
            await asyncio.wait(set(self._pending))
        if self._failures:
            failures, self._failures = self._failures, []
            raise PublishError(
                f"{len(failures)} event(s) were not written to {self.topic}: {failures[0]!r}"
            ) from failures[0]

    async def close(self) -> None:
        """Stop the producer (events still queued are sent first)."""
        if self._producer is not None and not self._closed:
            self._closed = True
            await self._producer.stop()

    def _settled(self, future: asyncio.Future[RecordMetadata]) -> None:
        self._pending.discard(future)
        # Retrieving the exception here keeps asyncio from warning about it; flush() raises.
        if not future.cancelled() and future.exception() is not None:
            self._failures.append(future.exception())  # type: ignore[arg-type]
