"""Liveness, readiness and ``/metrics`` over a minimal HTTP/1.1 server on the event loop.

The server runs on the consumer's own event loop on purpose: if the loop is blocked, the
probes time out and Kubernetes restarts the pod, which is exactly what liveness is for. It
is deliberately tiny (aiohttp is not a dependency): one request per connection, GET/HEAD
only, ``Content-Length`` always set, ``Connection: close`` always sent.

=========  ======================================================================
path       answer
=========  ======================================================================
/metrics   the registry in the Prometheus text format (``CONTENT_TYPE_LATEST``)
/healthz   200 ``ok`` while the consume loop made progress within ``stale_after_s``
/readyz    200 ``ready`` once ``set_ready(True)`` (partitions assigned, state restored);
           503 ``not ready: <why>`` before (waiting for Kafka, restoring, ...)
=========  ======================================================================

What the three paths answer comes from a :class:`Probes`: a registry and a health state
(:func:`start_health_server`), or anything else that can answer them, such as the
supervisor of worker processes (``symfonic_stream.runtime.workers``), which asks its workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

if TYPE_CHECKING:
    from symfonic_stream.observability.metrics import ConsumerMetrics

log = logging.getLogger(__name__)

DEFAULT_STALE_AFTER_S: Final = 60.0
#: A probe or a scrape sends its request at once; a client that trickles bytes is dropped.
REQUEST_TIMEOUT_S: Final = 5.0
#: Request line plus headers; a probe needs a few hundred bytes.
MAX_REQUEST_BYTES: Final = 8192

_REASONS: Final = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_TEXT: Final = "text/plain; charset=utf-8"


class HealthState:
    """What ``/healthz`` and ``/readyz`` report, fed by the consume loop.

    ``clock`` is a monotonic clock in seconds (injectable for tests). The loop calls
    :meth:`mark_progress` on every iteration, idle polls included, and while restoring state,
    so a long restore is not mistaken for a hung process. Construction counts as progress.
    When ``metrics`` is given, :meth:`set_ready` also sets its ``symfonic_stream_ready``
    gauge, so the probe and the metric cannot disagree.
    """

    def __init__(
        self,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        metrics: ConsumerMetrics | None = None,
    ) -> None:
        if stale_after_s <= 0:
            raise ValueError("stale_after_s must be positive")
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._metrics = metrics
        self._last_progress = clock()
        self._ready = False
        self._reason = "starting"
        if metrics is not None:
            metrics.set_ready(False)

    def mark_progress(self) -> None:
        """The consume loop completed an iteration."""
        self._last_progress = self._clock()

    def set_ready(self, ready: bool, reason: str = "") -> None:
        """Partitions assigned, state restored and consuming (or no longer, and why)."""
        self._ready = ready
        # One line, bounded: it is a probe's answer, not a log.
        self._reason = "" if ready else " ".join((reason or "not ready").split())[:500]
        if self._metrics is not None:
            self._metrics.set_ready(ready)

    @property
    def reason(self) -> str:
        """Why it is not ready ("" when ready): what ``/readyz`` answers."""
        return self._reason

    @property
    def seconds_since_progress(self) -> float:
        return self._clock() - self._last_progress

    @property
    def alive(self) -> bool:
        """Progress was made within ``stale_after_s``. That this is answered at all shows
        the event loop is responsive."""
        return self.seconds_since_progress <= self.stale_after_s

    @property
    def ready(self) -> bool:
        return self._ready


class HealthOfMany:
    """The health of a process running several engines: alive and ready only when each
    is, and the first one not ready says why (named)."""

    def __init__(self, parts: Sequence[tuple[str, HealthState]]) -> None:
        self._parts = tuple(parts)

    @property
    def alive(self) -> bool:
        return all(health.alive for _, health in self._parts)

    @property
    def ready(self) -> bool:
        return all(health.ready for _, health in self._parts)

    @property
    def reason(self) -> str:
        for name, health in self._parts:
            if not health.ready:
                return f"{name}: {health.reason}"
        return ""


#: What the health server reads: one engine's state or several.
HealthView = HealthState | HealthOfMany


class Probes(Protocol):
    """What the server answers: ``/metrics``' body, and whether ``/healthz`` and ``/readyz``
    are 200 (with the reason when not)."""

    async def metrics(self) -> bytes: ...

    async def liveness(self) -> tuple[bool, str]: ...

    async def readiness(self) -> tuple[bool, str]: ...


class LocalProbes:
    """The probes of this process: its registry and its engines' health."""

    def __init__(self, registry: CollectorRegistry, health: HealthView) -> None:
        self._registry = registry
        self._health = health

    async def metrics(self) -> bytes:
        # Collection is in-process and quick; doing it on the loop keeps one code path.
        return generate_latest(self._registry)

    async def liveness(self) -> tuple[bool, str]:
        alive = self._health.alive
        return alive, "" if alive else "stale"

    async def readiness(self) -> tuple[bool, str]:
        return self._health.ready, self._health.reason


async def start_health_server(
    port: int,
    registry: CollectorRegistry,
    health: HealthView,
    host: str = "0.0.0.0",
) -> asyncio.Server:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port`` until closed.

    ``port=0`` binds an ephemeral port (tests): read it with :func:`server_port`. The
    ``SYMFONIC_METRICS_PORT=0`` meaning "off" is :func:`start_configured_health_server`'s
    business. Stop with ``server.close(); await server.wait_closed()``.
    """
    return await start_probe_server(port, LocalProbes(registry, health), host)


async def start_probe_server(port: int, probes: Probes, host: str = "0.0.0.0") -> asyncio.Server:
    """Like :func:`start_health_server`, answering from any :class:`Probes`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _handle(reader, writer, probes)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        except Exception:  # one bad request must never take the server down
            log.exception("health server request failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port, limit=MAX_REQUEST_BYTES)


async def start_configured_health_server(
    port: int,
    registry: CollectorRegistry,
    health: HealthView,
    host: str = "0.0.0.0",
) -> asyncio.Server | None:
    """Like :func:`start_health_server`, but ``port=0`` (``SYMFONIC_METRICS_PORT=0``) means
    the server is off and ``None`` is returned."""
    if port == 0:
        return None
    return await start_health_server(port, registry, health, host)


def server_port(server: asyncio.Server) -> int:
    """The port ``server`` is bound to (useful after binding port 0)."""
    return int(server.sockets[0].getsockname()[1])


async def _handle(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probes: Probes
) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
    except asyncio.LimitOverrunError:
        await _respond(writer, 400, b"request too large\n")
        return
    except TimeoutError:
        return  # a client that does not send a request gets no answer
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        await _respond(writer, 400, b"bad request\n")
        return
    method, target, _ = parts
    # HEAD is answered like GET without the body: HTTP requires both of any server.
    if method not in ("GET", "HEAD"):
        await _respond(writer, 405, b"method not allowed\n", extra=(("Allow", "GET, HEAD"),))
        return
    head_only = method == "HEAD"
    path = target.split("?", 1)[0]
    if path == "/metrics":
        try:
            body = await probes.metrics()
        except Exception:
            log.exception("metrics collection failed")
            await _respond(writer, 500, b"metrics collection failed\n", head_only=head_only)
            return
        await _respond(writer, 200, body, CONTENT_TYPE_LATEST, head_only=head_only)
    elif path == "/healthz":
        ok, why = await probes.liveness()
        body = b"ok\n" if ok else f"{why}\n".encode()
        await _respond(writer, 200 if ok else 503, body, head_only=head_only)
    elif path == "/readyz":
        ok, why = await probes.readiness()
        body = b"ready\n" if ok else f"not ready: {why}\n".encode()
        await _respond(writer, 200 if ok else 503, body, head_only=head_only)
    else:
        await _respond(writer, 404, b"not found\n", head_only=head_only)


async def _respond(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: str = _TEXT,
    *,
    head_only: bool = False,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    headers = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: close",
        *(f"{name}: {value}" for name, value in extra),
    ]
    writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("latin-1"))
    if not head_only:
        writer.write(body)
    await writer.drain()
