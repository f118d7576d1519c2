"""What a run measured, summarised: medians per row, ratios to the copier, and the goals.

The verdicts compare the summary (and the state and offline results) with :data:`GOALS`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.latency import Latency
from bench.rows import BASELINE, ROWS
from bench.throughput import Throughput

GOALS = {
    "typed_throughput_ratio_min": 0.85,
    "typed_p99_ratio_max": 1.3,
    "restore_100k_max_s": 10.0,
    "offline_ratio_max": 3.0,
}


@dataclass(slots=True)
class Run:
    """Everything measured, per row and round (the summary takes the medians)."""

    throughput: dict[str, dict[int, list[Throughput]]] = field(default_factory=dict)
    latency: dict[str, list[Latency]] = field(default_factory=dict)


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def summarise(run: Run, rows: list[str], partitions: list[int]) -> dict[str, Any]:
    """Medians per row, and the ratios to the copier."""
    summary: dict[str, Any] = {}
    for row in rows:
        entry: dict[str, Any] = {"consumers": list(ROWS[row])}
        for p in partitions:
            rounds = run.throughput.get(row, {}).get(p, [])
            entry[f"throughput_{p}p_events_per_s"] = median([t.events_per_s for t in rounds])
        four = run.throughput.get(row, {}).get(max(partitions), [])
        entry["cpu_s_per_million"] = median([t.cpu_s_per_million for t in four])
        entry["peak_rss_mb"] = median([t.peak_rss_bytes / 2**20 for t in four])
        lat = run.latency.get(row, [])
        entry["latency_samples"] = int(median([float(x.samples) for x in lat]))
        for name in ("p50_ms", "p99_ms", "p999_ms"):
            entry[f"latency_{name}"] = median([getattr(x, name) for x in lat])
        summary[row] = entry
    base = summary.get(BASELINE)
    if base is not None:
        for entry in summary.values():
            ratios = {}
            for key in (
                *(f"throughput_{p}p_events_per_s" for p in partitions),
                "latency_p50_ms",
                "latency_p99_ms",
                "latency_p999_ms",
                "cpu_s_per_million",
                "peak_rss_mb",
            ):
                ratios[key] = entry[key] / base[key] if base[key] else 0.0
            entry["ratio_to_copier"] = ratios
    return summary


def goals(summary: dict[str, Any], state: dict[str, Any] | None,
          offline_result: dict[str, Any] | None, partitions: int) -> dict[str, Any]:
    verdicts: dict[str, Any] = {}
    typed = summary.get("typed", {}).get("ratio_to_copier")
    if typed:
        ratio = typed[f"throughput_{partitions}p_events_per_s"]
        verdicts["typed_throughput_ratio"] = {
            "value": ratio, "goal": f">= {GOALS['typed_throughput_ratio_min']}",
            "met": ratio >= GOALS["typed_throughput_ratio_min"],
        }
        ratio = typed["latency_p99_ms"]
        verdicts["typed_p99_latency_ratio"] = {
            "value": ratio, "goal": f"<= {GOALS['typed_p99_ratio_max']}",
            "met": ratio <= GOALS["typed_p99_ratio_max"],
        }
    if state is not None:
        verdicts["restore_seconds"] = {
            "value": state["restore_s"], "runs": state["runs"],
            "goal": f"< {GOALS['restore_100k_max_s']} s for 100,000 runs",
            # The goal is set for 100,000 runs; a smaller state says nothing about it.
            "met": (state["restore_s"] < GOALS["restore_100k_max_s"])
            if state["runs"] >= 100_000 else None,
        }
    if offline_result is not None:
        verdicts["offline_ratio"] = {
            "value": offline_result["ratio"], "goal": f"<= {GOALS['offline_ratio_max']}",
            "met": offline_result["ratio"] <= GOALS["offline_ratio_max"],
        }
    return verdicts
