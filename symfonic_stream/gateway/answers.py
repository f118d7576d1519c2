"""The gateway answers and claims tickets on a reviewer's behalf (docs/gateway.md,
"Answering a pause").

The reviewer never holds the ticket's token: the gateway takes it from the ticket's review
state (:mod:`.reviews`), writes the request to ``<prefix>.resume-requests`` keyed by the
ticket id, as a review tool does, with ``responder`` the reviewer's token's subject and a
``request_id`` of its own, and waits for the validator's verdict: the step of the ticket's
history that carries that request id.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from symfonic_stream.config import Settings
from symfonic_stream.gateway.reviews import Reviewed, ReviewStore
from symfonic_stream.kafka.clients import plain_producer_kwargs
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.pauses.review import answer_digest


@dataclass(frozen=True, slots=True)
class Verdict:
    """The validator's word on one request: ``outcome`` ``accepted`` (an answer), ``claimed``
    or ``released``, or the reason it refused (``claimed``, ``expired``, ``invalid_answer``,
    ...; ``no_verdict`` when none came in time)."""

    outcome: str
    detail: str = ""
    #: The answer was accepted before, the same (an AG-UI resume replayed): nothing sent.
    replayed: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome in ("accepted", "claimed", "released")


_DONE = {"answered": "accepted", "claimed": "claimed", "released": "released"}


class ReviewSender:
    """One producer to resume-requests, shared by every request the gateway serves."""

    def __init__(self, settings: Settings, store: ReviewStore) -> None:
        self._store = store
        self.topic = TopicNames(settings.topic_prefix).resume_requests
        self._wait_s = settings.gateway_verdict_wait_s
        self._producer = AIOKafkaProducer(**plain_producer_kwargs(settings, "gateway-answers"))

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def answer(self, reviewed: Reviewed, answer: Any, by: str) -> Verdict:
        """Answer the ticket; an answer accepted already is not sent again: the same one
        is a replay (accepted), another one ``already_answered``."""
        answered = reviewed.state.get("answered")
        if answered is not None:
            if answered["digest"] == answer_digest(answer):
                return Verdict("accepted", f"answered by {answered['by']}", replayed=True)
            return Verdict("already_answered", f"answered at {answered['at']}")
        return await self._send(reviewed, {"answer": answer}, by)

    async def claim(self, reviewed: Reviewed, action: str, by: str) -> Verdict:
        """``action`` ``claim`` or ``release``."""
        return await self._send(reviewed, {"action": action}, by)

    async def _send(self, reviewed: Reviewed, body: dict[str, Any], by: str) -> Verdict:
        ticket = reviewed.ticket
        request_id = uuid.uuid4().hex
        ticket_id, tenant = str(ticket["ticket_id"]), ticket["tenant"]
        request = {"ticket_id": ticket_id, "token": ticket["token"], "tenant": tenant,
                   "responder": by, "request_id": request_id, **body}
        await self._producer.send_and_wait(self.topic, key=ticket_id.encode(),
                                           value=orjson.dumps(request))

        def verdict() -> dict[str, Any] | None:
            found = self._store.get(tenant, ticket_id)
            return found.entry(request_id) if found is not None else None

        entry = await self._store.wait(tenant, verdict, self._wait_s)
        if entry is None:
            return Verdict("no_verdict", f"no verdict within {self._wait_s:g} s "
                                         "(SYMFONIC_GATEWAY_VERDICT_WAIT_S)")
        if entry["event"] in _DONE:
            return Verdict(_DONE[entry["event"]], entry.get("detail") or "")
        return Verdict(str(entry.get("reason")), entry.get("detail") or "")
