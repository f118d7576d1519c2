"""symfonic_stream/state/kept.py: kept state holds everything before its applied offset, and
its tail moves that offset only as far as it read; a warm-up's lag is unknown until a fetch
of it was answered; kept state is dropped past SYMFONIC_STATE_KEEP_S or when its tail fails,
its backend closed. On the in-memory changelog of changelog_fakes.py, with a clock
of the test's own."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from symfonic_stream.config import Settings
from symfonic_stream.state import kept as kept_module
from symfonic_stream.state.kept import KeptState
from symfonic_stream.state.store import Codec, StateStore, StorePartition

from .changelog_fakes import TOPIC, Changelog, Clock, Partition, RecordingBackend

SETTINGS = Settings(topic_prefix="unit")


@pytest.fixture
def changelog(monkeypatch: pytest.MonkeyPatch) -> Iterator[Changelog]:
    clock = Clock()
    made = Changelog(clock)
    monkeypatch.setattr(kept_module, "AIOKafkaConsumer", made.consumer)
    monkeypatch.setattr(kept_module, "time", clock)

    async def sleep(seconds: float) -> None:  # a poll's wait, on the test's clock
        clock.now += seconds

    on_clock = types.SimpleNamespace(**{name: getattr(asyncio, name) for name in dir(asyncio)
                                        if not name.startswith("_")})
    on_clock.sleep = sleep
    monkeypatch.setattr(kept_module, "asyncio", on_clock)
    yield made


def _store() -> StateStore[bytes]:
    return StateStore("runs", Codec(bytes, bytes))


def _partition(*stores: StateStore[bytes]) -> StorePartition:
    """A task's store partition (a new store when none is given), over a
    :class:`RecordingBackend`."""
    return StorePartition(stores or [_store()], RecordingBackend())


def _backend(partition: StorePartition) -> RecordingBackend:
    backend = partition.backend
    assert isinstance(backend, RecordingBackend)
    return backend


def _kept(keep_s: float = 60.0) -> KeptState[str]:
    return KeptState(SETTINGS, TOPIC, keep_s)


def _write(changelog: Changelog, partition: int, *keys: str) -> None:
    changelog.write(partition, *[(f"runs/{k}".encode(), k.encode()) for k in keys])


async def test_the_tail_applies_what_was_written_after_the_applied_offset(
        changelog: Changelog) -> None:
    _write(changelog, 0, "a", "b", "c")
    store = _store()
    partition = _partition(store)
    kept = _kept()
    kept.keep(0, "holder", partition, applied=2)
    assert kept.lags() == {0: 0}  # as far as it knows: the end it left
    _write(changelog, 0, "d")
    changelog.write(0, None)  # the commit marker
    assert await kept.tail() == 2
    assert dict(store.items()) == {"c": b"c", "d": b"d"}  # not a or b: before applied
    assert kept.applied(0) == 5  # past the marker
    backend = _backend(partition)
    assert backend.records == [(b"runs/c", b"c"), (b"runs/d", b"d")] and backend.marks == [5]
    assert partition.offset == 5 and len(store) == 2
    assert kept.lags() == {0: 0}
    taken = kept.take(0)
    assert taken is not None and (taken.holder, taken.applied, taken.tailed) == ("holder", 5, 2)
    assert kept.partitions == [] and kept.applied(0) is None


async def test_an_empty_poll_moves_nothing(changelog: Changelog) -> None:
    """A fetch that came back empty (other partitions filled it) says nothing of where
    the changelog ends: the applied offset and the lag stay as they were."""
    _write(changelog, 0, "a", "b", "c", "d")
    _write(changelog, 1, "x")
    store = _store()
    kept = _kept()
    partition = _partition(store)
    kept.warm_up(0, "holder", partition)
    changelog.starved[0] = 1
    assert await kept.tail() == 0
    assert kept.applied(0) == 0
    assert kept.lags() == {}  # unknown until a fetch of it was answered: not warm
    assert _backend(partition).records == [] and _backend(partition).marks == []
    assert await kept.tail() == 4
    assert kept.applied(0) == 4 and kept.lags() == {0: 0}
    assert _backend(partition).marks == [4] and len(store) == 4


async def test_a_warm_up_lags_by_what_it_has_not_read(
        changelog: Changelog, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(changelog, 0, *[f"k{n}" for n in range(10)])
    kept = _kept()
    another = _partition()
    kept.warm_up(0, "holder", _partition())
    kept.warm_up(0, "another", another)  # a partition kept already is not replaced
    assert _backend(another).closed
    made = changelog.consumer

    def four_at_a_time(**kwargs: Any) -> Any:
        consumer = made(**kwargs)
        fetch = consumer.getmany

        async def getmany(*tps: Any, **kw: Any) -> Any:
            return await fetch(*tps, **{**kw, "max_records": 4})

        consumer.getmany = getmany  # type: ignore[method-assign]
        return consumer

    monkeypatch.setattr(kept_module, "AIOKafkaConsumer", four_at_a_time)
    await kept.tail()
    assert kept.lags() == {0: 6}
    await kept.tail()
    await kept.tail()
    assert kept.lags() == {0: 0}
    entry = kept.take(0)
    assert entry is not None and entry.holder == "holder"


async def test_a_partition_taken_while_the_poll_was_out_gets_nothing(changelog: Changelog
                                                                    ) -> None:
    _write(changelog, 0, "a")
    _write(changelog, 1, "b")
    stores = [_store(), _store()]
    kept = _kept()
    partitions = [_partition(store) for store in stores]
    kept.keep(0, "zero", partitions[0], applied=0)
    kept.keep(1, "one", partitions[1], applied=0)
    await kept.tail()  # both assigned, both read
    _write(changelog, 0, "c")
    _write(changelog, 1, "d")
    consumer = changelog.consumers[0]
    fetch = consumer.getmany

    async def taken_meanwhile(*tps: Any, **kw: Any) -> Any:
        batch = await fetch(*tps, **kw)
        kept.take(0)
        return batch

    consumer.getmany = taken_meanwhile  # type: ignore[method-assign]
    assert await kept.tail() == 1  # the other partition's record still applied
    assert dict(stores[0].items()) == {"a": b"a"}
    assert dict(stores[1].items()) == {"b": b"b", "d": b"d"}
    assert _backend(partitions[0]).marks == [1]  # the first tail's only
    assert _backend(partitions[1]).marks == [1, 2]


async def test_a_warm_up_of_an_empty_changelog_is_warm_at_once(changelog: Changelog) -> None:
    """Its end, offset 0, is an end: the group may move the partition (engine/assignor.py)."""
    changelog.partitions[0] = Partition()
    kept = _kept()
    kept.warm_up(0, "holder", _partition())
    assert kept.lags() == {}
    await kept.tail()
    assert kept.lags() == {0: 0}


async def test_a_failed_tail_drops_what_is_kept(changelog: Changelog) -> None:
    _write(changelog, 0, "a")
    partition = _partition()
    kept = _kept()
    kept.keep(0, "holder", partition, applied=0)
    changelog.fail_next = KafkaConnectionError()
    assert await kept.tail() == 0
    assert kept.partitions == [] and _backend(partition).closed
    assert _backend(partition).records == []


async def test_state_kept_past_its_time_is_dropped(changelog: Changelog) -> None:
    revoked, warm = _partition(), _partition()
    kept = _kept(keep_s=0.5)
    kept.keep(0, "holder", revoked, applied=0)
    kept.warm_up(1, "holder", warm)
    changelog.clock.now += 0.5
    kept.evict()
    assert kept.partitions == [0, 1]  # not longer than half a second yet
    assert not _backend(revoked).closed and not _backend(warm).closed
    changelog.clock.now += 0.1
    kept.evict()
    assert kept.partitions == [] and _backend(revoked).closed and _backend(warm).closed


def test_nothing_is_kept_when_keeping_is_off() -> None:
    revoked, warm = _partition(), _partition()
    kept = _kept(keep_s=0)
    kept.keep(0, "holder", revoked, applied=3)
    kept.warm_up(1, "holder", warm)
    assert kept.partitions == [] and _backend(revoked).closed and _backend(warm).closed


async def test_the_tail_follows_what_is_kept_and_stops_when_nothing_is(
        changelog: Changelog) -> None:
    _write(changelog, 0, "a", "b")
    _write(changelog, 1, "c")
    kept = _kept()
    assert await kept.tail() == 0
    assert changelog.consumers == []  # nothing kept: no consumer
    kept.keep(1, "one", _partition(), applied=1)
    await kept.tail()
    consumer = changelog.consumers[0]
    assert [tp.partition for tp in consumer.assigned] == [1]
    assert consumer.positions[consumer.assigned[0]] == 1  # from where its state was read
    kept.keep(0, "zero", _partition(), applied=1)
    await kept.tail()
    assert sorted(tp.partition for tp in consumer.assigned) == [0, 1]
    kept.drop_all()
    await kept.tail()
    assert consumer.assigned == []
    changelog.fail_stop = KafkaConnectionError()
    await kept.close()  # a broker gone by now does not fail the engine's stop
    assert consumer.stopped
