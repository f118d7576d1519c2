"""Settings: contract §8 defaults, validation naming the variable, and the aiokafka kwargs built
from them (TLS, SASL, compression, the engine's consumer and producer contracts)."""

from __future__ import annotations

import fnmatch
import os
import re
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from symfonic_stream.config import ConfigError, Settings, load_settings
from symfonic_stream.kafka.clients import (
    client_kwargs,
    group_consumer_kwargs,
    restore_consumer_kwargs,
    transactional_producer_kwargs,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: no SYMFONIC_* variable leaks in from the shell."""
    for name in list(os.environ):
        if name.startswith("SYMFONIC_"):
            monkeypatch.delenv(name)


def test_defaults_are_the_documented_ones() -> None:
    settings = load_settings()
    assert settings.bootstrap_servers == "127.0.0.1:9092"
    assert settings.security_protocol == "PLAINTEXT"
    assert settings.sasl_mechanism is None and settings.sasl_password is None
    assert settings.topic_prefix == "symfonic"
    assert settings.gap_timeout_s == 30
    assert settings.run_buffer_max == 1000
    assert settings.closed_run_grace_s == 600
    assert settings.routing_rules is None
    assert settings.tenant_queues is False
    # Unset: each kind of process fills in its own (test_cli_start.py), the first 9400.
    assert settings.metrics_port is None and settings.metrics_port_or_default == 9400
    assert settings.startup_timeout_s is None and settings.startup_wait_s == 300
    assert (settings.partitions, settings.replication_factor, settings.min_insync_replicas) == (
        12, 1, 1,
    )


def test_values_come_from_symfonic_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMFONIC_GAP_TIMEOUT_S", "2.5")
    monkeypatch.setenv("SYMFONIC_METRICS_PORT", "0")
    monkeypatch.setenv("SYMFONIC_TOPIC_PREFIX", "staging")
    monkeypatch.setenv("SYMFONIC_TENANT_QUEUES", "true")
    settings = load_settings()
    assert settings.gap_timeout_s == 2.5
    assert settings.metrics_port == 0
    assert settings.topic_prefix == "staging"
    assert settings.tenant_queues is True


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SYMFONIC_GAP_TIMEOUT_S", "abc"),
        ("SYMFONIC_GAP_TIMEOUT_S", "0"),
        ("SYMFONIC_METRICS_PORT", "70000"),
        ("SYMFONIC_METRICS_PORT", "-1"),
        ("SYMFONIC_PARTITIONS", "0"),
        ("SYMFONIC_RUN_BUFFER_MAX", "1.5"),
        ("SYMFONIC_SECURITY_PROTOCOL", "TLS"),
        ("SYMFONIC_COMPRESSION", "brotli"),
        ("SYMFONIC_EVENT_LOOP", "trio"),
        ("SYMFONIC_TOPIC_PREFIX", "bad prefix"),
        ("SYMFONIC_TENANT_QUEUES", "perhaps"),
    ],
)
def test_a_bad_value_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert variable in str(error.value)
    assert repr(value) in str(error.value)


def test_an_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("SYMFONIC_ROUTING_RULES", "SYMFONIC_GAP_TIMEOUT_S", "SYMFONIC_TOPIC_PREFIX"):
        monkeypatch.setenv(variable, "")
    settings = load_settings()
    assert (settings.routing_rules, settings.gap_timeout_s, settings.topic_prefix) == (
        None, 30.0, "symfonic"
    )


def test_sasl_needs_a_mechanism_and_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMFONIC_SECURITY_PROTOCOL", "SASL_SSL")
    with pytest.raises(ConfigError, match="SYMFONIC_SASL_MECHANISM"):
        load_settings()
    monkeypatch.setenv("SYMFONIC_SASL_MECHANISM", "SCRAM-SHA-512")
    with pytest.raises(ConfigError, match="SYMFONIC_SASL_USERNAME"):
        load_settings()


def test_a_secret_never_appears_in_errors_or_reprs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMFONIC_SASL_PASSWORD", "hunter2-secret")
    monkeypatch.setenv("SYMFONIC_METRICS_PORT", "70000")
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert "hunter2-secret" not in str(error.value)
    monkeypatch.setenv("SYMFONIC_METRICS_PORT", "9400")
    settings = load_settings()
    assert "hunter2-secret" not in repr(settings)
    assert "hunter2-secret" not in str(settings.model_dump())


def test_min_insync_replicas_cannot_exceed_the_replication_factor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SYMFONIC_MIN_INSYNC_REPLICAS", "2")
    with pytest.raises(ConfigError, match="SYMFONIC_MIN_INSYNC_REPLICAS"):
        load_settings()


def test_a_missing_tls_file_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SYMFONIC_SSL_CAFILE", str(tmp_path / "nope.pem"))
    with pytest.raises(ConfigError, match="SYMFONIC_SSL_CAFILE"):
        load_settings()


def test_a_secret_settings_value_is_never_shown_in_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 33: a missing key file's error printed its path; a bad value of any secret
    setting shows as <secret>."""
    hidden = str(tmp_path / "private" / "client-key.pem")
    monkeypatch.setenv("SYMFONIC_SSL_KEYFILE", hidden)
    with pytest.raises(ConfigError, match="SYMFONIC_SSL_KEYFILE: no such file") as error:
        load_settings()
    assert hidden not in str(error.value) and "client-key" not in str(error.value)
    with pytest.raises(ConfigError) as error:
        load_settings(ssl_keyfile=["client-key", "pem"])
    assert "SYMFONIC_SSL_KEYFILE=<secret>" in str(error.value)
    assert "client-key" not in str(error.value)


# --------------------------------------------------------------------------- client kwargs


def test_plaintext_clients_carry_no_tls_or_sasl() -> None:
    kwargs = client_kwargs(Settings(), "x")
    assert kwargs["bootstrap_servers"] == "127.0.0.1:9092"
    assert kwargs["security_protocol"] == "PLAINTEXT"
    assert "ssl_context" not in kwargs and "sasl_mechanism" not in kwargs


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_credentials_reach_aiokafka(mechanism: str) -> None:
    settings = Settings(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,  # type: ignore[arg-type]
        sasl_username="svc",
        sasl_password="pw",  # type: ignore[arg-type]
    )
    kwargs = client_kwargs(settings, "x")
    assert kwargs["sasl_mechanism"] == mechanism
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("svc", "pw")
    assert "ssl_context" not in kwargs


def test_sasl_ssl_gets_a_tls_context() -> None:
    settings = Settings(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="svc",
        sasl_password="pw",  # type: ignore[arg-type]
    )
    kwargs = client_kwargs(settings, "x")
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED


def test_the_engine_consumer_reads_committed_data_and_never_autocommits() -> None:
    kwargs = group_consumer_kwargs(Settings(batch_max_bytes=2048), "symfonic-typed")
    assert kwargs["group_id"] == "symfonic-typed"
    assert kwargs["isolation_level"] == "read_committed"
    assert kwargs["enable_auto_commit"] is False
    assert kwargs["auto_offset_reset"] == "earliest"
    assert kwargs["fetch_max_bytes"] == 2048
    restore = restore_consumer_kwargs(Settings(), "changelog")
    assert restore["group_id"] is None and restore["isolation_level"] == "read_committed"


@pytest.mark.parametrize(("setting", "codec"), [("none", None), ("zstd", "zstd"), ("lz4", "lz4")])
def test_the_transactional_producer_is_idempotent_with_acks_all(
    setting: str, codec: str | None
) -> None:
    settings = Settings(compression=setting, transaction_timeout_ms=5000)  # type: ignore[arg-type]
    kwargs = transactional_producer_kwargs(settings, "symfonic-typed-symfonic.agent-events-3")
    assert kwargs["transactional_id"] == "symfonic-typed-symfonic.agent-events-3"
    assert kwargs["enable_idempotence"] is True
    assert kwargs["acks"] == "all"
    assert kwargs["compression_type"] == codec
    assert kwargs["transaction_timeout_ms"] == 5000
    assert kwargs["retry_backoff_ms"] == 20  # aiokafka's 100 ms: bench/results/HISTORY.md


def _aiokafkas_own_backoff_override() -> float:
    """``sender.BACKOFF_OVERRIDE`` as aiokafka itself defines it: read in a fresh
    interpreter, where nothing of ours has run (this one may have built producers already).
    Fails when aiokafka has no such attribute, or it is not a float."""
    probe = (
        "from aiokafka.producer import sender; "
        "value = sender.BACKOFF_OVERRIDE; "
        "assert type(value) is float, type(value); "
        "print(repr(value))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, (
        "aiokafka no longer has a float sender.BACKOFF_OVERRIDE: the engine's shorter "
        f"AddPartitionsToTxn retry (kafka/producer.py) silently stops working\n{result.stderr}"
    )
    return float(result.stdout)


async def test_a_task_producer_shortens_aiokafkas_add_partitions_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The engine sets a module constant of aiokafka's sender; an aiokafka release that
    # renames it must fail here, not slow every other transaction down unnoticed.
    from aiokafka.producer import sender

    from symfonic_stream.kafka.producer import ADD_PARTITIONS_RETRY_S, ProcessProducer

    aiokafkas = _aiokafkas_own_backoff_override()
    assert aiokafkas != ADD_PARTITIONS_RETRY_S == 0.002
    # Nothing in our code creates the attribute (it only changes one that exists), so it
    # being here means aiokafka has it; a float, or the engine leaves it alone.
    assert isinstance(getattr(sender, "BACKOFF_OVERRIDE", None), float), (
        "aiokafka.producer.sender has no float BACKOFF_OVERRIDE"
    )
    # From aiokafka's own value (whatever an earlier test left), restored after the test.
    monkeypatch.setattr(sender, "BACKOFF_OVERRIDE", aiokafkas)
    settings = Settings()
    producer = ProcessProducer(settings, "copier-0")  # connects on start
    try:
        assert sender.BACKOFF_OVERRIDE == ADD_PARTITIONS_RETRY_S
    finally:
        await producer.close()


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SYMFONIC_GAP_TIMEOUT_S", "abc"), ("SYMFONIC_METRICS_PORT", "70000")],
)
def test_run_with_a_bad_setting_exits_2_naming_the_variable(variable: str, value: str) -> None:
    script = Path(sys.executable).parent / "symfonic-stream"
    env = {"PATH": "/usr/bin:/bin", variable: value}
    result = subprocess.run(
        [str(script), "run", "copier"], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert variable in result.stderr
    assert "Traceback" not in result.stderr


def test_every_topic_has_room_for_the_largest_record_written_to_it() -> None:
    """Issue 16: nothing kept a changelog record under the broker's max.message.bytes
    (default 1 MB): `topics ensure` now sets it on every topic from the bounds."""
    from symfonic_stream.app.topics import required_topics

    settings = Settings(max_record_bytes=1_000_000, max_output_bytes=3_000_000,
                        max_state_record_bytes=5_000_000)
    specs = required_topics(settings)
    limits = {spec.name: int(spec.configs["max.message.bytes"]) for spec in specs}
    # (the changelogs, and review-tickets: each ticket's review state, the ticket with it)
    changelogs = {spec.name for spec in specs if spec.cleanup_policy == "compact"}
    assert {name for name in limits if name.endswith("-changelog")} < changelogs
    for name, limit in limits.items():
        largest = 5_000_000 if name in changelogs else 3_000_000
        assert limit == largest + 65_536, name


def test_uvloop_where_it_is_not_installed_fails_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an absent module looks like
    with pytest.raises(ConfigError, match="SYMFONIC_EVENT_LOOP=uvloop, but uvloop is not"):
        load_settings()
    monkeypatch.setenv("SYMFONIC_EVENT_LOOP", "asyncio")
    assert load_settings().event_loop == "asyncio"


# --------------------------------------------------------------------------- unknown variables


def test_a_misspelt_setting_fails_naming_it_and_the_closest_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SYMFONIC_TOPIC_PREFX", "foo")
    with pytest.raises(ConfigError) as error:
        load_settings()
    message = str(error.value)
    assert "SYMFONIC_TOPIC_PREFX" in message and "SYMFONIC_TOPIC_PREFIX" in message
    assert "foo" not in message, "the value is never shown"


@pytest.mark.parametrize("args", [["run", "typed"], ["topics", "ensure"], ["gateway"]])
def test_a_command_with_a_misspelt_setting_stops_before_doing_anything(args: list[str]) -> None:
    from click.testing import CliRunner

    from symfonic_stream.cli import main

    done = CliRunner().invoke(main, args, env={"SYMFONIC_TOPIC_PREFX": "foo"})
    assert done.exit_code == 2, done.output
    assert "SYMFONIC_TOPIC_PREFX is not a setting (did you mean SYMFONIC_TOPIC_PREFIX?)" in (
        done.output)


def test_a_lowercase_misspelling_is_caught_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # pydantic-settings reads variables case-insensitively, so the check does as well.
    monkeypatch.setenv("symfonic_gap_timeout", "5")
    with pytest.raises(ConfigError, match="SYMFONIC_GAP_TIMEOUT_S"):
        load_settings()


def test_a_name_like_no_setting_is_named_without_a_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMFONIC_QQQQQQQQQQQQ", "1")
    with pytest.raises(ConfigError, match="SYMFONIC_QQQQQQQQQQQQ is not a setting") as error:
        load_settings()
    assert "did you mean" not in str(error.value)


def test_the_dev_and_test_variables_are_not_settings_and_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SYMFONIC_KAFKA_PORT", "SYMFONIC_TEST_CLUSTER", "SYMFONIC_FAULT_FREEZE",
                 "SYMFONIC_WORKER_INDEX", "SYMFONIC_UPDATE_GOLDEN", "SYMFONIC_TOOLS_DIR"):
        monkeypatch.setenv(name, "x")
    assert load_settings().topic_prefix == "symfonic"


def test_deliberate_extras_are_listed_by_name_or_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMFONIC_SIDECAR_MODE", "on")
    monkeypatch.setenv("SYMFONIC_TYPED_METRICS_SERVICE_HOST", "10.0.0.1")
    with pytest.raises(ConfigError, match="SYMFONIC_SIDECAR_MODE"):
        load_settings()
    monkeypatch.setenv("SYMFONIC_IGNORED_VARIABLES", "SYMFONIC_SIDECAR_MODE, SYMFONIC_TYPED_*")
    load_settings()


def test_an_unknown_variable_is_named_beside_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMFONIC_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("SYMFONIC_SASL_MECHANISMS", "PLAIN")
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert "SYMFONIC_SASL_MECHANISMS is not a setting" in str(error.value)
    assert "SYMFONIC_SASL_MECHANISM is required" in str(error.value)


def test_every_symfonic_variable_the_repository_uses_is_a_setting_or_not_one_on_purpose() -> None:
    """Scripts, Makefiles, tests and the chart name SYMFONIC_* variables; each must be a
    setting or fall under config.NOT_SETTINGS, or the check would stop them."""
    from symfonic_stream.config import is_known_variable

    root = Path(__file__).resolve().parents[2]
    found: set[str] = set()
    for pattern in ("scripts/*", "Makefile", "mk/*.mk", "tests/**/*.py", "bench/**/*.py",
                    "symfonic_stream/**/*.py", "helm/*/templates/**/*", ".ci/*"):
        for path in root.glob(pattern):
            # (This file names misspellings on purpose.)
            if path.is_file() and path != Path(__file__).resolve():
                found.update(re.findall(r"\bSYMFONIC_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    unknown = sorted(name for name in found if not is_known_variable(name, ""))
    assert unknown == []


def test_the_not_settings_namespaces_hold_no_setting() -> None:
    from symfonic_stream.config import NOT_SETTINGS, is_known_variable

    for name in Settings.model_fields:
        assert not any(fnmatch.fnmatchcase(f"SYMFONIC_{name.upper()}", p) for p in NOT_SETTINGS)
        assert is_known_variable(f"SYMFONIC_{name.upper()}", "")
