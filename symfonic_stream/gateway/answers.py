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
    """The validator's word on one request. ``ok``: it succeeded (an answer accepted, a
    claim taken or given back); else it was refused, or no word came. ``outcome`` is what
    the client is told: ``accepted``, ``claimed`` or ``released`` when ``ok``, else the
    refusal's code (the validator's reason: ``claimed``, ``expired``, ``invalid_answer``,
    ``held``, ...; ``already_answered``, ``no_verdict`` of the gateway's own). A reason may
    be spelt as a success is (``claimed``: another holds the claim), so ``ok`` is never
    read from ``outcome``: it is decided where the verdict is made (:func:`verdict_of`)."""

    outcome: str
    ok: bool
    detail: str = ""
    #: The answer was accepted before, the same (an AG-UI resume replayed): nothing sent.
    replayed: bool = False


#: The review history's steps that answer a request with success, and what each is called;
#: its other answering steps (``answer_refused``, ``claim_refused``) are refusals.
SUCCEEDED = {"answered": "accepted", "claimed": "claimed", "released": "released"}
REFUSED = frozenset({"answer_refused", "claim_refused"})


def verdict_of(entry: dict[str, Any]) -> Verdict:
    """The verdict a step of a ticket's review history gives its request: success or
    refusal by the step's ``event``, never by how its reason is spelt."""
    event, detail = entry.get("event"), entry.get("detail") or ""
    if event in SUCCEEDED:
        return Verdict(SUCCEEDED[event], True, detail)
    if event in REFUSED:
        return Verdict(str(entry.get("reason") or event), False, detail)
    return Verdict("no_verdict", False, f"the request's step is {str(event)[:40]!r}, "
                   "no verdict")


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
                return Verdict("accepted", True, f"answered by {answered['by']}",
                               replayed=True)
            return Verdict("already_answered", False, f"answered at {answered['at']}")
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
            return Verdict("no_verdict", False, f"no verdict within {self._wait_s:g} s "
                                                "(SYMFONIC_GATEWAY_VERDICT_WAIT_S)")
        return verdict_of(entry)
