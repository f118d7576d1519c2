"""The fault table (tests/integration/faults.py) covers what docs/testing.md says it does:
every consumer meets every named phase of symfonic_stream/faults.py as a first fault and as its
successor's, the quick rows of ``make test`` hold every distinct first fault (mode, phase,
stateless or stateful) once and every phase as a successor's, and every zombie woken
mid-transaction is expected to be fenced. No broker: this reads the table."""

from __future__ import annotations

from collections import Counter

from symfonic_stream.faults import PHASES
from tests.integration.faults import REPLAY_TABLE, TABLE, Row
from tests.integration.workloads import WORKLOADS


def _phases(consumer: str) -> set[str]:
    """The phases a consumer passes: a stateless one restores nothing."""
    return set(PHASES) - (set() if WORKLOADS[consumer].stateful else {"restoring"})


def test_every_consumer_meets_every_phase_as_a_first_and_as_a_successors_fault() -> None:
    assert {row.consumer for row in TABLE} == set(WORKLOADS)
    for consumer in WORKLOADS:
        rows = [row for row in TABLE if row.consumer == consumer]
        assert {row.first.phase for row in rows} == _phases(consumer), consumer
        assert {row.successor.phase for row in rows} == _phases(consumer), consumer
        assert all(row.successor.mode == "kill" for row in rows)


def _first_fault(row: Row) -> tuple[str, str, bool]:
    """What the engine meets in a row's first fault: its mode and phase, and whether the
    consumer keeps state (restores, changelog writes and kept state are a stateful one's)."""
    return row.first.mode, row.first.phase, WORKLOADS[row.consumer].stateful


def test_the_quick_rows_hold_each_distinct_first_fault_once_and_every_successors_phase(
) -> None:
    """Issue 45: make test ran 7 of the 33 rows, no zombie of a stateful consumer among
    them. Every row whose first fault is distinct now runs in make test, once."""
    quick = [row for row in TABLE if row.quick]
    assert sorted(map(_first_fault, quick)) == sorted(set(map(_first_fault, TABLE)))
    assert {row.successor.phase for row in quick} == set(PHASES)
    assert {(mode, stateful) for mode, _, stateful in map(_first_fault, quick)} == {
        ("kill", False), ("kill", True), ("freeze", False), ("freeze", True)}
    assert any(row.first.fence_guaranteed and WORKLOADS[row.consumer].stateful for row in quick)
    # Replay: each row's first phase is its own.
    assert len({first.phase for first, _, _ in REPLAY_TABLE}) == len(REPLAY_TABLE)
    assert all(quick for *_, quick in REPLAY_TABLE)


def test_zombies_woken_mid_transaction_are_the_ones_expected_fenced() -> None:
    for row in TABLE:
        if row.first.phase == "in_transaction":
            assert row.first.mode == "freeze" and row.first.fence_guaranteed, row.name
        elif row.first.mode == "freeze":
            assert not row.first.fence_guaranteed, row.name
    zombies = Counter(row.consumer for row in TABLE if row.first.mode == "freeze")
    assert set(zombies) == set(WORKLOADS)


def test_rows_are_named_once_and_replays_only_meet_transaction_phases() -> None:
    names = [row.name for row in TABLE]
    assert len(names) == len(set(names))
    for first, rerun, _ in REPLAY_TABLE:
        assert {first.phase, rerun.phase} <= {"in_transaction", "commit_logged"}
