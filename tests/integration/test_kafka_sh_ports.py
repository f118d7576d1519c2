"""scripts/kafka.sh refuses to launch a broker one of whose ports is taken.

The port is held the way a CI run lost the authorizer broker's SASL port: by an outgoing
connection the kernel gave that local port, where nothing listens. Before the check, Kafka
served the probe listener for a moment, failed to bind the SASL one and exited, and the ACL
suite found no broker. Uses the cached Kafka jars (``scripts/kafka.sh start`` fetched them)
and a state directory of its own; no broker is started.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

KAFKA_SH = Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def held_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    server.close()  # nothing listens any more; the connection keeps its local port
    yield client.getsockname()[1]
    client.close()
    accepted.close()


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def test_auth_start_names_the_taken_port_and_its_setting(tmp_path: Path, held_port: int) -> None:
    controller, probe = _free_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_KAFKA_")}
    env.update(SYMFONIC_KAFKA_STATE=str(tmp_path), SYMFONIC_KAFKA_AUTH_PORT=str(held_port),
               SYMFONIC_KAFKA_AUTH_CONTROLLER_PORT=str(controller),
               SYMFONIC_KAFKA_AUTH_PROBE_PORT=str(probe))
    done = subprocess.run([str(KAFKA_SH), "auth-start"], env=env, capture_output=True,
                          text=True, timeout=110, check=False)
    assert done.returncode != 0, done.stdout
    assert f"SASL_PLAINTEXT 127.0.0.1:{held_port} listener's port is taken" in done.stderr
    assert "set SYMFONIC_KAFKA_AUTH_PORT" in done.stderr
    assert "started" not in done.stdout
    # No JVM was launched: no broker wrote a pid file in its state directory.
    assert [p for p in tmp_path.glob("auth-*/pid")] == []
    assert list(tmp_path.glob(f"auth-{held_port}-*/server.properties")), "config not written"
