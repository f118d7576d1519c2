"""``python -m bench --quick``: the benchmark runs end to end against the broker.

The figures of a tiny run mean nothing, so nothing is timed here: the report must have
every row and every column, each a positive number, and the JSON must say the same.

These are the benchmark's own checks, minutes of CPU that prove nothing about the
consumers: ``make test-bench`` runs them (marker ``bench``). ``make test`` keeps one quick
smoke, the gateway benchmark's (a few seconds), so a broken bench/ still fails CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gateway import HOT_VIEWERS
from bench.projectors import COLUMNS, rows

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.bench
@pytest.mark.timeout(170)
def test_quick_benchmark_reports_every_row_and_column(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    out = tmp_path / "latest.json"
    env = {**os.environ, "SYMFONIC_BOOTSTRAP_SERVERS": bootstrap_servers}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--offline-events", "2000",
         "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=160, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]

    result = json.loads(out.read_text())
    assert result["quick"] is True
    measured = result["rows"]
    assert list(measured) == list(rows())
    for name, entry in measured.items():
        for _, key, _ in COLUMNS:
            assert entry[key] > 0, (name, key, entry[key])
            assert entry["ratio_to_copier"][key] > 0, (name, key)
        assert entry["latency_samples"] > 0, name
    for key in ("encoded_record_bytes_per_run", "memory_bytes_per_run_tracemalloc",
                "restore_s", "typed_start_to_ready_s"):
        assert result["state"][key] > 0, key
    assert result["state"]["runs"] > 0
    assert result["state"]["memory_bytes_per_run_rss"] >= 0  # a tiny state may fit freed pages
    for key in ("baseline_us_per_event", "offline_us_per_event", "engine_shape_us_per_event",
                "ratio", "engine_shape_ratio"):
        assert result["offline"][key] > 0, key
    assert set(result["verdicts"]) == {
        "typed_throughput_ratio", "typed_p99_latency_ratio", "restore_seconds", "offline_ratio"
    }

    table = done.stdout
    for title, _, _ in COLUMNS:
        assert title in table
    for name in rows():
        assert any(line.startswith(name + " ") for line in table.splitlines()), name


def _table(stdout: str, header: str) -> dict[str, list[float]]:
    """The rows of the table printed under the line starting with ``header`` (and its rule)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    found: dict[str, list[float]] = {}
    for line in lines[start + 2 :]:
        name, *numbers = line.split()
        found[name] = [float(n.replace(",", "")) for n in numbers]
    return found


def _run_module(command: str, *args: str, bootstrap: str, timeout: float = 160) -> str:
    env = {**os.environ, "SYMFONIC_BOOTSTRAP_SERVERS": bootstrap}
    done = subprocess.run(
        [sys.executable, "-m", "bench", command, *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


@pytest.mark.bench
@pytest.mark.timeout(170)
def test_relative_load_experiment_offers_each_consumer_half_its_own_rate(
    bootstrap_servers: str,
) -> None:
    out = _run_module("relative_load", "--events", "2000", "--rounds", "1",
                      "--latency-seconds", "0", bootstrap=bootstrap_servers)
    rows = _table(out, "consumer")
    assert list(rows) == ["copier", "typed"]
    for name, (rate, offered, p50, p99, p99_ratio) in rows.items():
        assert offered == pytest.approx(rate / 2, abs=1), name
        assert 0 < p50 <= p99 and p99_ratio > 0, name


@pytest.mark.timeout(170)
def test_gateway_benchmark_serves_every_client_every_seq_once(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    out = tmp_path / "gateway.json"
    table = _run_module("gateway", "--quick", "--out", str(out),
                        bootstrap=bootstrap_servers)
    result = json.loads(out.read_text())
    assert result["quick"] is True
    first = result["first_event"]
    assert first["partition_records"] == first["earlier_records"] + 6  # + the target run
    for key in ("startup_s", "held_ms", "read_back_ms", "reader_ms"):
        figure = first[key]
        assert len(figure["all"]) > 0 and 0 < figure["median"] <= figure["max"], key
    assert first["held_x_reader"] > 0 and first["read_back_x_reader"] > 0
    [fan] = result["fanout"]
    assert fan["side"] == "after" and fan["failures"] == 0, fan["failure_examples"]
    # (the busier run's fast viewers are clients too; its slow one is checked apart)
    assert fan["clients"] == fan["runs"] * fan["viewers_per_run"] + HOT_VIEWERS
    assert fan["delivered_messages"] == fan["expected_messages"]
    # every regular run's message after its seq 0 was timed, by the clients and the floor
    regular = fan["runs"] * fan["viewers_per_run"]
    assert fan["lag"]["samples"] == regular * (fan["records_per_run"] - 1)
    assert fan["baseline_reader_lag"]["samples"] == fan["runs"] * (fan["records_per_run"] - 1)
    assert fan["lag"]["p50_ms"] <= fan["lag"]["p99_ms"] <= fan["lag"]["max_ms"]
    assert fan["gateway_cores"] > 0 and fan["gateway_rss_mb"]["peak_vmhwm"] > 0
    slow = fan["slow"]
    assert slow["whole_text"] and slow["ids_grow"] and slow["terminals_kept"] == [], slow
    assert [goal.split(":")[0] for goal in result["verdicts"]] == [
        "first_event_held < 100 ms", "first_event_read_back < 100 ms", "after"]
    for title in ("held in memory", "RunReader from offset 0", "gateway -> client",
                  "consumer", "slow viewer", "goals:"):
        assert title in table, title


@pytest.mark.bench
@pytest.mark.timeout(300)
def test_compare_reports_the_goals_and_each_latency_runs_cores(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Issue 18's comparison on the project's own rows (the peers need their own virtual
    environment, made on first use: not here), ``run typed --workers 2`` among them. Every
    latency run says how many cores the consumer, the broker (when it runs on this
    machine) and the whole machine used, and the harness's own longest collector pause."""
    out = tmp_path / "compare.json"
    table = _run_module("compare", "--rows", "copier,typed,typed-w2", "--events", "2000",
                        "--rounds", "1", "--latency-seconds", "2", "--out", str(out),
                        bootstrap=bootstrap_servers)
    result = json.loads(out.read_text())
    assert set(result["throughput"]) == {"copier", "typed", "typed-w2"}
    [latency] = result["latency"]
    assert set(latency) == {"200", "5000", "half"}
    local = bootstrap_servers.split(",")[0].rpartition(":")[0] in ("127.0.0.1", "localhost")
    for label, by_row in latency.items():
        assert set(by_row) == {"copier", "typed", "typed-w2"}, label
        for row, lat in by_row.items():
            assert lat["samples"] > 0 and 0 < lat["p50_ms"] <= lat["p99_ms"], (label, row)
            assert lat["consumer_cores"] > 0 and lat["machine_busy_cores"] > 0, (label, row)
            # The harness's own collector, recorded; its workload frozen out of it.
            assert 0 <= lat["bench_gc_longest_ms"] < 500, (label, row)
            if local:
                assert lat["broker_cores"] > 0, (label, row)
    [verdicts] = result["verdicts"]
    assert set(verdicts) == {"p99_200_typed_ms (<= 60)", "p99_half_typed_x_copier (<= 1.3)",
                             "p99_half_typed_w2_x_copier (<= 1.3)"}
    assert "| 200 200/s | typed |" in table and "goals per round (1 rounds):" in table


@pytest.mark.bench
@pytest.mark.timeout(600)
def test_compare_prices_the_client_with_the_naive_loop_on_librdkafka(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """``rdkafka-copier`` and ``rdkafka-typed``: the naive loop on confluent-kafka, in the
    peer environment (made here on first use, Quix Streams and its librdkafka; about a
    minute). Each copies or projects every event once, exactly once: its run ends only
    when its transactions' offsets reach the end of every input partition."""
    out = tmp_path / "compare.json"
    _run_module("compare", "--rows", "naive-copier,rdkafka-copier,rdkafka-typed",
                "--events", "2000", "--rounds", "1", "--latency-seconds", "0",
                "--out", str(out), bootstrap=bootstrap_servers, timeout=560)
    result = json.loads(out.read_text())
    assert list(result["throughput"]) == ["naive-copier", "rdkafka-copier", "rdkafka-typed"]
    per_event = result["outputs_per_event"]
    assert per_event["rdkafka-copier"] == per_event["naive-copier"] == 1.0
    assert per_event["rdkafka-typed"] > 1.0
    for row, [run] in result["throughput"].items():
        # Timed from the first commit seen: a first transaction may hold part of the input.
        assert run["committed"] == 2000 and 0 < run["events"] <= 2000, row
        assert run["events_per_s"] > 0, row
