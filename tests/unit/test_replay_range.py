"""The replay's range: parsing offsets, checking bounds, planning per-partition ranges."""

from __future__ import annotations

import pytest

from symfonic_stream.tools.replay.ranges import RangeError, ReplayRange, parse_offsets, plan_ranges

FIRSTS = {0: 0, 1: 0, 2: 10}
ENDS = {0: 100, 1: 50, 2: 60}


def plan(replay_range: ReplayRange, **times: dict[int, int | None]) -> dict[int, tuple[int, int]]:
    return plan_ranges(
        replay_range, 3, firsts=FIRSTS, ends=ENDS,
        from_times=times.get("from_times", {}), to_times=times.get("to_times", {}),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1200", 1200), (" 0 ", 0), ("0:10,2:7", {0: 10, 2: 7}), ("1:0", {1: 0})],
)
def test_parse_offsets(text: str, expected: object) -> None:
    assert parse_offsets(text, "--from-offset") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x", "offset 'x' is not a whole number"),
        ("-3", "offset -3 is negative"),
        ("1:5,1:6", "partition 1 is given twice"),
        ("1:5,7", "'7' is not PARTITION:OFFSET"),
        ("a:5", "partition 'a' is not a whole number"),
    ],
)
def test_bad_offsets_name_the_option_and_the_problem(text: str, message: str) -> None:
    with pytest.raises(RangeError, match="--to-offset") as caught:
        parse_offsets(text, "--to-offset")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give the start of the range"),
        ({"from_ms": 1, "from_offsets": 3}, "give the start of the range"),
        ({"from_ms": 1, "to_ms": 2, "to_offsets": 3}, "at most one end"),
        ({"from_ms": 5, "to_ms": 5}, "--to must be later than --from"),
        ({"from_offsets": 9, "to_offsets": 4}, "--to-offset 4 is before --from-offset 9"),
        ({"from_offsets": {0: 9}, "to_offsets": 4}, "--to-offset 4 is before --from-offset 9"),
        ({"from_offsets": {0: 1}, "to_offsets": {1: 4}}, "must name the same partitions"),
    ],
)
def test_impossible_ranges_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(RangeError, match=message):
        ReplayRange(**kwargs)  # type: ignore[arg-type]


def test_a_time_range_is_identified_as_before_offsets_existed() -> None:
    # Replays started by an earlier version resume under the same id.
    assert ReplayRange(from_ms=1, to_ms=2).identity() == [1, 2]
    assert ReplayRange(from_offsets={2: 5}).identity() == [None, {"2": 5}, None, None]


def test_one_offset_applies_to_every_partition_inside_what_it_holds() -> None:
    # Partition 2 starts at 10 (older records deleted); 1 holds only 50 records.
    assert plan(ReplayRange(from_offsets=5, to_offsets=70)) == {
        0: (5, 70), 1: (5, 50), 2: (10, 60)
    }


def test_named_partitions_are_the_only_ones_replayed() -> None:
    assert plan(ReplayRange(from_offsets={1: 20}, to_offsets={1: 30})) == {1: (20, 30)}
    assert plan(ReplayRange(from_offsets={0: 3, 2: 200})) == {0: (3, 100), 2: (60, 60)}
    assert plan(ReplayRange(from_ms=1, to_offsets={2: 30}), from_times={2: 12}) == {2: (12, 30)}


def test_time_bounds_use_the_offsets_of_the_times() -> None:
    got = plan(
        ReplayRange(from_ms=1, to_ms=2),
        from_times={0: 40, 1: None, 2: 15},  # None: nothing that late in partition 1
        to_times={0: 90, 1: None, 2: None},
    )
    assert got == {0: (40, 90), 1: (50, 50), 2: (15, 60)}


def test_mixed_bounds() -> None:
    got = plan(ReplayRange(from_offsets=20, to_ms=2), to_times={0: 30, 1: 10, 2: None})
    assert got == {0: (20, 30), 1: (20, 20), 2: (20, 60)}


def test_a_partition_the_topic_does_not_have_is_refused() -> None:
    with pytest.raises(RangeError, match="there is no partition 5"):
        plan(ReplayRange(from_offsets={5: 0}))
