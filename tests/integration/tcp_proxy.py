"""A TCP forwarder that tests open and close under a client, to stand for a Kafka that is
not there yet, or goes away.

Only the bootstrap connection goes through it: Kafka's metadata names the brokers'
advertised listeners, and a client connects to those directly afterwards. So a closed
proxy is "no broker reachable at the bootstrap address", which is what a consumer started
before its Kafka sees.
"""

from __future__ import annotations

import asyncio
import contextlib

from .harness import free_port


class TcpProxy:
    """``127.0.0.1:<port>`` → ``target``; refuses connections until :meth:`open`."""

    def __init__(self, target: str) -> None:
        host, _, port = target.split(",")[0].rpartition(":")
        self._target = (host or "127.0.0.1", int(port))
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for pipe in list(self._pipes):
            pipe.cancel()
        for pipe in list(self._pipes):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pipe

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(_pipe(source, sink))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        sink.close()
