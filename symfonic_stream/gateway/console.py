"""The review console: a tenant's open tickets, claims and answers (docs/gateway.md,
"The review console").

=================================================  ===========================================
``GET /review#access_token=...``                   the console page (the token stays in the
                                                   URL's fragment, which is never sent)
``GET /static/console.js``                         its script: JSON Editor and the console,
                                                   bundled into the package at build time
``GET /v1/reviews/events``                         SSE: ``tickets``, the token's queues' open
                                                   tickets, at once and after each change
``GET /v1/reviews/tickets``                        the same list as JSON (``?order=``)
``POST /v1/reviews/tickets/{id}/claim``            claim it for the lease (renew: again)
``POST /v1/reviews/tickets/{id}/release``          give the claim back
``POST /v1/reviews/tickets/{id}/answer``           ``{"answer": ...}``: answer it
=================================================  ===========================================

Every request needs a token (``Authorization: Bearer``; ``?access_token=`` too on the
``GET`` stream alone) with the ``reviews:answer`` and ``runs:read`` scopes, a ``tenant`` and
a ``sub`` (who claims and answers); it reviews the queues its ``queues`` claim names
(:class:`.auth.Grant`). A ticket of another tenant, or of a queue the token does not
review, is answered as one that does not exist, on reads and writes alike. Each request
holds one of the tenant's client slots while it is answered, and each responder's writes
are rate-limited (:mod:`.rates`). The ticket's token never leaves the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import cache
from importlib.resources import files
from typing import Any

import orjson
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import Receive, Scope, Send

from symfonic_stream.gateway.answers import Verdict
from symfonic_stream.gateway.auth import (
    ANSWER_REVIEWS,
    READ_RUNS,
    AuthError,
    Grant,
    bearer,
)
from symfonic_stream.gateway.edge import BodyRefused, read_body
from symfonic_stream.gateway.rates import rate_limited
from symfonic_stream.gateway.reviews import Reviewed, ReviewStore, Snapshot
from symfonic_stream.gateway.slots import Slots

#: The console's own script from its own origin, JSON Editor's inline styles, nothing else.
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'none'; base-uri 'none'; "
        "frame-ancestors 'none'"
    ),
}
_ORDERS = {"newest": lambda r: -r.ticket["routed_at"], "oldest": lambda r: r.ticket["routed_at"],
           "expiring": lambda r: r.ticket["expires_at"]}
#: The most bytes of an answer request read (the validator reads at most
#: SYMFONIC_MAX_ANSWER_BYTES of the request it becomes).
MAX_ANSWER_BODY = 1024 * 1024
ACTIONS = ("claim", "release", "answer")
#: A console stream looks again at least this often (time alone may end a lease or a
#: ticket; the snapshot knows when, this bounds a clock's drift).
LOOK_AGAIN_S = 60.0


class Reviewer:
    """Who asks, checked: a token with reviews:answer and runs:read, a tenant and a
    subject. ``stream``: the request is the GET stream, which may carry its token in
    ``?access_token=`` (an EventSource cannot set headers)."""

    def __init__(self, request: Request, *, stream: bool = False) -> None:
        state = request.app.state.gateway
        if state.tokens is None or state.reviews is None:
            raise AuthError(403, "answers_need_tokens", "answering needs "
                            "SYMFONIC_GATEWAY_AUTH=jwt: an answer records the token's subject")
        query = request.query_params.get("access_token") if stream else None
        grant: Grant = state.tokens.grant(bearer(request.headers.get("authorization"), query))
        if {ANSWER_REVIEWS, READ_RUNS} - grant.scopes or grant.tenant is None:
            raise AuthError(403, "forbidden", f"this token may not review ({ANSWER_REVIEWS} "
                            f"and {READ_RUNS} scopes and a tenant claim needed)")
        if grant.subject is None:
            raise AuthError(403, "forbidden", "a token that answers names who answers (sub)")
        self.grant, self.subject = grant, grant.subject
        self.store: ReviewStore = state.reviews
        self.state = state

    @property
    def tenant(self) -> str | None:
        return self.grant.tenant

    def open_tickets(self, order: str = "newest") -> list[dict[str, Any]]:
        now = time.time()
        found = [r for r in self.store.of_tenant(self.tenant)
                 if r.is_open(now) and self.grant.reviews(r.ticket["queue"])]
        return [r.shown(now) for r in sorted(found, key=_ORDERS.get(order, _ORDERS["newest"]))]

    def ticket(self, ticket_id: str) -> Reviewed | None:
        """The ticket, if it is the token's tenant's and of a queue the token reviews."""
        found = self.store.get(self.tenant, ticket_id)
        return found if found is not None and self.grant.reviews(found.ticket["queue"]) else None

    def snapshot(self) -> Snapshot:
        """The tenant's open tickets now, shared by its consoles (:meth:`Snapshot.tickets`
        picks the token's queues')."""
        return self.store.snapshot(self.tenant, time.time())


def _refused(exc: AuthError | BodyRefused) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if isinstance(exc, BodyRefused):
        headers = {"Connection": "close"}
    return JSONResponse({"error": exc.reason, "detail": exc.detail}, status_code=exc.status,
                        headers=headers)


async def _in_slot(reviewer: Reviewer, answer: Callable[[], Awaitable[Response]]) -> Response:
    """``answer()`` inside one of the tenant's client slots (a verdict may take
    SYMFONIC_GATEWAY_VERDICT_WAIT_S); the 503 when there is none."""
    slots, tenant = reviewer.state.slots, reviewer.tenant
    no_slot = slots.take(tenant)
    if no_slot is not None:
        return JSONResponse({"error": no_slot.reason, "detail": no_slot.detail},
                            status_code=503)
    try:
        return await answer()
    finally:
        slots.give(tenant)


@cache
def _page() -> bytes:
    return files("symfonic_stream.gateway").joinpath("static", "console.html").read_bytes()


async def page(request: Request) -> Response:
    return HTMLResponse(_page(), headers=_HEADERS)


async def script(request: Request) -> Response:
    """The bundled console script (built by ``make web``; a package without it was built
    without its web step: the page says so in its status)."""
    bundled = files("symfonic_stream.gateway").joinpath("static", "console.js")
    if not bundled.is_file():
        return JSONResponse({"error": "not_built", "detail": "console.js was not bundled: "
                             "build the package with `make web`"}, status_code=404)
    return Response(bundled.read_bytes(), media_type="text/javascript", headers=_HEADERS)


async def tickets(request: Request) -> Response:
    try:
        reviewer = Reviewer(request)
    except AuthError as exc:
        return _refused(exc)

    async def listed() -> Response:
        return JSONResponse({"tickets": reviewer.open_tickets(
            request.query_params.get("order", "newest"))})

    return await _in_slot(reviewer, listed)


async def events(request: Request) -> Response:
    try:
        reviewer = Reviewer(request, stream=True)
    except AuthError as exc:
        return _refused(exc)

    async def snapshots() -> AsyncIterator[dict[str, str]]:
        sent = None
        while True:
            changed = reviewer.store.changed(reviewer.tenant)
            snapshot = reviewer.snapshot()
            shown = snapshot.tickets(reviewer.grant.reviews, reviewer.grant.queues)
            if shown != sent:  # (a change of another queue's ticket sends nothing)
                yield {"event": "tickets", "data": shown.decode()}
                sent = shown
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(0.0, min(
                    snapshot.stale_at - time.time(), LOOK_AGAIN_S)))

    slots, tenant = reviewer.state.slots, reviewer.tenant
    no_slot = slots.take(tenant)  # (a console's stream is a client like a run's)
    if no_slot is not None:
        return JSONResponse({"error": no_slot.reason, "detail": no_slot.detail},
                            status_code=503)
    return _Slotted(snapshots(), slots, tenant,
                    ping=reviewer.state.settings.gateway_heartbeat_s)


class _Slotted(EventSourceResponse):
    """An SSE response that gives its client slot back when it ends, however it ends."""

    def __init__(self, content: Any, slots: Slots, tenant: str | None, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._slots, self._tenant = slots, tenant

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slots.give(self._tenant)


async def act(request: Request) -> Response:
    """Claim, release or answer one of the token's tickets: ``200`` when the validator
    took it, ``409`` with its code when it refused, ``504`` without its word in time."""
    try:
        reviewer = Reviewer(request)
    except AuthError as exc:
        return _refused(exc)

    async def acted() -> Response:
        action = request.path_params["action"]
        reviewed = reviewer.ticket(request.path_params["ticket_id"])
        if reviewed is None or action not in ACTIONS:
            return JSONResponse({"outcome": "not_found", "detail": "no such ticket"},
                                status_code=404)
        per_minute = reviewer.state.settings.gateway_review_requests_per_minute
        later = reviewer.state.rates.take((reviewer.tenant, reviewer.subject),
                                          time.monotonic())
        if later is not None:
            return JSONResponse({"outcome": "rate_limited", "detail": rate_limited(per_minute)},
                                status_code=429, headers={"Retry-After": str(math.ceil(later))})
        try:
            verdict = await _sent(request, reviewer, reviewed, action)
        except BodyRefused as exc:
            return _refused(exc)
        if verdict is None:
            return JSONResponse({"outcome": "bad_request",
                                 "detail": 'the body is {"answer": ...}'}, status_code=400)
        status = 200 if verdict.ok else 504 if verdict.outcome == "no_verdict" else 409
        return JSONResponse({"outcome": verdict.outcome, "detail": verdict.detail,
                             "replayed": verdict.replayed}, status_code=status)

    return await _in_slot(reviewer, acted)


async def _sent(request: Request, reviewer: Reviewer, reviewed: Reviewed,
                action: str) -> Verdict | None:
    """The verdict on ``action`` (None: an answer's body is no ``{"answer": ...}``)."""
    sender = reviewer.state.sender
    if action != "answer":
        verdict: Verdict = await sender.claim(reviewed, action, reviewer.subject)
        return verdict
    body = await read_body(request, MAX_ANSWER_BODY,
                           reviewer.state.settings.gateway_request_timeout_s)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or "answer" not in parsed:
        return None
    answered: Verdict = await sender.answer(reviewed, parsed["answer"], reviewer.subject)
    return answered
