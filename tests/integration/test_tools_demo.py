"""``symfonic-stream demo`` end to end: a smoke test with a few runs, bounded in time.

It starts the real projectors, pause router and resume validator as subprocesses
(``symfonic-stream run``), publishes synthetic runs, checks that every run reached its end
record on both output topics and that a reviewer's answer was accepted once;
``--delete-topics`` removes the demo's topics afterwards.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from .test_tools_cli import run_cli

RUNS = 8


async def test_demo_runs_end_to_end(bootstrap_servers: str, tmp_path: Path) -> None:
    status, out, err = await run_cli(
        "demo", "--runs", str(RUNS), "--max-events", "30", "--timeout", "120",
        "--delete-topics",
        bootstrap=bootstrap_servers,
        # TMPDIR: the consumers' log directory lands in the test's own tmp_path; port 0:
        # the gateway on a free port, not 8400 (another demo may hold it).
        env={"SYMFONIC_PARTITIONS": "2", "COLUMNS": "120", "TMPDIR": str(tmp_path),
             "SYMFONIC_GATEWAY_PORT": "0"},
        timeout_s=170,
    )
    assert status == 0, out + err
    logs = await asyncio.to_thread(lambda: list(tmp_path.glob("symfonic-demo-*/*.log")))
    assert logs != []
    for consumer in ("typed", "chunks"):
        row = re.search(rf"│ {consumer}\s+│\s+(\d+) │\s+(\d+)/(\d+) │", out)
        assert row is not None, out
        assert int(row.group(1)) > 0
        assert row.group(2) == row.group(3) == str(RUNS)
    # latency told apart (steady, start-up, behind a gap), the duplicates named for what
    # they are (re-sent inputs the guard dropped)
    for column in ("re-sent dropped", "steady p50", "start-up p99", "behind a gap p50"):
        assert column in out, out
    # each bad record is dead-lettered once by every consumer of the raw topic (3 of them)
    assert "dead letters: invalid_event 3, invalid_json 3, key_mismatch 3" in out
    # a reviewer answered a routed pause: accepted once, then refused as already answered
    assert re.search(r"answer .* → accepted; resume keyed by", out), out
    assert "a second answer → rejected: already_answered" in out
    assert re.search(r"metrics of typed: http://127\.0\.0\.1:\d+/metrics", out)
    # the gateway ran beside them, its page's URL for the first run printed
    assert re.search(r"^  open http://127\.0\.0\.1:\d+/\?run=demo-7-00000&access_token=\S+$", out,
                     re.MULTILINE)
    # the loop closed: a pause answered through the console, the run resumed to its end
    assert re.search(r"^  demo-reviewer: claim → claimed \(200\)$", out, re.MULTILINE), out
    assert re.search(r"^  demo-reviewer: answer → accepted \(200\)$", out, re.MULTILINE), out
    assert "the kernel resumed demo-7-review: the run ended completed" in out
    # The rendered run: a header, a tool call and an end line.
    assert re.search(r"^run demo-7-\d{5}  \(from seq 0", out, re.MULTILINE)
    assert "→ tool " in out
    assert re.search(r"^(■ run |⏸ run paused)", out, re.MULTILINE)
