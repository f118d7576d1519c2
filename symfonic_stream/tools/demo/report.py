"""What the demo prints at the end: the summary table and one run rendered as text."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import TYPE_CHECKING

from rich.table import Table

from symfonic_stream.sdk.reader import RunReader
from symfonic_stream.tools.render import RunRenderer

if TYPE_CHECKING:
    from symfonic_stream.tools.demo.context import DemoContext



def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by nearest rank; ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q * len(ordered))  # nearest rank: the smallest value covering q
    return ordered[max(0, min(len(ordered), rank) - 1)]


def metric_total(text: str, name: str, consumer: str) -> float | None:
    """One sample of a Prometheus text exposition (labels other than consumer ignored)."""
    total = None
    labels = rf'\{{[^}}]*consumer="{re.escape(consumer)}"[^}}]*\}}'
    pattern = re.compile(rf"^{re.escape(name)}{labels} (\S+)$")
    for line in text.splitlines():
        match = pattern.match(line)
        if match:
            total = (total or 0.0) + float(match.group(1))
    return total


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.0f} ms"


def _reading(ctx: DemoContext) -> str:
    """How to read the outputs table's columns, under it."""
    return (
        "re-sent dropped: inputs the kernel sent twice, dropped by the projector's ordering "
        "guard (no output is ever written twice). Latency: kernel timestamp (stamped at "
        f"publish, {ctx.options.rate:g} events/s) to the output record read back; steady: "
        f"after the first {ctx.options.startup_s:g} s of publishing (start-up: the "
        "consumers' first fetches and transactions) and not behind a lost event (those wait "
        f"for the {ctx.options.gap_timeout_s:g} s gap timeout)"
    )


def print_summary(ctx: DemoContext) -> None:
    console = ctx.console
    published = len(ctx.events)
    unique = len({(e["run_id"], e["index"]) for e in ctx.events})
    head = Table(show_header=False, box=None, pad_edge=False)
    head.add_row("topic prefix", ctx.settings.topic_prefix)
    head.add_row("runs", str(len(ctx.run_ids)))
    head.add_row("events published", f"{published} ({published - unique} re-sent duplicates)")
    head.add_row("bad records published", str(ctx.bad_published))
    console.print(head)

    table = Table(title="outputs, read back read_committed", title_justify="left")
    for column in ("consumer", "records", "runs ended", "re-sent dropped", "gaps",
                   "steady p50", "steady p99", "start-up p99", "behind a gap p50"):
        table.add_column(column, justify="left" if column == "consumer" else "right")
    types = Table(title="records out by type", title_justify="left")
    types.add_column("type")
    shown = [(t, c) for t, c in ctx.output_topics.items() if t in ctx.outputs]
    for topic, consumer in shown:
        stats = ctx.outputs[topic]
        types.add_column(consumer, justify="right")
        duplicates = metric_total(
            ctx.metrics.get(consumer, ""), "symfonic_stream_duplicates_total", consumer
        )
        table.add_row(
            consumer,
            str(sum(stats.by_type.values())),
            f"{len(stats.ended)}/{len(ctx.run_ids)}",
            "n/a" if duplicates is None else str(int(duplicates)),
            str(stats.by_type.get("gap", 0)),
            _ms(percentile(stats.latencies["steady"], 0.5)),
            _ms(percentile(stats.latencies["steady"], 0.99)),
            _ms(percentile(stats.latencies["start-up"], 0.99)),
            _ms(percentile(stats.latencies["behind a gap"], 0.5)),
        )
    for name in sorted({name for t, _ in shown for name in ctx.outputs[t].by_type}):
        types.add_row(name, *(str(ctx.outputs[t].by_type.get(name, 0) or "") for t, _ in shown))
    console.print(table)
    console.print(_reading(ctx), style="dim", soft_wrap=True)
    console.print(types)
    letters = Counter(ctx.dead_letters)
    console.print(
        "dead letters: "
        + (", ".join(f"{reason} {n}" for reason, n in sorted(letters.items())) or "none")
        + f" (on {ctx.names.dead_letter}, from every consumer)",
        soft_wrap=True,
    )
    for consumer, port in ctx.metrics_ports.items():
        console.print(f"metrics of {consumer}: http://127.0.0.1:{port}/metrics")
    console.print(f"consumer logs: {ctx.log_dir}")
    if not ctx.complete:
        console.print(
            f"[bold red]not every run ended within {ctx.options.timeout_s:g} s[/]"
        )


def _pick_run(ctx: DemoContext) -> str | None:
    """A short run that shows a tool call, preferring one that paused or failed."""
    lengths: Counter[str] = Counter()
    tools: set[str] = set()
    endings: dict[str, str] = {}
    for event in ctx.events:
        run_id = event["run_id"]
        lengths[run_id] += 1
        if event["kind"] == "tool_call":
            tools.add(run_id)
        if event.get("interrupt") or event["kind"] in ("done", "error", "cancelled"):
            endings[run_id] = "pause" if event.get("interrupt") else event["kind"]
    if not lengths:
        return None
    return min(
        lengths,
        key=lambda r: (r not in tools, endings.get(r) not in ("pause", "error"), lengths[r]),
    )


async def render_run(ctx: DemoContext) -> None:
    run_id = _pick_run(ctx)
    if run_id is None or not ctx.output_topics:
        return
    renderer = RunRenderer(ctx.console)
    async with RunReader(run_id, ctx.settings, idle_timeout_s=15) as reader:
        async for record in reader:
            renderer.render(record)
    renderer.finish()
    if ctx.options.delete_topics:
        return
    ctx.console.print(
        f"(the same with: SYMFONIC_TOPIC_PREFIX={ctx.settings.topic_prefix} "
        f"symfonic-stream tail {run_id})",
        style="dim",
        markup=False,
        soft_wrap=True,
    )
