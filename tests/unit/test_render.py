"""Rendering a run as text, compared with golden files (no colour).

The golden run (tests/golden/golden_run.jsonl) has thinking, text deltas, a re-sent
duplicate, a tool call with arguments and its result, a failed tool call, an ask_user pause
with questions, a lost index (a gap) and a completed end with usage. It is projected with
the offline projector, so these files are also what ``tail`` prints for it (checked against
the broker in tests/integration/test_tools_cli.py).

Regenerate after an intended change with
``SYMFONIC_UPDATE_GOLDEN=1 pytest tests/unit/test_render.py``: that run writes the files and
FAILS (an update is never a passing run, so a run with the variable set, CI's included, can
never go green); review the diff, then rerun without the variable.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console

from symfonic_stream.models.envelope import EndRecord, GapRecord, RunEnd
from symfonic_stream.sdk.reader import RunRecord, parse_run_record
from symfonic_stream.tools.offline import project_lines
from symfonic_stream.tools.render import RunRenderer, format_ts, render_records

GOLDEN = Path(__file__).parent.parent / "golden"
GOLDEN_RUN = GOLDEN / "golden_run.jsonl"


def golden_records(projection: str) -> list[RunRecord]:
    lines = GOLDEN_RUN.read_bytes().splitlines()
    records: list[RunRecord] = []
    for released in project_lines(lines, "typed" if projection == "typed" else "chunks"):
        records.extend(
            parse_run_record(out.value, "typed" if projection == "typed" else "chunks")
            for out in released.outputs
        )
    return records


def plain_console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, no_color=True, width=100, force_terminal=False), buffer


UPDATE_GOLDEN = "SYMFONIC_UPDATE_GOLDEN"


def assert_golden(golden: Path, text: str) -> None:
    """``text`` equals the golden file; with SYMFONIC_UPDATE_GOLDEN set, write it and fail."""
    if os.environ.get(UPDATE_GOLDEN):
        golden.write_text(text)
        pytest.fail(
            f"golden file updated; rerun without {UPDATE_GOLDEN} ({golden.name})", pytrace=False
        )
    assert text == golden.read_text()


def rendered(records: list[RunRecord]) -> str:
    console, buffer = plain_console()
    render_records(records, console)
    return buffer.getvalue()


@pytest.mark.parametrize("projection", ["typed", "chunks"])
def test_golden_run(projection: str) -> None:
    text = rendered(golden_records(projection))
    assert_golden(GOLDEN / f"render_{projection}.txt", text)


def test_a_golden_update_writes_the_file_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = tmp_path / "render.txt"
    golden.write_text("old\n")
    monkeypatch.setenv(UPDATE_GOLDEN, "1")
    with pytest.raises(pytest.fail.Exception, match="golden file updated; rerun without"):
        assert_golden(golden, "new\n")
    assert golden.read_text() == "new\n"
    monkeypatch.delenv(UPDATE_GOLDEN)
    assert_golden(golden, "new\n")
    with pytest.raises(AssertionError):
        assert_golden(golden, "other\n")


def test_no_escape_codes_without_colour() -> None:
    assert "\x1b[" not in rendered(golden_records("typed"))


def test_colour_styles_thinking_dim() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="standard", width=100)
    render_records(golden_records("typed")[:1], console)
    assert "\x1b[2;3m" in buffer.getvalue()  # dim italic


def test_error_end_and_gap_lines() -> None:
    records: list[RunRecord] = [
        GapRecord(run_id="r", seq=0, ts=1.0, gap={"from_index": 0, "to_index": 3}),
        EndRecord(
            run_id="r", seq=1, ts=2.0, source_index=4,
            end=RunEnd(status="error", error={"type": "ProviderError", "message": "rate limited"}),
        ),
    ]
    text = rendered(records)
    assert "⚠ gap: kernel indexes 0..3 never arrived" in text
    assert "■ run failed: ProviderError: rate limited" in text


def test_streaming_matches_whole_rendering() -> None:
    records = golden_records("typed")
    console, buffer = plain_console()
    renderer = RunRenderer(console)
    for record in records:
        renderer.render(record)
    renderer.finish()
    assert buffer.getvalue() == rendered(records)


def test_long_values_are_cut() -> None:
    record = parse_run_record(
        b'{"run_id":"r","seq":0,"source_index":0,"ts":1.0,"event":{"type":"tool_result",'
        b'"tool_call_id":"c","result":"' + b"x" * 5000 + b'"}}',
        "typed",
    )
    line = rendered([record]).splitlines()[-1]
    assert len(line) < 500 and line.endswith("…")


def test_format_ts_is_utc_with_millis() -> None:
    assert format_ts(1764480000.25) == "2025-11-30T05:20:00.250Z"
