"""``symfonic-stream demo`` end to end: a smoke test with a few runs, bounded in time.

It starts the real projectors, pause router and resume validator as subprocesses
(``symfonic-stream run``) and the gateway, publishes synthetic runs, checks that every run
reached its end record on both output topics, that a reviewer's answer was accepted once,
that the summary fits 80 columns, and that the demo deletes its topics at the end and says
what to type next.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient

from .test_tools_cli import run_cli

RUNS = 8


async def test_demo_runs_end_to_end(bootstrap_servers: str, tmp_path: Path) -> None:
    status, out, err = await run_cli(
        "demo", "--runs", str(RUNS), "--max-events", "30", "--timeout", "120",
        bootstrap=bootstrap_servers,
        # TMPDIR: the consumers' log directory lands in the test's own tmp_path; port 0:
        # the gateway on a free port, not 8400 (another demo may hold it).
        env={"SYMFONIC_PARTITIONS": "2", "COLUMNS": "80", "TMPDIR": str(tmp_path),
             "SYMFONIC_GATEWAY_PORT": "0"},
        timeout_s=170,
    )
    assert status == 0, out + err
    logs = await asyncio.to_thread(lambda: list(tmp_path.glob("symfonic-demo-*/*.log")))
    assert logs != []
    summary = out[out.index("summary ─"):out.index("one run, rendered ─")]
    assert max(len(line) for line in summary.splitlines()) <= 80, summary
    for label in ("records written", "runs ended"):
        row = re.search(rf"^  {label} +(\S+) +(\S+)$", summary, re.MULTILINE)
        assert row is not None, summary
        if label == "runs ended":
            assert row.group(1) == row.group(2) == f"{RUNS}/{RUNS}"
        else:
            assert int(row.group(1).replace(",", "")) > 0
    # every figure named for what it is: the duplicates re-sent, the late ones, the gaps,
    # latency from what to what, told apart (steady, start-up, behind a lost event)
    for label in ("re-sent events dropped (each written once)",
                  "late events dropped (came after their gap)",
                  "gaps (lost events reported, never invented)", "steady, median (p50)",
                  "in the first 2 s (start-up), p99", "behind a lost event, median",
                  "from an event's timestamp", "Not the benchmark's figures"):
        assert label in summary, summary
    # each bad record is dead-lettered once by every consumer of the raw topic (3 of them)
    assert "invalid_event 3, invalid_json 3, key_mismatch 3" in " ".join(summary.split())
    # a reviewer answered a routed pause: accepted once, then refused as already answered
    assert re.search(r"answer .* → accepted\n +\(a resume for the kernel, on ", out), out
    assert "a second answer → rejected: already_answered (the first answer stands)" in out
    assert not re.search(r"\b1\d{9}\.\d", out)  # times as times, never Unix seconds
    assert re.search(r"^  gateway ready \(pid \d+\), on port \d+$", out, re.MULTILINE)
    # the loop closed: a pause answered through the console, the run resumed to its end
    assert re.search(r"^  demo-reviewer: claim → claimed \(200\)$", out, re.MULTILINE), out
    assert re.search(r"^  demo-reviewer: answer → accepted \(200\)$", out, re.MULTILINE), out
    assert "the kernel resumed demo-7-review: the run ended completed" in out
    # The rendered run: a header, a tool call and an end line.
    assert re.search(r"^run demo-7-\d{5}  \(from seq 0", out, re.MULTILINE)
    assert "→ tool " in out
    assert re.search(r"^(■ run |⏸ run paused)", out, re.MULTILINE)
    # The closing: what stopped, the topics deleted, the next command.
    closing = out[out.index("done ─"):]
    assert "Stopped: the consumers and the gateway" in closing
    assert re.search(r"^  \S*symfonic-stream demo --keep-running$", closing, re.MULTILINE)
    [prefix] = re.findall(r"topics created with prefix (\S+)", out)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        left = [t for t in await admin.list_topics() if t.startswith(prefix)]
    finally:
        await admin.close()
    assert left == []
