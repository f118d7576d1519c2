"""The gateway process: its two tails, the HTTP server, and the probes.

Both ports are bound first (a port in use fails at once, naming its setting, with nothing
opened yet), then start-up waits for Kafka within ``SYMFONIC_STARTUP_TIMEOUT_S`` like every
consumer; ``/readyz`` says ready once both tails have read their window to the end offsets
of start (until then a request for a run waits, it is not refused). ``/metrics`` and the
probes are on ``SYMFONIC_METRICS_PORT``, the streams on ``SYMFONIC_GATEWAY_PORT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator

import uvicorn

from symfonic_stream.config import Settings, binding
from symfonic_stream.gateway.answers import ReviewSender
from symfonic_stream.gateway.app import GatewayState, create_app
from symfonic_stream.gateway.auth import TokenCheck
from symfonic_stream.gateway.edge import Limits, guarded
from symfonic_stream.gateway.reviews import ReviewStore, ReviewTail
from symfonic_stream.gateway.runs import RunStore
from symfonic_stream.gateway.tail import TopicTail
from symfonic_stream.kafka.retry import KafkaUnavailable, retrying
from symfonic_stream.models.names import TopicNames
from symfonic_stream.observability import tracing
from symfonic_stream.observability.gateway import FILINGS, GatewayMetrics
from symfonic_stream.observability.health import HealthState, start_configured_health_server
from symfonic_stream.projections.declared import PROJECTIONS

log = logging.getLogger(__name__)

#: How often the gauges and the health are refreshed.
REFRESH_S = 1.0
#: A stream still open at shutdown is cut after this long (the client reconnects elsewhere).
GRACEFUL_SHUTDOWN_S = 5


class Gateway:
    """The gateway, started and stopped by :func:`serve` (or by a test, in its loop)."""

    def __init__(self, settings: Settings, metrics: GatewayMetrics | None = None,
                 health: HealthState | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or GatewayMetrics()
        names = TopicNames(settings.topic_prefix)
        self.tails = {
            stream: TopicTail(
                settings, topic,
                RunStore(cache_bytes=settings.gateway_cache_bytes,
                         max_runs=settings.gateway_max_runs),
                on_record=_counter(self.metrics, stream),
            )
            for stream, topic in ((p.stream, p.topic.name(names)) for p in PROJECTIONS.values())
        }
        self.reviews = ReviewStore()
        self.review_tail = ReviewTail(settings, names.review_tickets, self.reviews)
        self.sender = ReviewSender(settings, self.reviews)
        # (a JWKS file that is no JWKS fails here, at start, naming the setting)
        self.state = GatewayState(settings, self.tails, self.metrics,
                                  TokenCheck.from_settings(settings), self.reviews, self.sender)
        self.health = health or HealthState()
        self._socket: socket.socket | None = None
        self._server: uvicorn.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def _readers(self) -> list[TopicTail | ReviewTail]:
        """What the gateway reads: the two streams' tails and the tickets' reviews."""
        return [*self.tails.values(), self.review_tail]

    @property
    def port(self) -> int:
        assert self._socket is not None, "start() first"
        return int(self._socket.getsockname()[1])

    def bind(self) -> None:
        """Bind and listen on the HTTP port (``PortInUse`` when it is taken): a request
        that comes while the gateway waits for Kafka waits too, it is not refused."""
        if self._socket is not None:
            return
        settings = self.settings
        with binding("GATEWAY_PORT", settings.gateway_port):
            self._socket = socket.create_server((settings.gateway_host, settings.gateway_port),
                                                reuse_port=False)

    async def start(self) -> None:
        """Bind the HTTP port (unless :meth:`bind` did) and start the tails, waiting for
        Kafka."""
        settings = self.settings
        self.bind()
        self.health.set_ready(False, "waiting for Kafka")
        for tail in self._readers():
            await retrying(f"starting the gateway's tail of {tail.topic}", tail.start,
                           timeout_s=settings.startup_wait_s, setting=settings.startup_wait_words())
        await retrying("starting the gateway's producer of answers", self.sender.start,
                       timeout_s=settings.startup_wait_s, setting=settings.startup_wait_words())
        self._server = http_server(self.state)
        if self.state.tokens is None:
            log.warning("the gateway serves without auth (SYMFONIC_GATEWAY_AUTH=none): whoever "
                        "reaches its port reads every tenant's runs", extra={"port": self.port})
        self.health.set_ready(False, "reading the topics' recent records")
        for tail in self._readers():
            self._tasks.append(asyncio.create_task(tail.run(), name=f"tail-{tail.topic}"))
        self._tasks.append(asyncio.create_task(self._refresh(), name="gateway-refresh"))

    async def serve(self) -> None:
        """Serve until :meth:`stop` (or SIGINT/SIGTERM, which uvicorn catches)."""
        assert self._server is not None and self._socket is not None, "start() first"
        await self._server.serve(sockets=[self._socket])

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self.state.pulse.stop()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for tail in self._readers():
            await tail.stop()
        await self.sender.stop()
        if self._socket is not None:
            self._socket.close()

    async def _refresh(self) -> None:
        while True:
            caught_up = all(t.caught_up.is_set()
                            for t in self._readers())
            if caught_up != self.health.ready:
                self.health.set_ready(caught_up, "reading the topics' recent records")
                if caught_up:
                    log.info("gateway caught up", extra={
                        s: len(t.store) for s, t in self.tails.items()})
            stale = max(time.monotonic() - t.last_progress
                        for t in self._readers())
            if stale < self.health.stale_after_s:
                self.health.mark_progress()
            for stream, tail in self.tails.items():
                self.metrics.runs.labels(stream).set(len(tail.store))
                self.metrics.held_bytes.labels(stream).set(tail.store.held_bytes)
            await asyncio.sleep(REFRESH_S)


class _Server(uvicorn.Server):
    """uvicorn's server, but a SIGTERM or SIGINT it stopped on is not raised again once it
    has shut down. uvicorn does so since 0.29 (uvicorn#1600, "cooperative signal handling"):
    the default handler then ends the process inside ``Server.serve``, before
    :func:`serve` closes the gateway (its review producer's last sends, its readers) and
    its probes, and the exit status is -15, not the 0 of a clean stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # (signals reach the main thread only)
            return
        stopping = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in stopping}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def http_server(state: GatewayState) -> uvicorn.Server:
    """The HTTP server of ``state``'s routes, with the edge's limits (:mod:`.edge`)."""
    settings, refused = state.settings, state.metrics.edge_refused
    limits = Limits(settings.gateway_max_connections, settings.gateway_max_header_bytes,
                    settings.gateway_request_timeout_s)
    config = uvicorn.Config(create_app(state), log_config=None, access_log=False,
                            lifespan="off", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                            http=guarded(limits, lambda why: refused.labels(why).inc()))
    server = _Server(config)
    # (a SIGTERM sets should_exit: the streams end at the pulse's next tick)
    state.pulse.exiting = lambda: bool(server.should_exit)
    return server


def _counter(metrics: GatewayMetrics, stream: str) -> Callable[[str], None]:
    """The tail's ``on_record``: each record's fate counted (children bound once)."""
    children = {outcome: metrics.records.labels(stream, outcome) for outcome in FILINGS}
    return lambda outcome: children[outcome].inc()


async def serve(settings: Settings) -> int:
    """Run the gateway until SIGTERM/SIGINT: 0 after a clean stop, 1 when it cannot start
    (:class:`~symfonic_stream.config.PortInUse` before anything opened, when a port is
    taken)."""
    metrics, health = GatewayMetrics(), HealthState()
    port = settings.metrics_port_or_default
    with binding("METRICS_PORT", port, off="serves no metrics"):
        probes = await start_configured_health_server(port, metrics.registry, health)
    gateway = Gateway(settings, metrics, health)
    try:
        gateway.bind()  # (closed by the finally below, with the producer never started)
        try:
            await gateway.start()
        except (KafkaUnavailable, RuntimeError, OSError) as exc:
            log.error("gateway cannot start", extra={"error": str(exc)})
            return 1
        log.info("gateway listening", extra={"port": gateway.port, "metrics_port": port})
        await gateway.serve()
        return 0
    finally:
        await gateway.close()
        tracing.shutdown()  # (when on: every stream's span ended so far exported)
        if probes is not None:
            probes.close()
            await probes.wait_closed()
