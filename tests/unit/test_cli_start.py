"""A process's start as a person at a terminal meets it: ports, waiting for Kafka, --help.

- Processes started side by side, as the README does (``run typed &`` then ``gateway &``),
  each take a metrics port of their own by default; a port in use is one line naming its
  setting, with no traceback and no client left unclosed.
- A command typed at a terminal gives up on Kafka within seconds, naming the setting that
  says how long and the address it tried; aiokafka's own line per failed connection is
  folded into that one line. A service waits as long as its setting says, not ready
  meanwhile.
- ``--help`` shows the defaults that matter.

No broker: Kafka's address is one where nothing listens. Each process is waited for by the
event the test names (its exit, an answer on its port), with a generous hang guard.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

# Processes started here may take the documented default ports (8400, 9400, 9405), which
# tests/integration/test_docs_snippets_live.py needs too: one xdist group for both modules.
pytestmark = pytest.mark.xdist_group("documented-ports")

#: A hang guard, far above what any of these takes (seconds).
HANG_S = 90
#: The documented defaults (docs/configuration.md): typed's and the gateway's metrics ports,
#: and how long a command waits for Kafka.
TYPED_PORT, GATEWAY_METRICS_PORT, COMMAND_WAIT_S = 9400, 9405, 15


def _nobody_listens() -> str:
    """An address of this machine where nothing listens (bound, never listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    env.update({f"SYMFONIC_{k.upper()}": v for k, v in settings.items()},
               PYTHONWARNINGS="always", PYTHONDEVMODE="1")
    return env


def _command(*argv: str, **settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "symfonic_stream", *argv],
                          env=_env(**settings), capture_output=True, text=True,
                          timeout=HANG_S)


@contextmanager
def _held_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.create_server(("0.0.0.0", 0)) as server:
        yield server.getsockname()[1]


def _one_clean_line(stderr: str) -> str:
    """The one line a failure prints: no traceback, no warning of a client left open."""
    assert "Traceback" not in stderr, stderr
    assert "Unclosed" not in stderr and "ResourceWarning" not in stderr, stderr
    [line] = stderr.splitlines()
    return line


def test_every_kind_of_process_has_a_metrics_port_of_its_own() -> None:
    from symfonic_stream.config import METRICS_PORT_BASE, Settings
    from symfonic_stream.consumers import metrics_port, processes

    ports = [metrics_port(name) for name in processes()]
    assert len(set(ports)) == len(ports)
    assert metrics_port("typed") == METRICS_PORT_BASE == TYPED_PORT  # the contract's default
    assert metrics_port("gateway") == GATEWAY_METRICS_PORT
    assert Settings.model_fields["gateway_port"].default not in ports


def test_the_settings_fill_in_only_what_is_unset() -> None:
    from symfonic_stream.config import Settings

    unset = Settings()
    filled = unset.for_process(metrics_port=9401, command=True)
    assert (filled.metrics_port, filled.startup_timeout_s) == (9401, COMMAND_WAIT_S)
    chosen = Settings(metrics_port=0, startup_timeout_s=2).for_process(metrics_port=9401,
                                                                        command=True)
    assert (chosen.metrics_port, chosen.startup_timeout_s) == (0, 2)


def _readyz(port: int) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/readyz")
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def _until_answering(process: subprocess.Popen[str], port: int) -> tuple[int, str]:
    """``/readyz`` on ``port`` once ``process`` serves it (or the failure if it exits)."""
    while True:
        if process.poll() is not None:
            pytest.fail(f"exited {process.returncode}: {process.communicate()[1]}")
        try:
            return _readyz(port)
        except ConnectionRefusedError:
            continue  # not bound yet: asked again at once (the connect is the wait)


@pytest.mark.timeout(HANG_S)
def test_run_and_the_gateway_side_by_side_with_their_default_ports() -> None:
    """The README's order: ``run typed &`` then ``gateway &``, nothing set but Kafka's
    address (where nothing answers: both wait for it, serving /readyz, not ready)."""
    wanted = [TYPED_PORT, GATEWAY_METRICS_PORT]
    for port in wanted:  # the defaults must be free on this machine for the test to mean it
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is in use here"
    env = _env(bootstrap_servers=_nobody_listens(), gateway_port="0")
    started = [subprocess.Popen([sys.executable, "-m", "symfonic_stream", *argv], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
               for argv in (["run", "typed"], ["gateway"])]
    try:
        for process, port in zip(started, wanted, strict=True):
            status, body = _until_answering(process, port)
            assert status == 503 and "waiting for Kafka" in body  # not ready while it waits
    finally:
        for process in started:
            process.terminate()
            process.communicate(timeout=HANG_S)


@pytest.mark.parametrize(("argv", "setting"), [
    (["run", "typed"], "METRICS_PORT"),
    (["run", "typed", "--workers", "2"], "METRICS_PORT"),
    (["gateway"], "METRICS_PORT"),
    (["gateway"], "GATEWAY_PORT"),
])
def test_a_port_in_use_is_one_line_naming_its_setting(argv: list[str], setting: str) -> None:
    with _held_port() as port:
        others = {"metrics_port": "0"} if setting == "GATEWAY_PORT" else {"gateway_port": "0"}
        done = _command(*argv, bootstrap_servers=_nobody_listens(),
                        **{**others, setting.lower(): str(port)})
    assert done.returncode == 2
    assert _one_clean_line(done.stderr) == (
        f"symfonic-stream: port {port} is in use by another process: set SYMFONIC_{setting} "
        "to a free port" + (" (SYMFONIC_METRICS_PORT=0 serves no metrics)"
                            if setting == "METRICS_PORT" else ""))


@pytest.mark.parametrize("argv", [
    ["topics", "ensure"],
    ["publish", "tests/golden/golden_run.jsonl"],
    ["tail", "golden-run"],
    ["acls", "--apply"],
    ["replay", "--projection", "typed", "--from-offset", "0", "--to-topic", "out"],
])
def test_a_command_gives_up_on_kafka_naming_the_setting_and_the_address(
    argv: list[str],
) -> None:
    """Ends with the command's one line, not a line per attempt (aiokafka's included); the
    hang guard is far above the setting's second."""
    address = _nobody_listens()
    done = subprocess.run([sys.executable, "-m", "symfonic_stream", *argv],
                          env=_env(bootstrap_servers=address, startup_timeout_s="1"),
                          capture_output=True, text=True, timeout=HANG_S,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode != 0
    assert "Unable connect to" not in done.stderr and "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert f"connecting to Kafka at {address} (SYMFONIC_BOOTSTRAP_SERVERS)" in last
    assert "Connect call failed" in last  # what the address answered
    assert "SYMFONIC_STARTUP_TIMEOUT_S=1 is how long it waits" in last, last
    assert len(done.stderr.splitlines()) <= 2  # at most one "waiting for Kafka" line before


def test_unset_a_command_waits_the_seconds_of_a_command() -> None:
    done = _command("tail", "golden-run", bootstrap_servers=_nobody_listens())
    assert done.returncode == 3
    assert _one_clean_line(done.stderr).endswith(
        f"SYMFONIC_STARTUP_TIMEOUT_S={COMMAND_WAIT_S} is how long it waits")


@pytest.mark.parametrize(("argv", "shown"), [
    (["run"], ["SYMFONIC_METRICS_PORT (default: typed 9400, chunks 9401",
               "SYMFONIC_BOOTSTRAP_SERVERS (default 127.0.0.1:9092)", "(default 300 s for a"]),
    (["gateway"], ["SYMFONIC_GATEWAY_PORT (default 8400)",
                   f"SYMFONIC_METRICS_PORT (default {GATEWAY_METRICS_PORT}",
                   "(default 300 s for a"]),
    (["topics", "ensure"], ["SYMFONIC_BOOTSTRAP_SERVERS (default 127.0.0.1:9092)",
                            "(default 15 s for a"]),
    (["publish"], ["(default 15 s for a"]),
    (["tail"], ["(default 15 s for a"]),
    (["replay"], ["(default 15 s for a"]),
    (["acls"], ["(default 15 s for a"]),
])
def test_help_shows_the_defaults_that_matter(argv: Sequence[str], shown: list[str]) -> None:
    done = _command(*argv, "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # as wrapped for any width
    for words in shown:
        assert words in text
