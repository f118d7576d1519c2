"""The single broker: one combined broker and controller on SYMFONIC_KAFKA_PORT, with a
SASL_SSL (SCRAM-SHA-512) and an SSL (mutual TLS) listener beside PLAINTEXT.

State: ``<state root>/single-<port>-<version>``. The commands that only look at or signal a
broker (stop, status, logs, secure-env) act on the broker this script runs on the port,
whatever its version; start launches the requested version.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from scripts.kafka import certs, jars, node, probe, properties, tools
from scripts.kafka.env import Env
from scripts.kafka.files import read
from scripts.kafka.messages import Clock, die, log, say


def dir_of(env: Env, version: str) -> Path:
    return env.state_root / f"single-{env.port}-{version}"


def dirs_on_port(env: Env) -> Iterator[Path]:
    """Every single-broker state directory of the port, of this layout and the old one."""
    yield from sorted(p for p in env.state_root.glob(f"single-{env.port}-*") if p.is_dir())
    legacy = [env.state_root / f"single-{env.port}"]
    if env.port == 9092:
        legacy.append(env.state_root / "single")
    yield from (p for p in legacy if p.is_dir())


def running_dir(env: Env) -> Path:
    """The broker this script runs on the port (any version), else the requested one's."""
    requested = dir_of(env, jars.offline_version(env))
    if node.pid_of(requested) is not None:
        return requested
    return next((d for d in dirs_on_port(env) if node.pid_of(d) is not None), requested)


def _address(env: Env) -> str:
    return f"{env.host}:{env.port}"


def _reuse(env: Env, requested: Path) -> bool:
    """Says so and True when a broker already serves on the port: this script's (of the
    requested version, of another one, or of the old layout) or anyone's."""
    pid = node.pid_of(requested)
    if pid is not None:
        if node.wait_ready(env, requested, _address(env)):
            say(f"kafka.sh: Kafka {node.version_of(requested)} is already running (pid {pid}) "
                f"on {_address(env)}; reusing it")
            return True
        raise die(f"the broker process {pid} is alive but does not serve on {_address(env)} "
                  "(scripts/kafka.sh logs; scripts/kafka.sh stop)")
    for other in dirs_on_port(env):
        pid = node.pid_of(other)
        if pid is None:
            continue
        if not node.wait_ready(env, other, _address(env)):
            raise die(f"the broker process {pid} ({other}) is alive but does not serve on "
                      f"{_address(env)}")
        if node.is_legacy(other):
            log(f"the broker on {_address(env)} (pid {pid}, state {other}) was started by an "
                "older kafka.sh, without the secure listeners; reusing it. 'scripts/kafka.sh "
                f"stop' stops it; the next start runs from {requested}")
        else:
            log(f"Kafka {node.version_of(other)} (pid {pid}, state {other}) already runs on "
                f"{_address(env)}, not the requested version; reusing it (scripts/kafka.sh stop "
                "stops it)")
        say(f"kafka.sh: a broker is already running (pid {pid}) on {_address(env)}; reusing it")
        return True
    answer = probe.ask(_address(env), probe.Expect())
    answer.report(quiet=True)
    if answer.status == 0:
        say(f"kafka.sh: a Kafka broker not started by this script already answers on "
            f"{_address(env)}; reusing it")
        return True
    if answer.status == 2:
        raise die(f"{_address(env)} is taken by something that is not a Kafka broker (set "
                  "SYMFONIC_KAFKA_PORT)")
    return False


def start(env: Env, fresh: bool) -> None:
    """Fetch Kafka if needed, make certificates and the SCRAM user once, format storage once,
    start, wait until it serves; or reuse a broker that already serves on the port."""
    node.lock_state(env)
    clock = Clock()
    if _reuse(env, dir_of(env, jars.offline_version(env))):
        return
    tools.java()  # before Maven spends a minute on jars it could not run
    kafka = jars.ensure(env)
    directory = dir_of(env, kafka.version)
    directory.mkdir(parents=True, exist_ok=True)
    secure = directory / "secure"
    if fresh and (directory / "data").is_dir():
        # Topics left by earlier runs only slow the start (every partition's log is loaded).
        shutil.rmtree(directory / "data")
        (secure / "scram.formatted").unlink(missing_ok=True)
        log(f"--fresh: deleted the old storage in {directory}/data")
    certs.ensure_certs(env, directory)
    certs.ensure_scram_password(directory)
    for name in ("sasl_ssl.env", "mtls.env"):
        (secure / name).unlink(missing_ok=True)
    properties.write(env, kafka.version, directory, "single", 1, env.port, env.controller_port)
    if not (directory / "data" / "meta.properties").is_file():
        extra = ["--add-scram", certs.scram_format_option(env, directory)]
        # The 4.x quickstart formats a dynamic quorum of this one controller; 3.9's is static.
        if jars.major(kafka.version) >= 4:
            extra.append("--standalone")
        (directory / "cluster.id").write_text(node.new_cluster_id() + "\n")
        node.format_storage(kafka, directory, read(directory / "cluster.id"), *extra)
        certs.mark_scram(env, directory)
    pid = node.launch_until_ready(env, kafka, directory, env.heap_opts, _address(env),
                                  "the Kafka broker")
    if not certs.scram_ok(env, directory) and not certs.upsert_scram_user(env, kafka, directory):
        log("could not add the SCRAM user: the SASL_SSL listener has no usable user and no "
            "sasl_ssl.env (scripts/kafka.sh start --fresh formats the storage with it)")
    certs.write_env_files(env, directory)
    say(f"kafka.sh: Kafka {kafka.version} started (pid {pid}) in {clock.since()} s: PLAINTEXT "
        f"{_address(env)}, SASL_SSL {env.host}:{env.sasl_ssl_port}, SSL (mutual TLS) "
        f"{env.host}:{env.mtls_port}; state {directory}")
    extra_config_note(env)


def extra_config_note(env: Env) -> None:
    if env.extra_config_set:
        log(f"not Kafka's defaults: SYMFONIC_KAFKA_EXTRA_CONFIG added {env.extra_settings()} "
            "setting(s) to server.properties")


def stop(env: Env) -> None:
    node.lock_state(env)
    node.stop(env, running_dir(env), env.port, "broker")


def status(env: Env) -> int:
    """0 when a broker answers, 1 when none runs, 2 when this script's is alive but does not."""
    directory = running_dir(env)
    answer = probe.ask(_address(env), probe.Expect())
    pid = node.pid_of(directory)
    if pid is not None:
        if answer.status == 0:
            say(f"running: pid {pid}, bootstrap {_address(env)}, Kafka "
                f"{node.version_of(directory)}, state {directory}")
            if (directory / "secure" / "mtls.env").is_file():
                say(f"secure listeners: SASL_SSL {env.host}:{env.sasl_ssl_port} "
                    f"({directory}/secure/sasl_ssl.env), SSL/mutual TLS "
                    f"{env.host}:{env.mtls_port} ({directory}/secure/mtls.env)")
            say(answer.text)
            return 0
        say(f"starting or unhealthy: pid {pid} is alive but {_address(env)} does not serve "
            f"metadata ({answer.text})")
        return 2
    if answer.status == 0:
        say(f"running: a broker not started by this script answers on {_address(env)}")
        say(answer.text)
        return 0
    say(f"not running ({answer.text})")
    return 1


def secure_env(env: Env, which: str) -> int:
    """Prints the path of the env file of that listener of the running broker."""
    if which not in ("sasl_ssl", "mtls"):
        raise die("secure-env: expected sasl_ssl or mtls")
    directory = running_dir(env)
    env_file = directory / "secure" / f"{which}.env"
    if node.pid_of(directory) is None:
        log(f"no broker started by this script runs on port {env.port}")
        return 1
    if not env_file.is_file():
        log(f"the broker on port {env.port} (state {directory}) has no {which} listener env file")
        return 1
    say(env_file)
    return 0


def reset(env: Env) -> None:
    """Deletes this version's state (the broker must be stopped)."""
    node.lock_state(env)
    directory = dir_of(env, jars.offline_version(env))
    if node.pid_of(directory) is not None:
        raise die("the broker is running: scripts/kafka.sh stop first")
    shutil.rmtree(directory, ignore_errors=True)
    say(f"kafka.sh: deleted {directory}")
