#!/usr/bin/env python3
"""A broker's listener ports: free before it starts, all open once it serves.

Used by scripts/kafka.sh; standard library only. Both read the ``listeners=`` line of the
node's generated server.properties.

``free``: every listener's port can be bound now. A port can be taken by a listening
process or, less visibly, by an outgoing connection that the kernel gave that local port
(Linux hands out 32768-60999 by default: /proc/sys/net/ipv4/ip_local_port_range). Kafka
then fails to bind one acceptor after the others are up and exits; this check names the
port before a JVM is started.

``open``: every listener accepts a TCP connection. The readiness probe speaks to one
PLAINTEXT listener; a broker whose other acceptor failed to bind serves that one for a
moment before it shuts down, so readiness also needs every port open.

    ports.py free <server.properties>
    ports.py open <server.properties>

Exit status: 0 yes; 1 no (``free`` names each taken port on stderr); 2 bad arguments or no
``listeners=`` line.
"""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name} {self.host}:{self.port}"


def listeners(properties: str) -> list[Listener]:
    """The ``listeners=`` entries of a server.properties text (``NAME://host:port,...``)."""
    for line in properties.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "listeners":
            found = []
            for entry in value.split(","):
                name, _, address = entry.strip().partition("://")
                host, _, port = address.rpartition(":")
                if not name or not port.isdigit():
                    raise ValueError(f"not a listener: {entry.strip()!r}")
                found.append(Listener(name, host or "0.0.0.0", int(port)))
            return found
    raise ValueError("no listeners= line")


def bind_error(listener: Listener) -> str | None:
    """Why ``listener``'s port cannot be bound now, or None when it can.

    SO_REUSEADDR as a JVM server socket sets it on Linux: a socket left in TIME_WAIT by a
    stopped broker does not count as taken, exactly as it does not stop Kafka."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((listener.host, listener.port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def accepts(listener: Listener, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((listener.host, listener.port), timeout=timeout):
            return True
    except OSError:
        return False


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int] | None:
    try:
        low, high = path.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("free", "open"):
        print("usage: ports.py free|open <server.properties>", file=sys.stderr)
        return 2
    try:
        found = listeners(Path(argv[1]).read_text())
    except (OSError, ValueError) as exc:
        print(f"ports.py: {argv[1]}: {exc}", file=sys.stderr)
        return 2
    if argv[0] == "open":
        return 0 if all(accepts(listener) for listener in found) else 1
    taken = [(listener, why) for listener in found if (why := bind_error(listener))]
    for listener, why in taken:
        print(f"the {listener} listener's port is taken ({why})", file=sys.stderr)
    span = ephemeral_range()
    if span and any(span[0] <= listener.port <= span[1] for listener, _ in taken):
        print(f"(ports {span[0]}-{span[1]} are this kernel's ephemeral range: an outgoing "
              "connection may hold one; pick ports below it)", file=sys.stderr)
    return 1 if taken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
