"""The gateway's HTTP side: a Starlette app serving one run's stream as server-sent events.

=========================================  ==================================================
``GET /v1/runs/{run_id}/events``           the run's typed envelopes (stream-events topic)
``GET /v1/runs/{run_id}/chunks``           the run's chunk envelopes (stream-chunks topic)
``POST /v1/runs/{run_id}/events``          AG-UI: a ``RunAgentInput``; with ``resume``, it
                                           answers the run's pause (:mod:`.resume`)
``GET {chat API}/{run_id}/stream``         the run as the AI SDK's UI message stream, where
                                           ``useChat`` resumes (``/api/chat/{id}/stream``)
``POST {chat API}``                        an AI SDK chat request: it answers the run's
                                           pause (:mod:`.chat`)
``/review``, ``/v1/reviews/...``           the review console (:mod:`.console`)
=========================================  ==================================================

``Last-Event-ID: n`` or ``?after_seq=n`` resumes after seq n. A run not yet seen is waited
for up to ``SYMFONIC_GATEWAY_RUN_WAIT_S``, then 404; so is a run the token may not read,
on the same path (:meth:`.runs.RunStore.wait_for`), and counted alike. The token is checked
before any of a POST's body is read (:func:`.edge.read_body`), and only the GET streams take
it from ``?access_token=``. Every response says ``Cache-Control: no-store`` and
``Referrer-Policy: no-referrer`` (:class:`.edge.NoStore`). docs/gateway.md has the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from symfonic_stream.config import Settings
from symfonic_stream.gateway import aisdk, chat, console
from symfonic_stream.gateway.answers import ReviewSender
from symfonic_stream.gateway.auth import (
    ANSWER_REVIEWS,
    READ_RUNS,
    AuthError,
    Grant,
    TokenCheck,
    bearer,
)
from symfonic_stream.gateway.edge import BodyRefused, NoStore, read_body
from symfonic_stream.gateway.fanout import PING, Pulse
from symfonic_stream.gateway.page import page
from symfonic_stream.gateway.rates import PerMinute, rate_limited
from symfonic_stream.gateway.resume import MAX_INPUT_BYTES, parse_input, resumed
from symfonic_stream.gateway.reviews import ReviewStore
from symfonic_stream.gateway.runs import Held, Run
from symfonic_stream.gateway.slots import Slots
from symfonic_stream.gateway.sse import BadRequest, check_run_id, resume_after
from symfonic_stream.gateway.tail import TopicTail
from symfonic_stream.gateway.viewer import (
    Viewing,
    agui_messages,
    aisdk_messages,
    envelope_messages,
    records,
)
from symfonic_stream.models.event_types import Format
from symfonic_stream.observability import tracing
from symfonic_stream.observability.gateway import GatewayMetrics

log = logging.getLogger(__name__)
#: A stream's wire format: the envelopes as on the topic, or a translation of them.
Wire = Format
#: What answers a run's pause once the run is found: its response's content.
Answer = Callable[[Run], Callable[[Viewing], AsyncIterator[bytes]]]


@dataclass
class GatewayState:
    """What the routes read: the settings, one tail per stream, the metrics."""

    settings: Settings
    tails: dict[str, TopicTail]
    metrics: GatewayMetrics
    #: Verifies bearer tokens (``SYMFONIC_GATEWAY_AUTH=jwt``); None: anyone may read.
    tokens: TokenCheck | None = None
    #: Every ticket's review state, and the producer that answers and claims (None: the
    #: gateway answers nothing, as in tests of reading alone).
    reviews: ReviewStore | None = None
    sender: ReviewSender | None = None
    #: Requests waiting for their run and streams open, in all and per tenant (:mod:`.slots`).
    slots: Slots = field(init=False)
    #: Review requests per responder (:mod:`.rates`).
    rates: PerMinute = field(init=False)
    #: The one heartbeat of every run stream (:class:`.fanout.Pulse`).
    pulse: Pulse = field(init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        self.slots = Slots(settings.gateway_max_clients,
                           None if self.tokens is None else settings.gateway_max_clients_per_tenant)
        self.rates = PerMinute(settings.gateway_review_requests_per_minute)
        self.pulse = Pulse(settings.gateway_heartbeat_s, settings.gateway_send_timeout_s)


#: A run stream's response head (``Cache-Control`` and ``Referrer-Policy``: NoStore's).
_HEAD = [(b"content-type", b"text/event-stream; charset=utf-8"),
         (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no")]


class _RunStream(Response):
    """A run's SSE response: pins its run while it streams, and counts how it ended.

    Each write is one ASGI send of what is ready (no task per write, no timer per stream):
    the process's one :class:`.fanout.Pulse` wakes it for a heartbeat and cuts it when a
    write waits past ``SYMFONIC_GATEWAY_SEND_TIMEOUT_S``; one task per stream waits for the
    client's disconnect."""

    def __init__(self, state: GatewayState, stream: str, run: Run, after: int,
                 wire: Wire, tenant: str | None,
                 answer: Callable[[Viewing], AsyncIterator[bytes]] | None = None) -> None:
        self._state, self._stream, self.run = state, stream, run
        self._wire, self._after = wire, after
        self._tenant = tenant  # whose slot it holds, given back when the stream ends
        self.viewing = viewing = Viewing(delivered=_delivery(state.metrics, stream))
        # A client resuming: a stream from after a seq (an answer's stream never is).
        self._resumed = answer is None and after >= 0
        tail = state.tails[stream]

        def read_back(offset: int) -> None:
            state.metrics.read_backs.labels(stream).inc()

        content: AsyncIterator[bytes]
        if answer is not None:  # a resume or chat request: verdicts, then the continuation
            content = answer(viewing)
        elif wire is Format.AG_UI:  # translated from the run's start, sent after ``after``
            content = agui_messages(records(tail, run, -1, viewing, read_back), run.run_id,
                                    after, viewing, run=run)
        elif wire is Format.AI_SDK:  # the same, as the run's UI message
            content = aisdk_messages(records(tail, run, -1, viewing, read_back), run, after,
                                     viewing, message_id=run.run_id)
        else:
            content = envelope_messages(records(tail, run, after, viewing, read_back),
                                        run, viewing, stream)
        self._content = content
        self.status_code, self.background = 200, None
        self.raw_headers = [*_HEAD, *([(aisdk.HEADER[0].encode(), aisdk.HEADER[1].encode())]
                                     if wire is Format.AI_SDK else [])]
        # What the pulse reads (:class:`.fanout.Beat`).
        self.last_sent = time.monotonic()
        self.sending_since: float | None = None
        self.ping_due = False
        self._gone = self._too_slow = False
        self._task: asyncio.Task[object] | None = None

    def cut(self) -> None:
        if self._task is not None and not self._too_slow:
            self._too_slow = True
            self._task.cancel()

    def _left(self, listening: asyncio.Task[object]) -> None:
        self._gone = True
        self.run.wake()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state, stream = self._state, self._stream
        metrics, pulse = state.metrics, state.pulse
        self.run.viewers += 1
        metrics.viewers.labels(stream).inc()
        if self._resumed:
            metrics.resumes.labels(stream).inc()
        ending = "disconnected"
        start_ns = time.time_ns()
        self._task = asyncio.current_task()
        listening = asyncio.ensure_future(_disconnect(receive))
        listening.add_done_callback(self._left)
        pulse.join(self)
        try:
            if await self._write(send):
                ending = "run_ended"
        except asyncio.CancelledError:
            if not self._too_slow or self._task is None:
                raise
            self._task.uncancel()
        finally:
            pulse.leave(self)
            listening.remove_done_callback(self._left)
            listening.cancel()
            with contextlib.suppress(BaseException):
                await self._content.aclose()  # type: ignore[attr-defined]
            viewing = self.viewing
            if self._too_slow or viewing.lost:
                ending = "too_slow"
                log.info("viewer dropped: a send took longer than SYMFONIC_GATEWAY_SEND_"
                         "TIMEOUT_S" if self._too_slow else "viewer dropped: its place in "
                         "the run's translation is no longer held", extra={"stream": stream})
            state.slots.give(self._tenant)
            self.run.viewers -= 1
            metrics.viewers.labels(stream).dec()
            metrics.streams.labels(stream, ending).inc()
            metrics.messages.labels(stream).inc(viewing.sent)
            if viewing.shed:
                metrics.shed.labels(stream).inc(viewing.shed)
            if viewing.merged:
                metrics.coalesced.labels(stream).inc(viewing.merged)
            if viewing.first_sent is not None:
                metrics.first_event.labels(stream).observe(viewing.first_sent - viewing.started)
            if tracing.TRACER is not None:
                tracing.stream_span(self.run.trace, {
                    "symfonic.run_id": self.run.run_id, "symfonic.stream": stream,
                    "symfonic.format": self._wire.value, "symfonic.from_seq": self._after + 1,
                    "symfonic.messages_sent": viewing.sent, "symfonic.ending": ending},
                    start_ns)

    async def _write(self, send: Send) -> bool:
        """The stream, written until it ends (True: after the run's end, or a response's
        end) or the client goes, or the gateway stops."""
        pulse = self._state.pulse
        await send({"type": "http.response.start", "status": 200,
                    "headers": self.raw_headers})
        complete = True
        async for chunk in self._content:
            if self._gone or pulse.stopping:
                complete = False
                break
            if not chunk:
                if not self.ping_due:
                    continue
                chunk = PING
            self.sending_since = time.monotonic()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self.last_sent, self.sending_since, self.ping_due = time.monotonic(), None, False
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return complete and self.viewing.run_ended


async def _disconnect(receive: Receive) -> None:
    """Until the client goes (or the response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _delivery(metrics: GatewayMetrics, stream: str) -> Callable[[list[Held]], None]:
    """What observes a stream's live records as they go out: each one's lag behind its
    Kafka timestamp (docs/metrics.md says why that one), a write's worth in one update."""
    lag = metrics.delivery_lag.labels(stream)

    def delivered(batch: list[Held]) -> None:
        now = time.time()
        lag.observe_many([now - held.ts for held in batch if held.ts])

    return delivered


def _refuse(state: GatewayState, stream: str, status: int, reason: str, detail: str, *,
            headers: dict[str, str] | None = None) -> Response:
    """The refusal, counted by ``reason`` (what the client is told too)."""
    state.metrics.refused.labels(stream, reason).inc()
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse({"error": reason, "detail": detail}, status_code=status,
                        headers=headers)


async def _run_stream(request: Request, stream: str, *, chat_id: bool = False) -> Response:
    """A run's stream (``chat_id``: the AI SDK's resume route, ``{chat API}/{id}/stream``)."""
    state: GatewayState = request.app.state.gateway
    settings, posting = state.settings, request.method == "POST"
    try:
        run_id = check_run_id(request.path_params["chat_id" if chat_id else "run_id"])
        after = resume_after(request.headers.get("last-event-id"),
                             request.query_params.get("after_seq"))
        wire = (Format.AG_UI if posting else Format.AI_SDK if chat_id
                else _format(request.query_params.get("format"), stream))
    except BadRequest as exc:
        return _refuse(state, stream, 400, "bad_request", str(exc))
    try:  # the token before anything of the body is read, and before any wait
        grant = _reader(state, request, posting)
    except AuthError as exc:
        return _refuse(state, stream, exc.status, exc.reason, exc.detail)
    posted = None
    if posting:
        try:
            posted = parse_input(await read_body(request, MAX_INPUT_BYTES,
                                                 settings.gateway_request_timeout_s))
        except BodyRefused as exc:
            return _refuse(state, stream, exc.status, exc.reason, exc.detail,
                           headers={"Connection": "close"})
        except BadRequest as exc:
            return _refuse(state, stream, 400, "bad_request", str(exc))
    answer: Answer | None = None
    if posted is not None and posted.resume:
        try:
            answerer = _answerer(state, grant)
        except AuthError as exc:
            return _refuse(state, stream, exc.status, exc.reason, exc.detail)
        given = posted
        made = _answering(state, stream, answerer, lambda tail, run, *rest: resumed(
            tail, run, given, *rest))
        if isinstance(made, Response):
            return made
        answer = made

    tenant = None if grant is None else grant.tenant
    return await _open(state, stream, run_id, after, wire, grant is not None, tenant, answer)


async def _chat(request: Request) -> Response:
    """``POST {chat API}``: an AI SDK chat request, answering the run's pause (:mod:`.chat`).
    Answering is all it does, so its token must answer before any of its body is read."""
    state: GatewayState = request.app.state.gateway
    settings, stream = state.settings, "events"
    try:
        answerer = _answerer(state, _reader(state, request, True))
    except AuthError as exc:
        return _refuse(state, stream, exc.status, exc.reason, exc.detail)
    try:
        given = chat.parse_request(await read_body(request, MAX_INPUT_BYTES,
                                                   settings.gateway_request_timeout_s))
        run_id = check_run_id(given.id)
    except BodyRefused as exc:
        return _refuse(state, stream, exc.status, exc.reason, exc.detail,
                       headers={"Connection": "close"})
    except BadRequest as exc:
        return _refuse(state, stream, 400, "bad_request", str(exc))
    answer = _answering(state, stream, answerer, lambda tail, run, *rest: chat.answered(
        tail, run, given, *rest))
    if isinstance(answer, Response):
        return answer
    return await _open(state, stream, run_id, -1, Format.AI_SDK, True, answerer.tenant,
                       answer)


def _answering(state: GatewayState, stream: str, answerer: Grant,
               reply: Callable[..., AsyncIterator[bytes]]) -> Answer | Response:
    """How the request's answer is made, ``reply(tail, run, answerer, reviews, sender,
    wait_s, viewing)`` (an AG-UI resume's or a chat request's); or the 429 of the
    responder's rate."""
    settings = state.settings
    later = state.rates.take((answerer.tenant, answerer.subject), time.monotonic())
    if later is not None:
        return _refuse(state, stream, 429, "rate_limited",
                       rate_limited(settings.gateway_review_requests_per_minute),
                       headers={"Retry-After": str(math.ceil(later))})
    assert state.reviews is not None and state.sender is not None
    reviews, sender, wait_s = state.reviews, state.sender, settings.gateway_verdict_wait_s

    def answer(run: Run) -> Callable[[Viewing], AsyncIterator[bytes]]:
        return lambda viewing: reply(state.tails[stream], run, answerer, reviews, sender,
                                     wait_s, viewing)

    return answer


def _reader(state: GatewayState, request: Request, posting: bool) -> Grant | None:
    """The request's token's grant (None: no tokens here), or AuthError: 401 without a
    valid token, 403 without ``runs:read``. Only a ``GET`` stream takes ``?access_token=``
    (what a browser's EventSource can send): a POST's token is in its header."""
    if state.tokens is None:
        return None
    query = None if posting else request.query_params.get("access_token")
    grant = state.tokens.grant(bearer(request.headers.get("authorization"), query))
    if READ_RUNS not in grant.scopes:
        raise AuthError(403, "forbidden", f"this token may not read runs ({READ_RUNS})")
    return grant


def _answerer(state: GatewayState, grant: Grant | None) -> Grant:
    """``grant``, when it may answer, or AuthError 403: answering needs tokens (an answer
    records the token's subject), ``reviews:answer`` and a subject."""
    if grant is None or state.reviews is None or state.sender is None:
        raise AuthError(403, "answers_need_tokens", "answering needs SYMFONIC_GATEWAY_AUTH="
                        "jwt: an answer records the token's subject")
    if ANSWER_REVIEWS not in grant.scopes or grant.subject is None:
        raise AuthError(403, "forbidden", f"this token may not answer ({ANSWER_REVIEWS} "
                        "scope and a subject needed)")
    return grant


async def _open(state: GatewayState, stream: str, run_id: str, after: int, wire: Wire,
                with_tokens: bool, tenant: str | None, answer: Answer | None) -> Response:
    """The run's stream once the run is there and readable (else 404 after the wait)."""
    settings = state.settings
    no_slot = state.slots.take(tenant)
    if no_slot is not None:
        return _refuse(state, stream, 503, no_slot.reason, no_slot.detail)
    store = state.tails[stream].store
    response: _RunStream | None = None
    try:
        run = await store.wait_for(run_id, _readable(with_tokens, tenant),
                                   settings.gateway_run_wait_s)
        if run is not None:
            response = _RunStream(state, stream, run, after, wire, tenant,
                                  answer(run) if answer is not None else None)
    finally:
        if response is None:  # (else the stream holds the slot until it ends)
            state.slots.give(tenant)
    if response is not None:
        return response
    # Not seen, or not this token's: one answer, after one wait, one count (whoever scrapes
    # the metric learns no more than the answer says).
    return _refuse(state, stream, 404, "not_found",
                   f"no run {run_id!r} that this request may read within the gateway's "
                   f"window after waiting {settings.gateway_run_wait_s:g} s")


def _format(name: str | None, stream: str) -> Wire:
    """The stream's wire format: envelopes, or (the typed stream alone) AG-UI events or the
    AI SDK's UI message stream."""
    if name in (None, "", Format.ENVELOPE):
        return Format.ENVELOPE
    if name in (Format.AG_UI, Format.AI_SDK) and stream == "events":
        return Format(name)
    raise BadRequest("format must be envelope or (for /events) ag-ui or ai-sdk, got "
                     f"{name[:40]!r}")


def _readable(with_tokens: bool, tenant: str | None) -> Callable[[Run], bool]:
    """Which runs a request may read: any without tokens; else those pinned to its token's
    tenant (a run of no tenant is nobody's)."""
    if not with_tokens:
        return lambda run: True
    return lambda run: run.pinned and run.tenant is not None and run.tenant == tenant


async def _events(request: Request) -> Response:
    return await _run_stream(request, "events")


async def _chunks(request: Request) -> Response:
    return await _run_stream(request, "chunks")


async def _chat_stream(request: Request) -> Response:
    return await _run_stream(request, "events", chat_id=True)


def create_app(state: GatewayState) -> Starlette:
    origins = [o.strip() for o in state.settings.gateway_cors_origins.split(",") if o.strip()]
    # (POST with JSON: the AG-UI client's run requests, the console's answers)
    middleware = [Middleware(NoStore)] + ([Middleware(
        CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST"],
        allow_headers=["Last-Event-ID", "Authorization", "Content-Type", "Accept"],
        expose_headers=[aisdk.HEADER[0]])]
        if origins else [])
    api = state.settings.gateway_chat_api
    app = Starlette(routes=[
        Route("/", page, methods=["GET"]),
        Route("/review", console.page, methods=["GET"]),
        Route("/static/console.js", console.script, methods=["GET"]),
        Route("/v1/runs/{run_id:str}/events", _events, methods=["GET", "POST"]),
        Route("/v1/runs/{run_id:str}/chunks", _chunks, methods=["GET"]),
        Route(api, _chat, methods=["POST"]),
        Route(api + "/{chat_id:str}/stream", _chat_stream, methods=["GET"]),
        Route("/v1/reviews/events", console.events, methods=["GET"]),
        Route("/v1/reviews/tickets", console.tickets, methods=["GET"]),
        Route("/v1/reviews/tickets/{ticket_id:str}/{action:str}", console.act,
              methods=["POST"]),
    ], middleware=middleware)
    app.state.gateway = state
    return app


def describe(state: GatewayState) -> dict[str, Any]:
    """The tails' sizes, for the metrics refresh (and a log line at start)."""
    return {stream: {"runs": len(t.store), "held_bytes": t.store.held_bytes}
            for stream, t in state.tails.items()}
