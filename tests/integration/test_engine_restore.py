"""State restore (checkpoint step 2): replaying a changelog partition written in
transactions, some aborted, ending on a commit marker, with tombstones."""

from __future__ import annotations

from aiokafka import AIOKafkaProducer

from symfonic_stream.engine.records import Collector
from symfonic_stream.engine.restore import restore_partitions
from symfonic_stream.models.names import TopicNames

from .harness import (
    BOOTSTRAP,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
)


class DictProcessor:
    """Applies changelog records to a dict, as a state store would."""

    def __init__(self) -> None:
        self.state: dict[bytes, bytes] = {}
        self.applied = 0

    def restore(self, key: bytes, value: bytes | None) -> None:
        self.applied += 1
        if value is None:
            self.state.pop(key, None)
        else:
            self.state[key] = value

    def process(self, record: object, now: float, out: Collector) -> None:
        raise AssertionError("not used")

    def punctuate(self, now: float, out: Collector) -> None:
        raise AssertionError("not used")

    def checkpoint(self, out: Collector) -> None:
        raise AssertionError("not used")

    buffered_events = 0
    active_runs = 0


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


async def test_restore_replays_committed_state_only(
    bootstrap_servers: str, prefix: str
) -> None:
    settings = await create_topics(prefix, with_copier=False)
    changelog = TopicNames(prefix).changelog("typed")
    txn = f"{prefix}-restore-test"
    await _write(changelog, 1, [(b"run-a", b"1"), (b"run-b", b"1")], commit=True,
                 transactional_id=txn)
    await _write(changelog, 1, [(b"run-a", b"aborted"), (b"run-c", b"aborted")], commit=False,
                 transactional_id=txn)
    await _write(changelog, 1, [(b"run-b", None), (b"run-a", b"2")], commit=True,
                 transactional_id=txn)
    await _write(changelog, 2, [(b"run-z", b"9")], commit=True, transactional_id=txn + "-2")

    processors = {p: DictProcessor() for p in (0, 1, 2)}
    progress: list[int] = []
    counts = await restore_partitions(
        settings, changelog, processors, on_progress=lambda: progress.append(1)
    )
    # The log ends on a commit marker; the restore still ends, at once.
    assert processors[1].state == {b"run-a": b"2"}  # aborted writes never seen
    assert processors[1].applied == 4
    assert processors[2].state == {b"run-z": b"9"}
    assert processors[0].state == {}  # an empty partition restores to nothing
    assert counts == {0: 0, 1: 4, 2: 1}
    assert progress
