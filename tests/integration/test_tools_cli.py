"""``publish`` and ``tail`` as a user runs them: real processes against the real broker."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

from .conftest import NewTopicFactory, ReadTopic
from .workloads import reference_values_by_run

GOLDEN = Path(__file__).parent.parent / "golden"


async def run_cli(
    *args: str, bootstrap: str, env: dict[str, str] | None = None, timeout_s: float = 60
) -> tuple[int, str, str]:
    """``symfonic-stream ARGS`` in a subprocess; (exit status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "symfonic_stream", *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # MAKELEVEL dropped: the command as typed at a terminal, even when the suite runs
        # under make (the demo's closing line names `make demo` only when make started it)
        env={**{k: v for k, v in os.environ.items() if k != "MAKELEVEL"},
             "SYMFONIC_BOOTSTRAP_SERVERS": bootstrap, "NO_COLOR": "1", **(env or {})},
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


# --------------------------------------------------------------------------- publish


async def test_publish_reports_bad_lines_and_sends_the_good_ones(
    bootstrap_servers: str, new_topic: NewTopicFactory, read_topic: ReadTopic, tmp_path: Path
) -> None:
    topic = await new_topic(partitions=3, prefix="cli-publish")
    good = [
        {"run_id": "p-1", "index": 0, "kind": "text_delta", "timestamp": 1.0, "text": "a"},
        {"run_id": "p-2", "index": 0, "kind": "thinking", "timestamp": 2.0, "text": "b"},
        {"run_id": "p-1", "index": 1, "kind": "done", "timestamp": 3.0},
    ]
    lines = [
        orjson.dumps(good[0]).decode(),
        "{not json",                                                        # line 2
        "",                                                                 # blank: skipped
        orjson.dumps(good[1]).decode(),
        '{"run_id":"p-3","index":-1,"kind":"text_delta","timestamp":1.0}',  # line 5
        orjson.dumps(good[2]).decode(),
    ]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n")

    status, out, err = await run_cli("publish", str(path), "--topic", topic,
                                     bootstrap=bootstrap_servers)
    assert status == 1, err
    assert "line 2: invalid_json" in err
    assert "line 5: invalid_event: index:" in err
    assert "published 3 event(s) of 2 run(s)" in out and "2 bad line(s) not sent" in out
    records = await read_topic(topic)
    assert sorted(orjson.loads(r.value or b"")["timestamp"] for r in records) == [1.0, 2.0, 3.0]
    assert all(r.key == orjson.loads(r.value or b"")["run_id"].encode() for r in records)

    status, out, _ = await run_cli("publish", "--json", "--dry-run", str(path), "--topic", topic,
                                   bootstrap=bootstrap_servers)
    assert status == 1
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [(r["type"], r.get("line")) for r in rows] == [
        ("bad_line", 2), ("bad_line", 5), ("summary", None)
    ]
    assert rows[-1]["published"] == 3 and rows[-1]["bad_lines"] == 2
    assert len(await read_topic(topic)) == 3  # --dry-run sent nothing


async def test_publish_exit_statuses(
    bootstrap_servers: str, new_topic: NewTopicFactory, tmp_path: Path
) -> None:
    topic = await new_topic(partitions=1, prefix="cli-publish-ok")
    path = tmp_path / "ok.jsonl"
    path.write_text('{"run_id":"ok","index":0,"kind":"text_delta","timestamp":1.0}\n')
    status, out, err = await run_cli("publish", str(path), "--topic", topic,
                                     bootstrap=bootstrap_servers)
    assert status == 0, err
    assert "published 1 event(s) of 1 run(s)" in out
    status, _, err = await run_cli("publish", str(tmp_path / "missing.jsonl"),
                                   bootstrap=bootstrap_servers)
    assert status == 2 and "cannot read" in err


# --------------------------------------------------------------------------- tail


async def _golden_topic(bootstrap: str, new_topic: NewTopicFactory, projection: str) -> str:
    """A topic holding the golden run's projection, as a projector would have written it."""
    topic = await new_topic(partitions=3, prefix=f"cli-tail-{projection}")
    lines = (GOLDEN / "golden_run.jsonl").read_bytes().splitlines()
    by_run = reference_values_by_run(lines, "typed" if projection == "typed" else "chunks")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for run_id, values in by_run.items():
            for value in values:
                await producer.send_and_wait(topic, value=value, key=run_id.encode())
    finally:
        await producer.stop()
    return topic


async def test_tail_renders_the_golden_run(
    bootstrap_servers: str, new_topic: NewTopicFactory
) -> None:
    topic = await _golden_topic(bootstrap_servers, new_topic, "typed")
    golden = (GOLDEN / "render_typed.txt").read_text()
    status, out, err = await run_cli("tail", "golden-run", "--topic", topic, "--follow",
                                     "--timeout", "20", bootstrap=bootstrap_servers)
    assert status == 0, err
    assert out == golden

    # Without --follow the pause ends the tail.
    status, out, err = await run_cli("tail", "golden-run", "--topic", topic,
                                     "--timeout", "20", bootstrap=bootstrap_servers)
    assert status == 0, err
    paused = "⏸ run paused (waiting for an answer)\n"
    assert out == golden[: golden.index(paused) + len(paused)]


async def test_tail_chunks_and_json(bootstrap_servers: str, new_topic: NewTopicFactory) -> None:
    topic = await _golden_topic(bootstrap_servers, new_topic, "chunks")
    status, out, err = await run_cli("tail", "golden-run", "--chunks", "--topic", topic,
                                     "--follow", "--timeout", "20", bootstrap=bootstrap_servers)
    assert status == 0, err
    assert out == (GOLDEN / "render_chunks.txt").read_text()

    status, out, err = await run_cli("tail", "golden-run", "--chunks", "--topic", topic,
                                     "--from-seq", "5", "--json", "--follow", "--timeout", "20",
                                     bootstrap=bootstrap_servers)
    assert status == 0, err
    # Byte for byte what the projector wrote (the offline projection of the same run).
    lines = (GOLDEN / "golden_run.jsonl").read_bytes().splitlines()
    [expected] = [[value.decode() for value in values]
                  for values in reference_values_by_run(lines, "chunks").values()]
    assert out.splitlines() == expected[5:]
    assert orjson.loads(expected[-1])["end"] == {"status": "completed", "error": None}


async def test_tail_exit_statuses(bootstrap_servers: str, new_topic: NewTopicFactory) -> None:
    status, _, err = await run_cli("tail", "r", "--topic", "it.no-such-topic.q7", "--timeout", "5",
                                   bootstrap=bootstrap_servers)
    assert status == 3 and "does not exist" in err
    topic = await new_topic(partitions=1, prefix="cli-tail-empty")
    status, _, err = await run_cli("tail", "nobody", "--topic", topic, "--timeout", "1",
                                   bootstrap=bootstrap_servers)
    assert status == 1 and "no record in 1 s" in err
    status, _, err = await run_cli("tail", "r", "--since", "yesterday",
                                   bootstrap=bootstrap_servers)
    assert status == 2 and "not a time" in err
