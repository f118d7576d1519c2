"""symfonic_stream/state/restore.py: a restore ends a partition only once its position reached
the end offset, or a probe of it alone found nothing there; never on an empty fetch (issue
32: a fetch of several partitions is filled from whichever come first, the others come
back empty although they have records). On the in-memory changelog of changelog_fakes.py,
with a clock of the test's own: each poll moves it by its wait."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from symfonic_stream.config import Settings
from symfonic_stream.state import restore
from symfonic_stream.state.store import Codec, StateStore, StorePartition

from .changelog_fakes import TOPIC, Changelog, Clock, RecordingBackend

SETTINGS = Settings(topic_prefix="unit")


@pytest.fixture
def changelog(monkeypatch: pytest.MonkeyPatch) -> Iterator[Changelog]:
    clock = Clock()
    made = Changelog(clock)
    monkeypatch.setattr(restore, "AIOKafkaConsumer", made.consumer)
    monkeypatch.setattr(restore, "time", clock)
    yield made


def _store() -> StateStore[bytes]:
    return StateStore("runs", Codec(bytes, bytes))


def _targets(*partitions: int) -> tuple[dict[int, Any], dict[int, StateStore[bytes]]]:
    """One task per partition, under prefix ``t<p>:``, with one store in a store partition
    over a :class:`RecordingBackend`."""
    stores = {p: _store() for p in partitions}
    targets = {p: [(f"t{p}:".encode(), StorePartition([stores[p]], RecordingBackend()))]
               for p in partitions}
    return targets, stores


def _backend(store: StateStore[bytes]) -> RecordingBackend:
    backend = store.partition.backend
    assert isinstance(backend, RecordingBackend)
    return backend


def _fill(changelog: Changelog, partition: int, count: int) -> None:
    """``count`` records of the task of ``partition``: keys r0.., values v0.."""
    prefix = f"t{partition}:runs/".encode()
    changelog.write(partition, *[(prefix + f"r{n}".encode(), f"v{n}".encode())
                                 for n in range(count)])


def _starve_polls(changelog: Changelog, partition: int, polls: int) -> None:
    """``partition`` comes back empty from the restoring consumer's next ``polls`` fetches."""
    changelog.starved[partition] = polls


async def _restore(changelog: Changelog, targets: Any, **kwargs: Any) -> restore.Restored:
    del changelog  # (its consumers stand in for aiokafka's: the fixture did that)
    return await restore.restore_stores(SETTINGS, TOPIC, targets, **kwargs)


async def test_every_record_before_the_end_is_restored_and_counted(changelog: Changelog
                                                                  ) -> None:
    _fill(changelog, 0, 30)
    changelog.write(0, None)  # a commit marker
    changelog.write(1, (b"t1:runs/a", b"1"), (b"t1:runs/a", None), (b"t1:runs/b", b"2"),
                    (None, b"no key"), (b"t9:runs/x", b"another task's"))
    targets, stores = _targets(0, 1)
    done = await _restore(changelog, targets)
    assert len(stores[0]) == 30 and stores[0].get("r29") == b"v29"
    assert dict(stores[1].items()) == {"b": b"2"}  # the tombstone removed a
    assert done.records == {0: 30, 1: 3}  # only records a store took
    assert done.applied == {0: 31, 1: 5}
    assert done.behind == set()
    assert [_backend(stores[p]).marks for p in (0, 1)] == [[31], [5]]  # each told its offset
    assert stores[0].partition.offset == 31 and stores[1].partition.offset == 5


async def test_records_past_the_end_when_it_began_are_not_restored(changelog: Changelog
                                                                  ) -> None:
    _fill(changelog, 0, 10)
    changelog.stable[0] = 6  # a transaction open on the rest
    targets, stores = _targets(0)
    done = await _restore(changelog, targets)
    assert sorted(key for key, _ in stores[0].items()) == [f"r{n}" for n in range(6)]
    assert done.applied == {0: 6}


async def test_what_commits_during_the_restore_is_not_restored(changelog: Changelog) -> None:
    """Only what was committed when it began: the stores hold everything before the end
    offsets it took, and the set-up reads from there on (engine/restoring.py)."""
    _fill(changelog, 0, 4)
    changelog.after_fetch.append(lambda: _fill(changelog, 0, 3))  # another writer's commits
    targets, stores = _targets(0)
    done = await _restore(changelog, targets)
    assert sorted(key for key, _ in stores[0].items()) == ["r0", "r1", "r2", "r3"]
    assert done.records == {0: 4} and done.applied == {0: 4}


async def test_a_partition_that_comes_back_empty_is_not_restored_by_that(changelog: Changelog
                                                                        ) -> None:
    """Issue 32: one empty fetch, or many short of SETTLE_S, proves nothing: the restore
    goes on until the position reaches the end offset."""
    _fill(changelog, 0, 40)
    _fill(changelog, 1, 40)
    polls = int(restore.SETTLE_S / (restore._POLL_MS / 1000)) - 2  # just short of a probe
    _starve_polls(changelog, 1, polls)
    targets, stores = _targets(0, 1)
    done = await _restore(changelog, targets)
    assert len(stores[1]) == 40
    assert done.records == {0: 40, 1: 40}
    assert [c for c in changelog.consumers if c is not changelog.consumers[0]] == []  # no probe


async def test_a_starved_partition_is_probed_and_restored_to_its_end(changelog: Changelog
                                                                    ) -> None:
    """Quiet for SETTLE_S, a partition is fetched alone: it has records, so it was only
    starved, and the restore goes on."""
    _fill(changelog, 0, 40)
    _fill(changelog, 1, 40)
    _starve_polls(changelog, 1, 10_000)  # never in a fetch of several
    restore_one = restore._restore_one
    taken: list[bytes] = []

    def counted(*args: Any) -> bool:
        taken.append(args[1])
        return restore_one(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(restore, "_restore_one", counted)
        patch.setattr(restore, "PROBE_WAIT_S", 1.0)

        real_probe = restore._Prober.anything_at

        async def probed_then_fed(self: Any, tp: Any, position: int) -> bool | None:
            found = await real_probe(self, tp, position)
            changelog.starved.clear()  # the partition's turn comes after a probe
            return found

        patch.setattr(restore._Prober, "anything_at", probed_then_fed)
        targets, stores = _targets(0, 1)
        done = await _restore(changelog, targets)
    assert len(stores[1]) == 40 and done.records == {0: 40, 1: 40}
    assert len(changelog.consumers) >= 2  # the restore's, and a probe's


async def test_a_probe_that_finds_nothing_ends_the_partition_at_its_position(
        changelog: Changelog, caplog: pytest.LogCaptureFixture) -> None:
    """A broker that dropped a compacted partition's last records and markers: nothing
    lies between the position and the end offset, and no fetch would ever reach it."""
    _fill(changelog, 0, 5)
    changelog.stable[0] = 9  # the end says 9; the log holds 0..4
    targets, stores = _targets(0)
    with caplog.at_level(logging.WARNING):
        done = await _restore(changelog, targets)
    assert len(stores[0]) == 5
    assert done.records == {0: 5}
    assert any("a hole the broker left" in r.getMessage() for r in caplog.records)


async def test_a_probe_that_moves_past_markers_only_ends_nothing(
        changelog: Changelog, caplog: pytest.LogCaptureFixture) -> None:
    """What lies before the end may be markers and aborted batches only: a probe that moves
    the position past them without a record found something, not a hole."""
    _fill(changelog, 0, 3)
    changelog.write(0, None, None, None)  # an abort marker, say, and two commit markers
    _starve_polls(changelog, 0, 10_000)
    real_probe = restore._Prober.anything_at
    answers: list[bool | None] = []

    async def watched(self: Any, tp: Any, position: int) -> bool | None:
        found = await real_probe(self, tp, position)
        answers.append(found)
        changelog.starved.clear()  # the partition's turn comes after the probe
        return found

    with pytest.MonkeyPatch.context() as patch, caplog.at_level(logging.WARNING):
        patch.setattr(restore._Prober, "anything_at", watched)
        targets, _ = _targets(0)
        done = await _restore(changelog, targets, starts={0: 3})  # the records were read
    assert answers == [True]
    assert not any("a hole" in r.getMessage() for r in caplog.records)
    assert done.records == {0: 0} and done.applied == {0: 6}


async def test_a_probe_without_an_answer_ends_nothing(changelog: Changelog) -> None:
    """A probe whose fetch got no response says nothing either way: the partition is
    probed again later, and restored once its records come."""
    _fill(changelog, 0, 20)
    changelog.silent.add(0)
    _starve_polls(changelog, 0, 10_000)
    answers: list[bool | None] = []
    real_probe = restore._Prober.anything_at

    async def watched(self: Any, tp: Any, position: int) -> bool | None:
        found = await real_probe(self, tp, position)
        answers.append(found)
        if len(answers) == 2:  # the broker answers again
            changelog.silent.clear()
            changelog.starved.clear()
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(restore._Prober, "anything_at", watched)
        targets, stores = _targets(0)
        done = await _restore(changelog, targets)
    assert answers[:2] == [None, None]
    assert len(stores[0]) == 20 and done.records == {0: 20}


async def test_a_restore_from_an_offset_reads_only_the_tail(changelog: Changelog) -> None:
    _fill(changelog, 0, 10)
    _fill(changelog, 1, 10)
    targets, stores = _targets(0, 1)
    done = await _restore(changelog, targets, starts={0: 7})
    assert sorted(key for key, _ in stores[0].items()) == ["r7", "r8", "r9"]
    assert done.records == {0: 3, 1: 10}
    assert done.applied == {0: 10, 1: 10}
    assert [key for key, _ in _backend(stores[0]).records] == [b"runs/r7", b"runs/r8",
                                                               b"runs/r9"]


async def test_a_start_before_the_log_start_is_behind(changelog: Changelog) -> None:
    """Records deleted since the stores last read it: the caller restores afresh."""
    _fill(changelog, 0, 10)
    changelog.partitions[0].start = 4
    changelog.partitions[0].entries = changelog.partitions[0].entries[4:]
    targets, stores = _targets(0)
    done = await _restore(changelog, targets, starts={0: 2})
    assert done.behind == {0}
    assert done.records == {0: 6}
    # Not told it holds everything before the end: offsets 2 and 3 are gone.
    assert _backend(stores[0]).marks == [] and stores[0].partition.offset is None


async def test_a_start_at_the_end_reads_nothing(changelog: Changelog) -> None:
    _fill(changelog, 0, 10)
    targets, stores = _targets(0)
    done = await _restore(changelog, targets, starts={0: 10})
    assert done.records == {0: 0} and len(stores[0]) == 0
    assert done.applied == {0: 10}
    assert changelog.fetches == 0
    assert _backend(stores[0]).marks == [10]


async def test_each_record_goes_to_its_tasks_backend_then_the_offset(changelog: Changelog
                                                                     ) -> None:
    """The backend (memory, or a database on disk) holds the values: each record, its task
    prefix taken off, then the offset they reach (a database's checkpoint)."""
    _fill(changelog, 0, 3)
    _fill(changelog, 1, 2)
    targets, stores = _targets(0, 1)
    await _restore(changelog, targets)
    backend = _backend(stores[0])
    assert backend.records == [(b"runs/r0", b"v0"), (b"runs/r1", b"v1"), (b"runs/r2", b"v2")]
    assert backend.marks == [3] and backend.offset == 3
    assert list(backend.scan(b"runs/")) == [("r0", b"v0"), ("r1", b"v1"), ("r2", b"v2")]
    assert _backend(stores[1]).records == [(b"runs/r0", b"v0"), (b"runs/r1", b"v1")]


async def test_a_restore_cancelled_meanwhile_stops(changelog: Changelog) -> None:
    _fill(changelog, 0, 10)
    _starve_polls(changelog, 0, 10_000)
    targets, _ = _targets(0)
    polls = []
    with pytest.raises(restore.RestoreCancelled):
        await _restore(changelog, targets, cancelled=lambda: len(polls) > 3,
                       on_progress=lambda: polls.append(1))
    assert all(c.stopped for c in changelog.consumers)


async def test_a_restore_without_progress_stalls(changelog: Changelog,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition that never moves and that no probe answers for fails the restore."""
    _fill(changelog, 0, 10)
    changelog.silent.add(0)
    _starve_polls(changelog, 0, 10_000)
    monkeypatch.setattr(restore, "PROBE_WAIT_S", 1.0)
    targets, _ = _targets(0)
    with pytest.raises(restore.RestoreStalled, match="0@0/10"):
        await _restore(changelog, targets)


async def test_nothing_to_restore_asks_nothing(changelog: Changelog) -> None:
    done = await _restore(changelog, {})
    assert (done.records, done.applied, changelog.consumers) == ({}, {}, [])
