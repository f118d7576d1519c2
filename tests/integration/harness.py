"""Helpers for the engine's integration tests: topics, consumer subprocesses, reading output.

Every test works under its own topic prefix (``t<uuid>``), so tests never see each other's
topics or groups on the shared broker. Consumers run as real ``symfonic-stream run``
subprocesses so a test can SIGKILL them mid-transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from symfonic_stream.app.topics import required_topics
from symfonic_stream.config import Settings
from symfonic_stream.engine.engine import Engine
from symfonic_stream.engine.topology import Topology
from symfonic_stream.kafka.admin import ensure_topics, group_offsets
from symfonic_stream.observability.health import HealthState
from symfonic_stream.observability.metrics import ConsumerMetrics
from symfonic_stream.runtime.workers import free_port

from .conftest import partitions_of, register_name
from .kafka_view import transactions

BOOTSTRAP = os.environ.get("SYMFONIC_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
PARTITIONS = 4


def unique_prefix() -> str:
    return register_name(f"t{uuid.uuid4().hex[:12]}")


@pytest.fixture(name="prefix")
async def prefix_fixture(bootstrap_servers: str) -> AsyncIterator[str]:
    """A fresh topic prefix; the test's topics are deleted afterwards.

    Set ``SYMFONIC_TEST_KEEP_TOPICS=1`` to keep them for a post-mortem.
    """
    name = unique_prefix()
    yield name
    if os.environ.get("SYMFONIC_TEST_KEEP_TOPICS"):
        return
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.startswith((f"{name}.", f"{name}-"))]
        if mine:
            with contextlib.suppress(KafkaError):
                await admin.delete_topics(mine)
    finally:
        await admin.close()


def settings_for(prefix: str, **overrides: Any) -> Settings:
    return Settings(
        bootstrap_servers=BOOTSTRAP, topic_prefix=prefix, partitions=PARTITIONS, **overrides
    )


def cli_path() -> str:
    """The ``symfonic-stream`` script of the interpreter running the tests."""
    local = Path(sys.executable).parent / "symfonic-stream"
    if local.exists():
        return str(local)
    found = shutil.which("symfonic-stream")
    if found is None:
        raise RuntimeError("symfonic-stream is not installed in this environment")
    return found


def consumer_env(prefix: str, **settings: str | int | float) -> dict[str, str]:
    """The environment of a consumer subprocess: the test's prefix plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    env.update(
        SYMFONIC_BOOTSTRAP_SERVERS=BOOTSTRAP,
        SYMFONIC_TOPIC_PREFIX=prefix,
        SYMFONIC_PARTITIONS=str(PARTITIONS),
        SYMFONIC_METRICS_PORT="0",
        SYMFONIC_LOG_LEVEL="INFO",
    )
    env.update({f"SYMFONIC_{k.upper()}": str(v) for k, v in settings.items()})
    return env


async def create_topics(prefix: str, *, with_copier: bool = True,
                        partitions: int = PARTITIONS) -> Settings:
    """``topics ensure`` for ``prefix``, then wait until every partition has a leader."""
    settings = settings_for(prefix).model_copy(update={"partitions": partitions})
    specs = required_topics(settings, include_copier=with_copier)
    report = await ensure_topics(settings, specs)
    assert report.ok, report.mismatches
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            described = await admin.describe_topics([spec.name for spec in specs])
            led = [
                t for t in described
                if t["error_code"] == 0 and len(t["partitions"]) == partitions
                and all(p["leader"] >= 0 for p in t["partitions"])
            ]
            if len(led) == len(specs):
                break
            assert time.monotonic() < deadline, f"topics of {prefix} have no leaders yet"
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    return settings


#: The names of the samples a metric family of each type exposes, after the family's name.
_SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"), "gauge": ("",), "info": ("_info",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("", "_count", "_sum", "_created"),
}
Samples = list[tuple[dict[str, str], float]]


def samples_of(families: Iterable[Metric], name: str) -> Samples:
    """Every sample called ``name`` (its labels and value). Fails when no family declares
    it: a declared family's series that has no value yet (a labelled counter before its
    first increment) is rightly read as none, but a name nothing declares (a metric renamed
    or gone) must not read as 0 and pass an upper bound."""
    found: Samples = []
    declared = False
    for family in families:
        suffixes = _SAMPLE_SUFFIXES.get(family.type, ("",))
        declared = declared or any(name == family.name + suffix for suffix in suffixes)
        found += [(dict(s.labels), float(s.value)) for s in family.samples if s.name == name]
    assert declared, f"no metric family declares {name}: renamed, or not registered?"
    return found


def sample_value(found: Samples, name: str, labels: dict[str, str], consumer: str,
                 family: Samples | None = None) -> float:
    """The first of ``found`` (samples of ``name``) with ``labels``, of ``consumer``; 0 when
    its series has no value yet. A label that no sample of ``name`` has fails: a renamed
    label would otherwise read as 0 too."""
    every = found if family is None else family
    names = {key for sample, _ in every for key in sample}
    unknown = sorted(set(labels) - names) if every else []
    assert not unknown, f"{name} has no label {unknown} (its labels: {sorted(names)})"
    for sample, value in found:
        if all(sample.get(k) == v for k, v in labels.items()) and (
                sample.get("consumer", consumer) == consumer):
            return value
    return 0.0


class ConsumerProcess:
    """One ``symfonic-stream run <consumer>`` subprocess with its log in ``log_path``
    (``args`` runs another command instead, e.g. a replay)."""

    def __init__(
        self,
        consumer: str,
        prefix: str,
        log_dir: Path,
        name: str = "",
        *,
        args: Sequence[str] | None = None,
        **settings: Any,
    ):
        self.consumer = consumer
        self.args = list(args) if args is not None else ["run", consumer]
        self.port = free_port()
        self.env = consumer_env(prefix, metrics_port=self.port, **settings)
        self.log_path = log_dir / f"{consumer}{name}-{uuid.uuid4().hex[:6]}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ConsumerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [cli_path(), *self.args], env=self.env, stdout=log, stderr=log
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def ready(self) -> bool:
        return self.probe("/readyz")[0] == 200

    def probe(self, path: str) -> tuple[int, str]:
        """(HTTP status, body) of ``path`` on the metrics server; (0, error) when it does
        not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=1) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            return 0, repr(exc)

    async def wait_ready(self, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"consumer exited with {self.proc.returncode}:\n{self.log()}")
            if await asyncio.to_thread(self.ready):
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"consumer not ready after {within}s:\n{self.log()}")

    def metric(self, name: str, **labels: str) -> float:
        """One sample from the process's ``/metrics``, of this process's consumer unless
        ``consumer`` says otherwise (the resumes process serves its intake's series too,
        under ``consumer="resume-intake"``): :func:`sample_value`."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        consumer = labels.pop("consumer", self.consumer)
        found = samples_of(text_string_to_metric_families(text), name)
        return sample_value(found, name, labels, consumer)

    def kill(self) -> None:
        """SIGKILL: no shutdown, transactions left open mid-flight."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    async def wait(self, within: float) -> int:
        assert self.proc is not None
        proc = self.proc
        return await asyncio.to_thread(proc.wait, within)

    def log(self, tail: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-tail:])

    def stop(self) -> None:
        """Test clean-up: whatever state it is in, the process is gone afterwards."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def run_cli(
    args: Sequence[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cli_path(), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


async def produce(
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes]]]],
    *,
    rate: float | None = None,
    partition: int | None = None,
) -> int:
    """Publish ``(key, value, headers)`` records (idempotent, acks=all); ``rate`` per second.

    Records go to their key's partition (the default partitioner), or all to ``partition``.
    """
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, enable_idempotence=True, linger_ms=5)
    await producer.start()
    count = 0
    started = time.monotonic()
    try:
        for key, value, headers in records:
            await producer.send(
                topic, key=key, value=value, headers=list(headers), partition=partition
            )
            count += 1
            if rate is not None and count % 50 == 0:
                ahead = count / rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        await producer.flush()
    finally:
        await producer.stop()
    return count


class TopicReader:
    """Reads a whole topic with ``isolation_level=read_committed``, incrementally."""

    def __init__(self, topic: str, isolation_level: str = "read_committed") -> None:
        self.topic = topic
        self.records: list[Record] = []
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=BOOTSTRAP,
            group_id=None,
            isolation_level=isolation_level,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )

    async def __aenter__(self) -> TopicReader:
        try:
            partitions = await partitions_of(BOOTSTRAP, self.topic)
        except BaseException:
            await self._consumer.stop()  # never started: else "Unclosed AIOKafkaConsumer"
            raise
        await self._consumer.start()
        tps = [TopicPartition(self.topic, p) for p in partitions]
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def poll(self, timeout_ms: int = 200) -> int:
        batch = await self._consumer.getmany(timeout_ms=timeout_ms)
        added = 0
        for records in batch.values():
            for r in records:
                headers = tuple((k, v) for k, v in (r.headers or ()))
                self.records.append(Record(r.topic, r.partition, r.offset, r.key, r.value, headers))
                added += 1
        return added

    async def until(self, count: int, within: float) -> list[Record]:
        """Read until at least ``count`` records arrived (or ``within`` seconds passed)."""
        deadline = time.monotonic() + within
        while len(self.records) < count and time.monotonic() < deadline:
            await self.poll()
        return self.records

    async def settle(self, quiet: float = 2.0, within: float = 60.0) -> list[Record]:
        """Read until nothing new arrived for ``quiet`` seconds."""
        deadline = time.monotonic() + within
        last_new = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last_new < quiet:
            if await self.poll():
                last_new = time.monotonic()
        return self.records


async def count_records(topic: str) -> int:
    """How many committed records ``topic`` holds: read to its end offsets, read_committed."""
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        total = 0
        while True:
            batch = await consumer.getmany(timeout_ms=500)
            if not batch:
                ends = await consumer.end_offsets(tps)
                positions = [await consumer.position(tp) for tp in tps]
                if all(at >= ends[tp] for at, tp in zip(positions, tps, strict=True)):
                    return total
            total += sum(len(records) for records in batch.values())
    finally:
        await consumer.stop()


async def committed_offsets(group: str, topic: str) -> dict[int, int]:
    """The group's committed offset of each partition of ``topic``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        offsets = await group_offsets(admin, group)
    finally:
        await admin.close()
    return {tp.partition: offset for tp, offset in offsets.items() if tp.topic == topic}


async def end_offsets(topic: str) -> dict[int, int]:
    """The read_committed end (last stable offset) of each partition of ``topic``."""
    partitions = await partitions_of(BOOTSTRAP, topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return {tp.partition: offset for tp, offset in ends.items()}


async def open_transaction_partitions(topic: str) -> list[int]:
    """Partitions of ``topic`` whose last stable offset is behind the high watermark."""
    partitions = await partitions_of(BOOTSTRAP, topic)
    tps = [TopicPartition(topic, p) for p in partitions]
    ends: dict[str, dict[TopicPartition, int]] = {}
    for level in ("read_committed", "read_uncommitted"):
        consumer = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, isolation_level=level)
        await consumer.start()
        try:
            consumer.assign(tps)
            ends[level] = await consumer.end_offsets(tps)
        finally:
            await consumer.stop()
    return [tp.partition for tp in tps
            if ends["read_committed"][tp] < ends["read_uncommitted"][tp]]


async def _own_transaction_open(output_topic: str, transactional_ids: Sequence[str]) -> bool:
    """Whether one of ``transactional_ids`` has a transaction Ongoing (begun, its commit
    not yet logged) with records on ``output_topic`` still past the last stable offset.

    Asked of the transaction coordinator, so another writer's open transaction on the
    same topic does not count, nor does a commit already logged whose markers are on
    their way."""
    open_partitions = set(await open_transaction_partitions(output_topic))
    if not open_partitions:
        return False
    described = await transactions(list(transactional_ids))
    return any(t.open_on(output_topic) and t.partitions[output_topic] & open_partitions
               for t in described.values())


async def kill_mid_transaction(
    process: ConsumerProcess, output_topic: str, transactional_ids: Sequence[str],
    tries: int = 100, input_flows: asyncio.Future[Any] | None = None,
) -> bool:
    """SIGKILL ``process`` while one of its own transactions (``transactional_ids``: those
    of the input partitions it owns) is open on ``output_topic``.

    Freezes it (SIGSTOP) at short random intervals until its coordinator says so, then
    kills it there: a zombie with records on the broker that the next owner's fencing has
    to abort. Tries ``tries`` times, and on while ``input_flows`` (the feeder) runs: on a
    loaded machine a hundred looks may all fall between two transactions. Returns False if
    no open transaction was caught (it is killed anyway).
    """
    assert process.proc is not None
    looks = 0
    while looks < tries or (input_flows is not None and not input_flows.done()):
        looks += 1
        process.proc.send_signal(signal.SIGSTOP)
        try:
            if await _own_transaction_open(output_topic, transactional_ids):
                process.kill()
                return True
        finally:
            if process.proc.poll() is None:
                process.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(random.uniform(0.0, 0.03))
    process.kill()
    return False


async def wait_caught_up(group: str, topic: str, within: float = 60.0) -> None:
    """Until the group's committed offsets reach the (read_committed) end of ``topic``."""
    deadline = time.monotonic() + within
    ends = await end_offsets(topic)
    committed: dict[int, int] = {}
    while time.monotonic() < deadline:
        committed = await committed_offsets(group, topic)
        if all(committed.get(p, 0) >= end for p, end in ends.items()):
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"group {group} did not catch up: committed {committed}, end {ends}")


def expected_by_key(
    sent: Iterable[tuple[bytes | None, bytes | None, object]],
) -> dict[bytes | None, list[bytes | None]]:
    """Values per key in the order they were produced."""
    by_key: dict[bytes | None, list[bytes | None]] = {}
    for key, value, _ in sent:
        by_key.setdefault(key, []).append(value)
    return by_key


def sequences_by_key(records: Iterable[Record]) -> dict[bytes | None, list[bytes | None]]:
    """Values in offset order per key (a key lives in one partition, so this is its order)."""
    by_key: dict[bytes | None, list[bytes | None]] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_key.setdefault(r.key, []).append(r.value)
    return by_key


class InProcessEngine:
    """An :class:`Engine` running in the test's event loop, with its own metrics registry."""

    def __init__(self, topology: Topology, settings: Settings) -> None:
        self.registry = CollectorRegistry()
        self.metrics = ConsumerMetrics(topology.consumer, registry=self.registry)
        self.health = HealthState(metrics=self.metrics)
        self.engine = Engine(topology, settings, self.metrics, self.health)
        self._task: asyncio.Task[int] | None = None
        self._collector_threshold = gc.get_threshold()

    async def __aenter__(self) -> InProcessEngine:
        self._task = asyncio.create_task(self.engine.run())
        await self.wait_ready()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.engine.stop()
        assert self._task is not None
        try:
            await asyncio.wait_for(self._task, 30)
        finally:  # the engine's set-up froze the test process's heap (engine/heap.py)
            gc.unfreeze()
            gc.set_threshold(*self._collector_threshold)

    async def wait_ready(self, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            assert self._task is not None
            if self._task.done():
                self._task.result()
                raise AssertionError("engine stopped before becoming ready")
            if self.health.ready:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"engine not ready after {within}s")

    def sample(self, name: str, **labels: str) -> float:
        """The engine's sample ``symfonic_stream_<name>`` with exactly these labels (and its
        consumer's): :func:`sample_value`."""
        full = f"symfonic_stream_{name}"
        found = samples_of(self.registry.collect(), full)
        wanted = {"consumer": self.engine.topology.consumer, **labels}
        exact = [(sample, value) for sample, value in found if sample == wanted]
        return sample_value(exact, full, labels, self.engine.topology.consumer, found)
