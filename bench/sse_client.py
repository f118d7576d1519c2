"""The gateway benchmark's SSE clients: a raw HTTP/1.1 GET over an asyncio socket, and the
fan-out's viewers in processes of their own (:func:`viewers`, :class:`ViewersProcesses`).

A browser's ``EventSource`` or httpx would cost the shared CPUs far more per message than
the gateway under test; this reads the response head, undoes chunked transfer encoding,
and reports the seq of every ``id:`` line with the time its bytes arrived (a slow viewer
keeps each message's ``event:`` and ``data:`` too, to check what coalescing made of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import time
from pathlib import Path
from typing import Any

import orjson

from bench.harness import call_command, rank


class SseParser:
    """Incremental: ``feed`` the bytes of one HTTP response, get the seqs of the ``id:``
    lines they complete (``keep``: every message's ``(id, event, data)`` in ``messages``).
    ``status`` is 0 until the head has arrived; ``ended`` once the chunked body's last
    chunk (size 0) has."""

    def __init__(self, keep: bool = False) -> None:
        self.status, self.ended, self.keep = 0, False, keep
        self.messages: list[tuple[int, str, bytes]] = []
        self._head_done = self._chunked = False
        self._buf, self._line = bytearray(), bytearray()
        #: Of the current chunk: data bytes still to come, then its CRLF's bytes.
        self._data_left = self._crlf_left = 0

    def feed(self, data: bytes) -> list[int]:
        self._buf += data
        if not self._head_done:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return []
            head = bytes(self._buf[:end]).decode("latin-1").lower().split("\r\n")
            del self._buf[: end + 4]
            self.status = int(head[0].split()[1])
            self._chunked = "transfer-encoding: chunked" in head
            self._head_done = True
        if self._chunked:
            body = self._dechunk()
        else:
            body, self._buf = bytes(self._buf), bytearray()
        line = self._line
        line += body
        last = line.rfind(b"\n\n" if self.keep else b"\n")
        if last < 0:
            return []
        complete = bytes(line[:last])
        del line[: last + (2 if self.keep else 1)]
        if not self.keep:
            return [int(part[3:]) for part in complete.split(b"\n") if part.startswith(b"id:")]
        ids = []
        for block in complete.split(b"\n\n"):
            fields = dict(f.split(b": ", 1) for f in block.split(b"\n") if b": " in f)
            if b"id" in fields:
                ids.append(int(fields[b"id"]))
                self.messages.append((ids[-1], fields.get(b"event", b"").decode(),
                                      fields.get(b"data", b"")))
        return ids

    def _dechunk(self) -> bytes:
        out, buf = bytearray(), self._buf
        while buf and not self.ended:
            if self._data_left or self._crlf_left:
                take = min(self._data_left or self._crlf_left, len(buf))
                if self._data_left:
                    out += buf[:take]
                    self._data_left -= take
                else:
                    self._crlf_left -= take
                del buf[:take]
                continue
            nl = buf.find(b"\r\n")
            if nl < 0:
                break
            size = int(bytes(buf[:nl]).split(b";")[0], 16)
            del buf[: nl + 2]
            self.ended = size == 0
            self._data_left, self._crlf_left = size, 2
        return bytes(out)


def request(host: str, port: int, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nConnection: close\r\n\r\n").encode()


class Viewer(asyncio.Protocol):
    """One client: records ``(seq, time.time())`` of each ``id:`` line it receives; ``done``
    resolves when the server closes the connection (after the run's end). ``read_bps``: a
    slow client, reading at most that many bytes a second (its socket's receive buffer
    small, so the gateway feels it)."""

    def __init__(self, payload: bytes, on_first: asyncio.Future[None],
                 read_bps: float = 0.0) -> None:
        self.parser = SseParser(keep=read_bps > 0)
        self.seqs: list[int] = []
        self.times: list[float] = []
        self._payload, self._on_first, self._read_bps = payload, on_first, read_bps
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
        elif self._read_bps and self._transport is not None:  # (read again when due)
            self._transport.pause_reading()
            asyncio.get_running_loop().call_later(len(data) / self._read_bps,
                                                  self._transport.resume_reading)

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and not self.error:
            self.error = repr(exc)
        if not self.done.done():
            self.done.set_result(None)


async def connect(port: int, path: str, first: asyncio.Future[None],
                  read_bps: float = 0.0) -> Viewer:
    loop, sock = asyncio.get_running_loop(), socket.socket()
    if read_bps:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    _, viewer = await loop.create_connection(
        lambda: Viewer(request("127.0.0.1", port, path), first, read_bps), sock=sock)
    return viewer


async def first_event(host: str, port: int, path: str, within: float = 60.0
                      ) -> tuple[float, int, float, int]:
    """One stream read to its close: seconds from before the TCP connect to its first
    ``id:`` line, that line's seq, seconds to the close, and the number of ``id:`` lines."""
    started = time.time()
    viewer = await connect(port, path, asyncio.get_running_loop().create_future())
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


class ViewersProcesses:
    """The parent's side of :func:`viewers`: ``count`` processes, each with its share of
    the runs' viewers (the first also the slow one), read line by line, killed if still up."""

    def __init__(self, count: int, within: float, out: Path) -> None:
        self.count, self.within, self.out = count, within, out
        self.procs: list[asyncio.subprocess.Process] = []

    async def start(self, port: int, runs: list[tuple[str, int]], slow: str) -> str:
        """Started; their first lines (``connected ...`` once every viewer streams)."""
        for n in range(self.count):
            share = runs[n::self.count]
            spec = orjson.dumps({"runs": share, "slow": slow if n == 0 else ""}).decode()
            self.procs.append(await asyncio.create_subprocess_exec(*call_command(
                viewers, str(port), spec, f"{self.out}.{n}", str(self.within - 30)),
                stdout=asyncio.subprocess.PIPE))
        return await self.lines()

    async def lines(self) -> str:
        async with asyncio.timeout(self.within):
            said = [(await p.stdout.readline()).decode().strip()  # type: ignore[union-attr]
                    for p in self.procs]
        return ", ".join(said)

    async def close(self, kill: bool = True) -> dict[str, Any]:
        """Until they exit (after their last lines; killed first unless said otherwise):
        their results, merged."""
        for proc in self.procs:
            if kill and proc.returncode is None:
                proc.kill()
            await proc.wait()
        return self.results()

    def results(self) -> dict[str, Any]:
        got = [orjson.loads(Path(f"{self.out}.{n}").read_bytes())
               for n in range(len(self.procs)) if Path(f"{self.out}.{n}").exists()]
        return {"viewers": [v for g in got for v in g["viewers"]],
                "slow": next((g["slow"] for g in got if g["slow"]), None),
                "cpu_s_during_load": sum(g["cpu_s_during_load"] for g in got),
                "loop_late_p99_ms": max((g["loop_late_p99_ms"] for g in got), default=0.0)}


def viewers(port: str, spec: str, out: str, within: str) -> int:
    """(The fan-out's viewers' process, apart from the benchmark's producer and from the
    gateway.) Opens the viewers ``spec`` names (``runs``: ``[run id, viewers]`` pairs;
    ``slow``: a run with one slow viewer more) to ``/v1/runs/<id>/events``. Prints
    ``connected <n> <s>`` once every viewer has received its first message, waits until the
    gateway has closed every stream (after the run's end) or ``within`` seconds, writes what
    each viewer got to ``out`` (JSON) and prints ``done``."""
    raise_fd_limit(65536)
    result = asyncio.run(_viewers(int(port), orjson.loads(spec), float(within)))
    Path(out).write_bytes(orjson.dumps(result))
    print("done", flush=True)
    return 0


#: The slow viewer's pace, bytes a second (a fast one's is whatever the socket gives).
SLOW_BPS = 8_000.0


async def _viewers(port: int, spec: dict[str, Any], within: float) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    pending = [(run_id, 0.0) for run_id, count in spec["runs"] for _ in range(count)]
    if spec["slow"]:
        pending.append((spec["slow"], SLOW_BPS))
    opened: list[tuple[str, Viewer, asyncio.Future[None]]] = []
    started = time.perf_counter()
    for at in range(0, len(pending), CONNECT_AT_ONCE):
        batch = [(run_id, bps, loop.create_future())
                 for run_id, bps in pending[at:at + CONNECT_AT_ONCE]]
        made = await asyncio.gather(*(connect(port, f"/v1/runs/{run_id}/events", first, bps)
                                      for run_id, bps, first in batch))
        opened += [(run_id, v, first) for (run_id, _, first), v in zip(batch, made, strict=True)]
    connected_s = time.perf_counter() - started
    firsts = [first for _, _, first in opened]
    try:
        async with asyncio.timeout(within):
            await asyncio.gather(*firsts)
        print(f"connected {len(opened)} {time.perf_counter() - started:.3f}", flush=True)
    except TimeoutError:
        print(f"failed {sum(f.done() for f in firsts)} of {len(opened)} got a first message",
              flush=True)
    cpu_at_load, lateness = time.process_time(), list[float]()
    monitor = asyncio.create_task(_watch_loop(lateness))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            await asyncio.gather(*(v.done for _, v, _ in opened))
    monitor.cancel()
    for _, v, _ in opened:
        if not v.done.done():
            v.error = v.error or "still open at the deadline"
            v.close()
    slow = [v for _, v, _ in opened if v.parser.keep]
    return {
        "connect_s": connected_s, "cpu_s_during_load": time.process_time() - cpu_at_load,
        "loop_late_p99_ms": rank(lateness, 0.99) * 1000,
        "viewers": [{"run": run_id, "seqs": v.seqs, "times": v.times, "error": v.error}
                    for run_id, v, _ in opened if not v.parser.keep],
        "slow": {"messages": [(i, e, d.decode(), at) for (i, e, d), at in zip(
            slow[0].parser.messages, slow[0].times, strict=True)], "error": slow[0].error}
        if slow else None,
    }


async def _watch_loop(lateness: list[float], tick_s: float = 0.01) -> None:
    """How late this process's event loop wakes a 10 ms sleep: a late loop stamps its
    receive times late (the lag is then partly the clients', not the gateway's)."""
    while True:
        due = time.perf_counter() + tick_s
        await asyncio.sleep(tick_s)
        lateness.append(max(0.0, time.perf_counter() - due))
