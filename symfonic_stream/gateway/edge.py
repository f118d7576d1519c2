"""The gateway's HTTP edge: what a connection may cost before anyone knows who it is
(docs/gateway.md, "Limits").

uvicorn bounds none of it: it waits for a request's headers as long as bytes trickle in (its
keep-alive timer is reset by every byte), its httptools parser takes headers of any size,
and its ``limit_concurrency`` answers ``503`` only once a request's headers are in, so
connections that never finish theirs are not bounded at all. :func:`guarded` is uvicorn's
httptools protocol with the three limits added where they can be seen, in the parser's
callbacks:

* ``SYMFONIC_GATEWAY_MAX_CONNECTIONS``: a connection past it is answered ``503`` and closed
  as it is accepted, before a byte is read;
* ``SYMFONIC_GATEWAY_MAX_HEADER_BYTES``: the request line and headers, counted as the parser
  hands them over; past it ``431`` and the connection closed;
* ``SYMFONIC_GATEWAY_REQUEST_TIMEOUT_S``: from a connection's start, or a request's first
  byte, to the end of its headers; past it ``408`` and the connection closed. An idle
  keep-alive connection is uvicorn's to close (``timeout_keep_alive``).

A body is the application's to read: :func:`read_body` reads it streamed, never more than
its cap, within the same timeout, and only after the token was checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


@dataclass(frozen=True, slots=True)
class Limits:
    """The edge's three limits (settings: see the module's docstring)."""

    max_connections: int
    max_header_bytes: int
    request_timeout_s: float


@dataclass(frozen=True, slots=True)
class _Wiring:
    """What one server's protocol class is given: the limits, and who counts refusals."""

    limits: Limits
    on_refused: Callable[[str], None]


class _HeadersTooLarge(Exception):
    """Raised in a parser callback: httptools stops and uvicorn answers the error."""


def _answer(status: int, text: str) -> bytes:
    body = text.encode()
    return b"".join([STATUS_LINE[status], b"content-type: text/plain; charset=utf-8\r\n",
                     b"content-length: %d\r\n" % len(body), b"connection: close\r\n\r\n",
                     body])


#: The kernel's send buffer of each connection (Linux doubles what is asked): what a viewer
#: may have in flight before the gateway's writes to it wait. Left to itself the kernel grows
#: it to megabytes, so a slow viewer would be seen (and coalesced: docs/gateway.md, "A viewer
#: that falls behind") only after that much, and ten thousand of them could hold gigabytes.
SEND_BUFFER_BYTES = 64 * 1024


class _Guarded(HttpToolsProtocol):
    """uvicorn's httptools protocol, with :class:`Limits` (one subclass per server:
    :func:`guarded`)."""

    wiring: ClassVar[_Wiring]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._refusal: bytes | None = None
        self._turned_away = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.wiring.limits.max_connections:
            self._turned_away = True  # (never one of the server's connections)
            self.wiring.on_refused("too_many_connections")
            transport.write(_answer(503, "too many connections (SYMFONIC_GATEWAY_MAX_"
                                         "CONNECTIONS)"))
            transport.close()
            return
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if not self._turned_away:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._turned_away:
            super().data_received(data)

    # The parser's callbacks: a request begins, its line and headers come, they end.

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = 0
        self._arm()

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)  # (": " and the line's end)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def send_400_response(self, msg: str) -> None:
        """How uvicorn answers a parser's error: ours, when it was ours."""
        if self._refusal is None:
            super().send_400_response(msg)
            return
        self.transport.write(self._refusal)
        self.transport.close()

    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self.wiring.limits.max_header_bytes:
            self.wiring.on_refused("headers_too_large")
            self._refusal = _answer(431, "request headers too large (SYMFONIC_GATEWAY_MAX_"
                                         "HEADER_BYTES)")
            raise _HeadersTooLarge

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.wiring.limits.request_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        self.wiring.on_refused("request_timeout")
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # (a pipelined request's: no answer inside another's)
            return
        self.transport.write(_answer(408, "request headers too slow (SYMFONIC_GATEWAY_"
                                          "REQUEST_TIMEOUT_S)"))
        self.transport.close()


def guarded(limits: Limits, on_refused: Callable[[str], None]) -> type[HttpToolsProtocol]:
    """The protocol class for uvicorn's ``http`` (``Config(http=...)``): httptools with
    ``limits``; ``on_refused`` is told each refusal's reason."""
    return type("GuardedHttpTools", (_Guarded,), {"wiring": _Wiring(limits, on_refused)})


class BodyRefused(Exception):
    """A request body refused: its status (413, 408 or 400) and the client's detail."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail


async def read_body(request: Request, cap: int, timeout_s: float) -> bytes:
    """The request's body, read as it comes and never past ``cap`` bytes (a
    ``Content-Length`` over it is refused unread), within ``timeout_s``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise BodyRefused(413, "body_too_large", f"the body is at most {cap} bytes")
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > cap:
                    raise BodyRefused(413, "body_too_large", f"the body is at most {cap} bytes")
    except TimeoutError:
        raise BodyRefused(408, "body_timeout", f"the body did not come within {timeout_s:g} s "
                          "(SYMFONIC_GATEWAY_REQUEST_TIMEOUT_S)") from None
    except ClientDisconnect:
        raise BodyRefused(400, "bad_request", "the client went away mid-body") from None
    return bytes(body)


#: On every response: no page, stream or answer is kept by a cache, and no URL of the
#: gateway (where a stream's ``?access_token=`` may be) is sent on as a Referer.
NO_STORE = ((b"cache-control", b"no-store"), (b"referrer-policy", b"no-referrer"))


class NoStore:
    """ASGI middleware: :data:`NO_STORE` on every response (replacing its
    Cache-Control)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in NO_STORE}
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in names]
                message = {**message, "headers": [*headers, *NO_STORE]}
            await send(message)

        await self.app(scope, receive, sending)
