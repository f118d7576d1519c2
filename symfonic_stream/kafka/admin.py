"""The admin side: create the project's topics idempotently and verify existing ones.

``topics ensure`` must never silently accept a topic that would break the engine's
guarantees: a changelog with a different partition count than the raw topic breaks
co-partitioning (state of partition p would be restored from the wrong place), and a
changelog that is not compacted grows forever. Such topics are reported as mismatches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, for_code

from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import admin_kwargs
from symfonic_stream.kafka.topics import TopicSpec

log = logging.getLogger(__name__)

_NO_ERROR = 0
_UNKNOWN_TOPIC = 3
_TOPIC_ALREADY_EXISTS = 36


class TopicError(Exception):
    """The broker refused to create or describe a topic."""


@dataclass(frozen=True, slots=True)
class ExistingTopic:
    """What the broker says about one topic."""

    name: str
    partitions: int
    replication_factor: int
    cleanup_policy: str


@dataclass(slots=True)
class EnsureReport:
    """The outcome of :func:`ensure_topics`."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches


async def ensure_topics(settings: Settings, specs: Sequence[TopicSpec]) -> EnsureReport:
    """Create the topics that are missing and check the ones that exist."""
    report = EnsureReport()
    admin = AIOKafkaAdminClient(**admin_kwargs(settings))
    await admin.start()
    try:
        existing = await describe_topics(admin, [s.name for s in specs])
        missing = [s for s in specs if s.name not in existing]
        if missing:
            response = await admin.create_topics(
                [
                    NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.configs)
                    for s in missing
                ]
            )
            raced: list[str] = []
            for topic, code, message in _create_errors(response):
                if code == _NO_ERROR:
                    report.created.append(topic)
                elif code == _TOPIC_ALREADY_EXISTS:
                    raced.append(topic)  # created by someone else meanwhile: verify it
                else:
                    name = for_code(code).__name__
                    raise TopicError(f"cannot create topic {topic}: {name} {message or ''}")
            if raced:
                existing.update(await describe_topics(admin, raced))
        for spec in specs:
            found = existing.get(spec.name)
            if found is None:
                continue
            report.existing.append(spec.name)
            report.mismatches.extend(_compare(spec, found))
            if found.replication_factor != spec.replication_factor:
                report.warnings.append(
                    f"topic {spec.name} has replication factor {found.replication_factor}; "
                    f"SYMFONIC_REPLICATION_FACTOR is {spec.replication_factor}"
                )
    finally:
        await admin.close()
    return report


async def describe_topics(
    admin: AIOKafkaAdminClient, topics: Iterable[str]
) -> dict[str, ExistingTopic]:
    """Partition count, replication factor and cleanup policy of the topics that exist."""
    wanted = list(topics)
    found: dict[str, tuple[int, int]] = {}
    for entry in await admin.describe_topics(wanted):
        code = entry.get("error_code", _NO_ERROR)
        if code == _UNKNOWN_TOPIC:
            continue
        if code != _NO_ERROR:
            raise TopicError(f"cannot describe topic {entry['topic']}: {for_code(code).__name__}")
        partitions = entry.get("partitions") or []
        replicas = len(partitions[0].get("replicas", [])) if partitions else 0
        found[entry["topic"]] = (len(partitions), replicas)
    if not found:
        return {}
    policies = await _cleanup_policies(admin, list(found))
    return {
        name: ExistingTopic(name, count, replicas, policies.get(name, "delete"))
        for name, (count, replicas) in found.items()
    }


async def partition_counts(settings: Settings, topics: Iterable[str]) -> dict[str, int]:
    """Partition count of each topic that exists (the engine's start-up check)."""
    admin = AIOKafkaAdminClient(**admin_kwargs(settings))
    await admin.start()
    try:
        found = await describe_topics(admin, topics)
    finally:
        await admin.close()
    return {name: topic.partitions for name, topic in found.items()}


def _compare(spec: TopicSpec, found: ExistingTopic) -> list[str]:
    problems = []
    if found.partitions != spec.partitions:
        why = (
            "a changelog must be co-partitioned with the raw topic"
            if spec.cleanup_policy == "compact"
            else "recreate it or set SYMFONIC_PARTITIONS to match"
        )
        problems.append(
            f"topic {spec.name} exists with {found.partitions} partitions; expected "
            f"{spec.partitions} (SYMFONIC_PARTITIONS): {why}"
        )
    if found.cleanup_policy != spec.cleanup_policy:
        problems.append(
            f"topic {spec.name} exists with cleanup.policy={found.cleanup_policy}; "
            f"expected cleanup.policy={spec.cleanup_policy}"
        )
    return problems


def _create_errors(response: Any) -> list[tuple[str, int, str | None]]:
    """(topic, error code, message) from any CreateTopics response version."""
    result = []
    for entry in response.topic_errors:
        topic, code = entry[0], entry[1]
        message = entry[2] if len(entry) > 2 else None
        result.append((topic, code, message))
    return result


async def _cleanup_policies(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, str]:
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, configs={"cleanup.policy": None})
        for name in topics
    ]
    policies: dict[str, str] = {}
    for response in await admin.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            if resource["error_code"] != _NO_ERROR:
                raise TopicError(
                    f"cannot describe configs of topic {resource['resource_name']}: "
                    f"{for_code(resource['error_code']).__name__}"
                )
            for entry in resource["config_entries"]:
                key = entry.get("config_names", entry.get("config_name"))
                if key == "cleanup.policy":
                    policies[resource["resource_name"]] = entry["config_value"]
    return policies


async def group_offsets(
    admin: AIOKafkaAdminClient, group: str, *, within_s: float = 30.0
) -> dict[TopicPartition, int]:
    """``group``'s committed offsets, waiting out a coordinator that is not ready yet.

    On a fresh broker the first group lookup creates ``__consumer_offsets``, and until its
    partitions are loaded FindCoordinator answers COORDINATOR_NOT_AVAILABLE; a coordinator
    that moves answers NOT_COORDINATOR. Both are retriable, not an answer.
    """
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        try:
            offsets = await admin.list_consumer_group_offsets(group)
        except KafkaError as exc:
            if not exc.retriable or asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)
            continue
        return {tp: meta.offset for tp, meta in offsets.items()}
