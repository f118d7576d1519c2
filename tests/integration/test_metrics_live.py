"""Metrics and health of a real consumer on a known input: exact values, from a real scrape."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import yaml

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.models.names import TopicNames
from symfonic_stream.observability.health import server_port, start_health_server

from .harness import InProcessEngine, create_topics, produce, settings_for, unique_prefix

FILES = Path(__file__).resolve().parents[2] / "helm" / "symfonic-stream" / "files"
METRIC = re.compile(r"\bsymfonic_stream_[a-z0-9_]+")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def ev(run: str, index: int, kind: str, **fields: Any) -> tuple[bytes, bytes, list[Any]]:
    event = {"run_id": run, "index": index, "kind": kind, "timestamp": 1.0 + index, **fields}
    return run.encode(), orjson.dumps(event), []


KNOWN_INPUT = [
    ev("a", 0, "text_delta", text="one"),
    ev("a", 1, "text_delta", text="two"),
    ev("a", 1, "text_delta", text="two"),  # duplicate
    ev("a", 2, "done", result={"text": "ok", "duration_ms": 5, "usage": {"input_tokens": 3}}),
    ev("b", 0, "text_delta", text="x"),
    ev("b", 2, "text_delta", text="y"),  # a hole at 1: one gap after the timeout
    ev("c", 0, "cancelled"),
    ev("c", 1, "text_delta", text="late"),  # run_closed
    ev("d", 0, "telemetry"),  # unknown kind
    (b"e", b"{nope", []),  # invalid_json
    (b"e", b'{"run_id": "e", "index": true, "kind": "done", "timestamp": 1}', []),  # invalid_event
    (b"not-f", orjson.dumps({"run_id": "f", "index": 0, "kind": "done", "timestamp": 1}), []),
    (b"g", b'{"pad": "' + b"x" * 3000 + b'"}', []),  # too_large
]


async def test_metrics_health_and_dashboard_against_a_real_scrape(bootstrap_servers: str) -> None:
    prefix = unique_prefix()
    await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)
    settings = settings_for(prefix, gap_timeout_s=2.0, max_record_bytes=2048)
    consumer = InProcessEngine(projector_topology("typed", settings), settings)
    server = await start_health_server(0, consumer.registry, consumer.health, host="127.0.0.1")
    base = f"http://127.0.0.1:{server_port(server)}"
    try:
        assert (await asyncio.to_thread(get, base + "/readyz"))[0] == 503  # nothing assigned
        async with consumer:
            assert (await asyncio.to_thread(get, base + "/readyz"))[0] == 200
            assert (await asyncio.to_thread(get, base + "/healthz"))[0] == 200
            await produce(names.agent_events, KNOWN_INPUT, partition=1)
            scrape = ""
            for _ in range(120):
                await asyncio.sleep(0.25)
                scrape = (await asyncio.to_thread(get, base + "/metrics"))[1]
                if (
                    consumer.sample("gaps_total") == 1
                    and consumer.sample(
                        "consumer_lag_records", topic=names.agent_events, partition="1"
                    )
                    == 0
                ):
                    break
    finally:
        server.close()
        await server.wait_closed()

    def value(name: str, **labels: str) -> float:
        return consumer.sample(name, **labels)

    out = names.stream_events
    read_as = ("text_delta", "done", "cancelled", "unknown", "invalid", "unclassified")
    assert {
        kind: value("records_in_total", topic=names.agent_events, type=kind) for kind in read_as
    } == {
        "text_delta": 6,
        "done": 1,
        "cancelled": 1,
        "unknown": 1,  # telemetry: an unknown kind, labelled as such (bounded labels)
        "invalid": 4,  # invalid_json, invalid_event, key_mismatch, too_large
        "unclassified": 0,
    }
    assert sum(map(int, re.findall(
        r'symfonic_stream_records_in_total\{[^}]*\} (\d+)', scrape
    ))) == len(KNOWN_INPUT)
    assert {
        kind: value("records_out_total", topic=out, type=kind)
        for kind in (
            "text_delta",
            "usage",
            "response_complete",
            "end_completed",
            "end_cancelled",
            "gap",
        )
    } == {
        "text_delta": 4,
        "usage": 1,
        "response_complete": 1,
        "end_completed": 1,
        "end_cancelled": 1,
        "gap": 1,
    }
    assert {
        reason: value("dead_letters_total", reason=reason)
        for reason in (
            "invalid_json",
            "invalid_event",
            "key_mismatch",
            "run_closed",
            "too_large",
            "unroutable",
        )
    } == {
        "invalid_json": 1,
        "invalid_event": 1,
        "key_mismatch": 1,
        "run_closed": 1,
        "too_large": 1,
        "unroutable": 0,
    }
    assert value("duplicates_total") == 1
    assert value("gaps_total") == 1
    assert value("unknown_kinds_total") == 1
    assert value("buffered_events") == 0
    assert value("active_runs") == 4  # a, b, c, d (bad records never reach the guard)
    for partition in range(4):
        assert (
            value("consumer_lag_records", topic=names.agent_events, partition=str(partition)) == 0
        )
    assert value("transactions_total", outcome="committed") >= 1
    assert value("end_to_end_latency_seconds_count") == 9  # every output with a kernel ts
    assert "symfonic_stream_build_info{" in scrape

    # No series anywhere is labelled by run.
    for line in scrape.splitlines():
        if line.startswith("symfonic_stream_") and "{" in line:
            labels = line[line.index("{") + 1 : line.index("}")]
            assert "run" not in {part.split("=")[0] for part in labels.split(",")}, line

    # Every consumer metric the dashboard and the alert rules query is one this scrape has
    # (the gateway serves its own: tests/unit/test_dashboard.py checks them against its
    # registry).
    families = {line.split()[2] for line in scrape.splitlines() if line.startswith("# TYPE")}
    samples = {
        line.split("{")[0].split()[0]
        for line in scrape.splitlines()
        if line.startswith("symfonic_stream_")
    }
    known = families | samples
    dashboard = json.loads((FILES / "grafana-dashboard.json").read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rules = yaml.safe_load((FILES / "prometheus-rules.yaml").read_text())
    expressions += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert expressions
    queried = {name for expr in expressions for name in METRIC.findall(expr)}
    unknown = {name for name in queried if not name.startswith("symfonic_stream_gateway_")}
    unknown -= known
    assert not unknown, f"queried but never exported: {sorted(unknown)}"
