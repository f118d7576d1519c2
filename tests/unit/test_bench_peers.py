"""The peers' projection is the typed projection, and the steady-rate arithmetic holds."""

from __future__ import annotations

import orjson

from bench.measure import _steady
from bench.peers.projection import Projection, project_bodies
from bench.workload import make_workload
from symfonic_stream.models.decoding import decode_agent_event
from symfonic_stream.projections.typed import project_typed


def test_peer_bodies_equal_the_typed_projection_on_the_benchmark_stream() -> None:
    workload = make_workload(20_000, seed=3)
    kinds = set()
    for event in workload.events:
        value = orjson.dumps(event)
        expected = project_typed(decode_agent_event(value))
        assert project_bodies(orjson.loads(value)) == expected, event
        kinds.update(body["type"] for body in expected)
    # The stream exercises every branch the peers take.
    assert {"text_delta", "thinking_delta", "tool_call_start", "tool_call_delta",
            "tool_result", "extension", "usage", "response_complete"} <= kinds
    assert kinds & {"ask_user", "interrupt"}


def test_peer_envelopes_carry_a_dense_seq_per_run_and_an_end() -> None:
    project = Projection()
    events = [
        {"run_id": "r", "index": 0, "kind": "text_delta", "timestamp": 1.0, "text": "a"},
        {"run_id": "r", "index": 1, "kind": "text_delta", "timestamp": 2.0, "text": ""},
        {"run_id": "r", "index": 2, "kind": "done", "timestamp": 3.0, "result": {"text": "a"}},
    ]
    out = [orjson.loads(v) for e in events for k, v in project(orjson.dumps(e))]
    assert [o["seq"] for o in out] == [0, 1, 2]
    assert out[0]["event"] == {"type": "text_delta", "text": "a"}
    assert out[1]["event"]["type"] == "response_complete"
    assert out[2]["end"] == {"status": "completed", "error": None}


def test_steady_rate_is_taken_between_10_and_90_percent() -> None:
    # (time, committed, cpu, machine): 10 s of start-up, then 100 events/s.
    trace = [(0.0, 0, 0.0, 0.0), (10.0, 0, 1.0, 0.0)]
    trace += [(10.0 + t, 100 * t, 1.0 + t * 0.5, 0.0) for t in range(1, 11)]
    rate, cpu_per_million = _steady(trace, 1000)
    assert rate == 100.0
    assert cpu_per_million == 0.5 / 100 * 1e6


def test_steady_rate_with_one_commit_past_both_marks() -> None:
    trace = [(0.0, 0, 0.0, 0.0), (4.0, 0, 1.0, 0.0), (5.0, 1000, 2.0, 0.0)]
    rate, _ = _steady(trace, 1000)
    assert rate == 1000.0
