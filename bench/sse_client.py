"""The benchmark's SSE client: a raw HTTP/1.1 GET over an asyncio socket, `id:` lines only.

A browser's ``EventSource`` or httpx would cost the shared CPUs far more per message than
the gateway under test; this reads the response head, undoes chunked transfer encoding,
and reports the seq of every ``id:`` line with the time its bytes arrived. Nothing else of
the stream is parsed (``event:`` and ``data:`` lines, ping comments are skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
import time


class SseParser:
    """Incremental: ``feed`` the bytes of one HTTP response, get the seqs of the ``id:``
    lines they complete. ``status`` is 0 until the head has arrived; ``ended`` once the
    last chunk (size 0) of a chunked body has."""

    def __init__(self) -> None:
        self.status = 0
        self.ended = False
        self._head_done = False
        self._chunked = False
        self._buf = bytearray()
        #: Of the current chunk: data bytes still to come, then its CRLF's bytes.
        self._data_left = 0
        self._crlf_left = 0
        self._line = bytearray()
        self.body_bytes = 0

    def feed(self, data: bytes) -> list[int]:
        self._buf += data
        if not self._head_done:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return []
            head = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
            del self._buf[: end + 4]
            self.status = int(head[0].split()[1])
            self._chunked = any(
                line.lower().startswith("transfer-encoding:") and "chunked" in line.lower()
                for line in head[1:]
            )
            self._head_done = True
        if self._chunked:
            body = self._dechunk()
        else:
            body, self._buf = bytes(self._buf), bytearray()
        self.body_bytes += len(body)
        return self._ids(body)

    def _dechunk(self) -> bytes:
        out = bytearray()
        buf = self._buf
        while buf and not self.ended:
            if self._data_left:
                take = min(self._data_left, len(buf))
                out += buf[:take]
                del buf[:take]
                self._data_left -= take
            elif self._crlf_left:
                take = min(self._crlf_left, len(buf))
                del buf[:take]
                self._crlf_left -= take
            else:
                nl = buf.find(b"\r\n")
                if nl < 0:
                    break
                size = int(bytes(buf[:nl]).split(b";")[0], 16)
                del buf[: nl + 2]
                if size == 0:
                    self.ended = True
                    break
                self._data_left, self._crlf_left = size, 2
        return bytes(out)

    def _ids(self, body: bytes) -> list[int]:
        if not body:
            return []
        line = self._line
        line += body
        last = line.rfind(b"\n")
        if last < 0:
            return []
        complete = bytes(line[:last])
        del line[: last + 1]
        return [int(part[3:]) for part in complete.split(b"\n") if part.startswith(b"id:")]


def request(host: str, port: int, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nConnection: close\r\n\r\n").encode()


async def first_event(host: str, port: int, path: str, within: float = 60.0
                      ) -> tuple[float, int, float, int]:
    """One stream read to its close: seconds from before the TCP connect to the arrival of
    its first ``id:`` line (``time.perf_counter``), that line's seq, seconds to the close
    (after the run's end), and the number of ``id:`` lines."""
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    first_s, first_seq, count = 0.0, -1, 0
    try:
        writer.write(request(host, port, path))
        parser = SseParser()
        async with asyncio.timeout(within):
            while not parser.ended:
                data = await reader.read(65536)
                if not data:
                    break
                ids = parser.feed(data)
                if ids and not count:
                    first_s, first_seq = time.perf_counter() - started, ids[0]
                count += len(ids)
                if parser.status not in (0, 200):
                    raise RuntimeError(f"{path}: HTTP {parser.status}")
        if not count:
            raise RuntimeError(f"{path}: closed before any event (HTTP {parser.status})")
        return first_s, first_seq, time.perf_counter() - started, count
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


class Viewer(asyncio.Protocol):
    """One fan-out client: records ``(seq, time.time())`` of each ``id:`` line it receives.
    ``done`` resolves when the server closes the connection (after the run's end)."""

    def __init__(self, payload: bytes, on_first: asyncio.Future[None]) -> None:
        self.parser = SseParser()
        self.seqs: list[int] = []
        self.times: list[float] = []
        self._payload = payload
        self._on_first = on_first
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.error = ""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.write(self._payload)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        now = time.time()
        ids = self.parser.feed(data)
        if ids:
            self.seqs.extend(ids)
            self.times.extend([now] * len(ids))
            if not self._on_first.done():
                self._on_first.set_result(None)
        elif self.parser.status not in (0, 200) and not self.error:
            self.error = f"HTTP {self.parser.status}"
        if self.parser.ended:  # the stream's last chunk: the run's end was sent
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self.error:
            self.error = repr(exc)
        if not self.done.done():
            self.done.set_result(None)
