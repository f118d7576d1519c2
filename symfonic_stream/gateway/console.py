"""The review console: a tenant's open tickets, claims and answers (docs/gateway.md,
"The review console").

=================================================  ===========================================
``GET /review``                                    the console page (``?access_token=``)
``GET /static/console.js``                         its script: JSON Editor and the console,
                                                   bundled into the package at build time
``GET /v1/reviews/events``                         SSE: ``tickets``, the tenant's open
                                                   tickets, at once and after each change
``GET /v1/reviews/tickets``                        the same list as JSON (``?order=``)
``POST /v1/reviews/tickets/{id}/claim``            claim it for the lease (renew: again)
``POST /v1/reviews/tickets/{id}/release``          give the claim back
``POST /v1/reviews/tickets/{id}/answer``           ``{"answer": ...}``: answer it
=================================================  ===========================================

Every request needs a token with the ``reviews:answer`` scope, a ``tenant`` and a ``sub``
(who claims and answers). Tickets are the token's tenant's only: another tenant's ticket is
answered as one that does not exist. The ticket's token never leaves the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from functools import cache
from importlib.resources import files
from typing import Any

import orjson
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import Receive, Scope, Send

from symfonic_stream.gateway.auth import (
    ANSWER_REVIEWS,
    AuthError,
    bearer,
    claimed_tenant,
    scopes,
    subject,
)
from symfonic_stream.gateway.reviews import Reviewed, ReviewStore
from symfonic_stream.gateway.slots import Slots

#: The console's own script from its own origin, JSON Editor's inline styles, nothing else.
_HEADERS = {
    "Cache-Control": "no-cache",
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


class Reviewer:
    """Who asks: the token's tenant and subject (checked: reviews:answer)."""

    def __init__(self, request: Request) -> None:
        state = request.app.state.gateway
        if state.tokens is None or state.reviews is None:
            raise AuthError(403, "answers_need_tokens", "answering needs "
                            "SYMFONIC_GATEWAY_AUTH=jwt: an answer records the token's subject")
        claims = state.tokens.claims(bearer(request.headers.get("authorization"),
                                            request.query_params.get("access_token")))
        self.tenant, self.subject = claimed_tenant(claims), subject(claims)
        if ANSWER_REVIEWS not in scopes(claims) or self.tenant is None:
            raise AuthError(403, "forbidden", f"this token may not answer ({ANSWER_REVIEWS} "
                            "scope and a tenant claim needed)")
        if self.subject is None:
            raise AuthError(403, "forbidden", "a token that answers names who answers (sub)")
        self.store: ReviewStore = state.reviews
        self.state = state

    def open_tickets(self, order: str = "newest") -> list[dict[str, Any]]:
        now = time.time()
        found = [r for r in self.store.of_tenant(self.tenant) if r.is_open(now)]
        return [r.shown(now) for r in sorted(found, key=_ORDERS.get(order, _ORDERS["newest"]))]

    def ticket(self, ticket_id: str) -> Reviewed | None:
        return self.store.get(self.tenant, ticket_id)


def _refused(exc: AuthError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse({"error": exc.reason, "detail": exc.detail}, status_code=exc.status,
                        headers=headers)


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
    return JSONResponse({"tickets": reviewer.open_tickets(
        request.query_params.get("order", "newest"))})


async def events(request: Request) -> Response:
    try:
        reviewer = Reviewer(request)
    except AuthError as exc:
        return _refused(exc)

    async def snapshots() -> AsyncIterator[dict[str, str]]:
        while True:
            changed = reviewer.store.changed(reviewer.tenant)
            yield {"event": "tickets",
                   "data": orjson.dumps({"tickets": reviewer.open_tickets()}).decode()}
            # (a lease or an expiry ends without a record: look again every few seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 5.0)

    slots, tenant = reviewer.state.slots, reviewer.tenant
    no_slot = slots.take(tenant)  # (a console's stream is a client like a run's)
    if no_slot is not None:
        return JSONResponse({"error": no_slot.reason, "detail": no_slot.detail},
                            status_code=503)
    return _Slotted(snapshots(), slots, tenant,
                    ping=reviewer.state.settings.gateway_heartbeat_s,
                    headers={"Cache-Control": "no-cache"})


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
    """Claim, release or answer one of the tenant's tickets."""
    try:
        reviewer = Reviewer(request)
    except AuthError as exc:
        return _refused(exc)
    action = request.path_params["action"]
    reviewed = reviewer.ticket(request.path_params["ticket_id"])
    if reviewed is None or action not in ("claim", "release", "answer"):
        return JSONResponse({"outcome": "not_found", "detail": "no such ticket"},
                            status_code=404)
    sender = reviewer.state.sender
    assert reviewer.subject is not None
    if action == "answer":
        body = await request.body()
        try:
            parsed = orjson.loads(body) if len(body) <= MAX_ANSWER_BODY else None
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict) or "answer" not in parsed:
            return JSONResponse({"outcome": "bad_request",
                                 "detail": 'the body is {"answer": ...}'}, status_code=400)
        verdict = await sender.answer(reviewed, parsed["answer"], reviewer.subject)
    else:
        verdict = await sender.claim(reviewed, action, reviewer.subject)
    status = 200 if verdict.ok else 504 if verdict.outcome == "no_verdict" else 409
    return JSONResponse({"outcome": verdict.outcome, "detail": verdict.detail,
                         "replayed": verdict.replayed}, status_code=status)
