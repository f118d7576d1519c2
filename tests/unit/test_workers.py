"""``run --workers N`` without a broker: the merged metrics, the combined probes, the
supervisor's signals and exit statuses (with stand-in workers), the worker's own settings."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import signal
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from symfonic_stream.config import ConfigError, Settings, load_settings
from symfonic_stream.observability.aggregate import (
    WorkerAnswer,
    combine,
    http_get,
    merge_expositions,
    parse_expositions,
)
from symfonic_stream.observability.logs import configure_logging
from symfonic_stream.observability.metrics import SupervisorMetrics
from symfonic_stream.runtime import workers as workers_module
from symfonic_stream.runtime.workers import (
    WORKER_INDEX_ENV,
    Supervisor,
    worker_env,
    worker_index,
)

# --------------------------------------------------------------------------- merged metrics


def exposition(partitions: list[int], latencies: list[float], records: int) -> str:
    """What one worker's /metrics could say (prometheus-client's own text)."""
    registry = CollectorRegistry()
    assigned = Gauge("symfonic_stream_partition_assigned", "Owned.\nSecond line \\ here",
                     ("consumer", "topic", "partition"), registry=registry)
    for partition in partitions:
        assigned.labels("typed", "raw", str(partition)).set(1)
    latency = Histogram("symfonic_stream_latency_seconds", "Latency.", ("consumer",),
                        buckets=(0.1, 1.0), registry=registry)
    for seconds in latencies:
        latency.labels("typed").observe(seconds)
    Counter("symfonic_stream_records_in", "Records in.", ("consumer",),
            registry=registry).labels("typed").inc(records)
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_two_workers_merge_into_one_valid_text_with_worker_labels() -> None:
    zero = exposition([0, 2], [0.05, 0.5], records=3)
    one = exposition([1, 3], [2.0], records=4)
    own = SupervisorMetrics("typed", 2)
    own.set_up(2)
    text = merge_expositions(parse_expositions({"0": zero, "1": one}),
                             own=own.registry.collect()).decode()

    # HELP and TYPE once per family, however many workers have it.
    for family in ("symfonic_stream_partition_assigned", "symfonic_stream_latency_seconds",
                   "symfonic_stream_records_in_total", "symfonic_stream_workers_up"):
        assert text.count(f"# HELP {family} ") == 1, family
        assert text.count(f"# TYPE {family} ") == 1, family
    assert "# TYPE symfonic_stream_records_in_total counter" in text
    assert "# TYPE symfonic_stream_latency_seconds histogram" in text
    # Every line is a comment or a sample: nothing the Prometheus text format forbids.
    for line in text.splitlines():
        assert line.startswith("# ") or re.match(r"^[a-z_]+(\{.*\})? \S+$", line), line

    got = samples(text)  # parses back
    for worker, source in (("0", zero), ("1", one)):
        for (name, labels), value in samples(source).items():
            assert got[(name, tuple(sorted((*labels, ("worker", worker)))))] == value, name
    assert len(got) == len(samples(zero)) + len(samples(one)) + 2  # + the supervisor's two
    assigned = {
        dict(labels)["worker"]: dict(labels)["partition"] for (name, labels), _ in got.items()
        if name == "symfonic_stream_partition_assigned" and dict(labels)["partition"] in "01"
    }
    assert assigned == {"0": "0", "1": "1"}
    # Histograms keep their series: buckets with le, _count and _sum, per worker.
    assert got[("symfonic_stream_latency_seconds_bucket",
                (("consumer", "typed"), ("le", "1.0"), ("worker", "0")))] == 2
    assert got[("symfonic_stream_latency_seconds_count",
                (("consumer", "typed"), ("worker", "1")))] == 1
    assert got[("symfonic_stream_latency_seconds_sum",
                (("consumer", "typed"), ("worker", "1")))] == 2.0
    assert got[("symfonic_stream_records_in_total",
                (("consumer", "typed"), ("worker", "1")))] == 4
    assert got[("symfonic_stream_workers", (("consumer", "typed"),))] == 2
    assert got[("symfonic_stream_workers_up", (("consumer", "typed"),))] == 2
    # The HELP text survives its escaping both ways.
    [assigned_family] = [f for f in text_string_to_metric_families(text)
                         if f.name == "symfonic_stream_partition_assigned"]
    assert assigned_family.documentation == "Owned.\nSecond line \\ here"


def test_a_worker_whose_text_does_not_parse_is_left_out() -> None:
    parsed = parse_expositions({"0": exposition([0], [], 1), "1": "not {a metric"})
    assert list(parsed) == ["0"]
    text = merge_expositions(parsed).decode()
    assert 'worker="0"' in text and 'worker="1"' not in text


def test_a_label_worker_of_a_worker_is_replaced_and_the_supervisors_families_win() -> None:
    registry = CollectorRegistry()
    Gauge("g", "G.", ("worker",), registry=registry).labels("forged").set(1)
    Gauge("symfonic_stream_workers", "Forged.", registry=registry).set(99)
    own = SupervisorMetrics("typed", 3)
    text = merge_expositions(parse_expositions({"2": generate_latest(registry).decode()}),
                             own=own.registry.collect()).decode()
    got = samples(text)
    assert got[("g", (("worker", "2"),))] == 1
    assert ("g", (("worker", "forged"),)) not in got
    assert got == {
        ("g", (("worker", "2"),)): 1,
        ("symfonic_stream_workers", (("consumer", "typed"),)): 3,
        ("symfonic_stream_workers_up", (("consumer", "typed"),)): 0,
    }


# --------------------------------------------------------------------------- probes


def test_combined_probes_are_ok_only_when_every_worker_runs_and_says_200() -> None:
    ok = [WorkerAnswer(0, None, 200, "ready\n"), WorkerAnswer(1, None, 200, "ready\n")]
    assert combine(ok) == (True, "")
    assert combine([]) == (True, "")
    ready, why = combine([
        ok[0],
        WorkerAnswer(1, None, 503, "not ready: rebalancing\n"),
        WorkerAnswer(2, 1, 0, ""),
        WorkerAnswer(3, None, 0, "no answer within 3 s"),
        WorkerAnswer(4, None, 503, "stale\n"),
    ])
    assert not ready
    assert why == ("worker 1: rebalancing; worker 2: exited with status 1; "
                   "worker 3: does not answer (no answer within 3 s); worker 4: stale")
    # An exited worker is not ok whatever it said before.
    assert combine([WorkerAnswer(0, 0, 200, "ready\n")]) == (False, "worker 0: exited with "
                                                                "status 0")
    long = combine([WorkerAnswer(i, None, 503, "x" * 300) for i in range(4)])
    assert not long[0] and len(long[1]) == 500


async def test_http_get_answers_zero_and_why_when_nothing_listens() -> None:
    status, body = await http_get(_unused_port(), "/healthz", timeout_s=2)
    assert status == 0 and body


def _unused_port() -> int:
    from symfonic_stream.runtime.workers import free_port

    return free_port()


# --------------------------------------------------------------------------- settings


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("SYMFONIC_"):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_env")
@pytest.mark.parametrize("value", ["0", "65", "-1", "two", "1.5"])
def test_a_bad_workers_value_names_symfonic_workers(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("SYMFONIC_WORKERS", value)
    with pytest.raises(ConfigError) as error:
        load_settings()
    assert f"SYMFONIC_WORKERS={value!r}" in str(error.value)


@pytest.mark.usefixtures("clean_env")
def test_workers_default_to_one_and_the_flag_overrides_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().workers == 1
    monkeypatch.setenv("SYMFONIC_WORKERS", "64")
    assert load_settings().workers == 64
    assert load_settings(workers="3").workers == 3
    with pytest.raises(ConfigError, match="SYMFONIC_WORKERS=65"):
        load_settings(workers=65)


def test_a_worker_gets_its_index_a_port_and_one_worker() -> None:
    env = worker_env({"SYMFONIC_WORKERS": "4", "PATH": "/bin"}, 3, 12345)
    assert env == {"SYMFONIC_WORKERS": "1", "PATH": "/bin", WORKER_INDEX_ENV: "3",
                   "SYMFONIC_METRICS_PORT": "12345"}
    assert worker_index(env) == 3
    assert worker_index({}) is None
    for bad in ("x", "-1", "64"):
        with pytest.raises(ConfigError, match=f"{WORKER_INDEX_ENV}='{bad}'"):
            worker_index({WORKER_INDEX_ENV: bad})


def test_a_workers_log_lines_say_which_worker() -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    try:
        configure_logging("typed", "info", stream=stream, worker=1)
        logging.getLogger("t").info("hello", extra={"worker": 7, "partition": 2})
        configure_logging("typed", "info", stream=stream)
        logging.getLogger("t").info("about one", extra={"worker": 7})
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (first["worker"], first["partition"], first["consumer"]) == (1, 2, "typed")
    assert second["worker"] == 7  # the supervisor's line about its worker 7


# --------------------------------------------------------------------------- the supervisor

#: A stand-in worker: serves /healthz, /readyz and /metrics with the real server, is ready
#: at once unless told otherwise, exits 0 on SIGTERM, or with FAKE_EXIT after FAKE_AFTER s.
FAKE_WORKER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from prometheus_client import CollectorRegistry, Gauge
    from symfonic_stream.observability.health import HealthState, start_health_server

    async def main() -> int:
        registry = CollectorRegistry()
        index = os.environ["SYMFONIC_WORKER_INDEX"]
        Gauge("fake_up", "Up.", ("index", "workers"), registry=registry).labels(
            index, os.environ["SYMFONIC_WORKERS"]).set(1)
        health = HealthState()
        health.set_ready(os.environ.get("FAKE_READY", "1") == "1", "still restoring")
        server = await start_health_server(
            int(os.environ["SYMFONIC_METRICS_PORT"]), registry, health, "127.0.0.1")
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        after = os.environ.get(f"FAKE_AFTER_{index}")
        try:
            await asyncio.wait_for(stop.wait(), float(after) if after else None)
        except TimeoutError:
            return int(os.environ["FAKE_EXIT"])
        finally:
            server.close()
        return int(os.environ.get("FAKE_STOP_STATUS", "0"))

    sys.exit(asyncio.run(main()))
""")


@pytest.fixture
def fake_worker(tmp_path: Path) -> Iterator[Path]:
    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    yield script


@pytest.fixture
async def supervisor(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Supervisor, asyncio.Task[int]]]:
    monkeypatch.setenv("SYMFONIC_WORKERS", "5")  # what the workers must not inherit
    settings = Settings(workers=2, metrics_port=_unused_port(), shutdown_timeout_s=2)
    sup = Supervisor("typed", settings, lambda index: (sys.executable, str(fake_worker)))
    task = asyncio.create_task(sup.run())
    yield sup, task
    if not task.done():
        sup.stop()
        await asyncio.wait_for(task, 30)


async def ask(sup: Supervisor, path: str) -> tuple[int, str]:
    assert sup.port is not None
    status, body = await http_get(sup.port, path, timeout_s=5)
    return status, body.decode()


async def until_ready(sup: Supervisor, task: asyncio.Task[int]) -> None:
    for _ in range(200):
        assert not task.done(), task.result()
        if sup.port is not None and (await ask(sup, "/readyz"))[0] == 200:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not ready: {await ask(sup, '/readyz')}")


async def test_the_supervisor_serves_its_workers_and_sigterm_stops_them_all(
    supervisor: tuple[Supervisor, asyncio.Task[int]],
) -> None:
    sup, task = supervisor
    await until_ready(sup, task)
    assert (await ask(sup, "/healthz"))[0] == 200
    status, text = await ask(sup, "/metrics")
    assert status == 200
    got = samples(text)
    # Each worker knows its index and that it is one worker (not the supervisor's 5).
    assert {labels for name, labels in got if name == "fake_up"} == {
        (("index", "0"), ("worker", "0"), ("workers", "1")),
        (("index", "1"), ("worker", "1"), ("workers", "1")),
    }
    assert got[("symfonic_stream_workers_up", (("consumer", "typed"),))] == 2
    pids = [w.process.pid for w in sup.workers]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's own handler
    assert await asyncio.wait_for(task, 20) == 0
    assert [w.exit_status for w in sup.workers] == [0, 0]


async def test_a_worker_that_exits_on_its_own_stops_the_other_and_fails(
    supervisor: tuple[Supervisor, asyncio.Task[int]],
) -> None:
    sup, task = supervisor
    await until_ready(sup, task)
    sup.workers[1].process.kill()
    assert await asyncio.wait_for(task, 20) == 1
    assert sup.workers[0].exit_status == 0  # stopped gracefully, by SIGTERM
    assert sup.workers[1].exit_status == -signal.SIGKILL


async def test_a_worker_that_exits_zero_unasked_is_a_failure_too(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_AFTER_0", "1.0")
    monkeypatch.setenv("FAKE_EXIT", "0")
    settings = Settings(workers=2, metrics_port=0, shutdown_timeout_s=2)
    sup = Supervisor("typed", settings, lambda index: (sys.executable, str(fake_worker)))
    # No server at all (SYMFONIC_METRICS_PORT=0): the workers get port 0 too.
    assert await asyncio.wait_for(sup.run(), 20) == 1
    assert sup.port is None and [w.port for w in sup.workers] == [0, 0]
    assert [w.exit_status for w in sup.workers] == [0, 0]


async def test_a_worker_that_does_not_answer_fails_the_probes_and_drops_from_metrics(
    supervisor: tuple[Supervisor, asyncio.Task[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sup, task = supervisor
    await until_ready(sup, task)
    monkeypatch.setattr(workers_module, "PROBE_TIMEOUT_S", 0.5)
    sup.workers[1].process.send_signal(signal.SIGSTOP)  # alive, but answers nothing
    try:
        status, body = await ask(sup, "/readyz")
        assert status == 503
        assert body.startswith("not ready: worker 1: does not answer (no answer within")
        status, body = await ask(sup, "/healthz")
        assert status == 503 and body.startswith("worker 1: does not answer")
        status, text = await ask(sup, "/metrics")
        workers = {dict(labels)["worker"] for name, labels in samples(text) if name == "fake_up"}
        assert workers == {"0"}
        got = samples(text)
        assert got[("symfonic_stream_workers_up", (("consumer", "typed"),))] == 1
    finally:
        sup.workers[1].process.send_signal(signal.SIGCONT)
    sup.stop()
    assert await asyncio.wait_for(task, 20) == 0


async def test_a_worker_not_ready_names_itself_and_a_stop_times_out_into_sigkill(
    fake_worker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_READY", "0")
    monkeypatch.setattr(workers_module, "SHUTDOWN_MARGIN_S", 0.5)
    settings = Settings(workers=2, metrics_port=_unused_port(), shutdown_timeout_s=0.5)
    sup = Supervisor("typed", settings, lambda index: (sys.executable, str(fake_worker)))
    task = asyncio.create_task(sup.run())
    try:
        for _ in range(200):
            if sup.port is not None and len(sup.workers) == 2:
                status, body = await ask(sup, "/readyz")
                if "does not answer" not in body:  # both servers are up
                    break
            await asyncio.sleep(0.05)
        assert status == 503
        assert body == ("not ready: worker 0: still restoring; worker 1: still restoring\n")
    finally:
        for worker in sup.workers:
            worker.process.send_signal(signal.SIGSTOP)  # SIGTERM cannot stop them now
        sup.stop()
    assert await asyncio.wait_for(task, 30) == 1  # killed after 0.5 s + the margin
    assert [w.exit_status for w in sup.workers] == [-signal.SIGKILL, -signal.SIGKILL]
