"""The script's settings: ``SYMFONIC_KAFKA_*`` from the environment, each checked once, before
any command runs, with an error that names the setting (docs/dev-broker.md lists them)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scripts.kafka.messages import die

#: Tried in order until Maven resolves one; SYMFONIC_KAFKA_VERSION pins one (or a list).
#: Supported: 4.x (4.1.1 is the default; 4.4.0 tested) and 3.9.x (3.9.1 tested).
DEFAULT_VERSIONS = "4.1.1 4.1.0 4.0.1 4.0.0"
CLUSTER_SIZE = 3
#: The authorizer broker's super user (it creates the ACLs).
AUTH_ADMIN = "admin"
#: The JVM options of every node, before SYMFONIC_KAFKA_JVM_OPTS.
JVM_OPTS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true")

_PORT = re.compile(r"[0-9]+")
#: What a user name (SCRAM) may hold.
USER_NAME = re.compile(r"[A-Za-z0-9._-]+")
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
_CONFIG_LINE = re.compile(r"\s*[a-z0-9][a-z0-9._-]*\s*=.*")


@dataclass(frozen=True)
class Env:
    """Every setting of one run of the script."""

    #: The candidate Kafka versions, in order.
    versions: tuple[str, ...]
    cache_root: Path
    state_root: Path
    #: SYMFONIC_KAFKA_HOME: the jar cache of one version (None: one per version).
    kafka_home: Path | None
    host: str
    # The single broker: every port follows its PLAINTEXT port, so a second broker on another
    # SYMFONIC_KAFKA_PORT never collides with the first.
    port: int
    controller_port: int
    sasl_ssl_port: int
    mtls_port: int
    scram_user: str
    #: Opt-in only: server.properties lines added after Kafka's defaults. Empty: the defaults.
    extra_config: str
    heap_opts: tuple[str, ...]
    cluster_base_port: int
    cluster_heap_opts: tuple[str, ...]
    # The authorizer broker: its SASL_PLAINTEXT (SCRAM-SHA-512) client port; the others follow.
    auth_port: int
    auth_controller_port: int
    auth_probe_port: int
    #: SYMFONIC_KAFKA_AUTH_USERS; None: the consumers' declarations say (scripts.kafka.auth).
    auth_users: tuple[str, ...] | None
    #: Seconds without progress while a node starts; seconds in all; to stop, then SIGKILL.
    start_timeout: int
    start_limit: int
    stop_timeout: int
    jvm_opts: tuple[str, ...]
    maven_args: tuple[str, ...]
    #: A file written with the pid when a start really started a broker.
    started_flag: str
    log_lines: str

    @property
    def extra_config_set(self) -> bool:
        return bool(self.extra_config.strip())

    def extra_settings(self) -> int:
        """How many settings SYMFONIC_KAFKA_EXTRA_CONFIG adds (lines that are not comments)."""
        return sum(1 for line in self.extra_config.splitlines()
                   if line.strip() and not line.lstrip().startswith("#"))


def _port(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    text = env.get(name) or ("" if default is None else str(default))
    if not _PORT.fullmatch(text):
        if name in ("SYMFONIC_KAFKA_PORT", "SYMFONIC_KAFKA_AUTH_PORT"):
            raise die(f"{name} must be a port number, not '{text}'")
        raise die(f"'{text}' is not a port number (SYMFONIC_KAFKA_*_PORT)")
    return int(text)


def _seconds(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name) or str(default)
    if not _PORT.fullmatch(text):
        raise die(f"{name} must be a whole number of seconds, not '{text}'")
    return int(text)


def _versions(text: str) -> tuple[str, ...]:
    versions = tuple(text.split())
    for version in versions:
        if not _VERSION.fullmatch(version):
            raise die(f"SYMFONIC_KAFKA_VERSION: '{version}' is not a Kafka version (e.g. 4.1.1)")
        major, minor = (int(part) for part in version.split(".")[:2])
        if (major, minor) < (3, 9):
            raise die(f"Kafka {version} is not supported here: 4.x or 3.9.x (the KRaft settings "
                      "below differ before 3.9)")
    return versions


def _extra_config(text: str) -> str:
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not _CONFIG_LINE.fullmatch(line):
            raise die(f"SYMFONIC_KAFKA_EXTRA_CONFIG: '{line}' is not a name=value line")
    return text


def _users(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    users = tuple(text.split())
    for user in users:
        if not USER_NAME.fullmatch(user) or user == AUTH_ADMIN:
            raise die(f"SYMFONIC_KAFKA_AUTH_USERS: '{user}' (letters, digits, . _ - only; "
                      f"not {AUTH_ADMIN})")
    return users


def load(env: Mapping[str, str] = os.environ) -> Env:
    """The settings, from ``env``; a bad one raises :class:`~scripts.kafka.messages.Failed`
    (checked in the order the old shell script checked them, so the first error is the same)."""
    cache_root = Path.home() / ".cache" / "symfonic-stream"
    port = _port(env, "SYMFONIC_KAFKA_PORT", 9092)
    auth_port = _port(env, "SYMFONIC_KAFKA_AUTH_PORT", 29192)
    controller_port = _port(env, "SYMFONIC_KAFKA_CONTROLLER_PORT", port + 1)
    sasl_ssl_port = _port(env, "SYMFONIC_KAFKA_SASL_SSL_PORT", port + 2)
    mtls_port = _port(env, "SYMFONIC_KAFKA_MTLS_PORT", port + 3)
    cluster_base_port = _port(env, "SYMFONIC_KAFKA_CLUSTER_BASE_PORT", 19092)
    auth_controller_port = _port(env, "SYMFONIC_KAFKA_AUTH_CONTROLLER_PORT", auth_port + 1)
    auth_probe_port = _port(env, "SYMFONIC_KAFKA_AUTH_PROBE_PORT", auth_port + 2)
    scram_user = env.get("SYMFONIC_KAFKA_SCRAM_USER") or "symfonic"
    if not USER_NAME.fullmatch(scram_user):
        raise die("SYMFONIC_KAFKA_SCRAM_USER: letters, digits, . _ - only")
    auth_users = _users(env.get("SYMFONIC_KAFKA_AUTH_USERS") or None)
    extra_config = _extra_config(env.get("SYMFONIC_KAFKA_EXTRA_CONFIG") or "")
    versions = _versions(env.get("SYMFONIC_KAFKA_VERSION") or DEFAULT_VERSIONS)
    home = env.get("SYMFONIC_KAFKA_HOME")
    return Env(
        versions=versions,
        cache_root=cache_root,
        state_root=Path(env.get("SYMFONIC_KAFKA_STATE") or cache_root / "state"),
        kafka_home=Path(home) if home else None,
        host=env.get("SYMFONIC_KAFKA_HOST") or "127.0.0.1",
        port=port,
        controller_port=controller_port,
        sasl_ssl_port=sasl_ssl_port,
        mtls_port=mtls_port,
        scram_user=scram_user,
        extra_config=extra_config,
        heap_opts=_words(env, "SYMFONIC_KAFKA_HEAP_OPTS", "-Xms512m -Xmx1g"),
        cluster_base_port=cluster_base_port,
        cluster_heap_opts=_words(env, "SYMFONIC_KAFKA_CLUSTER_HEAP_OPTS", "-Xms512m -Xmx512m"),
        auth_port=auth_port,
        auth_controller_port=auth_controller_port,
        auth_probe_port=auth_probe_port,
        auth_users=auth_users,
        start_timeout=_seconds(env, "SYMFONIC_KAFKA_START_TIMEOUT", 90),
        start_limit=_seconds(env, "SYMFONIC_KAFKA_START_LIMIT", 600),
        stop_timeout=_seconds(env, "SYMFONIC_KAFKA_STOP_TIMEOUT", 30),
        jvm_opts=(*JVM_OPTS, *_words(env, "SYMFONIC_KAFKA_JVM_OPTS", "")),
        maven_args=_words(env, "SYMFONIC_KAFKA_MAVEN_ARGS", ""),
        started_flag=env.get("SYMFONIC_KAFKA_STARTED_FLAG") or "",
        log_lines=env.get("SYMFONIC_KAFKA_LOG_LINES") or "200",
    )


def _words(env: Mapping[str, str], name: str, default: str) -> tuple[str, ...]:
    """A setting of several options, split at white space (as the shell split them)."""
    return tuple((env.get(name) or default).split())
