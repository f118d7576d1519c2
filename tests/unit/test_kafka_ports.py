"""scripts/kafka/ports.py: a broker's listener ports, free before it starts, open once it serves.

The case it exists for: a port held not by a listening process but by an outgoing
connection the kernel gave that local port (a CI run lost the authorizer broker's SASL port
that way; Kafka served the probe listener for a moment, then exited).
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kafka" / "ports.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kafka_ports", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


ports = _load()


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


@pytest.fixture
def outgoing(listening: socket.socket) -> Iterator[int]:
    """The local port of an outgoing connection (the kernel's choice): nothing listens on it."""
    client = socket.create_connection(listening.getsockname())
    accepted, _ = listening.accept()
    yield client.getsockname()[1]
    client.close()
    accepted.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _config(tmp_path: Path, *entries: str) -> Path:
    path = tmp_path / "server.properties"
    path.write_text("# generated\nnode.id=1\nlisteners=" + ",".join(entries)
                    + "\nadvertised.listeners=PLAINTEXT://ignored:1\n")
    return path


def test_listeners_reads_every_entry_of_the_listeners_line() -> None:
    found = ports.listeners("a=b\nlisteners=PLAINTEXT://127.0.0.1:9092,"
                            "SASL_SSL://127.0.0.1:9094,CONTROLLER://:9093\n")
    assert [(x.name, x.host, x.port) for x in found] == [
        ("PLAINTEXT", "127.0.0.1", 9092), ("SASL_SSL", "127.0.0.1", 9094),
        ("CONTROLLER", "0.0.0.0", 9093)]


@pytest.mark.parametrize("text", ["advertised.listeners=PLAINTEXT://h:1\n",
                                  "listeners=PLAINTEXT://127.0.0.1:port\n",
                                  "listeners=127.0.0.1:9092\n"])
def test_listeners_refuses_a_config_without_usable_listeners(text: str) -> None:
    with pytest.raises(ValueError):
        ports.listeners(text)


def test_a_listening_port_is_taken(listening: socket.socket) -> None:
    port = listening.getsockname()[1]
    assert ports.bind_error(ports.Listener("PLAINTEXT", "127.0.0.1", port)) is not None


def test_an_outgoing_connections_local_port_is_taken(outgoing: int) -> None:
    assert ports.bind_error(ports.Listener("SASL_PLAINTEXT", "127.0.0.1", outgoing)) is not None


def test_a_free_port_binds() -> None:
    assert ports.bind_error(ports.Listener("PLAINTEXT", "127.0.0.1", _free_port())) is None


def test_accepts_only_a_listening_port(listening: socket.socket, outgoing: int) -> None:
    assert ports.accepts(ports.Listener("PLAINTEXT", "127.0.0.1", listening.getsockname()[1]))
    assert not ports.accepts(ports.Listener("SASL_PLAINTEXT", "127.0.0.1", outgoing))
    assert not ports.accepts(ports.Listener("CONTROLLER", "127.0.0.1", _free_port()))


def test_free_names_each_taken_listener_and_the_ephemeral_range(
        tmp_path: Path, outgoing: int, capsys: pytest.CaptureFixture[str]) -> None:
    free = _free_port()
    config = _config(tmp_path, f"PLAINTEXT://127.0.0.1:{free}",
                     f"SASL_PLAINTEXT://127.0.0.1:{outgoing}")
    assert ports.main(["free", str(config)]) == 1
    err = capsys.readouterr().err
    assert f"SASL_PLAINTEXT 127.0.0.1:{outgoing} listener's port is taken" in err
    assert f":{free}" not in err
    span = ports.ephemeral_range()
    if span is not None and span[0] <= outgoing <= span[1]:  # the kernel's choice: it is
        assert "ephemeral range" in err


def test_free_and_open_say_yes_only_when_so(tmp_path: Path, listening: socket.socket) -> None:
    free, serving = _free_port(), listening.getsockname()[1]
    assert ports.main(["free", str(_config(tmp_path, f"PLAINTEXT://127.0.0.1:{free}"))]) == 0
    both = _config(tmp_path, f"PLAINTEXT://127.0.0.1:{serving}", f"SSL://127.0.0.1:{free}")
    assert ports.main(["open", str(both)]) == 1  # the one probed serves, another is shut
    assert ports.main(["open", str(_config(tmp_path, f"PLAINTEXT://127.0.0.1:{serving}"))]) == 0


def test_bad_arguments_and_a_missing_file_are_status_2(tmp_path: Path) -> None:
    assert ports.main(["bind", str(tmp_path / "x")]) == 2
    assert ports.main(["free", str(tmp_path / "missing.properties")]) == 2
