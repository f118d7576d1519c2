"""``symfonic-stream demo`` end to end: a smoke test with a few runs, bounded in time.

It starts the real typed and chunk projectors as subprocesses (``symfonic-stream run``),
publishes synthetic runs and checks that every run reached its end record on both output
topics; ``--delete-topics`` removes the demo's topics afterwards.
"""

from __future__ import annotations

import re
from pathlib import Path

from .test_tools_cli import run_cli

RUNS = 8


async def test_demo_runs_end_to_end(bootstrap_servers: str, tmp_path: Path) -> None:
    status, out, err = await run_cli(
        "demo", "--runs", str(RUNS), "--max-events", "30", "--timeout", "120",
        "--delete-topics",
        bootstrap=bootstrap_servers,
        # TMPDIR: the consumers' log directory lands in the test's own tmp_path.
        env={"SYMFONIC_PARTITIONS": "2", "COLUMNS": "120", "TMPDIR": str(tmp_path)},
        timeout_s=170,
    )
    assert status == 0, out + err
    assert [p.name for p in tmp_path.glob("symfonic-demo-*/*.log")] != []
    for consumer in ("typed", "chunks"):
        row = re.search(rf"│ {consumer}\s+│\s+(\d+) │\s+(\d+)/(\d+) │", out)
        assert row is not None, out
        assert int(row.group(1)) > 0
        assert row.group(2) == row.group(3) == str(RUNS)
    assert "dead letters: invalid_event 2, invalid_json 2, key_mismatch 2" in out
    assert re.search(r"metrics of typed: http://127\.0\.0\.1:\d+/metrics", out)
    # The rendered run: a header, a tool call and an end line.
    assert re.search(r"^run demo-7-\d{5}  \(from seq 0", out, re.MULTILINE)
    assert "→ tool " in out
    assert re.search(r"^(■ run |⏸ run paused)", out, re.MULTILINE)
