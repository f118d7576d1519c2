"""The observability library: metrics move the right series, probes answer, logs are JSON."""

from __future__ import annotations

import asyncio
import io
import logging
import random
import re
from collections.abc import AsyncIterator, Iterator

import orjson
import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest

from symfonic_stream import __version__, native
from symfonic_stream.engine.processor import DeadLetterReason
from symfonic_stream.engine.readiness import Readiness
from symfonic_stream.observability import (
    COUNT_KEYS,
    DEAD_LETTER_REASONS,
    LATENCY_BUCKETS,
    RESUME_OUTCOMES,
    ConsumerMetrics,
    HealthState,
    configure_logging,
    redact,
    server_port,
    start_configured_health_server,
    start_health_server,
)
from symfonic_stream.observability.histogram import BatchHistogram
from symfonic_stream.observability.queues import QueueTickets

P = "symfonic_stream_"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> ConsumerMetrics:
    return ConsumerMetrics("typed", registry)


def snapshot(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample except the ``_created`` timestamps, keyed by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def changed(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> set[str]:
    """Names of the samples that appeared or whose value moved."""
    return {key[0] for key, value in after.items() if before.get(key) != value}


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(P + name, labels)


# -- metrics: each method moves exactly its series ----------------------------------------


def test_series_are_preinitialised_to_zero(registry: CollectorRegistry) -> None:
    ConsumerMetrics("typed", registry)
    for reason in DEAD_LETTER_REASONS:
        assert value(registry, "dead_letters_total", consumer="typed", reason=reason) == 0
    for name in (
        "duplicates_total",
        "gaps_total",
        "unknown_kinds_total",
        "buffered_events",
        "active_runs",
        "producers_fenced_total",
        "rebalances_total",
        "state_records_restored_total",
        "ready",
        "end_to_end_latency_seconds_count",
        "transaction_duration_seconds_count",
        "state_restore_duration_seconds_count",
    ):
        assert value(registry, name, consumer="typed") == 0, name
    for outcome in ("committed", "aborted"):
        assert value(registry, "transactions_total", consumer="typed", outcome=outcome) == 0
    # resume outcomes only on the consumer that resumes
    assert value(registry, "resumes_total", consumer="typed", outcome="accepted") is None
    ConsumerMetrics("resumes", registry)
    for outcome in RESUME_OUTCOMES:
        assert value(registry, "resumes_total", consumer="resumes", outcome=outcome) == 0


def test_build_info(registry: CollectorRegistry) -> None:
    ConsumerMetrics("typed", registry)
    samples = [s for f in registry.collect() for s in f.samples if s.name == P + "build_info"]
    assert len(samples) == 1
    assert samples[0].value == 1
    assert samples[0].labels["version"] == __version__
    assert set(samples[0].labels) == {"version", "python_version", "aiokafka_version", "native"}
    assert samples[0].labels["native"] == "true"  # make venv builds the native extension


def test_build_info_says_when_the_native_extension_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(native, "AVAILABLE", False)
    registry = CollectorRegistry()
    ConsumerMetrics("typed", registry)
    [sample] = [s for f in registry.collect() for s in f.samples if s.name == P + "build_info"]
    assert sample.labels["native"] == "false"


def test_record_in_and_out(registry: CollectorRegistry, metrics: ConsumerMetrics) -> None:
    before = snapshot(registry)
    metrics.record_in("symfonic.agent-events", "text_delta")
    metrics.record_in("symfonic.agent-events", "text_delta", 4)
    metrics.record_in("symfonic.agent-events", "invalid", 2)
    assert changed(before, snapshot(registry)) == {P + "records_in_total"}
    topic = "symfonic.agent-events"
    assert value(registry, "records_in_total", consumer="typed", topic=topic,
                 type="text_delta") == 5
    assert value(registry, "records_in_total", consumer="typed", topic=topic,
                 type="invalid") == 2
    before = snapshot(registry)
    metrics.record_out("symfonic.stream-events", "text_delta", 3)
    metrics.record_out("symfonic.stream-events", "end_completed")
    assert changed(before, snapshot(registry)) == {P + "records_out_total"}
    labels = {"consumer": "typed", "topic": "symfonic.stream-events"}
    assert value(registry, "records_out_total", type="text_delta", **labels) == 3
    assert value(registry, "records_out_total", type="end_completed", **labels) == 1


def test_dead_letter(registry: CollectorRegistry, metrics: ConsumerMetrics) -> None:
    before = snapshot(registry)
    metrics.dead_letter("invalid_json")
    metrics.dead_letter(DeadLetterReason.RUN_CLOSED)
    assert changed(before, snapshot(registry)) == {P + "dead_letters_total"}
    assert value(registry, "dead_letters_total", consumer="typed", reason="invalid_json") == 1
    assert value(registry, "dead_letters_total", consumer="typed", reason="run_closed") == 1
    with pytest.raises(ValueError, match="dead-letter reason"):
        metrics.dead_letter("invalid-json")


def test_add_counts(registry: CollectorRegistry, metrics: ConsumerMetrics) -> None:
    assert {"duplicates", "gaps", "unknown_kind", "abandoned_runs", "evicted_runs",
            "punctuations_cut_short"} == COUNT_KEYS
    before = snapshot(registry)
    metrics.add_counts({"duplicates": 2, "gaps": 1, "unknown_kind": 3, "abandoned_runs": 1,
                        "evicted_runs": 1, "punctuations_cut_short": 1})
    assert changed(before, snapshot(registry)) == {
        P + "duplicates_total",
        P + "gaps_total",
        P + "unknown_kinds_total",
        P + "abandoned_runs_total",
        P + "evicted_runs_total",
        P + "punctuations_cut_short_total",
    }
    assert value(registry, "duplicates_total", consumer="typed") == 2
    assert value(registry, "gaps_total", consumer="typed") == 1
    assert value(registry, "unknown_kinds_total", consumer="typed") == 3
    before = snapshot(registry)
    with pytest.raises(ValueError, match="duplicate"):
        metrics.add_counts({"duplicates": 1, "duplicate": 1})
    assert changed(before, snapshot(registry)) == set()  # nothing half-applied


def test_gauges(registry: CollectorRegistry, metrics: ConsumerMetrics) -> None:
    before = snapshot(registry)
    metrics.set_buffered(7)
    assert changed(before, snapshot(registry)) == {P + "buffered_events"}
    before = snapshot(registry)
    metrics.set_active_runs(3)
    assert changed(before, snapshot(registry)) == {P + "active_runs"}
    before = snapshot(registry)
    metrics.set_ready(True)
    assert changed(before, snapshot(registry)) == {P + "ready"}
    assert value(registry, "ready", consumer="typed") == 1
    metrics.set_ready(False)
    assert value(registry, "ready", consumer="typed") == 0
    assert value(registry, "buffered_events", consumer="typed") == 7
    assert value(registry, "active_runs", consumer="typed") == 3


def test_lag_and_forget_partition(registry: CollectorRegistry, metrics: ConsumerMetrics) -> None:
    before = snapshot(registry)
    metrics.set_lag("symfonic.agent-events", 3, 42)
    metrics.set_lag("symfonic.agent-events", 4, -1)  # a stale LSO never shows negative
    assert changed(before, snapshot(registry)) == {P + "consumer_lag_records"}
    labels = {"consumer": "typed", "topic": "symfonic.agent-events"}
    assert value(registry, "consumer_lag_records", partition="3", **labels) == 42
    assert value(registry, "consumer_lag_records", partition="4", **labels) == 0
    metrics.forget_partition("symfonic.agent-events", 3)
    assert value(registry, "consumer_lag_records", partition="3", **labels) is None
    assert value(registry, "consumer_lag_records", partition="4", **labels) == 0
    metrics.forget_partition("symfonic.agent-events", 99)  # unknown: no error


def test_latency_and_transactions(registry: CollectorRegistry, metrics: ConsumerMetrics) -> None:
    before = snapshot(registry)
    metrics.observe_end_to_end(0.02)
    metrics.observe_end_to_end(-5.0)  # clock skew counts as 0
    assert changed(before, snapshot(registry)) == {
        P + "end_to_end_latency_seconds_bucket",
        P + "end_to_end_latency_seconds_count",
        P + "end_to_end_latency_seconds_sum",
    }
    assert value(registry, "end_to_end_latency_seconds_count", consumer="typed") == 2
    assert value(registry, "end_to_end_latency_seconds_sum", consumer="typed") == pytest.approx(
        0.02
    )
    assert value(registry, "end_to_end_latency_seconds_bucket", consumer="typed", le="0.001") == 1

    before = snapshot(registry)
    metrics.observe_transaction(0.05, committed=True)
    metrics.observe_transaction(0.5, committed=False)
    assert changed(before, snapshot(registry)) == {
        P + "transaction_duration_seconds_bucket",
        P + "transaction_duration_seconds_count",
        P + "transaction_duration_seconds_sum",
        P + "transactions_total",
    }
    assert value(registry, "transactions_total", consumer="typed", outcome="committed") == 1
    assert value(registry, "transactions_total", consumer="typed", outcome="aborted") == 1


def test_fencing_rebalance_restore(registry: CollectorRegistry, metrics: ConsumerMetrics) -> None:
    before = snapshot(registry)
    metrics.producer_fenced()
    assert changed(before, snapshot(registry)) == {P + "producers_fenced_total"}
    before = snapshot(registry)
    metrics.rebalance()
    assert changed(before, snapshot(registry)) == {P + "rebalances_total"}
    before = snapshot(registry)
    metrics.state_restored(2.0, 1500)
    assert changed(before, snapshot(registry)) == {
        P + "state_restore_duration_seconds_bucket",
        P + "state_restore_duration_seconds_count",
        P + "state_restore_duration_seconds_sum",
        P + "state_records_restored_total",
    }
    assert value(registry, "state_records_restored_total", consumer="typed") == 1500
    assert value(registry, "state_restore_duration_seconds_sum", consumer="typed") == 2.0


def test_tickets_and_resumes(registry: CollectorRegistry) -> None:
    pauses = ConsumerMetrics("pauses", registry)
    resumes = ConsumerMetrics("resumes", registry)
    before = snapshot(registry)
    pauses.ticket_routed("default", "ask_user")
    assert changed(before, snapshot(registry)) == {P + "tickets_routed_total"}
    assert (
        value(registry, "tickets_routed_total", consumer="pauses", queue="default", kind="ask_user")
        == 1
    )
    before = snapshot(registry)
    resumes.resume("accepted")
    resumes.resume("bad_token")
    assert changed(before, snapshot(registry)) == {P + "resumes_total"}
    assert value(registry, "resumes_total", consumer="resumes", outcome="accepted") == 1
    assert value(registry, "resumes_total", consumer="resumes", outcome="bad_token") == 1
    with pytest.raises(ValueError, match="resume outcome"):
        resumes.resume("accept")


def test_consumers_share_one_registry(registry: CollectorRegistry) -> None:
    """The demo runs every consumer in one process: families are registered once."""
    typed = ConsumerMetrics("typed", registry)
    chunks = ConsumerMetrics("chunks", registry)
    typed.rebalance()
    assert value(registry, "rebalances_total", consumer="typed") == 1
    assert value(registry, "rebalances_total", consumer="chunks") == 0
    chunks.dead_letter("too_large")
    assert value(registry, "dead_letters_total", consumer="chunks", reason="too_large") == 1
    assert value(registry, "dead_letters_total", consumer="typed", reason="too_large") == 0


def test_latency_buckets_span_1ms_to_60s(registry: CollectorRegistry) -> None:
    ConsumerMetrics("typed", registry)
    assert LATENCY_BUCKETS[0] == 0.001
    assert LATENCY_BUCKETS[-1] == 60
    for name in ("end_to_end_latency_seconds", "transaction_duration_seconds"):
        bounds = [
            s.labels["le"]
            for f in registry.collect()
            for s in f.samples
            if s.name == P + name + "_bucket"
        ]
        assert bounds[0] == "0.001"
        assert bounds[-2:] == ["60.0", "+Inf"]


def test_no_run_label_and_prefix_everywhere(registry: CollectorRegistry) -> None:
    m = ConsumerMetrics("typed", registry)
    exercise(m)
    for family in registry.collect():
        assert family.name.startswith(P), family.name
        for sample in family.samples:
            for label in sample.labels:
                assert not re.search(r"run", label, re.IGNORECASE), (sample.name, label)
            if family.name != P + "build_info":
                assert sample.labels.get("consumer") == "typed", sample


def exercise(m: ConsumerMetrics) -> None:
    """Call every method once."""
    m.record_in("symfonic.agent-events", "done")
    m.record_out("symfonic.stream-events", "text_delta")
    m.dead_letter("invalid_json")
    m.add_counts({"duplicates": 1, "gaps": 1, "unknown_kind": 1})
    m.set_buffered(1)
    m.set_active_runs(1)
    m.set_lag("symfonic.agent-events", 0, 1)
    m.observe_end_to_end(0.1)
    m.observe_transaction(0.1, committed=True)
    m.producer_fenced()
    m.rebalance()
    m.state_restored(0.1, 1)
    m.ticket_routed("default", "ask_user")
    m.resume("accepted")
    m.claim("default", "granted")
    m.watch(lambda: [OneOpenTicket()])
    m.set_ready(True)


class OneOpenTicket:
    """A processor with one ticket open on queue ``default`` (observability/queues.py)."""

    def review_queues(self, now: float) -> dict[str, QueueTickets]:
        tickets = QueueTickets()
        tickets.add(now - 60, now + 600)
        return {"default": tickets}


# -- health ------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_health_state_staleness_and_readiness(registry: CollectorRegistry) -> None:
    clock = FakeClock()
    m = ConsumerMetrics("typed", registry)
    health = HealthState(60.0, clock=clock, metrics=m)
    assert health.alive and not health.ready
    clock.now += 60
    assert health.alive
    clock.now += 0.5
    assert not health.alive
    health.mark_progress()
    assert health.alive
    health.set_ready(True)
    assert health.ready
    assert value(registry, "ready", consumer="typed") == 1
    with pytest.raises(ValueError):
        HealthState(0)


async def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)  # until the server closes
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    assert lines[0].startswith("HTTP/1.1 ")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


async def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return await http(port, f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def server(
    registry: CollectorRegistry, clock: FakeClock
) -> AsyncIterator[tuple[int, HealthState, ConsumerMetrics]]:
    m = ConsumerMetrics("typed", registry)
    health = HealthState(60.0, clock=clock, metrics=m)
    srv = await start_health_server(0, registry, health, host="127.0.0.1")
    try:
        yield server_port(srv), health, m
    finally:
        srv.close()
        await srv.wait_closed()


async def test_metrics_endpoint(server: tuple[int, HealthState, ConsumerMetrics]) -> None:
    port, _, m = server
    m.record_in("symfonic.agent-events", "text_delta", 3)
    status, headers, body = await get(port, "/metrics")
    assert status == 200
    assert headers["content-type"] == CONTENT_TYPE_LATEST
    assert int(headers["content-length"]) == len(body)
    assert headers["connection"] == "close"
    text = body.decode()
    assert (
        'symfonic_stream_records_in_total{consumer="typed",topic="symfonic.agent-events",'
        'type="text_delta"} 3.0' in text
    )
    assert "# TYPE symfonic_stream_end_to_end_latency_seconds histogram" in text
    status, headers, body = await get(port, "/metrics?x=1", "HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


async def test_healthz_goes_503_when_progress_is_stale(
    server: tuple[int, HealthState, ConsumerMetrics], clock: FakeClock
) -> None:
    port, health, _ = server
    status, _, body = await get(port, "/healthz")
    assert (status, body) == (200, b"ok\n")
    clock.now += 61
    status, _, _ = await get(port, "/healthz")
    assert status == 503
    health.mark_progress()
    status, _, _ = await get(port, "/healthz")
    assert status == 200


async def test_readyz(server: tuple[int, HealthState, ConsumerMetrics]) -> None:
    port, health, _ = server
    status, _, _ = await get(port, "/readyz")
    assert status == 503
    health.set_ready(True)
    status, _, body = await get(port, "/readyz")
    assert (status, body) == (200, b"ready\n")


async def test_unknown_path_method_and_garbage(
    server: tuple[int, HealthState, ConsumerMetrics],
) -> None:
    port, _, _ = server
    status, headers, body = await get(port, "/nope")
    assert status == 404 and int(headers["content-length"]) == len(body)
    status, headers, _ = await get(port, "/metrics", "POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    status, _, _ = await http(port, b"hello\r\n\r\n")
    assert status == 400
    status, _, _ = await http(port, b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\n\r\n")
    assert status == 400
    # a client that hangs up mid-request does not break the server
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /hea")
    writer.close()
    await writer.wait_closed()
    status, _, _ = await get(port, "/healthz")
    assert status == 200


async def test_port_zero_in_settings_means_off(registry: CollectorRegistry) -> None:
    assert await start_configured_health_server(0, registry, HealthState()) is None


# -- logs --------------------------------------------------------------------------------


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    configure_logging("typed", "info", stream=stream)
    try:
        yield stream
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.captureWarnings(False)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def test_json_log_lines(log_stream: io.StringIO) -> None:
    log = logging.getLogger("symfonic_stream.engine")
    log.debug("not at info")
    log.info("consumed %d records", 3, extra={"topic": "t", "partition": 2, "offset": 9})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("batch failed", extra={"key": b"run-1"})
    out = lines(log_stream)
    assert len(out) == 2
    first, second = out
    assert first["level"] == "INFO"
    assert first["consumer"] == "typed"
    assert first["logger"] == "symfonic_stream.engine"
    assert first["message"] == "consumed 3 records"
    assert (first["topic"], first["partition"], first["offset"]) == ("t", 2, 9)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(first["time"]))
    assert second["level"] == "ERROR"
    assert "RuntimeError: boom" in str(second["exception"])
    assert second["key"] == "run-1"


def test_extra_cannot_forge_fixed_fields(log_stream: io.StringIO) -> None:
    logging.getLogger("x").warning("hi", extra={"consumer": "other", "level": "DEBUG"})
    (line,) = lines(log_stream)
    assert (line["consumer"], line["level"]) == ("typed", "WARNING")


def test_secrets_are_redacted(log_stream: io.StringIO) -> None:
    log = logging.getLogger("symfonic_stream.config")
    log.info(
        "connecting with sasl_password=hunter2 and token: 'abc def'",
        extra={
            "sasl_password": "hunter2",
            "settings": {
                "bootstrap_servers": "k:9092",
                "SASL_USERNAME": "svc",
                "nested": [{"client_secret": "s3cr3t", "ok": 1}],
            },
            "detail": 'config {"password": "hunter2"}',
        },
    )
    try:
        raise ValueError("login failed: password=hunter2")
    except ValueError:
        log.exception("failed")
    text = log_stream.getvalue()
    assert "hunter2" not in text and "s3cr3t" not in text and "abc def" not in text
    assert "svc" not in text  # every sasl_* key, the user name included
    first = lines(log_stream)[0]
    assert first["sasl_password"] == "<redacted>"
    settings = first["settings"]
    assert isinstance(settings, dict)
    assert settings["bootstrap_servers"] == "k:9092"
    assert settings["nested"] == [{"client_secret": "<redacted>", "ok": 1}]


def test_redact_is_safe_on_odd_values() -> None:
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    assert isinstance(redact(cyclic), dict)  # depth-bounded, no RecursionError
    assert redact({1: {"token": 5}}) == {"1": {"token": "<redacted>"}}


def test_unserialisable_extra_does_not_lose_the_line(log_stream: io.StringIO) -> None:
    logging.getLogger("x").info("big", extra={"n": 2**70, "obj": object()})
    (line,) = lines(log_stream)
    assert line["message"] == "big"
    assert line["n"] == str(2**70)


def test_bad_level_is_rejected() -> None:
    with pytest.raises(ValueError, match="log level"):
        configure_logging("typed", "LOUD", stream=io.StringIO())


def _exposition(registry: CollectorRegistry) -> list[str]:
    # ``_created`` is a timestamp prometheus-client adds to its own histograms only.
    return [line for line in generate_latest(registry).decode().splitlines()
            if "_created" not in line]


def test_the_batch_histogram_is_exported_exactly_like_a_prometheus_client_histogram() -> None:
    values = [0.0004, 0.001, 0.003, 0.01, 0.2, 0.25, 7.0, 61.0, 1e9, -3.0]
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batch = BatchHistogram("x_latency_seconds", "Doc.", "consumer", LATENCY_BUCKETS, ours)
    reference = Histogram("x_latency_seconds", "Doc.", ("consumer",), buckets=LATENCY_BUCKETS,
                          registry=theirs)
    batch.labels("typed").observe_many(values[:4])
    batch.labels("typed").observe_many(values[4:])
    batch.labels("chunks").observe(0.02)
    for value in values:
        reference.labels("typed").observe(max(0.0, value))  # what observe_end_to_end did
    reference.labels("chunks").observe(0.02)

    assert _exposition(ours) == _exposition(theirs)
    assert 'x_latency_seconds_bucket{consumer="typed",le="0.001"} 3.0' in _exposition(ours)
    assert 'x_latency_seconds_count{consumer="typed"} 10.0' in _exposition(ours)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        BatchHistogram("x_latency_seconds", "Doc.", "consumer", LATENCY_BUCKETS, ours)
    with pytest.raises(ValueError, match="increasing"):
        BatchHistogram("y_seconds", "Doc.", "consumer", (1.0, 0.5), CollectorRegistry())


def _buckets(registry: CollectorRegistry) -> dict[str, float]:
    return {sample.labels["le"]: sample.value
            for family in registry.collect() for sample in family.samples
            if sample.name.endswith("_bucket")}


def test_the_batch_histogram_places_any_batch_as_one_observe_per_value_would() -> None:
    """Random batches with values on the bounds, between, above, negative and repeated:
    the same bucket counts as prometheus-client's, the same sum (up to rounding)."""
    rng = random.Random(18)
    values = [*LATENCY_BUCKETS, *(b * 1.000001 for b in LATENCY_BUCKETS), -0.5, 0.0, 1e6]
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batch = BatchHistogram("z_seconds", "Doc.", "consumer", LATENCY_BUCKETS, ours)
    reference = Histogram("z_seconds", "Doc.", ("consumer",), buckets=LATENCY_BUCKETS,
                          registry=theirs)
    observed: list[float] = []
    for size in (0, 1, 2, 7, 100, 1000):
        one = [rng.choice(values) if rng.random() < 0.5 else rng.uniform(-1.0, 120.0)
               for _ in range(size)]
        batch.labels("typed").observe_many(iter(one) if size % 2 else one)
        observed.extend(one)
        for value in one:
            reference.labels("typed").observe(max(0.0, value))

    assert _buckets(ours) == _buckets(theirs)
    assert _buckets(ours)["+Inf"] == len(observed)
    (ours_sum,) = [s.value for f in ours.collect() for s in f.samples if s.name.endswith("_sum")]
    (their_sum,) = [s.value for f in theirs.collect() for s in f.samples
                    if s.name.endswith("_sum")]
    assert ours_sum == pytest.approx(their_sum, rel=1e-12)


def test_readiness_says_which_partitions_keep_failing(metrics: ConsumerMetrics) -> None:
    health = HealthState()
    readiness = Readiness(health, metrics)
    readiness.assigned = True
    readiness.refresh(setting_up=[], failing=[], stopping=False)
    assert health.ready
    readiness.refresh(setting_up=[], failing=[3, 1], stopping=False)
    assert not health.ready and "partitions [1, 3] keep failing" in health.reason
    readiness.refresh(setting_up=[], failing=[], stopping=False)  # one committed again
    assert health.ready


def test_a_consumer_without_the_native_extension_warns_at_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    log = logging.getLogger("symfonic_stream.runtime.service")
    native.warn_if_missing(log)
    assert caplog.records == []  # make venv builds it: nothing to say
    monkeypatch.setattr(native, "AVAILABLE", False)
    monkeypatch.setattr(native, "MISSING", "No module named 'symfonic_stream._native'")
    native.warn_if_missing(log)
    [record] = caplog.records
    assert record.levelno == logging.WARNING and "pure Python" in record.getMessage()
    assert record.__dict__["error"] == "No module named 'symfonic_stream._native'"
