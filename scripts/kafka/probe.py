#!/usr/bin/env python3
"""Is a Kafka broker really serving? Used by scripts/kafka.sh (:func:`ask`) and runnable alone;
standard library only.

An open port is not enough: a KRaft broker opens its listener before it has caught up with
the metadata log and been unfenced. This sends a real ApiVersions request and then a real
Metadata request over PLAINTEXT and succeeds only when the answer lists at least
``--expect-brokers`` brokers (and, with ``--expect-node``, that node id among them: a KRaft
broker lists only unfenced brokers). It retries until ``--timeout`` seconds have passed.

A broker that is back in the cluster may still be catching up on its replicas. With
``--expect-in-sync N`` the Metadata request asks for every topic and succeeds only when node
N is in the ISR of every partition that has N among its replicas (and every such partition
has a leader): N has caught up and a second node may now go down without leaving a partition
below its ISR. ``--expect-all-in-sync`` asks that no partition at all be under-replicated.
``--isr`` prints a one-line summary of the partitions (count, under-replicated, leaderless).

    probe.py 127.0.0.1:9092 [--timeout 90] [--expect-brokers 1] [--expect-node 1]
             [--expect-in-sync 1 | --expect-all-in-sync] [--isr] [--quiet]

Exit status: 0 ready; 1 not ready within the timeout; 2 something that is not Kafka answers.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from dataclasses import dataclass, field

API_VERSIONS = 18
METADATA = 3
CLIENT_ID = b"symfonic-probe"


class NotKafka(Exception):
    """The peer answered with bytes that are not a Kafka response."""


@dataclass
class Partition:
    topic: str
    index: int
    error: int
    leader: int
    replicas: list[int]
    isr: list[int]


@dataclass
class Metadata:
    cluster_id: str | None
    brokers: list[int]
    partitions: list[Partition] = field(default_factory=list)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the peer")
        buf += chunk
    return bytes(buf)


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    # Request header v1: api_key, api_version, correlation_id, client_id (nullable string).
    header = struct.pack(">hhih", api_key, version, corr, len(CLIENT_ID)) + CLIENT_ID
    payload = header + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    if size < 4 or size > 64 * 1024 * 1024:
        raise NotKafka(f"implausible response size {size}")
    data = _recv_exact(sock, size)
    (got_corr,) = struct.unpack_from(">i", data, 0)
    if got_corr != corr:
        raise NotKafka(f"correlation id {got_corr} != {corr}")
    return data[4:]  # response header v0 is the correlation id alone


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fmt(self, fmt: str) -> tuple[int, ...]:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def int16(self) -> int:
        return self.fmt(">h")[0]

    def int32(self) -> int:
        return self.fmt(">i")[0]

    def boolean(self) -> bool:
        return bool(self.fmt(">b")[0])

    def int32_array(self) -> list[int]:
        n = self.int32()
        return [self.int32() for _ in range(max(n, 0))]

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s


def probe_once(host: str, port: int, timeout: float, all_topics: bool = False) -> Metadata:
    """One ApiVersions + Metadata exchange: cluster id, broker ids (and partitions if asked)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        # ApiVersions v0: every broker answers it, whatever it supports.
        r = _Reader(_request(sock, API_VERSIONS, 0, 1, b""))
        error = r.int16()
        if error != 0:
            raise NotKafka(f"ApiVersions error code {error}")
        ranges = {}
        for _ in range(r.int32()):
            key, lo, hi = r.fmt(">hhh")
            ranges[key] = (lo, hi)
        if METADATA not in ranges:
            raise NotKafka("the broker does not offer the Metadata API")
        lo, hi = ranges[METADATA]
        # v4..v8 share one non-flexible layout (Kafka 4 dropped v0..v3, v9 is flexible).
        version = max(lo, 4)
        if version > min(hi, 8):
            raise NotKafka(f"no Metadata version in 4..8 (broker offers {lo}..{hi})")
        # topics: null (every topic) or an empty array (none); allow_auto_topic_creation:
        # false; v8 adds include_cluster/topic_authorized_operations.
        body = struct.pack(">i?", -1 if all_topics else 0, False)
        if version >= 8:
            body += struct.pack(">??", False, False)
        r = _Reader(_request(sock, METADATA, version, 2, body))
        r.int32()  # throttle_time_ms
        brokers = []
        for _ in range(r.int32()):
            node_id = r.int32()
            r.string()  # host
            r.int32()  # port
            r.string()  # rack
            brokers.append(node_id)
        meta = Metadata(cluster_id=r.string(), brokers=sorted(brokers))
        r.int32()  # controller_id
        for _ in range(r.int32()):
            r.int16()  # topic error code
            topic = r.string() or ""
            r.boolean()  # is_internal
            for _ in range(r.int32()):
                p_error = r.int16()
                index = r.int32()
                leader = r.int32()
                if version >= 7:
                    r.int32()  # leader_epoch
                replicas = r.int32_array()
                isr = r.int32_array()
                if version >= 5:
                    r.int32_array()  # offline_replicas
                meta.partitions.append(Partition(topic, index, p_error, leader, replicas, isr))
            if version >= 8:
                r.int32()  # topic_authorized_operations
        return meta


def lagging(meta: Metadata, node: int | None) -> list[Partition]:
    """Partitions not yet fully served: node (or any replica) outside the ISR, or no leader."""
    out = []
    for p in meta.partitions:
        if node is not None and node not in p.replicas:
            continue
        wanted = [node] if node is not None else p.replicas
        if p.leader < 0 or any(r not in p.isr for r in wanted):
            out.append(p)
    return out


def isr_summary(meta: Metadata) -> str:
    under = [p for p in meta.partitions if any(r not in p.isr for r in p.replicas)]
    leaderless = [p for p in meta.partitions if p.leader < 0]
    text = (
        f"{len(meta.partitions)} partitions, {len(under)} under-replicated, "
        f"{len(leaderless)} without a leader"
    )
    shown = [f"{p.topic}-{p.index} (replicas {p.replicas}, isr {p.isr})" for p in under[:5]]
    return text + (": " + ", ".join(shown) if shown else "")


@dataclass(frozen=True)
class Expect:
    """What "ready" means: at least ``brokers`` brokers listed, ``node`` among them, and
    node ``in_sync`` (or, ``all_in_sync``, every replica) in the ISR of its partitions."""

    brokers: int = 1
    node: int | None = None
    in_sync: int | None = None
    all_in_sync: bool = False

    @property
    def topics(self) -> bool:
        return self.all_in_sync or self.in_sync is not None


@dataclass
class Answer:
    """0 ready, 1 not ready, 2 something that is not Kafka answers; and what to say of it."""

    status: int
    text: str
    meta: Metadata | None = None

    def report(self, quiet: bool = False, isr: bool = False) -> None:
        """As the command line prints it: ready on stdout, not ready on stderr (neither
        when quiet), not Kafka on stderr always; with ``isr`` the partitions' summary."""
        if self.status == 2:
            print(self.text, file=sys.stderr)
        elif not quiet:
            print(self.text, file=sys.stdout if self.status == 0 else sys.stderr)
        if isr and self.status == 0 and self.meta is not None:
            print(isr_summary(self.meta))


def ask(address: str, expect: Expect, timeout: float = 0.0, isr: bool = False) -> Answer:
    """Asks the broker at ``address`` (host:port) until it is ready or ``timeout`` seconds
    have passed (0: once)."""
    host, _, port_s = address.rpartition(":")
    port = int(port_s)
    deadline = time.monotonic() + timeout
    last = "no attempt"
    while True:
        try:
            meta = probe_once(host, port, timeout=5.0, all_topics=isr or expect.topics)
            ok = len(meta.brokers) >= expect.brokers and (
                expect.node is None or expect.node in meta.brokers
            )
            last = f"cluster {meta.cluster_id}, brokers {meta.brokers}"
            if ok and expect.topics:
                behind = lagging(meta, expect.in_sync)
                if behind:
                    ok = False
                    who = "" if expect.in_sync is None else f" of node {expect.in_sync}"
                    last += f"; {len(behind)} partitions{who} not in sync yet"
            if ok:
                return Answer(0, f"kafka at {host}:{port} is ready: {last}", meta)
        except NotKafka as exc:
            return Answer(2, f"{host}:{port} answers but is not a usable Kafka broker: {exc}")
        except (OSError, struct.error) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            return Answer(1, f"kafka at {host}:{port} is not ready: {last}")
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("address", help="host:port of one broker's PLAINTEXT listener")
    parser.add_argument("--timeout", type=float, default=0.0, help="seconds to keep retrying")
    parser.add_argument("--expect-brokers", type=int, default=1)
    parser.add_argument("--expect-node", type=int, default=None)
    sync = parser.add_mutually_exclusive_group()
    sync.add_argument("--expect-in-sync", type=int, default=None, metavar="NODE")
    sync.add_argument("--expect-all-in-sync", action="store_true")
    parser.add_argument("--isr", action="store_true", help="print a partition/ISR summary")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    expect = Expect(args.expect_brokers, args.expect_node, args.expect_in_sync,
                    args.expect_all_in_sync)
    answer = ask(args.address, expect, args.timeout, args.isr)
    answer.report(args.quiet, args.isr)
    return answer.status


if __name__ == "__main__":
    sys.exit(main())
