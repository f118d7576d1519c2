"""scripts/kafka (what scripts/kafka.sh runs): its settings, the configuration it generates, the
probe's verdicts and the authorizer broker's users, without a broker.

The broker commands themselves run in the integration suites that need brokers
(test_kafka_sh_ports.py, test_secure_listeners.py, make test-cluster, make test-acls)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.kafka import auth, env, jars, node, ports, probe, properties
from scripts.kafka.messages import Failed
from symfonic_stream.app.acls import default_principal, plan_names, reviewer_principal
from symfonic_stream.config import Settings
from symfonic_stream.consumers import deployed_names

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "kafka.sh"


def _env(**settings: str) -> env.Env:
    return env.load({f"SYMFONIC_KAFKA_{k.upper()}": v for k, v in settings.items()})


# --------------------------------------------------------------------------- settings


def test_every_port_of_a_broker_follows_its_first() -> None:
    found = _env(port="29092", auth_port="29192")
    assert (found.controller_port, found.sasl_ssl_port, found.mtls_port) == (29093, 29094, 29095)
    assert (found.auth_controller_port, found.auth_probe_port) == (29193, 29194)
    assert _env(port="29092", mtls_port="30000").mtls_port == 30000


@pytest.mark.parametrize(("settings", "named"), [
    ({"port": "90x"}, "SYMFONIC_KAFKA_PORT must be a port number, not '90x'"),
    ({"auth_port": "-1"}, "SYMFONIC_KAFKA_AUTH_PORT must be a port number"),
    ({"mtls_port": "x"}, "'x' is not a port number (SYMFONIC_KAFKA_*_PORT)"),
    ({"scram_user": "a b"}, "SYMFONIC_KAFKA_SCRAM_USER"),
    ({"auth_users": "alice admin"}, "SYMFONIC_KAFKA_AUTH_USERS: 'admin'"),
    ({"extra_config": "num.partitions=4\nnot a setting"},
     "SYMFONIC_KAFKA_EXTRA_CONFIG: 'not a setting' is not a name=value line"),
    ({"version": "4.1"}, "SYMFONIC_KAFKA_VERSION: '4.1' is not a Kafka version"),
    ({"version": "3.8.1"}, "Kafka 3.8.1 is not supported here"),
    ({"stop_timeout": "soon"}, "SYMFONIC_KAFKA_STOP_TIMEOUT must be a whole number"),
])
def test_a_bad_setting_is_refused_by_name(settings: dict[str, str], named: str) -> None:
    with pytest.raises(Failed, match=re.escape(named)):
        _env(**settings)


def test_extra_config_counts_its_settings_not_its_comments() -> None:
    found = _env(extra_config="# why\ngroup.initial.rebalance.delay.ms=0\n\n num.partitions = 4")
    assert found.extra_config_set and found.extra_settings() == 2
    assert not _env(extra_config=" \n").extra_config_set


def test_the_wrapper_runs_the_package_and_says_how_it_failed() -> None:
    def run(*args: str, **settings: str) -> subprocess.CompletedProcess[str]:
        extra = {f"SYMFONIC_KAFKA_{k.upper()}": v for k, v in settings.items()}
        return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False,
                              env={"PATH": "/usr/bin:/bin",
                                   "SYMFONIC_KAFKA_PYTHON": sys.executable, **extra},
                              timeout=60)

    helped = run("help", port="29092")
    assert helped.returncode == 0 and "PLAINTEXT 29092, controller 29093" in helped.stderr
    assert run("no-such-command").returncode == 2
    refused = run("status", port="x")
    assert refused.returncode == 1
    assert refused.stderr == "kafka.sh: error: SYMFONIC_KAFKA_PORT must be a port number, not 'x'\n"


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("version", ["3.9.1", "4.1.1", "4.4.0"])
def test_each_kind_of_node_listens_where_its_settings_say(tmp_path: Path, version: str) -> None:
    settings = _env(port="29092", cluster_base_port="21092", auth_port="29192")
    (tmp_path / "secure").mkdir()
    (tmp_path / "secure" / "store.password").write_text("pw\n")
    single = properties.server_properties(settings, version, tmp_path, "single", 1, 29092, 29093)
    cluster = properties.server_properties(settings, version, tmp_path, "cluster", 2, 21094, 21095)
    assert [str(x) for x in ports.listeners(single)] == [
        "PLAINTEXT 127.0.0.1:29092", "SASL_SSL 127.0.0.1:29094", "SSL 127.0.0.1:29095",
        "CONTROLLER 127.0.0.1:29093"]
    assert [str(x) for x in ports.listeners(cluster)] == [
        "PLAINTEXT 127.0.0.1:21094", "CONTROLLER 127.0.0.1:21095"]
    voters = "controller.quorum.voters=1@127.0.0.1:21093,2@127.0.0.1:21095,3@127.0.0.1:21097"
    assert voters in cluster and "min.insync.replicas=2" in cluster
    if version.startswith("3."):  # 3.9's quickstart: a static quorum, no share groups
        assert "controller.quorum.voters=1@127.0.0.1:29093" in single
        assert "share.coordinator" not in single
    else:
        assert "controller.quorum.bootstrap.servers=127.0.0.1:29093" in single
        assert "share.coordinator.state.topic.replication.factor=1" in single
    recovery = 2 if version == "4.4.0" else 1
    assert f"num.recovery.threads.per.data.dir={recovery}\n" in single


def test_extra_config_comes_last_under_a_heading_saying_it_is_not_the_default(
        tmp_path: Path) -> None:
    settings = _env(extra_config="group.initial.rebalance.delay.ms=0")
    text = properties.server_properties(settings, "4.1.1", tmp_path, "cluster", 1, 1, 2)
    assert text.endswith("NOT Kafka's defaults\n\n# Set by whoever started this node (an opt-in, "
                         "e.g. to skip the 3 s initial rebalance delay\n# of new consumer groups);"
                         " a later line wins over an earlier one with the same name.\n"
                         "group.initial.rebalance.delay.ms=0\n")
    plain = properties.server_properties(_env(), "4.1.1", tmp_path, "cluster", 1, 1, 2)
    assert "EXTRA_CONFIG" not in plain and "group.initial.rebalance.delay.ms=0" not in plain


def test_a_complete_resolve_is_one_with_every_jar_and_one_logging_binding(tmp_path: Path) -> None:
    for jar in jars.required_jars("4.1.1"):
        (tmp_path / jar).touch()
    assert jars.problems("4.1.1", tmp_path) == ["lacks the log4j2 slf4j binding",
                                                "lacks log4j-core"]
    (tmp_path / "log4j-slf4j-impl-2.24.3.jar").touch()
    (tmp_path / "log4j-core-2.24.3.jar").touch()
    assert jars.problems("4.1.1", tmp_path) == []
    (tmp_path / "slf4j-reload4j-1.7.36.jar").touch()
    assert jars.problems("4.1.1", tmp_path) == ["has a second slf4j binding (slf4j-reload4j)"]
    assert "lacks kafka_2.13-3.9.1.jar" in jars.problems("3.9.1", tmp_path)


def test_a_cluster_id_never_reads_as_an_option() -> None:
    ids = {node.new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)


# --------------------------------------------------------------------------- the probe


@pytest.fixture
def not_kafka() -> Iterator[int]:
    """A TCP server that answers every request with bytes that are not Kafka's."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(b"\x00\x00\x00\x08HTTP/1.1")

    threading.Thread(target=answer, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def test_the_probe_tells_nothing_from_something_that_is_not_kafka(not_kafka: int) -> None:
    other = probe.ask(f"127.0.0.1:{not_kafka}", probe.Expect())
    assert other.status == 2 and "answers but is not a usable Kafka broker" in other.text
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    nothing = probe.ask(f"127.0.0.1:{closed}", probe.Expect())
    assert nothing.status == 1
    assert nothing.text.startswith(f"kafka at 127.0.0.1:{closed} is not ready: ConnectionRefused")


# --------------------------------------------------------------------------- the users


def test_the_authorizer_brokers_users_are_the_declared_principals(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every consumer and reader the declarations name, under the default prefix, and the
    reviewers: read from the declarations through the ACL plan's own functions (by this
    interpreter, the venv's: the tree may be a copy without .venv, as under mutmut)."""
    monkeypatch.setattr(auth, "VENV_PYTHON", Path(sys.executable))
    settings = Settings(topic_prefix="symfonic")
    want = [default_principal(settings, name) for name in plan_names()]
    want += [reviewer_principal(tenant) for tenant in auth.REVIEWER_TENANTS]
    users = auth.declared_users()
    assert [f"User:{user}" for user in users] == want
    assert {f"symfonic-{name}" for name in (*deployed_names(), "gateway")} <= set(users)


def test_no_consumer_is_named_in_the_script() -> None:
    names = "|".join(re.escape(n) for n in plan_names())
    pattern = re.compile(rf"""["'](symfonic-)?({names})["']""")
    named = [f"{path.name}:{n}" for path in sorted((ROOT / "scripts" / "kafka").glob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert named == []


def test_the_users_follow_the_environment_when_it_names_them() -> None:
    assert auth.users(_env(auth_users="alice bob")) == ["admin", "alice", "bob"]
