"""The reviewer SDK: what a human-review tool needs to work a queue (contract §7).

    async with Reviewer("symfonic-review.acme.ui") as reviewer:   # SYMFONIC_* from the env
        async for ticket in reviewer.tickets("default"):
            outcome = await reviewer.answer(ticket, {"approved": True}, responder="pat")
            print(outcome.accepted, outcome.reason)
            await reviewer.commit()          # this ticket is handled: don't show it again

``tickets`` reads a queue topic ``read_committed`` from the tool's committed position (its
own consumer group), so a restarted tool continues where it left off. ``answer`` writes the
request keyed by ticket id (the partitioning the resume validator relies on) and waits
for the validator's verdict on ``<prefix>.resumes`` / ``<prefix>.resume-rejections``.

Each ticket carries the run's W3C trace context as ``ticket.trace_context`` (None: the
interrupt it came of carried none); ``answer`` sends the request in that context, so the
resume (or rejection) is in the run's trace; ``submit`` takes one (``trace=``) and, by
default, the caller's current OpenTelemetry context (docs/metrics.md, "Tracing").

A least-privilege reviewer (docs/security.md: its tenant's queues, its own groups, and
``<prefix>.resume-requests``) may not read the verdict topics, which hold every tenant's
answers. ``Reviewer(..., follow_outcomes=False)`` never touches them: ``tickets``,
``submit`` and ``commit`` work as before, and ``outcome`` / ``answer`` raise
:class:`OutcomesUnavailable` (the verdict reaches the kernel all the same).

Entering the block raises :class:`~symfonic_stream.kafka.retry.KafkaUnavailable` when Kafka
cannot be reached; nothing is left open then.
"""

from __future__ import annotations

import asyncio
import enum
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError

from symfonic_stream.config import Settings, load_settings
from symfonic_stream.kafka.clients import client_kwargs, plain_producer_kwargs
from symfonic_stream.kafka.retry import KafkaUnavailable
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import RejectionReason, ResumeRequest, Ticket
from symfonic_stream.sdk.tracing import TraceLike, trace_context

__all__ = ["OutcomesUnavailable", "Reviewer", "TicketOutcome"]


class OutcomesUnavailable(RuntimeError):
    """``outcome`` on a reviewer made with ``follow_outcomes=False``."""


class Unnamed(enum.Enum):
    """``submit``'s ``tenant`` when the answer names none (None is a tenant-less ticket's)."""

    TENANT = enum.auto()


@dataclass(frozen=True, slots=True)
class TicketOutcome:
    """The validator's verdict on one answer."""

    ticket_id: str
    accepted: bool
    reason: RejectionReason | None
    detail: str
    record: dict[str, Any]


class Reviewer:
    """A human-review tool's connection to its queues and to the validator: ``group_id`` is
    the tool's consumer group (its committed position in each queue), ``settings`` default
    to the ``SYMFONIC_*`` environment, as the publisher's and the reader's do."""

    def __init__(self, group_id: str, settings: Settings | None = None, *,
                 follow_outcomes: bool = True) -> None:
        self._settings = settings or load_settings()
        self._names = TopicNames(self._settings.topic_prefix)
        self._group_id = group_id
        self._follow_outcomes = follow_outcomes
        # Clients are made when the block is entered (one made and never started warns
        # "Unclosed AIOKafkaProducer" when collected).
        self._producer: AIOKafkaProducer | None = None
        self._queue_consumer: AIOKafkaConsumer | None = None
        self._verdicts: AIOKafkaConsumer | None = None
        self._seen: dict[str, dict[str, Any]] = {}

    async def __aenter__(self) -> Reviewer:
        try:
            self._producer = AIOKafkaProducer(
                **plain_producer_kwargs(self._settings, f"reviewer-{self._group_id}"))
            await self._producer.start()
            if self._follow_outcomes:
                # Otherwise no metadata request for the verdict topics either: its principal
                # may not even describe them.
                self._verdicts = AIOKafkaConsumer(
                    **client_kwargs(self._settings, f"reviewer-{self._group_id}-verdicts"),
                    group_id=None,
                    isolation_level="read_committed",
                    auto_offset_reset="latest",
                )
                await self._verdicts.start()
                await self._follow_verdicts(self._verdicts, self._producer)
        except KafkaConnectionError as exc:
            await self.close()
            raise KafkaUnavailable(f"reviewer {self._group_id}: {exc}") from exc
        except BaseException:
            await self.close()
            raise
        return self

    async def _follow_verdicts(
        self, verdicts: AIOKafkaConsumer, producer: AIOKafkaProducer
    ) -> None:
        partitions: list[TopicPartition] = []
        for topic in (self._names.resumes, self._names.resume_rejections):
            numbers = await producer.partitions_for(topic)  # waits for the metadata
            partitions.extend(TopicPartition(topic, number) for number in sorted(numbers))
        verdicts.assign(partitions)
        # Position at the current end now, so `answer` sees every verdict given after it.
        await verdicts.seek_to_end(*partitions)
        for tp in partitions:
            await verdicts.position(tp)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop every client this reviewer started (safe to call twice)."""
        clients = (self._queue_consumer, self._verdicts, self._producer)
        self._queue_consumer = self._verdicts = self._producer = None
        for client in clients:
            if client is not None:
                await client.stop()

    async def tickets(self, queue: str, tenant: str | None = None) -> AsyncIterator[Ticket]:
        """Tickets of one queue (``tenant`` for per-tenant queues), from the committed position."""
        topic = self._names.human_queue(queue, tenant)
        consumer = AIOKafkaConsumer(
            topic,
            **client_kwargs(self._settings, f"reviewer-{self._group_id}"),
            group_id=self._group_id,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        self._queue_consumer = consumer
        async for message in consumer:
            ticket = Ticket.model_validate_json(message.value or b"")
            ticket.traced(message.headers)
            yield ticket

    async def commit(self) -> None:
        """Mark every ticket yielded so far as handled for this tool's group."""
        if self._queue_consumer is not None:
            await self._queue_consumer.commit()

    async def submit(
        self, ticket_id: str, token: str, answer: Any, responder: str | None = None,
        *, tenant: str | Unnamed | None = Unnamed.TENANT, request_id: str | None = None,
        trace: TraceLike = None,
    ) -> str:
        """Send one answer (no wait for the verdict); its request id (``request_id``, or
        one made here), which its verdict carries. ``tenant``, the ticket's, names which
        ticket when tenants share the id; unnamed, the token tells. ``trace``: the
        request's W3C context (a ``traceparent`` string is checked), by default the
        caller's current OpenTelemetry context, if any."""
        context = trace_context(trace)
        named = {} if isinstance(tenant, Unnamed) else {"tenant": tenant}
        request = ResumeRequest(
            ticket_id=ticket_id, token=token, answer=answer, responder=responder,
            request_id=request_id or uuid.uuid4().hex, **named
        )
        assert self._producer is not None, "use `async with Reviewer(...)`"
        await self._producer.send_and_wait(
            self._names.resume_requests,
            key=ticket_id.encode(),
            value=orjson.dumps(request.model_dump(exclude_unset=True)),
            headers=list(context.headers) if context is not None else None,
        )
        assert request.request_id is not None
        return request.request_id

    async def answer(
        self, ticket: Ticket, answer: Any, responder: str | None = None, timeout_s: float = 30.0,
        *, trace: TraceLike = None,
    ) -> TicketOutcome:
        """Answer a ticket with its own token and wait for the validator's verdict on this
        answer (with ``follow_outcomes=False``: raises :class:`OutcomesUnavailable` before
        sending; use :meth:`submit`). The request is sent in ``trace``, else the ticket's
        context (the run's trace), else the caller's current one."""
        self._check_outcomes()
        request_id = await self.submit(ticket.ticket_id, ticket.token, answer, responder,
                                       tenant=ticket.tenant,
                                       trace=trace if trace is not None else ticket.trace_context)
        return await self.outcome(ticket.ticket_id, timeout_s, request_id=request_id)

    async def outcome(self, ticket_id: str, timeout_s: float = 30.0, *,
                      request_id: str | None = None) -> TicketOutcome:
        """The verdict on the request ``request_id`` (what :meth:`submit` returned); without
        one, the next verdict on ``ticket_id`` given since this reviewer started, whoever's
        request it answers (another reviewer's, another tenant's ticket of that id)."""
        self._check_outcomes()
        assert self._verdicts is not None, "use `async with Reviewer(...)`"
        deadline = time.monotonic() + timeout_s
        key = request_id if request_id is not None else ticket_id
        while key not in self._seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no verdict on ticket {ticket_id!r} within {timeout_s}s")
            batch = await self._verdicts.getmany(timeout_ms=int(min(left, 0.5) * 1000))
            for tp, messages in batch.items():
                for message in messages:
                    self._record_verdict(tp, message.value)
            await asyncio.sleep(0)
        record = self._seen.pop(key)
        if self._seen.get(ticket_id) is record:  # (kept under both: taken once)
            del self._seen[ticket_id]
        reason = record.get("reason")
        return TicketOutcome(
            ticket_id=ticket_id,
            accepted=reason is None,
            reason=RejectionReason(reason) if reason is not None else None,
            detail=str(record.get("detail", "")),
            record=record,
        )

    def _check_outcomes(self) -> None:
        if not self._follow_outcomes:
            raise OutcomesUnavailable(
                "this Reviewer was made with follow_outcomes=False (a reviewer that may not "
                f"read {self._names.resumes} and {self._names.resume_rejections}): it cannot "
                "wait for verdicts; send answers with submit()"
            )

    def _record_verdict(self, tp: TopicPartition, value: bytes | None) -> None:
        """Kept under its ticket id and, when it has one, its request id."""
        record = orjson.loads(value or b"{}")
        for key in (record.get("ticket_id"), record.get("request_id")):
            if isinstance(key, str):
                self._seen[key] = record
