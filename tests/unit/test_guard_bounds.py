"""The guard's bounds (issue 16, docs/engine.md "Bounds"): checked when an event arrives,
idle runs abandoned, the partition's buffered bytes capped, a failing run evicted,
punctuation held to its budget, buffered events under their own changelog keys."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.decoding import DecodeLimits
from symfonic_stream.processors.projector import (
    RUN_CODEC,
    GuardLimits,
    ProjectorProcessor,
    RunStatus,
    decode_run,
)
from symfonic_stream.projections.typed import project_typed
from tests.unit.helpers import interrupt, raw, restore_from, write_changes
from tests.unit.test_guard import Harness, text

IDLE = GuardLimits(gap_timeout_s=30.0, run_buffer_max=5, closed_run_grace_s=600.0,
                   run_idle_timeout_s=3600.0)


def test_an_idle_run_ends_abandoned_with_its_last_timestamp_and_closes() -> None:
    h = Harness(IDLE)
    h.feed(text(0), now=1000.0)
    h.feed(text(1), now=1010.0)
    h.processor.punctuate(1010.0 + 3599.0, h.out)
    assert h.shapes() == ["text_delta", "text_delta"]  # not yet
    h.processor.punctuate(1010.0 + 3600.0, h.out)
    assert h.shapes() == ["text_delta", "text_delta", "end:abandoned"]
    end = h.records()[-1]
    assert end == {"run_id": "run-1", "seq": 2, "source_index": None, "ts": 101.0,
                   "end": {"status": "abandoned", "error": None}}
    h.feed(text(2), now=5000.0)
    assert h.reasons() == ["run_closed"]  # closed like any other run
    h.processor.punctuate(1010.0 + 3600.0 + 600.0, h.out)
    assert h.processor.guard.run("run-1") is None  # and forgotten after its grace


def test_an_event_postpones_the_idle_end_without_touching_the_heap() -> None:
    h = Harness(IDLE)
    h.feed(text(0), now=0.0)
    heap_before = len(h.processor.guard.runs._heap)
    for second in range(1, 100):
        h.feed(text(second), now=float(second))
    assert len(h.processor.guard.runs._heap) == heap_before  # the hot path never pushes
    h.processor.punctuate(3600.0, h.out)  # the first deadline comes up: moved, not fired
    assert "end:abandoned" not in h.shapes()
    h.processor.punctuate(99.0 + 3600.0, h.out)
    assert h.shapes()[-1] == "end:abandoned"


def test_a_paused_run_is_kept_until_its_pause_expires_plus_the_grace() -> None:
    h = Harness(IDLE)
    h.feed(raw("ask_user", 0, interrupt=interrupt(expires_at=20_000.0)), now=0.0)
    h.processor.punctuate(3600.0 * 2, h.out)  # idle long past the idle timeout: paused
    assert h.shapes() == ["ask_user", "end:paused"]
    h.processor.punctuate(20_000.0 + 600.0, h.out)
    assert h.shapes() == ["ask_user", "end:paused", "end:abandoned"]


def test_a_paused_run_with_an_absurd_expiry_still_ends() -> None:
    h = Harness(IDLE)
    h.feed(raw("ask_user", 0, interrupt=interrupt(expires_at=1e300)), now=0.0)
    h.processor.punctuate(24 * 3600.0 + 600.0, h.out)  # 24 idle timeouts, the grace
    assert h.shapes()[-1] == "end:abandoned"


def test_an_abandoned_run_with_holes_reports_them_first() -> None:
    h = Harness(GuardLimits(gap_timeout_s=10_000.0, run_idle_timeout_s=100.0))
    h.feed(text(0), now=0.0)
    h.feed(text(3), now=1.0)
    h.processor.punctuate(200.0, h.out)
    assert h.shapes() == ["text_delta", "gap:1-2", "text_delta", "end:abandoned"]
    assert [r["seq"] for r in h.records()] == [0, 1, 2, 3]


def test_the_partitions_buffered_bytes_are_capped_oldest_hole_first() -> None:
    limits = GuardLimits(gap_timeout_s=1e9, run_buffer_max=1000, buffer_max_bytes=2048)
    h = Harness(limits)
    for n in range(20):  # twenty runs each waiting for their index 0
        h.feed(text(1, f"run-{n:02d}"), now=float(n))
    guard = h.processor.guard
    assert guard.buffered_bytes <= 2048
    gapped = [r["run_id"] for r in h.records() if "gap" in r]
    assert gapped and gapped == sorted(gapped)  # the longest waiting went first
    assert gapped[0] == "run-00"
    assert guard.buffered + len(gapped) == 20
    assert {r["run_id"] for r in h.records() if "event" in r} == set(gapped)


def test_an_output_over_the_bound_is_dead_lettered_when_it_arrives() -> None:
    h = Harness(GuardLimits(max_output_bytes=2000))
    big = raw("text_delta", 0, text="x" * 3000)
    h.feed(big)
    assert h.reasons() == ["too_large"] and h.records() == []
    assert "output would be" in h.out.dead_letters[0].detail
    h.feed(raw("text_delta", 2, text="y" * 3000))  # buffered: refused now, not at release
    assert h.reasons() == ["too_large", "too_large"]
    assert h.processor.buffered_events == 0


def test_a_buffered_event_over_the_state_bound_is_dead_lettered_when_it_arrives() -> None:
    h = Harness(GuardLimits(max_state_bytes=1500, max_output_bytes=10_000))
    h.feed(raw("text_delta", 3, text="z" * 2000))
    assert h.reasons() == ["too_large"]
    assert "state record" in h.out.dead_letters[0].detail
    h.feed(raw("text_delta", 0, text="z" * 2000))  # in place: no state record needed
    assert h.shapes() == ["text_delta"]


def test_a_projection_that_raises_costs_its_record_only() -> None:
    def fragile(event: Any) -> list[dict[str, Any]]:
        if event.text == "boom":
            raise ValueError("cannot")
        return project_typed(event)

    processor = ProjectorProcessor(fragile, "out", GuardLimits())
    out = Collector()
    for offset, event in enumerate([text(0), raw("text_delta", 1, text="boom"), text(2)]):
        processor.process(InputRecord("in", 0, offset, b"run-1", orjson.dumps(event)), 0.0, out)
    assert [letter.reason.value for letter in out.dead_letters] == ["invalid_event"]
    assert "ValueError: cannot" in out.dead_letters[0].detail
    processor.punctuate(31.0, out)  # the hole it left becomes a gap, as for any lost index
    shapes = [orjson.loads(o.value or b"").get("gap") for o in out.outputs]
    assert shapes == [None, {"from_index": 1, "to_index": 1}, None]


def test_a_run_whose_expiry_fails_is_evicted_and_the_rest_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness()
    h.feed(text(0, "bad"), now=0.0)
    h.feed(text(2, "bad"), now=0.0)
    h.feed(text(0, "good"), now=0.0)
    h.feed(text(2, "good"), now=0.0)
    guard = h.processor.guard
    real = guard.fill_first_hole

    def failing(run_id: str, *args: Any) -> None:
        if run_id == "bad":
            raise RuntimeError("broken")
        real(run_id, *args)

    monkeypatch.setattr(guard, "fill_first_hole", failing)
    h.processor.punctuate(31.0, h.out)
    assert [letter.record.offset for letter in h.out.dead_letters] == [2]
    assert "was evicted: RuntimeError: broken" in h.out.dead_letters[0].detail
    good = [r for r in h.records() if r["run_id"] == "good"]
    assert [("gap" in r, r["seq"]) for r in good] == [(False, 0), (True, 1), (False, 2)]
    assert [r for r in h.records() if r["run_id"] == "bad"] == [h.records()[0]]
    bad = guard.run("bad")
    assert bad is not None and bad.status is RunStatus.CLOSED and bad.next_seq == 1


def test_punctuation_stops_at_its_budget_and_the_next_goes_on() -> None:
    h = Harness(GuardLimits(gap_timeout_s=1.0, punctuate_budget_s=0.0))
    for n in range(50):
        h.feed(text(1, f"run-{n}"), now=0.0)
    h.processor.punctuate(10.0, h.out)
    assert len(h.records()) == 2  # one run's gap and event: the budget was spent
    assert h.out.counts["punctuations_cut_short"] == 1
    for _ in range(49):
        h.processor.punctuate(10.0, h.out)
    assert h.out.counts["gaps"] == 50


def test_buffered_events_have_their_own_changelog_keys_and_changes_stay_small() -> None:
    h = Harness(GuardLimits(run_buffer_max=1000))
    sizes = []
    for index in range(1, 200):
        h.feed(raw("text_delta", index, text="k" * 1000))
        write_changes(h.processor, h.out)
        sizes.append(sum(len(v or b"") for v in h.out.changelog.values()))
        h.out.changelog.clear()
    assert max(sizes) < 1300  # one event and the run's counters, not the whole buffer
    h.feed(text(0))
    write_changes(h.processor, h.out)
    tombstones = [key for key, value in h.out.changelog.items() if value is None]
    assert len(tombstones) == 199 and all(key.startswith(b"buf/run-1/") for key in tombstones)


def test_a_restore_rebuilds_buffers_and_deadlines() -> None:
    h = Harness(IDLE)
    h.feed(text(0), now=0.0)
    h.feed(text(2), now=5.0)
    h.feed(text(4), now=6.0)
    write_changes(h.processor, h.out)
    again = Harness(IDLE)
    restore_from(again.processor, dict(h.out.changelog))
    assert again.processor.buffered_events == 2
    assert again.processor.guard.buffered_bytes == h.processor.guard.buffered_bytes
    again.processor.punctuate(35.0, again.out)  # index 2 arrived at 5, index 4 at 6
    assert again.shapes() == ["gap:1-1", "text_delta"]
    again.processor.punctuate(36.0, again.out)
    assert again.shapes() == ["gap:1-1", "text_delta", "gap:3-3", "text_delta"]


def test_a_run_record_of_the_previous_format_is_read_with_its_buffer() -> None:
    value = orjson.dumps(text(3))
    old = orjson.dumps([1, 1, 0, 0.0, [[7.0, "in", 0, 9, 0, "cnVuLTE=", value.decode(), []]]])
    state = decode_run(old)
    assert (state.next_index, state.next_seq) == (1, 1) and state.legacy_buffer is not None
    assert sorted(state.legacy_buffer) == [3]
    assert state.legacy_buffer[3].record.value == value and state.legacy_buffer[3].ts == 103.0
    h = Harness(IDLE)
    restore_from(h.processor, {b"run/run-1": old})
    assert h.processor.buffered_events == 1 and sorted(h.processor.guard.held["run-1"]) == [3]
    write_changes(h.processor, h.out)
    assert b"buf/run-1/3" in h.out.changelog  # written under its own key from now on
    again = decode_run(h.out.changelog[b"run/run-1"] or b"")  # and the run's record without it
    assert again.legacy_buffer is None
    assert orjson.loads(RUN_CODEC.encode(again))[7] is False  # no owner yet
    h.processor.punctuate(1.0, h.out)  # no arrival time: its idle clock starts now
    assert "end:abandoned" not in h.shapes()
    assert len(RUN_CODEC.encode(decode_run(RUN_CODEC.encode(state)))) < 60


def test_decode_limits_reach_the_projector() -> None:
    processor = ProjectorProcessor(project_typed, "out", GuardLimits(),
                                   decode=DecodeLimits(max_depth=8))
    out = Collector()
    deep: Any = 1
    for _ in range(8):
        deep = [deep]
    event = raw("tool_call", 0, tool_call={"id": "c", "name": "n", "arguments": {"a": deep}})
    processor.process(InputRecord("in", 0, 0, b"run-1", orjson.dumps(event)), 0.0, out)
    assert [(d.reason.value, d.detail) for d in out.dead_letters] == [
        ("invalid_event", "nested deeper than 8 levels")
    ]


def test_a_pause_already_expired_when_it_arrives_is_kept_for_the_grace_from_then() -> None:
    """A kernel clock behind ours (or a replayed stream) must not abandon a run at once."""
    h = Harness(IDLE)
    h.feed(raw("ask_user", 0, interrupt=interrupt(expires_at=5.0)), now=10_000.0)
    h.processor.punctuate(10_000.0 + 599.0, h.out)
    assert h.shapes() == ["ask_user", "end:paused"]
    h.processor.punctuate(10_000.0 + 600.0, h.out)
    assert h.shapes()[-1] == "end:abandoned"


def test_held_events_live_in_the_guard_not_in_the_run() -> None:
    """A run's record is its counters alone: the events held behind its holes are the
    ``buf`` store's (each under its own key), indexed in memory by the guard, and gone from
    the index once released."""
    h = Harness(GuardLimits(run_buffer_max=3))
    for run in ("a", "b"):
        h.feed(text(0, run))
        for index in (3, 2, 5, 4, 9, 8, 7):
            h.feed(text(index, run))
        h.feed(text(1, run))
    h.processor.punctuate(100.0, h.out)
    assert h.processor.guard.held == {}
    state = h.processor.guard.run("a")
    assert state is not None and len(RUN_CODEC.encode(state)) < 60
