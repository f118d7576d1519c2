"""One node's JVM and its state directory: storage formatted once, the process launched
detached, waited for until it serves, signalled, and waited for until it is gone.

A state directory holds ``server.properties`` (regenerated at every start), ``data/``,
``logs/``, ``pid`` and ``version``; one per port and version, so versions never share data
(a 3.9 broker cannot read storage a 4.x broker wrote) nor pid files.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO

from scripts.kafka import ports, probe, properties, tools
from scripts.kafka.env import Env
from scripts.kafka.files import read_or_none
from scripts.kafka.jars import Kafka
from scripts.kafka.messages import die, log

_LEGACY = re.compile(r"(single|cluster)(-[0-9]+)?")
#: The state lock, held until the script exits (see :func:`lock_state`).
_held: list[IO[str]] = []


def lock_state(env: Env) -> None:
    """One start or stop at a time (two ``make test`` runs at once must not both launch a
    broker). Held until the script exits; a launched broker does not inherit it."""
    env.state_root.mkdir(parents=True, exist_ok=True)
    lock = (env.state_root / ".lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    _held.append(lock)


def pid_of(directory: Path) -> int | None:
    """The pid of the node's JVM when it is alive; never another process that got its pid."""
    text = read_or_none(directory / "pid")
    if text is None or not text.isdigit():
        return None
    pid = int(text)
    try:
        os.kill(pid, 0)
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except (OSError, ValueError):
        return None
    return pid if f"kafka.Kafka {directory}/server.properties" in command else None


def version_of(directory: Path) -> str:
    """The Kafka version that last ran in a state directory (a cluster's: its node 1's)."""
    for path in (directory / "version", directory / "node1" / "version"):
        found = read_or_none(path)
        if found:
            return found
    return "unknown"


def is_legacy(directory: Path) -> bool:
    """A state directory of the kafka.sh before versioned directories."""
    return _LEGACY.fullmatch(directory.name) is not None


def new_cluster_id() -> str:
    """A Kafka Uuid: 16 random bytes, URL-safe base64 without padding. Never one starting
    with '-' (Kafka's Uuid.randomUuid avoids them too): the storage tool would read it as an
    option and fail about one start in 32."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def storage_cluster_id(directory: Path) -> str:
    """The cluster id its formatted storage holds ('' when unformatted)."""
    try:
        lines = (directory / "data" / "meta.properties").read_text().splitlines()
    except OSError:
        return ""
    return next((line.removeprefix("cluster.id=") for line in lines
                 if line.startswith("cluster.id=")), "")


def mask_passwords(text: str) -> str:
    return re.sub(r"(password=)[^],]*", r"\1***", text)


def run_tool(kafka: Kafka, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A Kafka command-line tool (a class of its jars), logging warnings to stderr."""
    return subprocess.run(
        [tools.java(), "-Xmx256m", properties.log_option(kafka.version, directory, "tools"),
         "-cp", kafka.classpath, *args],
        capture_output=True, text=True, check=False)


def format_storage(kafka: Kafka, directory: Path, cluster_id: str, *extra: str) -> None:
    """Formats the KRaft storage once (when ``data/`` has no meta.properties)."""
    data = directory / "data"
    if (data / "meta.properties").is_file():
        return
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    done = run_tool(kafka, directory, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                    "-c", str(directory / "server.properties"), *extra)
    if done.returncode != 0:
        print(mask_passwords((done.stdout + done.stderr).rstrip("\n")), file=sys.stderr)
        raise die(f"formatting the KRaft storage in {data} failed")


def _ports_setting(env: Env, directory: Path) -> str:
    """The setting(s) that choose the ports of the node in ``directory``."""
    name = str(directory.relative_to(env.state_root)) if directory.is_relative_to(
        env.state_root) else ""
    if name.startswith("auth-"):
        return "SYMFONIC_KAFKA_AUTH_PORT (and _AUTH_CONTROLLER_PORT, _AUTH_PROBE_PORT)"
    if name.startswith("cluster-"):
        return "SYMFONIC_KAFKA_CLUSTER_BASE_PORT"
    return "SYMFONIC_KAFKA_PORT (and _CONTROLLER_PORT, _SASL_SSL_PORT, _MTLS_PORT)"


def launch(env: Env, kafka: Kafka, directory: Path, heap: tuple[str, ...]) -> None:
    """Starts the node's JVM detached (its own session, SIGHUP ignored as under nohup), so it
    outlives this script, make and CI steps; writes its pid."""
    config = directory / "server.properties"
    # Kafka binds its acceptors one after another and exits when one fails, after another has
    # served for a moment: a taken port is named here, before a JVM starts.
    if ports.main(["free", str(config)]) != 0:
        raise die(f"a port of the broker in {directory} is taken: stop what holds it, or set "
                  f"{_ports_setting(env, directory)}")
    logs = directory / "logs"
    if (logs / "stdout.log").is_file():
        (logs / "stdout.log").replace(logs / "stdout.log.prev")
    (directory / "pid").unlink(missing_ok=True)
    (directory / "version").write_text(kafka.version + "\n")
    command = [tools.java(), *heap, *env.jvm_opts,
               properties.log_option(kafka.version, directory, "broker"),
               f"-Dkafka.logs.dir={logs}", "-cp", kafka.classpath, "kafka.Kafka", str(config)]
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # inherited by the JVM: nohup
    try:
        with (logs / "stdout.log").open("wb") as out:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        raise die(f"the broker process did not start ({exc}; see {logs}/stdout.log)") from exc
    finally:
        signal.signal(signal.SIGHUP, hangup)
    # Never waited for: the broker runs on after this script exits.
    (directory / "pid").write_text(f"{process.pid}\n")
    # Popen returns once exec has passed its point of no return, a moment before the kernel
    # shows the new command line: until then pid_of would take the JVM for gone.
    for _ in range(50):
        if pid_of(directory) == process.pid or process.poll() is not None:
            return
        time.sleep(0.1)
    raise die(f"the broker process did not start (see {logs}/stdout.log)")


def launch_until_ready(env: Env, kafka: Kafka, directory: Path, heap: tuple[str, ...],
                       address: str, what: str) -> str:
    """Launches the node and waits until it serves on ``address``; kills it and fails naming
    ``what`` when it does not. Its pid, also written to SYMFONIC_KAFKA_STARTED_FLAG's file
    (for callers that must stop only what they started)."""
    launch(env, kafka, directory, heap)
    if not wait_ready(env, directory, address):
        signal_node(directory, signal.SIGKILL)
        (directory / "pid").unlink(missing_ok=True)
        raise die(f"{what} did not come up (full log: {directory}/logs/server.log)")
    pid = read_or_none(directory / "pid") or ""
    if env.started_flag:
        Path(env.started_flag).write_text(pid + "\n")
    return pid


def _log_size(directory: Path) -> int:
    try:
        return (directory / "logs" / "server.log").stat().st_size
    except OSError:
        return 0


def _tail(path: Path, lines: int) -> None:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return
    if text[-lines:]:
        print("\n".join(text[-lines:]), file=sys.stderr)


def wait_ready(env: Env, directory: Path, address: str, expect: probe.Expect | None = None
               ) -> bool:
    """Until the node serves on ``address`` (and every listener is open), the JVM dies, or
    the bound. A broker with thousands of partitions spends minutes loading its logs before it
    serves; a fixed bound would kill it half-way. The bound therefore counts time without
    progress (its log not growing), under a hard limit."""
    expect = expect or probe.Expect()
    now = time.monotonic()
    deadline, limit, last_size = now + env.start_timeout, now + env.start_limit, -1
    while True:
        size = _log_size(directory)
        if size != last_size:
            last_size = size
            deadline = min(time.monotonic() + env.start_timeout, limit)
        if pid_of(directory) is None:
            log(f"the broker in {directory} exited while starting; the end of its logs:")
            _tail(directory / "logs" / "server.log", 30)
            _tail(directory / "logs" / "stdout.log", 10)
            return False
        # Served by one listener, and every other one open: an acceptor that failed to bind
        # stops the broker moments after the first served (scripts/kafka/ports.py).
        answer = probe.ask(address, expect)
        answer.report(quiet=True)
        if answer.status == 0 and ports.main(["open", str(directory / "server.properties")]) == 0:
            return True
        if time.monotonic() >= deadline:
            log(f"the broker on {address} did not serve metadata (no progress in its log for "
                f"{env.start_timeout}s, or {env.start_limit}s in all); the end of its log:")
            _tail(directory / "logs" / "server.log", 30)
            probe.ask(address, expect).report(quiet=False)
            return False
        time.sleep(0.5)


def signal_node(directory: Path, signum: signal.Signals) -> bool:
    """Sends ``signum`` to the node's JVM, without waiting; False when it does not run."""
    pid = pid_of(directory)
    if pid is None:
        return False
    with contextlib.suppress(OSError):
        os.kill(pid, signum)
    return True


def wait_gone(directory: Path, bound: float) -> None:
    """Until the node's JVM is gone; SIGKILL after ``bound`` seconds."""
    deadline, killed = time.monotonic() + bound, False
    while (pid := pid_of(directory)) is not None:
        if time.monotonic() >= deadline:
            if killed:
                raise die(f"pid {pid} survived SIGKILL for 10 s")
            log(f"pid {pid} did not stop within {bound:g}s; sending SIGKILL")
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            killed, deadline = True, time.monotonic() + 10
        time.sleep(0.2)
    (directory / "pid").unlink(missing_ok=True)


def stop(env: Env, directory: Path, port: int, what: str) -> None:
    """SIGTERM and wait (SIGKILL after the stop bound), or say that none runs."""
    pid = pid_of(directory)
    if pid is None:
        print(f"kafka.sh: no {what} started by this script is running on port {port}")
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    wait_gone(directory, env.stop_timeout)
    print(f"kafka.sh: stopped the {what} (pid {pid}, Kafka {version_of(directory)}, "
          f"state {directory})")


def show_log(env: Env, directory: Path, follow: str) -> None:
    """The node's log: its last lines, or followed (``-f``, replacing this process)."""
    log_file = directory / "logs" / "server.log"
    if not log_file.is_file():
        raise die(f"no log yet at {log_file}")
    sys.stdout.flush()
    if follow == "-f":
        os.execvp("tail", ["tail", "-n", "200", "-F", str(log_file)])
    subprocess.run(["tail", "-n", env.log_lines, str(log_file)], check=False)
