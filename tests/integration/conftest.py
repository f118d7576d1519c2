"""Fixtures for the tests that run against a real Kafka broker.

Every test under tests/integration is marked ``kafka`` (and gets a generous per-test
timeout). The broker is the one ``scripts/kafka.sh start`` runs (``make test`` starts it), or
any Kafka named by ``SYMFONIC_BOOTSTRAP_SERVERS``. When no broker answers, the tests FAIL
with a message saying how to start one: they never skip, so a missing broker can never pass
for a green run.

``new_topic`` creates uniquely named topics and deletes them when the test ends, so the
long-lived development broker does not fill up with test topics. Set
``SYMFONIC_TEST_KEEP_TOPICS=1`` to keep them for a post-mortem. What a test leaves behind
anyway (module-scoped pipelines, killed consumers) is swept when the session ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
_HERE = Path(__file__).parent
_TEST_TIMEOUT_S = 180

IsolationLevel = Literal["read_committed", "read_uncommitted"]
NewTopicFactory = Callable[..., Awaitable[str]]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test in this directory ``kafka``, with a hang guard; deselect the
    ``cluster`` tests (they kill brokers) unless ``SYMFONIC_TEST_CLUSTER=1`` says the broker
    is the project's 3-node cluster (``make test-cluster``), the ``authorizer`` tests
    unless ``SYMFONIC_TEST_AUTHORIZER=1`` says it is the authorizer broker (``make
    test-acls``), the fault table's rows beyond the quick ones (``faults_full``) unless
    ``SYMFONIC_TEST_FAULT_TABLE=full`` (``make test-faults``), the benchmark's own checks
    (``bench``) unless ``SYMFONIC_TEST_BENCH=1`` (``make test-bench``), and the ``image``
    tests only when ``SYMFONIC_TEST_IMAGE`` names the image ``make image`` built: each part
    runs them on the broker they need."""
    wanted = {
        "cluster": bool(os.environ.get("SYMFONIC_TEST_CLUSTER")),
        "authorizer": bool(os.environ.get("SYMFONIC_TEST_AUTHORIZER")),
        "faults_full": os.environ.get("SYMFONIC_TEST_FAULT_TABLE") == "full",
        "bench": bool(os.environ.get("SYMFONIC_TEST_BENCH")),
        "image": bool(os.environ.get("SYMFONIC_TEST_IMAGE")),
    }
    kept, dropped = [], []
    for item in items:
        if _HERE in item.path.parents:
            item.add_marker(pytest.mark.kafka)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(_TEST_TIMEOUT_S))
        elsewhere = any(item.get_closest_marker(marker) is not None and not on
                        for marker, on in wanted.items())
        if elsewhere:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


# --------------------------------------------------------------------------- the broker


def bootstrap_from_env() -> str:
    return os.environ.get("SYMFONIC_BOOTSTRAP_SERVERS", "").strip() or DEFAULT_BOOTSTRAP


def replication_factor_from_env() -> int:
    return int(os.environ.get("SYMFONIC_REPLICATION_FACTOR", "1"))


async def _describe_cluster(bootstrap: str) -> dict[str, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        await asyncio.wait_for(admin.start(), timeout=15)
        cluster: dict[str, Any] = await asyncio.wait_for(admin.describe_cluster(), timeout=15)
        return cluster
    finally:
        await admin.close()


@pytest.fixture(scope="session")
def bootstrap_servers() -> str:
    """The broker's bootstrap servers; fails (never skips) when no broker answers."""
    bootstrap = bootstrap_from_env()
    problem = ""
    cluster: dict[str, Any] = {}
    try:
        cluster = asyncio.run(_describe_cluster(bootstrap))
    except (KafkaError, OSError, TimeoutError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if problem:  # failed outside the except block: no chained traceback in the report
        pytest.fail(
            f"no Kafka broker answers at {bootstrap} ({problem}). "
            "Start the project's broker with `scripts/kafka.sh start` (or run `make test`, "
            "which starts it), or point SYMFONIC_BOOTSTRAP_SERVERS at a running Kafka.",
            pytrace=False,
        )
    if not cluster.get("brokers"):
        pytest.fail(f"the Kafka cluster at {bootstrap} reports no brokers", pytrace=False)
    return bootstrap


# The names the fixtures and harness give topics (``it.<prefix>.<hex>``, ``t<hex>.<topic>``,
# ``t<hex>-<consumer>-state-changelog``), each registered here when it is handed out: only
# this session's are swept at its end, so the topics of another test session running on the
# same broker at the same time (or anyone else's) are never touched.
_TEST_TOPIC = re.compile(r"^(it\.|t[0-9a-f]{12}[.-])")
_HANDED_OUT: set[str] = set()


def register_name(name: str) -> str:
    """Remember a topic name or prefix this session made up (see ``sweep_test_topics``)."""
    _HANDED_OUT.add(name)
    return name


def _ours(topic: str) -> bool:
    return any(topic == name or topic.startswith((f"{name}.", f"{name}-"))
               for name in _HANDED_OUT)


async def list_topic_names(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        for start in range(0, len(names), 100):
            with contextlib.suppress(KafkaError):
                await admin.delete_topics(names[start : start + 100])
    finally:
        await admin.close()


@pytest.fixture(scope="session", autouse=True)
def sweep_test_topics(bootstrap_servers: str) -> Iterator[None]:
    """Delete, when the session ends, every test topic it created that a test left behind.

    Module-scoped pipelines and killed consumers leave topics behind; on a long-lived
    development broker thousands of them pile up and make its next start load every one.
    ``SYMFONIC_TEST_KEEP_TOPICS=1`` keeps them for a post-mortem.
    """
    before = asyncio.run(list_topic_names(bootstrap_servers))
    yield
    if os.environ.get("SYMFONIC_TEST_KEEP_TOPICS"):
        return
    with contextlib.suppress(KafkaError, OSError):
        after = asyncio.run(list_topic_names(bootstrap_servers))
        left = sorted(t for t in after - before if _TEST_TOPIC.match(t) and _ours(t))
        asyncio.run(_delete_topics(bootstrap_servers, left))


# --------------------------------------------------------------------------- topics


def unique_name(prefix: str) -> str:
    return register_name(f"it.{prefix}.{uuid.uuid4().hex[:12]}")


async def create_topic(
    admin: AIOKafkaAdminClient,
    name: str,
    partitions: int,
    *,
    replication_factor: int | None = None,
    config: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create a topic and wait until every partition has a leader in the metadata."""
    rf = replication_factor if replication_factor is not None else replication_factor_from_env()
    response = await admin.create_topics(
        [NewTopic(name, partitions, rf, topic_configs=config or {})], timeout_ms=30_000
    )
    for topic, code, message in response.topic_errors:
        if code != 0:
            raise AssertionError(f"creating topic {topic} failed: error {code} {message}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        described = await admin.describe_topics([name])
        if described and described[0]["error_code"] == 0:
            leaders = [p["leader"] for p in described[0]["partitions"]]
            if len(leaders) == partitions and all(leader >= 0 for leader in leaders):
                return
        if loop.time() > deadline:
            raise AssertionError(f"topic {name} has no leader for every partition: {described}")
        await asyncio.sleep(0.1)


@pytest.fixture
async def admin_client(bootstrap_servers: str) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=30_000)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


@pytest.fixture
async def new_topic(admin_client: AIOKafkaAdminClient) -> AsyncIterator[NewTopicFactory]:
    """``await new_topic(partitions=4, prefix="t", config=None)`` -> a fresh topic's name.

    Names are ``it.<prefix>.<random>``; the topics are deleted after the test unless
    ``SYMFONIC_TEST_KEEP_TOPICS`` is set.
    """
    created: list[str] = []

    async def make(
        partitions: int = 4,
        prefix: str = "t",
        config: dict[str, str] | None = None,
        replication_factor: int | None = None,
    ) -> str:
        name = unique_name(prefix)
        await create_topic(
            admin_client,
            name,
            partitions,
            replication_factor=replication_factor,
            config=config,
        )
        created.append(name)
        return name

    yield make
    if created and not os.environ.get("SYMFONIC_TEST_KEEP_TOPICS"):
        # Best effort: a leftover topic must not fail a passing test.
        with contextlib.suppress(KafkaError):
            await admin_client.delete_topics(created)


@pytest.fixture
def group_id() -> Iterator[str]:
    """A fresh consumer group id."""
    yield f"it-group-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Record:
    """One consumed record, typed (aiokafka's own record type is untyped)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def _record(r: Any) -> Record:
    return Record(
        topic=r.topic,
        partition=r.partition,
        offset=r.offset,
        key=r.key,
        value=r.value,
        # (A null-valued header reads as empty, as the engine reads it: test_null_headers.)
        headers=tuple((k, b"" if v is None else bytes(v)) for k, v in r.headers),
    )


async def partitions_of(bootstrap_servers: str, topic: str) -> list[int]:
    """The partition ids of an existing topic (fails when the topic does not exist)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=30_000)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if not described or described[0]["error_code"] != 0:
        raise AssertionError(f"topic {topic} is unknown to {bootstrap_servers}: {described}")
    return sorted(p["partition"] for p in described[0]["partitions"])


async def read_to_end(
    bootstrap_servers: str,
    topic: str,
    *,
    isolation_level: IsolationLevel = "read_committed",
    timeout_s: float = 30.0,
) -> list[Record]:
    """Every record of ``topic`` from the beginning up to its current end.

    The end is taken once, at the start: the high watermark for ``read_uncommitted``, the
    last stable offset for ``read_committed`` (so an open transaction bounds it). No
    consumer group is used and no offset is committed. Records come back ordered by
    (partition, offset).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    partitions = await partitions_of(bootstrap_servers, topic)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=isolation_level,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        end: dict[Any, int] = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[Record] = []
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}
            if all(positions[tp] >= end[tp] for tp in tps):
                break
            if loop.time() > deadline:
                raise AssertionError(
                    f"could not read {topic} to its end in {timeout_s}s: "
                    f"positions {positions}, end {end}"
                )
            batch = await consumer.getmany(timeout_ms=500)
            for recs in batch.values():
                records.extend(_record(r) for r in recs)
    finally:
        await consumer.stop()
    return sorted(records, key=lambda r: (r.partition, r.offset))


ReadTopic = Callable[..., Awaitable[list[Record]]]


@pytest.fixture
def read_topic(bootstrap_servers: str) -> ReadTopic:
    """``await read_topic(topic, isolation_level="read_committed")``: see :func:`read_to_end`."""

    async def read(
        topic: str, isolation_level: IsolationLevel = "read_committed", timeout_s: float = 30.0
    ) -> list[Record]:
        return await read_to_end(
            bootstrap_servers, topic, isolation_level=isolation_level, timeout_s=timeout_s
        )

    return read
