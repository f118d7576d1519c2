"""The gateway benchmark's SSE clients: a raw HTTP/1.1 GET over an asyncio socket, ``id:``
lines only, and the fan-out's viewers in a process of their own (:func:`viewers`).

A browser's ``EventSource`` or httpx would cost the shared CPUs far more per message than
the gateway under test; this reads the response head, undoes chunked transfer encoding,
and reports the seq of every ``id:`` line with the time its bytes arrived. Nothing else of
the stream is parsed (``event:`` and ``data:`` lines, ping comments are skipped).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from pathlib import Path
from typing import Any

import orjson

from bench.harness import call_command, rank


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


async def first_event(host: str, port: int, path: str, within: float = 60.0
                      ) -> tuple[float, int, float, int]:
    """One stream read to its close by a :class:`Viewer`: seconds from before the TCP
    connect to the arrival of its first ``id:`` line, that line's seq, seconds to the close
    (after the run's end), and the number of ``id:`` lines."""
    loop = asyncio.get_running_loop()
    started = time.time()
    _, viewer = await loop.create_connection(
        lambda: Viewer(request(host, port, path), loop.create_future()), host, port)
    try:
        async with asyncio.timeout(within):
            await viewer.done
    finally:
        viewer.close()
    if viewer.error or not viewer.seqs:
        raise RuntimeError(f"{path}: {viewer.error or 'closed before any event'} "
                           f"(HTTP {viewer.parser.status})")
    return viewer.times[0] - started, viewer.seqs[0], time.time() - started, len(viewer.seqs)


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (up to the hard limit); returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


#: Connections opened at once while connecting.
CONNECT_AT_ONCE = 100


class ViewersProcess:
    """The parent's side of :func:`viewers`: started, its lines read, killed if still up."""

    def __init__(self, within: float) -> None:
        self.within = within
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, port: int, runs_file: Path, per_run: int, out: Path) -> str:
        """Started; its first line (``connected ...`` once every viewer streams)."""
        self.proc = await asyncio.create_subprocess_exec(*call_command(
            viewers, str(port), str(runs_file), str(per_run), str(out),
            str(self.within - 30)), stdout=asyncio.subprocess.PIPE)
        return await self.line()

    async def line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        async with asyncio.timeout(self.within):
            return (await self.proc.stdout.readline()).decode().strip()

    async def close(self, kill: bool = True) -> None:
        """Until it exits (after its last line); killed first unless said otherwise."""
        if self.proc is not None:
            if kill and self.proc.returncode is None:
                self.proc.kill()
            await self.proc.wait()


def viewers(port: str, runs_file: str, per_run: str, out: str, within: str) -> int:
    """(The fan-out's viewers' process, apart from the benchmark's producer, whose commit
    times a thousand sockets' reads would delay, and from the gateway's event loop.)

    Opens ``per_run`` connections per run id of ``runs_file`` (one per line) to the
    gateway's ``/v1/runs/<id>/events``, each a :class:`Viewer`. Prints ``connected <n> <s>``
    once every viewer has received its first message (the parent starts the load then),
    waits until the gateway has closed every stream (after the run's closing end) or
    ``within`` seconds, writes every viewer's seqs and times to ``out`` (JSON) and prints
    ``done``."""
    raise_fd_limit(65536)
    run_ids = [line.strip() for line in Path(runs_file).read_text().splitlines() if line.strip()]
    result = asyncio.run(_viewers(int(port), run_ids, int(per_run), float(within)))
    Path(out).write_bytes(orjson.dumps(result))
    print("done", flush=True)
    return 0


async def _viewers(port: int, run_ids: list[str], per_run: int, within: float
                   ) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    opened: list[tuple[str, Viewer, asyncio.Future[None]]] = []
    started = time.perf_counter()
    pending = [run_id for run_id in run_ids for _ in range(per_run)]
    for start in range(0, len(pending), CONNECT_AT_ONCE):
        batch = []
        for run_id in pending[start:start + CONNECT_AT_ONCE]:
            first: asyncio.Future[None] = loop.create_future()
            payload = request("127.0.0.1", port, f"/v1/runs/{run_id}/events")

            def viewer(payload: bytes = payload, first: asyncio.Future[None] = first) -> Viewer:
                return Viewer(payload, first)

            batch.append((run_id, first, loop.create_connection(viewer, "127.0.0.1", port)))
        made = await asyncio.gather(*(connect for _, _, connect in batch))
        for (run_id, first, _), (_, protocol) in zip(batch, made, strict=True):
            opened.append((run_id, protocol, first))
    connected_s = time.perf_counter() - started
    firsts = [first for _, _, first in opened]
    try:
        async with asyncio.timeout(within):
            await asyncio.gather(*firsts)
        print(f"connected {len(opened)} {time.perf_counter() - started:.3f}", flush=True)
    except TimeoutError:
        got = sum(1 for f in firsts if f.done())
        print(f"failed {got} of {len(opened)} got a first message", flush=True)
    cpu_at_load = time.process_time()
    lateness: list[float] = []
    monitor = asyncio.create_task(_watch_loop(lateness))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            await asyncio.gather(*(v.done for _, v, _ in opened))
    monitor.cancel()
    for _, v, _ in opened:
        if not v.done.done():
            v.error = v.error or "still open at the deadline"
            v.close()
    return {
        "connect_s": connected_s,
        "cpu_s_during_load": time.process_time() - cpu_at_load,
        "loop_lateness_ms": {name: rank(lateness, share) * 1000
                             for name, share in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))},
        "viewers": [{"run": run_id, "seqs": v.seqs, "times": v.times, "error": v.error}
                    for run_id, v, _ in opened],
    }


async def _watch_loop(lateness: list[float], tick_s: float = 0.01) -> None:
    """How late this process's event loop wakes a 10 ms sleep: a late loop stamps its
    receive times late (the lag is then partly the clients', not the gateway's)."""
    while True:
        due = time.perf_counter() + tick_s
        await asyncio.sleep(tick_s)
        lateness.append(max(0.0, time.perf_counter() - due))
