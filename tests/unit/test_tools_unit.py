"""Pure parts of the tools: TIME parsing, event validation, reader errors, demo helpers."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson
import pytest

from symfonic_stream.models.agent_event import AgentEvent
from symfonic_stream.models.dead_letter import DeadLetterReason
from symfonic_stream.models.envelope import EndRecord, GapRecord, TypedEventRecord
from symfonic_stream.models.names import TopicNames
from symfonic_stream.sdk.publisher import InvalidEventError, encode_event
from symfonic_stream.sdk.reader import RunReadError, SequenceError, parse_run_record, parse_time
from symfonic_stream.tools.demo.report import metric_total, percentile
from symfonic_stream.tools.replay.ranges import ReplayRange
from symfonic_stream.tools.replay.replay import ReplayError, refused_targets, replay_id

VALID = {"run_id": "r-1", "index": 0, "kind": "text_delta", "timestamp": 1.5, "text": "hi"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1764480000", 1764480000.0),
        ("1764480000.25", 1764480000.25),
        ("2025-11-30T05:20:00Z", 1764480000.0),
        ("2025-11-30T05:20:00", 1764480000.0),  # no zone: UTC
        ("2025-11-30T06:20:00+01:00", 1764480000.0),
        ("2025-11-30", 1764460800.0),
    ],
)
def test_parse_time(text: str, expected: float) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "", "-5", "nan", "2025-13-01"])
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a time"):
        parse_time(text)


def test_encode_accepts_dict_model_and_bytes() -> None:
    from_dict = encode_event(VALID)
    from_model = encode_event(AgentEvent.model_validate(VALID))
    from_bytes = encode_event(b'{"run_id":"r-1","index":0,"kind":"text_delta","timestamp":1.5}')
    assert from_dict[0] == from_model[0]
    assert from_bytes[0].run_id == "r-1"


def test_encode_keeps_unknown_fields() -> None:
    _, value = encode_event({**VALID, "future_field": {"x": 1}})
    assert b'"future_field"' in value


@pytest.mark.parametrize(
    ("event", "reason", "detail"),
    [
        (b"{oops", DeadLetterReason.INVALID_JSON, ""),
        (b"[1,2]", DeadLetterReason.INVALID_EVENT, "not an object"),
        ({**VALID, "index": "0"}, DeadLetterReason.INVALID_EVENT, "index"),
        ({**VALID, "index": True}, DeadLetterReason.INVALID_EVENT, "index"),
        ({"run_id": "r"}, DeadLetterReason.INVALID_EVENT, "index"),
        ({**VALID, "when": {1, 2}}, DeadLetterReason.INVALID_JSON, "set"),
    ],
)
def test_encode_rejects(event: object, reason: DeadLetterReason, detail: str) -> None:
    with pytest.raises(InvalidEventError) as caught:
        encode_event(event)  # type: ignore[arg-type]
    assert caught.value.reason is reason
    assert detail in caught.value.detail


def test_encode_rejects_too_large() -> None:
    with pytest.raises(InvalidEventError) as caught:
        encode_event({**VALID, "text": "x" * 2000}, max_bytes=1000)
    assert caught.value.reason is DeadLetterReason.TOO_LARGE


def test_encode_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        encode_event(42)  # type: ignore[arg-type]


def test_parse_output_records() -> None:
    typed = parse_run_record(
        b'{"run_id":"r","seq":0,"source_index":0,"ts":1.0,'
        b'"event":{"type":"text_delta","text":"a"}}',
        "typed",
    )
    end = parse_run_record(
        b'{"run_id":"r","seq":1,"source_index":0,"ts":1.0,'
        b'"end":{"status":"paused","error":null}}',
        "typed",
    )
    gap = parse_run_record(
        b'{"run_id":"r","seq":2,"source_index":null,"ts":1.0,'
        b'"gap":{"from_index":1,"to_index":2}}',
        "chunks",
    )
    assert isinstance(typed, TypedEventRecord)
    assert isinstance(end, EndRecord)
    assert isinstance(gap, GapRecord)


@pytest.mark.parametrize(
    "value",
    [None, b"nope", b"[]", b'{"run_id":"r","seq":0}', b'{"run_id":"r","seq":0,"ts":1,"event":{}}'],
)
def test_parse_output_record_rejects(value: bytes | None) -> None:
    with pytest.raises(RunReadError):
        parse_run_record(value, "typed")


def test_sequence_error_messages_name_run_and_seqs() -> None:
    hole = SequenceError("run-9", expected=3, got=6, offset=41)
    assert str(hole) == "run 'run-9': hole: seq 3..5 missing before seq 6 (offset 41)"
    single = SequenceError("run-9", expected=3, got=4, offset=41)
    assert "hole: seq 3 missing before seq 4" in str(single)
    repeat = SequenceError("run-9", expected=3, got=2, offset=41)
    assert str(repeat) == "run 'run-9': repeat: seq 2 again where seq 3 was due (offset 41)"


def test_replay_refuses_project_topics() -> None:
    names = TopicNames("p")
    never, live = refused_targets(names)
    assert {"p.agent-events", "p.dead-letter", "p-typed-state-changelog"} <= never
    assert live == {"p.stream-events", "p.stream-chunks"}
    assert issubclass(ReplayError, Exception)


def test_replay_id_is_stable_and_specific() -> None:
    since = ReplayRange(from_ms=1000)
    a = replay_id("p.agent-events", "typed", since, "out")
    assert a == replay_id("p.agent-events", "typed", ReplayRange(from_ms=1000), "out")
    assert a != replay_id("p.agent-events", "chunks", since, "out")
    assert a != replay_id("p.agent-events", "typed", ReplayRange(from_ms=1000, to_ms=2000), "out")
    assert a != replay_id("p.agent-events", "typed", ReplayRange(from_offsets=1000), "out")
    # A time range keeps the id it had before offset ranges existed: such replays resume.
    old = orjson.dumps(["p.agent-events", "typed", 1000, None, "out"])
    assert a == hashlib.sha256(old).hexdigest()[:16]


def test_percentile_nearest_rank() -> None:
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([], 0.5) is None


def test_metric_total_sums_the_consumer_samples() -> None:
    text = (
        '# HELP symfonic_stream_duplicates_total x\n'
        'symfonic_stream_duplicates_total{consumer="typed"} 12.0\n'
        'symfonic_stream_duplicates_total{consumer="chunks"} 3.0\n'
    )
    assert metric_total(text, "symfonic_stream_duplicates_total", "typed") == 12.0
    assert metric_total(text, "symfonic_stream_missing_total", "typed") is None


def test_the_demo_tells_steady_latency_from_start_up_and_gap_held() -> None:
    from rich.console import Console

    from symfonic_stream.config import Settings
    from symfonic_stream.tools.demo.context import DemoContext, DemoOptions, OutputStats

    ctx = DemoContext(DemoOptions(startup_s=2.0), Settings(), Console())
    ctx.published_from, ctx.lost = 1000.0, {"damaged": 5}
    stats = OutputStats()

    def phase(run_id: str, index: int | None, ts: float) -> str:
        return ctx.phase({"run_id": run_id, "source_index": index, "ts": ts}, stats)

    assert phase("r", 3, 1001.9) == "start-up"
    assert phase("r", 3, 1002.0) == "steady"
    assert phase("damaged", 4, 1010.0) == "steady"  # before the lost index
    assert phase("damaged", 6, 1010.0) == "behind a gap"
    assert phase("damaged", None, 1010.0) == "steady"
    stats.gaps_read["damaged"] = 1013.0  # the gap was written: later events wait no more
    assert phase("damaged", 7, 1012.9) == "behind a gap"
    assert phase("damaged", 9, 1013.5) == "steady"


def _demo_read_back(*, keep_running: bool = False, keep_topics: bool = False) -> Any:
    """A demo's context as after its runs: 2 runs, one event re-sent, one lost; the typed
    projector also dropped one event that came after its gap (its counter says 2)."""
    from collections import Counter

    from rich.console import Console

    from symfonic_stream.config import Settings
    from symfonic_stream.tools.demo.context import DemoContext, DemoOptions, OutputStats

    options = DemoOptions(runs=2, keep_running=keep_running, keep_topics=keep_topics)
    settings = Settings(topic_prefix="symfonic-demo-20261204-021856",
                        bootstrap_servers="127.0.0.1:9092")
    ctx = DemoContext(options, settings, Console(width=80), consumers=["typed", "chunks"])
    ctx.run_ids, ctx.lost, ctx.bad_published, ctx.complete = ["demo-7-00000", "demo-7-00001"], \
        {"demo-7-00001": 3}, 3, True
    ctx.events = [{"run_id": "demo-7-00000", "index": i, "kind": "text_delta"}
                  for i in (0, 1, 1, 2)]
    for topic in ctx.output_topics:
        stats = OutputStats(by_type=Counter({"text_delta": 1234, "gap": 1,
                                             "end_completed": 2}),
                            ended={"demo-7-00000", "demo-7-00001"})
        stats.latencies["steady"] = [0.012, 0.020, 1.5]
        ctx.outputs[topic] = stats
    ctx.metrics = {"typed": 'symfonic_stream_duplicates_total{consumer="typed"} 2.0\n',
                   "chunks": 'symfonic_stream_duplicates_total{consumer="chunks"} 1.0\n'}
    ctx.dead_letters = Counter({"invalid_json": 3, "invalid_event": 3, "key_mismatch": 3})
    ctx.metrics_ports = {"typed": 41001, "chunks": 41002, "gateway": 41005}
    ctx.gateway_urls = ["http://127.0.0.1:8400/review?access_token=x"]
    ctx.rendered_run = "demo-7-00000"
    return ctx


def test_the_demo_summary_fits_80_columns_and_says_what_each_figure_is() -> None:
    from symfonic_stream.tools.demo.report import summary

    lines = summary(_demo_read_back())
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    row = {line.split("  ")[1].strip(): line.split()[-2:] for line in lines
           if line.startswith("  ") and len(line.split()) > 2}
    assert row["re-sent events dropped (each written once)"] == ["1", "1"]
    # the guard counts a late event as a duplicate too: told apart from the re-sent ones
    assert row["late events dropped (came after their gap)"] == ["1", "0"]
    assert row["records written"] == ["1,237", "1,237"]
    assert row["runs ended"] == ["2/2", "2/2"]
    assert "1 of the events were re-sent" in text and "gap record says what is missing" in text
    assert "from an event's timestamp" in text and "Not the benchmark's figures" in text
    assert row["steady, median (p50)"] == ["20", "ms"] and "1,500 ms" in text
    assert "invalid_event 3, invalid_json 3, key_mismatch 3" in " ".join(text.split())
    assert not re.search(r"\b1\d{9}\.\d", text)  # no Unix seconds shown as a time


def test_the_demo_ends_with_what_still_runs_and_the_next_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from symfonic_stream.tools.demo.report import closing

    monkeypatch.delenv("MAKELEVEL", raising=False)
    stopped = closing(_demo_read_back(), keeping=False)
    assert "Stopped" in stopped[0] and "are deleted" in " ".join(stopped)
    assert stopped[-1].endswith(" demo --keep-running")
    assert "symfonic-stream" in stopped[-1]
    monkeypatch.setenv("MAKELEVEL", "1")  # run by `make demo`: its broker goes with it
    assert closing(_demo_read_back(), keeping=False)[-1] == (
        "  make demo DEMO_ARGS=--keep-running")
    running = closing(_demo_read_back(keep_running=True), keeping=True)
    text = "\n".join(running)
    assert "Still running until Ctrl-C" in text and "port 41005" in text
    assert "  http://127.0.0.1:8400/review?access_token=x" in running
    assert "  export SYMFONIC_TOPIC_PREFIX=symfonic-demo-20261204-021856" in running
    assert running[-1].endswith("symfonic-stream tail demo-7-00000")
    assert max(len(line) for line in running if "access_token" not in line) <= 80
