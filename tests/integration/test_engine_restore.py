"""State restore (task set-up, step 2): replaying a changelog partition written in
transactions, some aborted, ending on a commit marker, with tombstones, into state stores;
and tasks sharing one changelog partition under key prefixes (a replay's)."""

from __future__ import annotations

from aiokafka import AIOKafkaProducer

from symfonic_stream.engine.restore import restore_stores
from symfonic_stream.engine.store import Codec, StateStore
from symfonic_stream.models.names import TopicNames

from .harness import (
    BOOTSTRAP,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
)


def _store() -> StateStore[bytes]:
    """A store of raw values (the codec leaves them as they are)."""
    return StateStore("run", Codec(lambda v: v, lambda v: v))


async def _write(changelog: str, partition: int, writes: list[tuple[bytes, bytes | None]], *,
                 commit: bool, transactional_id: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=transactional_id)
    await producer.start()
    try:
        await producer.begin_transaction()
        for key, value in writes:
            await producer.send(changelog, key=key, value=value, partition=partition)
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
    finally:
        await producer.stop()
    await _settle(transactional_id)


async def _settle(transactional_id: str) -> None:
    """What the engine has before every restore: InitProducerId on the writer's id.

    EndTxn returns once the coordinator has decided; the markers reach the partition
    after. The coordinator answers InitProducerId with CONCURRENT_TRANSACTIONS (aiokafka
    retries) until they have, so the last stable offset then covers the transaction.
    Without this, a restore could read the end offset before the marker (seen on Kafka
    3.9.1 in CI: the shared-partition test restored nothing)."""
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=transactional_id)
    await producer.start()
    await producer.stop()


async def test_restore_replays_committed_state_only(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = await create_topics(prefix, with_copier=False)
    changelog = TopicNames(prefix).changelog("typed")
    txn = f"{prefix}-restore-test"
    await _write(changelog, 1, [(b"run/a", b"1"), (b"run/b", b"1")], commit=True,
                 transactional_id=txn)
    await _write(changelog, 1, [(b"run/a", b"aborted"), (b"run/c", b"aborted")], commit=False,
                 transactional_id=txn)
    await _write(changelog, 1, [(b"run/b", None), (b"run/a", b"2")], commit=True,
                 transactional_id=txn)
    await _write(changelog, 2, [(b"run/z", b"9"), (b"other/x", b"not a run")], commit=True,
                 transactional_id=txn + "-2")

    stores = {p: _store() for p in (0, 1, 2)}
    progress: list[int] = []
    counts = await restore_stores(
        settings, changelog, {p: [(b"", [store])] for p, store in stores.items()},
        on_progress=lambda: progress.append(1),
    )
    # The log ends on a commit marker; the restore still ends, at once.
    assert stores[1].items() == [("a", b"2")]  # aborted writes never seen
    assert stores[2].items() == [("z", b"9")]  # another store's record is not this one's
    assert stores[0].items() == []  # an empty partition restores to nothing
    assert counts == {0: 0, 1: 4, 2: 1}
    assert progress


async def test_tasks_sharing_a_changelog_partition_each_restore_their_prefix(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = await create_topics(prefix, with_copier=False)
    changelog = TopicNames(prefix).changelog("typed")
    await _write(changelog, 0, [(b"r1/p/0/run/a", b"0a"), (b"r1/p/1/run/a", b"1a"),
                                (b"r2/p/0/run/a", b"other replay"), (b"r1/p/0/run/b", b"0b")],
                 commit=True, transactional_id=f"{prefix}-shared")
    zero, one = _store(), _store()
    counts = await restore_stores(
        settings, changelog, {0: [(b"r1/p/0/", [zero]), (b"r1/p/1/", [one])]}
    )
    assert zero.items() == [("a", b"0a"), ("b", b"0b")]
    assert one.items() == [("a", b"1a")]
    assert counts == {0: 3}
