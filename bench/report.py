"""The benchmark's printed report: one table of absolute figures and ratios to the copier."""

from __future__ import annotations

from typing import Any

#: (column title, key in a row summary, format)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("ev/s 1p", "throughput_1p_events_per_s", "{:,.0f}"),
    ("ev/s 4p", "throughput_4p_events_per_s", "{:,.0f}"),
    ("p50 ms", "latency_p50_ms", "{:.1f}"),
    ("p99 ms", "latency_p99_ms", "{:.1f}"),
    ("p999 ms", "latency_p999_ms", "{:.1f}"),
    ("CPU s/M ev", "cpu_s_per_million", "{:.1f}"),
    ("peak RSS MB", "peak_rss_mb", "{:.1f}"),
)


def _cell(entry: dict[str, Any], key: str, fmt: str) -> str:
    if key not in entry:
        return "-"
    text = fmt.format(entry[key])
    ratio = entry.get("ratio_to_copier", {}).get(key)
    return f"{text} ({ratio:.2f}x)" if ratio is not None else text


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """Header and one line per consumer row (as shown, ratios to the copier in brackets)."""
    rows = result["rows"]
    columns = [c for c in COLUMNS if any(c[1] in e for e in rows.values())]
    lines = [["consumer", *(title for title, _, _ in columns)]]
    for name, entry in rows.items():
        lines.append([name, *(_cell(entry, key, fmt) for _, key, fmt in columns)])
    return lines


def markdown_table(result: dict[str, Any]) -> str:
    lines = table_rows(result)
    out = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(lines[0])]
    out.extend("| " + " | ".join(line) + " |" for line in lines[1:])
    return "\n".join(out)


def render_table(result: dict[str, Any]) -> str:
    lines = table_rows(result)
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = []
    for n, line in enumerate(lines):
        text.append("  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ))
        if n == 0:
            text.append("  ".join("-" * w for w in widths))
    load = result.get("latency_offered_load_per_s")
    if load:
        text.append(
            f"latency at {load:,.0f} events/s offered "
            f"({result.get('offered_load_share', 0.5):.0%} of the copier's 4-partition "
            "throughput), read_committed, read time - event timestamp; "
            "CPU and RSS from the 4-partition run; ratios to the copier in brackets"
        )
    state = result.get("state")
    if state:
        text.append(
            f"guard state, {state['runs']:,} open runs: "
            f"{state['encoded_record_bytes_per_run']:.1f} B/run in the changelog "
            f"(value {state['encoded_value_bytes_per_run']:.1f} B), "
            f"{state['memory_bytes_per_run_tracemalloc']:.0f} B/run in memory (tracemalloc; "
            f"RSS delta {state['memory_bytes_per_run_rss']:.0f} B/run); "
            f"restore {state['restore_s']:.2f} s; typed start->ready "
            f"{state['typed_start_to_ready_s']:.2f} s"
        )
    off = result.get("offline")
    if off:
        text.append(
            f"offline hot path ({off['events']:,} events): baseline "
            f"{off['baseline_us_per_event']:.2f} us/ev, typed {off['offline_us_per_event']:.2f} "
            f"us/ev = {off['ratio']:.2f}x; live batch shape "
            f"{off['engine_shape_us_per_event']:.2f} us/ev = {off['engine_shape_ratio']:.2f}x"
        )
    for name, verdict in result.get("verdicts", {}).items():
        met = verdict["met"]
        shown = "n/a (not measured at the goal's size)" if met is None else (
            "MET" if met else "NOT MET"
        )
        text.append(f"goal {name}: {verdict['value']:.2f} (goal {verdict['goal']}) {shown}")
    return "\n".join(text)
