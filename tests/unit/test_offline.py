"""The offline ``project`` command, end to end, as a user runs it."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from symfonic_stream.tools.synthetic import (
    Damage,
    RunShape,
    deliver,
    generate_run,
    interleave,
    to_jsonl,
)
from tests.unit.test_guard import expected_records

CLI = [sys.executable, "-m", "symfonic_stream", "project"]


def run_cli(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, *args], input=stdin, capture_output=True, timeout=120,
        env={**os.environ, **(env or {})},
    )


def lines(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in data.splitlines()]


def test_many_interleaved_damaged_runs_project_to_their_kernel_order(tmp_path: Path) -> None:
    rng = random.Random(7)
    shape = RunShape(min_events=5, max_events=60, pause_share=0.2)
    runs = [generate_run(rng, f"run-{n:03d}", shape=shape) for n in range(120)]
    delivered = [
        deliver(rng, run, Damage(duplicate_share=0.05, reorder_share=0.05)) for run in runs
    ]
    source = tmp_path / "raw.jsonl"
    source.write_bytes(to_jsonl(list(interleave(rng, delivered))))

    done = run_cli("--projection", "typed", "--dead-letters", str(tmp_path / "dl"), str(source))

    assert done.returncode == 0, done.stderr.decode()
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in lines(done.stdout):
        by_run.setdefault(record["run_id"], []).append(record)
    assert len(by_run) == len(runs)
    for run in runs:
        assert by_run[run[0]["run_id"]] == expected_records(run)
    assert (tmp_path / "dl").read_bytes() == b""


def test_bad_lines_go_to_the_dead_letter_file_with_their_line_numbers(tmp_path: Path) -> None:
    good = [
        {"run_id": "r", "index": 0, "kind": "text_delta", "timestamp": 1, "text": "a"},
        {"run_id": "r", "index": 1, "kind": "done", "timestamp": 2},
        {"run_id": "r", "index": 2, "kind": "text_delta", "timestamp": 3, "text": "late"},
    ]
    text = b"\n".join(
        [
            orjson.dumps(good[0]),
            b"{oops",
            b"",
            b'{"run_id": "r", "index": "1", "kind": "done", "timestamp": 2}',
            orjson.dumps(good[1]),
            b"   ",
            orjson.dumps(good[2]),
        ]
    )
    letters = tmp_path / "dead.jsonl"
    done = run_cli("--projection", "chunks", "--dead-letters", str(letters), stdin=text)
    assert done.returncode == 0
    assert [r.get("event", r.get("end")) for r in lines(done.stdout)] == [
        {"type": "text", "content": "a", "name": None},
        {"type": "final", "content": "", "name": None},
        {"status": "completed", "error": None},
    ]
    dead = lines(letters.read_bytes())
    assert [(d["reason"], d["line"]) for d in dead] == [
        ("invalid_json", 2),
        ("invalid_event", 4),
        ("run_closed", 7),
    ]
    assert "index" in dead[1]["detail"]


def test_end_of_input_turns_every_open_hole_into_a_gap() -> None:
    events = [
        {"run_id": "a", "index": 2, "kind": "text_delta", "timestamp": 5.0, "text": "x"},
        {"run_id": "b", "index": 0, "kind": "text_delta", "timestamp": 6.0, "text": "y"},
        {"run_id": "b", "index": 3, "kind": "cancelled", "timestamp": 7.0},
    ]
    done = run_cli("--projection", "typed", stdin=to_jsonl(events))
    assert done.returncode == 0
    assert lines(done.stdout) == [
        {
            "run_id": "b",
            "seq": 0,
            "source_index": 0,
            "ts": 6.0,
            "event": {"type": "text_delta", "text": "y"},
        },
        {
            "run_id": "a",
            "seq": 0,
            "source_index": None,
            "ts": 5.0,
            "gap": {"from_index": 0, "to_index": 1},
        },
        {
            "run_id": "a",
            "seq": 1,
            "source_index": 2,
            "ts": 5.0,
            "event": {"type": "text_delta", "text": "x"},
        },
        {
            "run_id": "b",
            "seq": 1,
            "source_index": None,
            "ts": 7.0,
            "gap": {"from_index": 1, "to_index": 2},
        },
        {
            "run_id": "b",
            "seq": 2,
            "source_index": 3,
            "ts": 7.0,
            "end": {"status": "cancelled", "error": None},
        },
    ]


def test_missing_input_file_fails_with_a_clear_message(tmp_path: Path) -> None:
    done = run_cli("--projection", "typed", str(tmp_path / "nope.jsonl"))
    assert done.returncode != 0
    assert b"nope.jsonl" in done.stderr


def test_unknown_projection_is_refused() -> None:
    done = run_cli("--projection", "fancy", stdin=b"")
    assert done.returncode == 2
    assert b"fancy" in done.stderr


@pytest.mark.parametrize("projection", ["typed", "chunks"])
def test_empty_input_gives_empty_output(projection: str) -> None:
    done = run_cli("--projection", projection, stdin=b"")
    assert (done.returncode, done.stdout) == (0, b"")


def test_the_run_buffer_bound_is_the_live_setting() -> None:
    events = [(0, 1.0), (3, 2.0), (5, 3.0), (2, 4.0)]
    stdin = b"".join(
        orjson.dumps({"run_id": "r", "index": i, "kind": "text_delta", "timestamp": ts,
                      "text": f"t{i}"}) + b"\n"
        for i, ts in events
    )
    bounded = run_cli("--projection", "chunks", stdin=stdin, env={"SYMFONIC_RUN_BUFFER_MAX": "1"})
    assert bounded.returncode == 0, bounded.stderr
    # Index 5 makes two events wait behind the hole with a bound of one: the hole is
    # reported at once, and index 2, arriving after its gap, is a duplicate.
    assert [(r["seq"], r["source_index"], r.get("gap")) for r in lines(bounded.stdout)] == [
        (0, 0, None), (1, None, {"from_index": 1, "to_index": 2}), (2, 3, None),
        (3, None, {"from_index": 4, "to_index": 4}), (4, 5, None),
    ]
    default = run_cli("--projection", "chunks", stdin=stdin)
    assert [r["source_index"] for r in lines(default.stdout)] == [0, None, 2, 3, None, 5]


def test_a_bad_setting_is_refused_naming_it() -> None:
    done = run_cli("--projection", "typed", stdin=b"", env={"SYMFONIC_RUN_BUFFER_MAX": "zero"})
    assert done.returncode == 2
    assert b"SYMFONIC_RUN_BUFFER_MAX" in done.stderr


def test_hostile_lines_are_dead_lettered_as_live_and_never_crash_the_command(
    tmp_path: Path,
) -> None:
    """Issue 16: a value nested 600 deep crashed `project` (orjson writes at most 254
    levels); the offline path never applied `too_large`. Now both are dead letters, with
    the live settings, and the runs around them are projected."""
    deep = b"[" * 600 + b"]" * 600
    stdin = b"\n".join([
        b'{"run_id":"a","index":0,"kind":"text_delta","timestamp":1,"text":"before"}',
        b'{"run_id":"x","index":0,"kind":"tool_result","timestamp":1,'
        b'"tool_call":{"id":"c","name":"n","result":' + deep + b"}}",
        b'{"run_id":"y","index":0,"kind":"text_delta","timestamp":1,"text":"' + b"z" * 5000 + b'"}',
        b'{"run_id":"z","index":0,"kind":"done","timestamp":1,"run_id":"a"}',
        b'{"run_id":"a","index":1,"kind":"done","timestamp":2}',
    ]) + b"\n"
    letters = tmp_path / "dead.jsonl"
    done = run_cli("--projection", "typed", "--dead-letters", str(letters), stdin=stdin,
                   env={"SYMFONIC_MAX_RECORD_BYTES": "4096"})
    assert done.returncode == 0, done.stderr
    assert {r["run_id"] for r in lines(done.stdout)} == {"a"}
    assert [r["source_index"] for r in lines(done.stdout)] == [0, 1, 1]  # text, done, end
    assert [(r["reason"], r["line"]) for r in lines(letters.read_bytes())] == [
        ("invalid_event", 2), ("too_large", 3), ("invalid_event", 4),
    ]
