"""The admin side: create the project's topics idempotently and verify existing ones.

``topics ensure`` must never silently accept a topic that would break the engine's
guarantees: a changelog with a different partition count than the raw topic breaks
co-partitioning (state of partition p would be restored from the wrong place), and a
changelog that is not compacted grows forever. Such topics are reported as mismatches.

Every call goes through :class:`Admin`, which retries what a broker that is down or
restarting answers (:mod:`symfonic_stream.kafka.retry`): connecting within the settings'
start-up wait (``SYMFONIC_STARTUP_TIMEOUT_S``), each call within ``SYMFONIC_ADMIN_TIMEOUT_S``
(or, for both, the caller's own bound). No call here can create a topic
but CreateTopics (:mod:`symfonic_stream.kafka.no_auto_create`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, for_code

from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import admin_kwargs
from symfonic_stream.kafka.retry import OnWait, retrying, transient_code
from symfonic_stream.kafka.specs import TopicSpec

T = TypeVar("T")

_NO_ERROR = 0
_UNKNOWN_TOPIC = 3
_TOPIC_ALREADY_EXISTS = 36


class TopicError(Exception):
    """The broker refused to create or describe a topic."""


class _NotYet(KafkaError):  # type: ignore[misc]
    """A per-topic error code that means "ask again" (retried like a transient error)."""

    retriable = True


def _check_code(code: int, what: str) -> None:
    if code == _NO_ERROR:
        return
    name = for_code(code).__name__
    if transient_code(code):
        raise _NotYet(f"{what}: {name}")
    raise TopicError(f"{what}: {name}")


class Admin:
    """An admin client whose every call waits out an unreachable or restarting broker.

    ``async with Admin(settings) as admin: await admin.call("what", fn)``; ``fn`` gets the
    aiokafka admin client and is called again after each transient failure, until
    ``timeout_s`` has passed. Without ``timeout_s``, connecting waits as long as a start
    does (``Settings.startup_wait_s``) and each call ``SYMFONIC_ADMIN_TIMEOUT_S``.
    """

    def __init__(
        self, settings: Settings, *, timeout_s: float | None = None, on_wait: OnWait | None = None
    ) -> None:
        self._settings = settings
        if timeout_s is None:
            self._connect_s, self._connect_setting = (settings.startup_wait_s,
                                                      settings.startup_wait_words())
            self._timeout_s = settings.admin_timeout_s
            self._setting = f"SYMFONIC_ADMIN_TIMEOUT_S={settings.admin_timeout_s:g}"
        else:
            self._connect_s = self._timeout_s = timeout_s
            self._connect_setting = self._setting = ""
        self._on_wait = on_wait
        self._client: AIOKafkaAdminClient | None = None

    async def __aenter__(self) -> Admin:
        async def connect() -> AIOKafkaAdminClient:
            client = AIOKafkaAdminClient(**admin_kwargs(self._settings))
            try:
                await client.start()
            except BaseException:
                await client.close()
                raise
            return client

        where = (f"connecting to Kafka at {self._settings.bootstrap_servers} "
                 "(SYMFONIC_BOOTSTRAP_SERVERS)")
        self._client = await retrying(where, connect, timeout_s=self._connect_s,
                                      on_wait=self._on_wait, setting=self._connect_setting)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def call(self, what: str, fn: Callable[[AIOKafkaAdminClient], Awaitable[T]]) -> T:
        client = self._client
        if client is None:
            raise RuntimeError("Admin is used outside its async with block")
        return await self._retry(what, lambda: fn(client))

    async def _retry(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        return await retrying(what, call, timeout_s=self._timeout_s, on_wait=self._on_wait,
                              setting=self._setting)


@dataclass(frozen=True, slots=True)
class ExistingTopic:
    """What the broker says about one topic."""

    name: str
    partitions: int
    replication_factor: int
    cleanup_policy: str
    #: The topic's ``max.message.bytes`` (None: the broker did not say).
    max_message_bytes: int | None = None


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


async def ensure_topics(
    settings: Settings,
    specs: Sequence[TopicSpec],
    *,
    timeout_s: float | None = None,
    on_wait: OnWait | None = None,
) -> EnsureReport:
    """Create the topics that are missing and check the ones that exist."""
    report = EnsureReport()
    async with Admin(settings, timeout_s=timeout_s, on_wait=on_wait) as admin:
        existing = await describe_topics(admin, [s.name for s in specs])
        missing = [s for s in specs if s.name not in existing]
        if missing:
            created, raced = await admin.call("creating topics", lambda c: _create(c, missing))
            report.created.extend(created)
            await _until_led(admin, created)
            if raced:  # created by someone else meanwhile: verify it
                existing.update(await describe_topics(admin, raced))
        for spec in specs:
            found = existing.get(spec.name)
            if found is None:
                continue
            report.existing.append(spec.name)
            report.mismatches.extend(_compare(spec, found))
            too_small = _size_warning(spec, found)
            if too_small is not None:
                report.warnings.append(too_small)
            if found.replication_factor != spec.replication_factor:
                report.warnings.append(
                    f"topic {spec.name} has replication factor {found.replication_factor}; "
                    f"SYMFONIC_REPLICATION_FACTOR is {spec.replication_factor}"
                )
    return report


#: How long ``ensure_topics`` waits for the topics it created to have their leaders.
LEADERS_WAIT_S = 30.0


async def _until_led(admin: Admin, topics: Sequence[str]) -> None:
    """Until every partition of ``topics`` has a leader: CreateTopics answers before the
    controller's metadata reaches every broker, and a client that asks at once (a
    publisher run right after ``topics ensure``) may be told the topic does not exist."""
    deadline = time.monotonic() + LEADERS_WAIT_S
    while topics and time.monotonic() < deadline:
        described = await admin.call("describing new topics",
                                     lambda c: c.describe_topics(list(topics)))
        if all(t.get("error_code", 0) == 0 and t["partitions"]
               and all(p["leader"] >= 0 for p in t["partitions"]) for t in described):
            return
        await asyncio.sleep(0.1)


async def _create(
    client: AIOKafkaAdminClient, specs: Sequence[TopicSpec]
) -> tuple[list[str], list[str]]:
    """CreateTopics for ``specs``: (created, already existing). A retry after a transient
    failure finds the topics created by the attempt before as already existing."""
    response = await client.create_topics(
        [NewTopic(s.name, s.partitions, s.replication_factor, topic_configs=s.configs)
         for s in specs]
    )
    created: list[str] = []
    raced: list[str] = []
    for topic, code, message in _create_errors(response):
        if code == _TOPIC_ALREADY_EXISTS:
            raced.append(topic)
            continue
        _check_code(code, f"cannot create topic {topic} ({message or ''})")
        created.append(topic)
    return created, raced


async def describe_topics(admin: Admin, topics: Iterable[str]) -> dict[str, ExistingTopic]:
    """Partition count, replication factor and cleanup policy of the topics that exist."""
    wanted = list(topics)
    found = await admin.call("describing topics", lambda c: _partitions(c, wanted))
    if not found:
        return {}
    names = list(found)
    configs = await admin.call("describing topic configs", lambda c: _topic_configs(c, names))
    return {
        name: ExistingTopic(
            name, count, replicas, configs.get(name, {}).get("cleanup.policy", "delete"),
            _int_or_none(configs.get(name, {}).get("max.message.bytes")),
        )
        for name, (count, replicas) in found.items()
    }


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


async def _partitions(client: AIOKafkaAdminClient, wanted: list[str]) -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for entry in await client.describe_topics(wanted):
        code = entry.get("error_code", _NO_ERROR)
        if code == _UNKNOWN_TOPIC:
            continue
        _check_code(code, f"cannot describe topic {entry['topic']}")
        partitions = entry.get("partitions") or []
        replicas = len(partitions[0].get("replicas", [])) if partitions else 0
        found[entry["topic"]] = (len(partitions), replicas)
    return found


async def partition_counts(
    settings: Settings,
    topics: Iterable[str],
    *,
    timeout_s: float | None = None,
    on_wait: OnWait | None = None,
) -> dict[str, int]:
    """Partition count of each topic that exists (the engine's start-up check)."""
    async with Admin(settings, timeout_s=timeout_s, on_wait=on_wait) as admin:
        found = await describe_topics(admin, topics)
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


def _size_warning(spec: TopicSpec, found: ExistingTopic) -> str | None:
    """An existing topic too small for the largest record the bounds allow: a warning (the
    records the bounds let through may still all fit; an operator decides)."""
    wanted = int(spec.configs.get("max.message.bytes", "0"))
    if found.max_message_bytes is None or found.max_message_bytes >= wanted:
        return None
    return (f"topic {spec.name} has max.message.bytes={found.max_message_bytes}; the largest "
            f"record written to it may take {wanted} (SYMFONIC_MAX_RECORD_BYTES, "
            "_MAX_OUTPUT_BYTES, _MAX_STATE_RECORD_BYTES): raise it, or lower those")


def _create_errors(response: Any) -> list[tuple[str, int, str | None]]:
    """(topic, error code, message) from any CreateTopics response version."""
    result = []
    for entry in response.topic_errors:
        topic, code = entry[0], entry[1]
        message = entry[2] if len(entry) > 2 else None
        result.append((topic, code, message))
    return result


#: The configs of an existing topic that ``topics ensure`` checks.
_CHECKED_CONFIGS = ("cleanup.policy", "max.message.bytes")


async def _topic_configs(
    client: AIOKafkaAdminClient, topics: list[str]
) -> dict[str, dict[str, str]]:
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name,
                       configs=dict.fromkeys(_CHECKED_CONFIGS))
        for name in topics
    ]
    configs: dict[str, dict[str, str]] = {}
    for response in await client.describe_configs(resources):
        for resource in response.to_object()["resources"]:
            _check_code(
                resource["error_code"],
                f"cannot describe configs of topic {resource['resource_name']}",
            )
            for entry in resource["config_entries"]:
                key = entry.get("config_names", entry.get("config_name"))
                if key in _CHECKED_CONFIGS and entry["config_value"] is not None:
                    configs.setdefault(resource["resource_name"], {})[key] = entry["config_value"]
    return configs


async def group_offsets(
    admin: AIOKafkaAdminClient, group: str, *, within_s: float = 30.0
) -> dict[TopicPartition, int]:
    """``group``'s committed offsets, waiting out a coordinator that is not ready yet.

    On a fresh broker the first group lookup creates ``__consumer_offsets``, and until its
    partitions are loaded FindCoordinator answers COORDINATOR_NOT_AVAILABLE; a coordinator
    that moves answers NOT_COORDINATOR. Both are retriable, not an answer.
    """
    offsets = await retrying(
        f"reading the committed offsets of {group}",
        lambda: admin.list_consumer_group_offsets(group),
        timeout_s=within_s,
    )
    return {tp: meta.offset for tp, meta in offsets.items()}
