"""No metadata request the project makes creates a topic (issue 13), on a broker with Kafka's
default ``auto.create.topics.enable=true``.

The first test is the control: it shows this broker does create a topic when a Metadata
request allows it, so the others prove something. Then every path that looks a topic up
(``topics ensure``, start-up checks, replay, the reader, the publisher, ``tail``, a
producer's and a consumer's metadata, a restore) is run against topics that do not exist,
and none of them may exist afterwards. ``topics ensure`` and the on-demand queue topics
create theirs with CreateTopics and the project's settings, never the broker's defaults.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from symfonic_stream.app.topics import required_topics
from symfonic_stream.engine.on_demand import OnDemandTopics
from symfonic_stream.engine.processor import Collector, OutputRecord
from symfonic_stream.kafka.admin import Admin, describe_topics, partition_counts
from symfonic_stream.kafka.clients import group_consumer_kwargs, plain_producer_kwargs
from symfonic_stream.kafka.specs import topic_spec
from symfonic_stream.models.names import TopicNames
from symfonic_stream.sdk.reader import RunReader, TopicMissingError
from symfonic_stream.state.restore import restore_stores

from .conftest import list_topic_names
from .harness import (
    PARTITIONS,
    consumer_env,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    run_cli,
    settings_for,
)


async def _broker_config(bootstrap: str, name: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
        broker = str(cluster["brokers"][0]["node_id"])
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, broker, configs={name: None})]
        )
        for resource in response.to_object()["resources"]:
            for entry in resource["config_entries"]:
                if entry.get("config_names", entry.get("config_name")) == name:
                    return str(entry["config_value"])
    finally:
        await admin.close()
    raise AssertionError(f"the broker does not report {name}")


async def _exists(bootstrap: str, topic: str) -> bool:
    return topic in await list_topic_names(bootstrap)


async def test_control_this_broker_creates_topics_when_a_metadata_request_allows_it(
    bootstrap_servers: str, prefix: str
) -> None:
    assert await _broker_config(bootstrap_servers, "auto.create.topics.enable") == "true", (
        "the suite runs on a broker with Kafka's default settings (scripts/kafka.sh start)"
    )
    topic = f"{prefix}.control"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        node = admin._client.get_random_node()
        await admin._client.send(node, MetadataRequest([topic], allow_auto_topic_creation=True))
    finally:
        await admin.close()
    deadline = time.monotonic() + 15
    while not await _exists(bootstrap_servers, topic):
        assert time.monotonic() < deadline, "the broker did not auto-create the control topic"
        await asyncio.sleep(0.2)


async def test_lookups_of_missing_topics_create_nothing(
    bootstrap_servers: str, prefix: str, tmp_path: Path
) -> None:
    settings = settings_for(prefix)
    names = TopicNames(prefix)
    wanted = [spec.name for spec in required_topics(settings)]

    # The admin side: partition counts (start-up checks, replay, the reader) and describe.
    assert await partition_counts(settings, wanted) == {}
    async with Admin(settings) as admin:
        assert await describe_topics(admin, wanted) == {}
    # A group consumer subscribing (the engine's consumer) and a restore consumer.
    # (aiokafka's start waits for a subscribed topic's metadata, and finds none.)
    consumer = AIOKafkaConsumer(**group_consumer_kwargs(settings, names.group("typed")),
                                request_timeout_ms=5000)
    consumer.subscribe([names.agent_events])
    try:
        with pytest.raises(KafkaError):
            await consumer.start()
    finally:
        await consumer.stop()
    with pytest.raises(KafkaError):
        await asyncio.wait_for(
            restore_stores(settings, names.changelog("typed"), {0: [(b"", [])]}), 60
        )
    # A producer's partition lookup (the engine's ``_partition_for``, the publisher).
    producer = AIOKafkaProducer(**plain_producer_kwargs(settings, "probe"), request_timeout_ms=3000)
    await producer.start()
    try:
        with pytest.raises(KafkaError):
            await producer.partitions_for(names.stream_events)
    finally:
        await producer.stop()
    # The reader SDK.
    with pytest.raises(TopicMissingError):
        async with RunReader("run-1", settings) as reader:
            async for _ in reader:
                break
    # The command line: publish, tail, replay, and a consumer's start-up check.
    env = consumer_env(prefix, startup_timeout_s=20)
    events = tmp_path / "events.jsonl"
    events.write_text('{"run_id": "run-1", "index": 0, "kind": "done", "timestamp": 1.0}\n')
    published = await asyncio.to_thread(run_cli, ["publish", str(events)], env, 90)
    assert published.returncode != 0 and "does not exist" in published.stderr, published
    tailed = await asyncio.to_thread(run_cli, ["tail", "run-1", "--timeout", "2"], env, 60)
    assert tailed.returncode != 0 and "does not exist" in tailed.stderr, tailed.stderr
    replayed = await asyncio.to_thread(
        run_cli, ["replay", "--projection", "typed", "--to-topic", f"{prefix}.replayed",
                  "--from-offset", "0"], env, 60
    )
    assert replayed.returncode != 0 and "does not exist" in replayed.stderr, replayed.stderr
    started = await asyncio.to_thread(run_cli, ["run", "typed"], env, 90)
    assert started.returncode == 1 and "do not exist" in started.stderr, started.stderr

    left = {t for t in await list_topic_names(bootstrap_servers) if t.startswith(prefix)}
    assert left == set(), f"a lookup created {sorted(left)}"


async def test_topics_ensure_on_a_default_broker_creates_every_topic_right(
    bootstrap_servers: str, prefix: str
) -> None:
    env = consumer_env(prefix)
    first = await asyncio.to_thread(run_cli, ["topics", "ensure"], env)
    assert first.returncode == 0, first.stderr
    created = {line.split()[1] for line in first.stdout.splitlines() if line.startswith("created")}
    settings = settings_for(prefix)
    specs = required_topics(settings)
    assert created == {spec.name for spec in specs}, "an existing topic would mean a lookup made it"
    async with Admin(settings) as admin:
        found = await describe_topics(admin, created)
    for spec in specs:
        assert found[spec.name].partitions == PARTITIONS != 1  # not the broker's num.partitions
        assert found[spec.name].cleanup_policy == spec.cleanup_policy
    again = await asyncio.to_thread(run_cli, ["topics", "ensure"], env)
    assert again.returncode == 0, again.stderr
    assert not [line for line in again.stdout.splitlines() if line.startswith("created")]


async def test_an_on_demand_topic_is_created_with_the_projects_settings(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = settings_for(prefix)
    topic = f"{prefix}.human.tenant-a.default"

    def spec_for(name: str) -> Any:
        return topic_spec(settings, name, "test queue") if name == topic else None

    out = Collector()
    out.emit(OutputRecord(topic, b"k", b"v", "ticket"))
    await OnDemandTopics(settings, spec_for).ensure(out)
    deadline = time.monotonic() + 30
    async with Admin(settings) as admin:
        while not (found := await describe_topics(admin, [topic])):
            assert time.monotonic() < deadline, "the on-demand topic never appeared"
            await asyncio.sleep(0.2)
    assert found[topic].partitions == PARTITIONS
    assert found[topic].cleanup_policy == "delete"
