#!/usr/bin/env python3
"""End-to-end check of the single broker's secure listeners, with aiokafka (the project's client).

Reads the env files `scripts/kafka.sh secure-env sasl_ssl|mtls` names and, on each listener:
creates a topic, produces records and consumes them back. Then checks that the listeners
refuse what they must: the mutual-TLS listener a client without a certificate (both with
aiokafka and with a bare TLS handshake), the SASL_SSL listener a wrong password. Also checks
that the broker's certificate is valid for 127.0.0.1 and for localhost.

    .venv/bin/python scripts/kafka/check_secure.py \
        "$(scripts/kafka.sh secure-env sasl_ssl)" "$(scripts/kafka.sh secure-env mtls)"

Exit status 0 when every check passed. Needs aiokafka (the project's venv has it).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.helpers import create_ssl_context

RECORDS = 200
TIMEOUT_S = 30.0


def read_env(path: str) -> dict[str, str]:
    env = {}
    for line in Path(path).read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name] = value
    return env


def client_kwargs(
    env: dict[str, str], *, with_cert: bool = True, password: str | None = None
) -> dict[str, Any]:
    protocol = env["SYMFONIC_SECURITY_PROTOCOL"]
    kwargs: dict[str, Any] = {
        "bootstrap_servers": env["SYMFONIC_BOOTSTRAP_SERVERS"],
        "security_protocol": protocol,
        "ssl_context": create_ssl_context(
            cafile=env["SYMFONIC_SSL_CAFILE"],
            certfile=env.get("SYMFONIC_SSL_CERTFILE") if with_cert else None,
            keyfile=env.get("SYMFONIC_SSL_KEYFILE") if with_cert else None,
        ),
    }
    if protocol.startswith("SASL_"):
        kwargs["sasl_mechanism"] = env["SYMFONIC_SASL_MECHANISM"]
        kwargs["sasl_plain_username"] = env["SYMFONIC_SASL_USERNAME"]
        kwargs["sasl_plain_password"] = password or env["SYMFONIC_SASL_PASSWORD"]
    return kwargs


async def round_trip(name: str, env: dict[str, str]) -> None:
    t0 = time.monotonic()
    kwargs = client_kwargs(env)
    topic = f"secure-check.{name}.{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(**kwargs)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(acks="all", enable_idempotence=True, **kwargs)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send(topic, f"{name}-{i}".encode())
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(auto_offset_reset="earliest", enable_auto_commit=False, **kwargs)
    await consumer.start()
    got: list[bytes] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < RECORDS and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            for records in batch.values():
                got.extend(r.value for r in records if r.value is not None)
    finally:
        await consumer.stop()
    expected = [f"{name}-{i}".encode() for i in range(RECORDS)]
    if got != expected:
        raise AssertionError(f"{name}: consumed {len(got)} records, not the {RECORDS} produced")
    admin = AIOKafkaAdminClient(**kwargs)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()
    where = f"{env['SYMFONIC_SECURITY_PROTOCOL']} on {env['SYMFONIC_BOOTSTRAP_SERVERS']}"
    print(
        f"ok   {name}: {where}: created {topic}, produced and consumed {RECORDS} records "
        f"in {time.monotonic() - t0:.1f} s"
    )


async def refused(what: str, kwargs: dict[str, Any]) -> None:
    producer = AIOKafkaProducer(request_timeout_ms=5000, **kwargs)
    try:
        await asyncio.wait_for(producer.start(), timeout=15)
    except Exception as exc:  # any failure to connect is the expected outcome
        print(f"ok   {what}: refused ({type(exc).__name__}: {str(exc)[:100]})")
        return
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
    raise AssertionError(f"{what}: the client was NOT refused")


def bare_tls_without_cert(env: dict[str, str]) -> None:
    """A TLS client without a certificate: the broker must end the connection."""
    host, _, port = env["SYMFONIC_BOOTSTRAP_SERVERS"].rpartition(":")
    ctx = ssl.create_default_context(cafile=env["SYMFONIC_SSL_CAFILE"])
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname=host) as tls:
                # TLS 1.3: the server checks the client's (missing) certificate after the
                # client's side of the handshake is done; its alert arrives on the next read.
                header = struct.pack(">hhih", 18, 0, 1, 5) + b"check"
                tls.sendall(struct.pack(">i", len(header)) + header)
                data = tls.recv(4)
        except (ssl.SSLError, ConnectionError) as exc:
            print(f"ok   mtls without a certificate (bare TLS): refused ({exc})")
            return
    if data:
        raise AssertionError("mtls without a certificate (bare TLS): the broker answered")
    print("ok   mtls without a certificate (bare TLS): connection closed by the broker")


def certificate_names(env: dict[str, str]) -> None:
    host, _, port = env["SYMFONIC_BOOTSTRAP_SERVERS"].rpartition(":")
    for name in ("127.0.0.1", "localhost"):
        ctx = ssl.create_default_context(cafile=env["SYMFONIC_SSL_CAFILE"])
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname=name) as tls,
        ):
            tls.version()
    print("ok   the broker's certificate verifies for 127.0.0.1 and localhost")


async def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    sasl, mtls = read_env(sys.argv[1]), read_env(sys.argv[2])
    await round_trip("sasl_ssl", sasl)
    await round_trip("mtls", mtls)
    certificate_names(sasl)
    bare_tls_without_cert(mtls)
    await refused("mtls without a certificate (aiokafka)", client_kwargs(mtls, with_cert=False))
    await refused("sasl_ssl with a wrong password", client_kwargs(sasl, password="wrong-password"))
    print("all secure-listener checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
