"""SASL_SSL (SCRAM-SHA-512) and mutual TLS, end to end on real listeners (issue 13).

``scripts/kafka.sh start`` gives the test broker both listeners, with a CA, certificates and
a SCRAM user it makes at start, and writes the ``SYMFONIC_*`` variables of each into an env
file (``scripts/kafka.sh secure-env sasl_ssl|mtls``). Against another Kafka, point
``SYMFONIC_TEST_SASL_SSL_ENV`` / ``SYMFONIC_TEST_MTLS_ENV`` at such files.

Each listener carries a whole deployment: ``topics ensure``, the publisher, the typed
projector killed mid-transaction and restarted, and the output compared with the reference
projection. The password, the key's path and the key itself never reach a log line (DEBUG
included) or ``/metrics``.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
from pathlib import Path

import pytest

from symfonic_stream.models.names import TopicNames

from .conftest import read_to_end
from .harness import (
    BOOTSTRAP,
    PARTITIONS,
    ConsumerProcess,
    consumer_env,
    kill_mid_transaction,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    run_cli,
    wait_caught_up,
)
from .kafka_view import transactional_ids
from .observe import quiesce
from .workloads import WORKLOADS, Feeder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

KAFKA_SH = Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh"
LISTENERS = ("sasl_ssl", "mtls")


def listener_env(name: str) -> dict[str, str]:
    """The ``SYMFONIC_*`` client settings of one secure listener (fails, never skips)."""
    override = os.environ.get(f"SYMFONIC_TEST_{name.upper()}_ENV")
    if override:
        path = Path(override)
    else:
        done = subprocess.run([str(KAFKA_SH), "secure-env", name], capture_output=True,
                              text=True, timeout=30, check=False)
        if done.returncode != 0:
            pytest.fail(f"no {name} listener: start the broker with scripts/kafka.sh start, "
                        f"or set SYMFONIC_TEST_{name.upper()}_ENV ({done.stderr.strip()})",
                        pytrace=False)
        path = Path(done.stdout.strip())
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _secrets(env: dict[str, str]) -> list[str]:
    """What must never be printed: the password, the key's path and its content."""
    found = [env[k] for k in ("SYMFONIC_SASL_PASSWORD", "SYMFONIC_SSL_KEYFILE") if k in env]
    if "SYMFONIC_SSL_KEYFILE" in env:
        body = Path(env["SYMFONIC_SSL_KEYFILE"]).read_text().splitlines()
        found.extend(line for line in body if line and not line.startswith("-----"))
    return found


@pytest.mark.parametrize("listener", LISTENERS)
async def test_a_deployment_runs_exactly_once_over_the_secure_listener(
    listener: str, prefix: str, tmp_path: Path, bootstrap_servers: str
) -> None:
    secure = listener_env(listener)
    names = TopicNames(prefix)
    env = {**consumer_env(prefix), **secure}
    ensured = await asyncio.to_thread(run_cli, ["topics", "ensure"], env, 120)
    assert ensured.returncode == 0, ensured.stderr
    feeder = Feeder(WORKLOADS["typed"], names.agent_events, seed=21, rate=400)
    # Part of the input goes through the publisher, on the same listener.
    published = WORKLOADS["typed"].batch(random.Random(21), 10_000)
    lines = tmp_path / "published.jsonl"
    lines.write_bytes(b"".join((v or b"") + b"\n" for _, v, _ in published))
    done = await asyncio.to_thread(run_cli, ["publish", str(lines)], env, 120)
    assert done.returncode == 0, done.stderr
    feeder.sent.extend(published)
    settings = {k.removeprefix("SYMFONIC_").lower(): v for k, v in secure.items()}
    settings.update(log_level="DEBUG", gap_timeout_s="600")
    first = ConsumerProcess("typed", prefix, tmp_path, name="-first", **settings).start()
    second = ConsumerProcess("typed", prefix, tmp_path, name="-second", **settings)
    processes = [first, second]
    try:
        await first.wait_ready(within=90)
        feeder.start()
        await feeder.sent_at_least(len(feeder.sent) + 800)
        assert await kill_mid_transaction(first, names.stream_events, transactional_ids(
            names.group("typed"), names.agent_events, range(PARTITIONS))), "no open transaction"
        second.start()
        await second.wait_ready(within=90)
        await feeder.sent_at_least(len(feeder.sent) + 400)
        metrics = (await asyncio.to_thread(second.probe, "/metrics"))[1]
        await feeder.stop()
        await wait_caught_up(names.group("typed"), names.agent_events, within=120)
        await quiesce(names.group("typed"), names.agent_events, [second])
        read = {t: await read_to_end(BOOTSTRAP, t) for t in WORKLOADS["typed"].outputs(names)}
    finally:
        await feeder.stop()
        for process in processes:
            process.stop()
    WORKLOADS["typed"].check(names, feeder.sent, read)
    logs = "".join(p.log_path.read_text(errors="replace") for p in processes)
    assert '"level":"DEBUG"' in logs, "the consumers logged at DEBUG (the strictest case)"
    for secret in _secrets(secure):
        assert secret not in logs, f"a secret of the {listener} listener reached a log line"
        assert secret not in metrics, f"a secret of the {listener} listener reached /metrics"
