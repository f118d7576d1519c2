"""The gateway's HTTP edge against the real server process (issue 43): ``symfonic-stream
gateway`` as a subprocess on the test broker, attacked over raw sockets as issue 43 did.

One test per limit: headers that come too slowly, a header block over its cap, a body over
its cap, connections past the limit. What each attack cost the server (its connections'
fates, the bytes it took, its peak RSS from /proc, reset before each attack) is written
to build/test-artefacts/gateway-edge.json: the figures of docs/security.md's threat table.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from symfonic_stream.runtime.workers import free_port

from .gateway_harness import jwt_settings, mint
from .harness import (  # noqa: F401  (prefix_fixture provides the ``prefix`` fixture)
    ConsumerProcess,
    create_topics,
    prefix_fixture,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

ARTEFACT = Path(__file__).resolve().parents[2] / "build" / "test-artefacts" / "gateway-edge.json"
TIMEOUT_S = 2.0
MAX_CONNECTIONS = 40
HEADER_CAP = 32 * 1024
MIB = 1024 * 1024


class Edge:
    """A gateway process and what the tests measure of it."""

    def __init__(self, process: ConsumerProcess, port: int) -> None:
        self.process, self.port = process, port

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    def reset_peak(self) -> int:
        """Reset the process's peak RSS (``clear_refs`` 5); its RSS now, in bytes."""
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")
        return self._status("VmRSS")

    def peak(self) -> int:
        return self._status("VmHWM")

    def _status(self, field: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise AssertionError(f"no {field} in /proc/{self.process.pid}/status")

    def refused(self, reason: str) -> float:
        return self.process.metric("symfonic_stream_gateway_edge_refused_total", reason=reason)


@contextlib.asynccontextmanager
async def gateway(prefix: str, log_dir: Path, max_connections: int = MAX_CONNECTIONS
                  ) -> AsyncIterator[Edge]:
    await create_topics(prefix)
    port = free_port()
    process = ConsumerProcess(
        "gateway", prefix, log_dir, args=["gateway"], gateway_port=port,
        gateway_host="127.0.0.1", gateway_request_timeout_s=TIMEOUT_S,
        gateway_max_connections=max_connections, gateway_max_header_bytes=HEADER_CAP,
        gateway_run_wait_s=0.5, **jwt_settings()).start()
    try:
        await process.wait_ready(90)
        yield Edge(process, port)
    finally:
        process.stop()


def record(name: str, figures: dict[str, Any]) -> None:
    ARTEFACT.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(ARTEFACT.read_text()) if ARTEFACT.exists() else {}
    ARTEFACT.write_text(json.dumps({**known, name: figures}, indent=1, sort_keys=True) + "\n")


async def answer_of(reader: asyncio.StreamReader, within: float) -> tuple[bytes, float]:
    """What the server sent until it closed the connection, and when it closed it. A
    server that closes a connection with unread bytes of it (a client still sending) resets
    it, and the reset may take its answer: then b"" (the metrics say what it answered); so
    may the client's own write that failed on it (a broken pipe, kept by the stream)."""
    started = time.monotonic()
    async with asyncio.timeout(within):
        try:
            data = await reader.read()
        except ConnectionError:  # (reset, or a broken pipe)
            data = b""
    return data, time.monotonic() - started


async def closed_at(reader: asyncio.StreamReader, within: float) -> tuple[bytes, float]:
    """What the server sent until it closed the connection, and when (monotonic)."""
    data, _ = await answer_of(reader, within)
    return data, time.monotonic()


async def served(edge: Edge) -> bytes:
    """A plain request's status line: the server still serves."""
    reader, writer = await edge.connect()
    writer.write(b"GET /review HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n")
    data, _ = await answer_of(reader, 10)
    writer.close()
    return data.split(b"\r\n", 1)[0]


async def test_headers_that_come_too_slowly_are_answered_408_and_closed(
    prefix: str, tmp_path: Path,
) -> None:
    """Issue 43: 300 of 300 connections with unfinished headers were still open after
    12 s, unauthenticated. Each trickles a header line every 0.5 s (every byte reset
    uvicorn's keep-alive timer); each is closed at SYMFONIC_GATEWAY_REQUEST_TIMEOUT_S."""
    count = 300
    async with gateway(prefix, tmp_path, max_connections=count + 10) as edge:
        connections, connected = [], []
        for _ in range(count):
            connections.append(await edge.connect())
            connected.append(time.monotonic())  # (the server's deadline starts after it)
        for _, writer in connections:
            writer.write(b"GET /v1/runs/r/events HTTP/1.1\r\nHost: gateway\r\n")

        async def trickle(writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while not writer.is_closing():
                    writer.write(b"X-Slow: still coming\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.5)  # (the attack's pace, not a synchronisation)

        trickles = [asyncio.create_task(trickle(w)) for _, w in connections]
        answers = await asyncio.gather(*(closed_at(r, TIMEOUT_S + 15) for r, _ in connections))
        for task in trickles:
            task.cancel()
        await asyncio.gather(*trickles, return_exceptions=True)
        for _, writer in connections:
            writer.close()
        assert all(data.startswith(b"HTTP/1.1 408") for data, _ in answers), answers[0]
        closed_after = sorted(at - began for (_, at), began in zip(answers, connected,
                                                                   strict=True))
        # none before its timeout (50 ms: the server may accept before the client resumes)
        assert closed_after[0] >= TIMEOUT_S - 0.05, closed_after[0]
        assert edge.refused("request_timeout") == count
        assert await served(edge) == b"HTTP/1.1 200 OK"
        record("slow_headers", {"connections": count, "timeout_s": TIMEOUT_S,
                                "closed_after_s": [round(closed_after[0], 2),
                                                   round(closed_after[-1], 2)]})


async def test_a_header_block_over_its_cap_is_answered_431_and_read_no_further(
    prefix: str, tmp_path: Path,
) -> None:
    """Issue 43: a 16 MiB header block was accepted."""
    async with gateway(prefix, tmp_path) as edge:
        before = edge.reset_peak()
        reader, writer = await edge.connect()
        writer.write(b"GET /v1/runs/r/events HTTP/1.1\r\nHost: gateway\r\n")
        line = b"X-Big: " + b"x" * 4088 + b"\r\n"  # 4 KiB a line, 4,096 lines: 16 MiB
        sent = 0
        with contextlib.suppress(ConnectionError):
            for _ in range(16 * MIB // len(line)):
                writer.write(line)
                await writer.drain()
                sent += len(line)
        data, _ = await answer_of(reader, 15)
        writer.close()
        assert data == b"" or data.startswith(b"HTTP/1.1 431"), data[:80]
        assert sent < 16 * MIB, "the server read the whole 16 MiB"
        grew = edge.peak() - before
        assert grew < 8 * MIB, grew
        assert edge.refused("headers_too_large") == 1
        assert await served(edge) == b"HTTP/1.1 200 OK"
        record("large_headers", {"cap_bytes": HEADER_CAP, "sent_before_close_bytes": sent,
                                 "peak_rss_growth_bytes": grew})


@pytest.mark.parametrize("declared", [False, True], ids=["chunked", "content-length"])
async def test_a_body_over_its_cap_is_answered_413_and_read_no_further(
    prefix: str, tmp_path: Path, declared: bool,
) -> None:
    """Issue 43: a 40 MiB body was read whole before its size was checked (it peaked at
    80 MiB). The token first, then the body as it comes, never past its 1 MiB cap; a
    Content-Length over it is refused unread."""
    async with gateway(prefix, tmp_path) as edge:
        before = edge.reset_peak()
        reader, writer = await edge.connect()
        size = 40 * MIB
        framing = (b"Content-Length: %d\r\n" % size if declared
                   else b"Transfer-Encoding: chunked\r\n")
        writer.write(b"POST /v1/runs/r/events HTTP/1.1\r\nHost: gateway\r\n"
                     b"Content-Type: application/json\r\nAuthorization: Bearer "
                     + mint("acme", "ana").encode() + b"\r\n" + framing + b"\r\n")
        piece = b"x" * (256 * 1024)
        sent = 0
        with contextlib.suppress(ConnectionError):
            while sent < size:
                writer.write(piece if declared else b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                sent += len(piece)
        data, _ = await answer_of(reader, 15)
        writer.close()
        assert data == b"" or data.startswith(b"HTTP/1.1 413"), data[:80]
        assert edge.process.metric("symfonic_stream_gateway_refused_total", stream="events",
                                   reason="body_too_large") == 1
        assert sent < size, "the server read the whole 40 MiB"
        grew = edge.peak() - before
        assert grew < 8 * MIB, grew
        assert await served(edge) == b"HTTP/1.1 200 OK"
        record(f"large_body_{'declared' if declared else 'chunked'}", {
            "body_bytes": size, "sent_before_close_bytes": sent,
            "peak_rss_growth_bytes": grew})


async def test_connections_past_the_limit_are_answered_503_and_closed_at_once(
    prefix: str, tmp_path: Path,
) -> None:
    """Issue 43: no limit on connections (uvicorn's limit_concurrency, unset, would answer
    only those that finish their headers). Past SYMFONIC_GATEWAY_MAX_CONNECTIONS a
    connection is answered 503 and closed before a byte of it is read."""
    async with gateway(prefix, tmp_path) as edge:
        held = [await edge.connect() for _ in range(MAX_CONNECTIONS)]
        beyond = [await edge.connect() for _ in range(10)]
        answers = await asyncio.gather(*(answer_of(r, 10) for r, _ in beyond))
        assert all(data.startswith(b"HTTP/1.1 503") for data, _ in answers), answers[0]
        assert max(after for _, after in answers) < TIMEOUT_S  # at once, not at a timeout
        assert edge.refused("too_many_connections") == 10
        for _, writer in held + beyond:
            writer.close()
        # Once they are gone, the gateway serves again (the held ones were idle).
        deadline = time.monotonic() + 10
        while (status := await served(edge)) != b"HTTP/1.1 200 OK":
            assert time.monotonic() < deadline, status
        record("many_connections", {"max_connections": MAX_CONNECTIONS, "beyond": 10,
                                    "answered_503_within_s": round(
                                        max(after for _, after in answers), 3)})
