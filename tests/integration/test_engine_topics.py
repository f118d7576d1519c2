"""``symfonic-stream topics ensure``: creates every topic once, then verifies; never accepts a
topic whose partition count or cleanup policy would break the engine."""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient

from symfonic_stream.app.topics import required_topics
from symfonic_stream.kafka.admin import Admin, describe_topics
from symfonic_stream.models.names import TopicNames

from .conftest import create_topic
from .harness import (
    PARTITIONS,
    consumer_env,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
    run_cli,
    settings_for,
    unique_prefix,
)


async def test_topics_ensure_creates_everything_once_then_is_idempotent(
    bootstrap_servers: str, prefix: str, admin_client: AIOKafkaAdminClient
) -> None:
    env = consumer_env(prefix)
    first = run_cli(["topics", "ensure"], env)
    assert first.returncode == 0, first.stderr
    specs = required_topics(settings_for(prefix))
    names = TopicNames(prefix)
    expected = {spec.name for spec in specs}
    assert {
        names.agent_events, names.stream_events, names.stream_chunks, names.dead_letter,
        names.resume_requests, names.pause_registrations, names.resumes, names.resume_rejections,
        names.human_queue("default"), names.expired_queue, names.review_tickets,
        *(names.changelog(c) for c in ("typed", "chunks", "pauses", "resumes")),
    } == expected
    created = {line.split()[1] for line in first.stdout.splitlines() if line.startswith("created")}
    assert created == expected
    assert names.copier_output not in created  # only with --with-copier

    async with Admin(settings_for(prefix)) as admin:
        found = await describe_topics(admin, expected)
    assert set(found) == expected
    for spec in specs:
        assert found[spec.name].partitions == PARTITIONS
        # The changelogs, and the review tickets' topic (sized like a state record).
        compacted = spec.name.endswith("-state-changelog") or spec.name == names.review_tickets
        assert found[spec.name].cleanup_policy == ("compact" if compacted else "delete")
        # Room for the largest record the bounds allow (the broker's default is ~1 MB).
        assert found[spec.name].max_message_bytes == (
            2 * 1024 * 1024 + 65_536 if compacted else 2 * 1_048_576 + 65_536
        ), spec.name

    second = run_cli(["topics", "ensure", "--with-copier"], env)
    assert second.returncode == 0, second.stderr
    assert [line for line in second.stdout.splitlines() if line.startswith("created")] == [
        f"created  {names.copier_output}  (copier (benchmark) output)"
    ]
    assert sum(line.startswith("exists") for line in second.stdout.splitlines()) == len(expected)


async def test_topics_ensure_reports_mismatched_existing_topics(
    bootstrap_servers: str, prefix: str, admin_client: AIOKafkaAdminClient
) -> None:
    names = TopicNames(prefix)
    # A changelog that is not co-partitioned, and a dead-letter topic that is compacted.
    await create_topic(admin_client, names.changelog("typed"), PARTITIONS + 1)
    await create_topic(
        admin_client, names.dead_letter, PARTITIONS, config={"cleanup.policy": "compact"}
    )
    result = run_cli(["topics", "ensure"], consumer_env(prefix))
    assert result.returncode == 1
    assert (
        f"topic {names.changelog('typed')} exists with {PARTITIONS + 1} partitions; "
        f"expected {PARTITIONS}"
    ) in result.stderr
    assert "co-partitioned" in result.stderr
    assert (
        f"topic {names.dead_letter} exists with cleanup.policy=compact; "
        "expected cleanup.policy=delete"
    ) in result.stderr
    # Everything else was still created, and the bad topics were left untouched.
    async with Admin(settings_for(prefix)) as admin:
        found = await describe_topics(admin, [names.agent_events, names.changelog("typed")])
    assert found[names.agent_events].partitions == PARTITIONS
    assert found[names.changelog("typed")].partitions == PARTITIONS + 1


async def test_topics_ensure_warns_of_an_existing_topic_too_small_for_the_bounds(
    bootstrap_servers: str, prefix: str, admin_client: AIOKafkaAdminClient
) -> None:
    names = TopicNames(prefix)
    await create_topic(admin_client, names.changelog("typed"), PARTITIONS,
                       config={"cleanup.policy": "compact", "max.message.bytes": "1048588"})
    result = run_cli(["topics", "ensure"], consumer_env(prefix))
    assert result.returncode == 0, result.stderr  # a warning: the operator decides
    assert (f"topic {names.changelog('typed')} has max.message.bytes=1048588; the largest "
            f"record written to it may take {2 * 1024 * 1024 + 65_536}") in result.stderr


def test_topics_ensure_with_a_bad_setting_exits_2_naming_it(bootstrap_servers: str) -> None:
    result = run_cli(["topics", "ensure"], consumer_env(unique_prefix(), partitions="zero"))
    assert result.returncode == 2
    assert "SYMFONIC_PARTITIONS" in result.stderr
