"""The ordering guard (contract §5): examples for each rule, then properties (hypothesis)."""

from __future__ import annotations

import random
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from symfonic_stream.engine.processor import Collector, InputRecord
from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.processors.projector import (
    RUN_CODEC,
    GuardLimits,
    ProjectorProcessor,
    RunStatus,
    decode_run,
)
from symfonic_stream.projections.typed import project_typed
from tests.unit.helpers import interrupt, raw, restore_from, write_changes

LIMITS = GuardLimits(gap_timeout_s=30.0, run_buffer_max=5, closed_run_grace_s=600.0)


class Harness:
    """A projector processor fed raw dicts, keeping every output and dead letter."""

    def __init__(self, limits: GuardLimits = LIMITS) -> None:
        self.limits = limits
        self.processor = ProjectorProcessor(project_typed, "out", limits, check_keys=True)
        self.out = Collector()
        self.offset = 0

    def feed(self, event: dict[str, Any], now: float = 0.0) -> None:
        self.offset += 1
        record = InputRecord(
            "in", 0, self.offset, str(event.get("run_id")).encode(), orjson.dumps(event)
        )
        self.processor.process(record, now, self.out)

    def records(self) -> list[dict[str, Any]]:
        return [orjson.loads(output.value or b"") for output in self.out.outputs]

    def shapes(self) -> list[str]:
        """Each record as a short word: the event type, ``end:<status>`` or ``gap:a-b``."""
        words = []
        for record in self.records():
            if "event" in record:
                words.append(record["event"]["type"])
            elif "end" in record:
                words.append("end:" + record["end"]["status"])
            else:
                words.append(f"gap:{record['gap']['from_index']}-{record['gap']['to_index']}")
        return words

    def reasons(self) -> list[str]:
        return [letter.reason.value for letter in self.out.dead_letters]


def text(index: int, run_id: str = "run-1") -> dict[str, Any]:
    return raw("text_delta", index, run_id, text=f"t{index}")


def done(index: int, run_id: str = "run-1") -> dict[str, Any]:
    return raw("done", index, run_id, result={"text": "fin", "duration_ms": 1.0})


def test_in_order_run_gets_dense_seq_and_one_completed_end() -> None:
    h = Harness()
    for event in [text(0), text(1), done(2)]:
        h.feed(event)
    records = h.records()
    assert [r["seq"] for r in records] == [0, 1, 2, 3]
    assert [r["source_index"] for r in records] == [0, 1, 2, 2]
    assert [r["ts"] for r in records] == [100.0, 101.0, 102.0, 102.0]
    assert h.shapes() == ["text_delta", "text_delta", "response_complete", "end:completed"]
    assert records[-1]["end"] == {"status": "completed", "error": None}


def test_error_end_carries_the_kernels_error_object() -> None:
    h = Harness()
    h.feed(text(0))
    h.feed(raw("error", 1, error={"type": "ProviderError", "message": "rate limited"}))
    assert h.records()[-1] == {
        "run_id": "run-1",
        "seq": 1,
        "source_index": 1,
        "ts": 101.0,
        "end": {"status": "error", "error": {"type": "ProviderError", "message": "rate limited"}},
    }


def test_cancelled_ends_without_any_event() -> None:
    h = Harness()
    h.feed(raw("cancelled", 0))
    assert h.shapes() == ["end:cancelled"]


def test_duplicates_are_dropped_and_counted() -> None:
    h = Harness()
    h.feed(text(0))
    h.feed(text(0))
    h.feed(text(2))
    h.feed(text(2))  # already buffered
    h.feed(text(1))
    assert h.shapes() == ["text_delta"] * 3
    assert h.out.counts["duplicates"] == 2


def test_out_of_order_events_wait_for_the_hole_then_release_in_order() -> None:
    h = Harness()
    h.feed(text(2))
    h.feed(text(1))
    assert h.records() == []
    assert h.processor.buffered_events == 2
    h.feed(text(0))
    assert [r["source_index"] for r in h.records()] == [0, 1, 2]
    assert h.processor.buffered_events == 0


def test_gap_after_timeout_reports_the_missing_range_with_next_events_timestamp() -> None:
    h = Harness()
    h.feed(text(0), now=0.0)
    h.feed(text(3), now=10.0)
    h.processor.punctuate(39.9, h.out)
    assert h.shapes() == ["text_delta"]
    h.processor.punctuate(40.0, h.out)
    records = h.records()
    assert records[1] == {
        "run_id": "run-1",
        "seq": 1,
        "source_index": None,
        "ts": 103.0,
        "gap": {"from_index": 1, "to_index": 2},
    }
    assert records[2]["source_index"] == 3 and records[2]["seq"] == 2
    assert h.out.counts["gaps"] == 1
    h.feed(text(1))  # the lost event arrives after all: it is a duplicate now
    assert h.out.counts["duplicates"] == 1


def test_buffer_past_its_bound_fills_the_first_hole() -> None:
    h = Harness()  # run_buffer_max=5
    for index in range(2, 7):
        h.feed(text(index))
    assert h.records() == []
    h.feed(text(7))  # the sixth buffered event exceeds the bound
    assert h.shapes() == ["gap:0-1"] + ["text_delta"] * 6


def test_run_closed_dead_letters_new_indexes_and_drops_old_ones() -> None:
    h = Harness()
    h.feed(text(0))
    h.feed(done(1))
    h.feed(text(5))
    h.feed(text(1))
    assert h.reasons() == ["run_closed"]
    assert h.out.counts["duplicates"] == 1
    assert h.shapes()[-1] == "end:completed"


def test_events_buffered_when_the_run_closes_are_dead_lettered_in_index_order() -> None:
    h = Harness()
    h.feed(text(4))
    h.feed(text(3))
    h.feed(text(0))
    h.feed(done(1))
    assert h.shapes() == ["text_delta", "response_complete", "end:completed"]
    assert h.reasons() == ["run_closed", "run_closed"]
    assert [letter.record.offset for letter in h.out.dead_letters] == [2, 1]
    assert h.processor.buffered_events == 0


def test_pause_ends_the_segment_and_the_run_continues_its_seq() -> None:
    h = Harness()
    h.feed(text(0))
    h.feed(raw("ask_user", 1, interrupt=interrupt("ask_user")))
    h.feed(text(2))
    h.feed(done(3))
    assert h.shapes() == [
        "text_delta",
        "ask_user",
        "end:paused",
        "text_delta",
        "response_complete",
        "end:completed",
    ]
    assert [r["seq"] for r in h.records()] == list(range(6))


def test_unknown_kind_is_counted_and_advances_the_run() -> None:
    h = Harness()
    h.feed(raw("telemetry", 0))
    h.feed(text(1))
    assert h.shapes() == ["text_delta"]
    assert h.out.counts["unknown_kind"] == 1


def test_closed_run_is_forgotten_after_grace_with_a_tombstone() -> None:
    h = Harness()
    h.feed(done(0), now=100.0)
    write_changes(h.processor, h.out)
    assert h.out.changelog[b"run/run-1"] is not None
    h.processor.punctuate(699.0, h.out)
    assert h.processor.active_runs == 1
    h.processor.punctuate(700.0, h.out)
    assert h.processor.active_runs == 0
    write_changes(h.processor, h.out)
    assert h.out.changelog[b"run/run-1"] is None


def test_runs_are_independent() -> None:
    h = Harness()
    h.feed(text(1, "a"))
    h.feed(text(0, "b"))
    h.feed(done(1, "b"))
    h.feed(text(0, "a"))
    assert [(r["run_id"], r["seq"]) for r in h.records()] == [
        ("b", 0),
        ("b", 1),
        ("b", 2),
        ("a", 0),
        ("a", 1),
    ]


def test_state_of_an_idle_run_is_small_and_round_trips() -> None:
    h = Harness()
    for index in range(50):
        h.feed(text(index, "run-0123456789abcdef"))
    state = h.processor.guard.run("run-0123456789abcdef")
    assert state is not None
    encoded = RUN_CODEC.encode(state)
    assert len(encoded) < 100
    again = decode_run(encoded)
    assert (again.next_index, again.next_seq, again.status) == (50, 50, RunStatus.OPEN)


def test_buffered_events_survive_encoding_with_their_original_record() -> None:
    h = Harness()
    h.feed(text(3))
    write_changes(h.processor, h.out)
    restored = Harness()
    assert sorted(h.out.changelog) == [b"buf/run-1/3", b"run/run-1"]  # the event has its own key
    assert h.out.changelog[b"buf/run-1/3"].endswith(b"\n" + orjson.dumps(text(3)))  # unescaped
    restore_from(restored.processor, dict(h.out.changelog))
    assert restored.processor.buffered_events == 1
    restored.feed(done(0))
    [letter] = restored.out.dead_letters
    assert letter.record.value == orjson.dumps(text(3))
    assert letter.record.key == b"run-1"


# -- properties -------------------------------------------------------------------------


def kernel_run(draw: st.DrawFn, run_id: str) -> list[dict[str, Any]]:
    length = draw(st.integers(min_value=1, max_value=25))
    events: list[dict[str, Any]] = []
    for index in range(length - 1):
        choice = draw(st.sampled_from(["text", "thinking", "tool", "pause", "odd"]))
        if choice == "text":
            events.append(raw("text_delta", index, run_id, text=f"x{index}"))
        elif choice == "thinking":
            events.append(raw("thinking", index, run_id, text=draw(st.sampled_from(["", "h"]))))
        elif choice == "tool":
            call = {"id": f"c{index}", "name": "f", "arguments": {"i": index}}
            events.append(raw("tool_call", index, run_id, tool_call=call))
        elif choice == "pause":
            pending = interrupt("ask_user", interrupt_id=f"i{index}", run_id=run_id)
            events.append(raw("ask_user", index, run_id, interrupt=pending))
        else:
            events.append(raw("telemetry", index, run_id))
    terminal = draw(st.sampled_from(["done", "error", "cancelled"]))
    extra: dict[str, Any] = {}
    if terminal == "done":
        extra["result"] = {"text": "ok", "duration_ms": 3.33, "usage": {"input_tokens": 2}}
    if terminal == "error":
        extra["error"] = {"type": "E", "message": "m"}
    events.append(raw(terminal, length - 1, run_id, **extra))
    return events


@st.composite
def damaged_delivery(
    draw: st.DrawFn,
) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """A few runs, delivered with duplicates and bounded displacement (no loss)."""
    runs = [kernel_run(draw, f"run-{n}") for n in range(draw(st.integers(1, 3)))]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    delivered: list[tuple[float, dict[str, Any]]] = []
    for run in runs:
        for position, event in enumerate(run):
            copies = 2 if rng.random() < 0.2 else 1
            for _ in range(copies):
                delivered.append((position + rng.uniform(0, 4), event))
    delivered.sort(key=lambda pair: pair[0])
    return runs, [event for _, event in delivered]


def expected_records(run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The contract, stated directly: project each event in order, number densely."""
    records: list[dict[str, Any]] = []
    for raw_event in run:
        event = AgentEvent.model_validate(raw_event)
        base = {"run_id": event.run_id, "source_index": event.index, "ts": event.timestamp}
        for body in project_typed(event):
            records.append({**base, "seq": len(records), "event": body})
        status = {"done": "completed", "error": "error", "cancelled": "cancelled"}.get(event.kind)
        if status is None and event.interrupt is not None:
            status = "paused"
        if status is not None:
            error = raw_event.get("error") if status == "error" else None
            records.append({**base, "seq": len(records), "end": {"status": status, "error": error}})
    return records


@settings(max_examples=200, deadline=None)
@given(damaged_delivery())
def test_any_damaged_delivery_gives_the_projection_of_the_kernel_order(
    case: tuple[list[list[dict[str, Any]]], list[dict[str, Any]]],
) -> None:
    runs, delivered = case
    h = Harness(GuardLimits(run_buffer_max=1000))
    for event in delivered:
        h.feed(event)
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in h.records():
        by_run.setdefault(record["run_id"], []).append(record)
    for run in runs:
        got = by_run.get(run[0]["run_id"], [])
        assert got == expected_records(run)
        assert [r["seq"] for r in got] == list(range(len(got)))
        closing = [r for r in got if "end" in r and r["end"]["status"] != "paused"]
        assert closing == [got[-1]]
    assert h.reasons() == []


@settings(max_examples=150, deadline=None)
@given(damaged_delivery(), st.data())
def test_restoring_state_at_any_point_gives_the_same_output(
    case: tuple[list[list[dict[str, Any]]], list[dict[str, Any]]], data: st.DataObject
) -> None:
    _, delivered = case
    limits = GuardLimits(run_buffer_max=3)
    straight = Harness(limits)
    for event in delivered:
        straight.feed(event)
    cut = data.draw(st.integers(0, len(delivered)))
    first = Harness(limits)
    for event in delivered[:cut]:
        first.feed(event)
    write_changes(first.processor, first.out)
    second = Harness(limits)
    second.offset = first.offset
    restore_from(second.processor, first.out.changelog)
    for event in delivered[cut:]:
        second.feed(event)
    assert first.records() + second.records() == straight.records()
    assert first.reasons() + second.reasons() == straight.reasons()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=60))
def test_any_arrival_with_losses_still_gives_dense_seq_and_every_index_once(
    arrivals: list[int],
) -> None:
    h = Harness(GuardLimits(run_buffer_max=4))
    for index in arrivals:
        h.feed(text(index))
    h.processor.end_of_input(h.out)
    records = h.records()
    assert [r["seq"] for r in records] == list(range(len(records)))
    covered: list[int] = []
    for record in records:
        if "gap" in record:
            covered.extend(range(record["gap"]["from_index"], record["gap"]["to_index"] + 1))
        else:
            covered.append(record["source_index"])
    assert covered == list(range(max(arrivals) + 1))
    assert h.processor.buffered_events == 0
