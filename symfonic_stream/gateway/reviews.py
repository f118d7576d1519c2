"""The gateway's view of every ticket's review: ``<prefix>.review-tickets``, read whole.

The resume validator writes a ticket's whole review state there after each change
(docs/pauses.md, "Claims and escalation"), compacted, keyed by ``[tenant, ticket id]``. The
gateway reads every partition with one consumer (no group: every replica reads all of it,
so all replicas show the same claims), ``read_committed``, from the start (compaction keeps
it to the tickets the validator still remembers), then live. It keeps each ticket's latest
state: the console lists a tenant's open tickets from it, and an answer through the gateway
takes its ticket's token from it and waits there for its verdict (the history entry that
carries the answer's request id).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from symfonic_stream.config import Settings
from symfonic_stream.gateway.tail import TopicMissing, polled
from symfonic_stream.kafka.admin import partition_counts
from symfonic_stream.kafka.clients import groupless_consumer_kwargs

log = logging.getLogger(__name__)

#: A ticket's place: (its tenant, its id).
TicketKey = tuple[str | None, str]


@dataclass(slots=True)
class Reviewed:
    """One ticket's latest review state (models.pauses.ReviewTicket, as JSON)."""

    state: dict[str, Any]

    @property
    def ticket(self) -> dict[str, Any]:
        ticket: dict[str, Any] = self.state["ticket"]
        return ticket

    def holder(self, now: float) -> str | None:
        claim = self.state.get("claim")
        return claim["by"] if claim and claim["until"] > now else None

    def is_open(self, now: float) -> bool:
        return self.state.get("answered") is None and self.ticket["expires_at"] > now

    def entry(self, request_id: str) -> dict[str, Any] | None:
        """The history step that answers request ``request_id`` (None: not yet)."""
        return next((e for e in reversed(self.state["history"])
                     if e.get("request") == request_id), None)

    def shown(self, now: float) -> dict[str, Any]:
        """What a reviewer's browser is told: everything but the token."""
        ticket = {k: v for k, v in self.ticket.items() if k != "token"}
        return {**self.state, "ticket": ticket, "open": self.is_open(now),
                "holder": self.holder(now)}


def _read(key: bytes | None, value: bytes | None) -> tuple[TicketKey, Reviewed | None] | None:
    """A record's ticket and state (None: a tombstone), or None for a record that is no
    review of a ticket (skipped: only the validator writes the topic, but checked)."""
    try:
        tenant, ticket_id = orjson.loads(key or b"")
        if not (isinstance(tenant, str | None) and isinstance(ticket_id, str)):
            return None
        if value is None:
            return (tenant, ticket_id), None
        state = orjson.loads(value)
        ticket = state["ticket"]
        if ticket["ticket_id"] != ticket_id or ticket["tenant"] != tenant:
            return None
        return (tenant, ticket_id), Reviewed(state)
    except (ValueError, TypeError, KeyError):
        return None


@dataclass(slots=True)
class Snapshot:
    """One tenant's open tickets as its consoles are sent them, made once per change of its
    tickets and shared by every console stream of the tenant: each ticket encoded once,
    newest first; each set of queues' list joined once (:meth:`tickets`)."""

    #: The tenant's change count when it was made (:meth:`ReviewStore.snapshot`).
    version: int
    #: When what it shows changes with time alone: a lease's or a ticket's end.
    stale_at: float
    #: (queue, the ticket as shown, encoded), newest first.
    shown: list[tuple[str, bytes]]
    _joined: dict[frozenset[str], bytes] = field(default_factory=dict)

    def tickets(self, reviews: Callable[[str], bool], key: frozenset[str]) -> bytes:
        """``{"tickets": [...]}`` of the tickets of the queues ``reviews`` admits;
        ``key`` names that set of queues (the same key, the same bytes)."""
        joined = self._joined.get(key)
        if joined is None:
            parts = [encoded for queue, encoded in self.shown if reviews(queue)]
            joined = self._joined[key] = b'{"tickets":[' + b",".join(parts) + b"]}"
        return joined


class ReviewStore:
    """Every ticket's latest review state, per tenant, and an event per tenant that fires
    on change."""

    def __init__(self) -> None:
        self._tickets: dict[str | None, dict[str, Reviewed]] = {}
        self._changed: dict[str | None, asyncio.Event] = {}
        self._versions: dict[str | None, int] = {}
        self._snapshots: dict[str | None, Snapshot] = {}

    def __len__(self) -> int:
        return sum(len(tickets) for tickets in self._tickets.values())

    def file(self, key: bytes | None, value: bytes | None) -> bool:
        """File one record of review-tickets; False when it is no review of a ticket."""
        read = _read(key, value)
        if read is None:
            return False
        (tenant, ticket_id), reviewed = read
        if reviewed is None:
            tickets = self._tickets.get(tenant, {})
            tickets.pop(ticket_id, None)
            if not tickets:
                self._tickets.pop(tenant, None)
        else:
            self._tickets.setdefault(tenant, {})[ticket_id] = reviewed
        self._versions[tenant] = self._versions.get(tenant, 0) + 1
        changed = self._changed.pop(tenant, None)
        if changed is not None:
            changed.set()
        return True

    def get(self, tenant: str | None, ticket_id: str) -> Reviewed | None:
        return self._tickets.get(tenant, {}).get(ticket_id)

    def of_tenant(self, tenant: str | None) -> list[Reviewed]:
        return list(self._tickets.get(tenant, {}).values())

    def changed(self, tenant: str | None) -> asyncio.Event:
        """Set at the next change of one of ``tenant``'s tickets."""
        return self._changed.setdefault(tenant, asyncio.Event())

    def snapshot(self, tenant: str | None, now: float) -> Snapshot:
        """``tenant``'s open tickets as of ``now``: the one made since its last change,
        unless time alone has changed what it shows since."""
        version = self._versions.get(tenant, 0)
        made = self._snapshots.get(tenant)
        if made is not None and made.version == version and now < made.stale_at:
            return made
        found = sorted((r for r in self.of_tenant(tenant) if r.is_open(now)),
                       key=lambda r: -r.ticket["routed_at"])
        ends = [end for r in found
                for end in (r.ticket["expires_at"], (r.state.get("claim") or {}).get("until"))
                if isinstance(end, int | float) and end > now]
        made = self._snapshots[tenant] = Snapshot(
            version, min(ends, default=math.inf),
            [(r.ticket["queue"], orjson.dumps(r.shown(now))) for r in found])
        return made

    async def wait(self, tenant: str | None, until: Callable[[], Any],
                   timeout_s: float) -> Any:
        """``until()`` once it is truthy (checked at each change of ``tenant``'s tickets),
        or None after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not (found := until()):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(self.changed(tenant).wait(), left)
            except TimeoutError:
                return None
        return found


class ReviewTail:
    """``<prefix>.review-tickets``, read from its start and then live, into a store."""

    def __init__(self, settings: Settings, topic: str, store: ReviewStore) -> None:
        self.settings, self.topic, self.store = settings, topic, store
        self.caught_up = asyncio.Event()
        self.last_progress = time.monotonic()
        self._consumer: AIOKafkaConsumer | None = None
        self._ends: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        counts = await partition_counts(self.settings, [self.topic],
                                        timeout_s=self.settings.admin_timeout_s)
        if self.topic not in counts:
            raise TopicMissing(f"topic {self.topic} does not exist (run `topics ensure`)")
        consumer = AIOKafkaConsumer(**groupless_consumer_kwargs(self.settings, "gateway-reviews"))
        await consumer.start()
        self._consumer = consumer
        try:
            tps = [TopicPartition(self.topic, p) for p in range(counts[self.topic])]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            self._ends = {tp: end for tp, end in (await consumer.end_offsets(tps)).items()
                          if end > 0}
        except BaseException:
            await self.stop()
            raise
        await self._check_caught_up()

    async def run(self) -> None:
        assert self._consumer is not None, "start() first"
        async for batch in polled(self._consumer, self.topic):
            self.last_progress = time.monotonic()
            for records in batch.values():
                for record in records:
                    if not self.store.file(record.key, record.value):
                        log.warning("a record on review-tickets that is no ticket's review: "
                                    "skipped", extra={"topic": self.topic,
                                                      "partition": record.partition,
                                                      "offset": record.offset})
            await self._check_caught_up()

    async def _check_caught_up(self) -> None:
        assert self._consumer is not None
        for tp, end in list(self._ends.items()):
            if await self._consumer.position(tp) >= end:
                del self._ends[tp]
        if not self._ends:
            self.caught_up.set()

    async def stop(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()
