"""What the demo prints at the end: the summary, one run rendered as text, and the closing
(what still runs, and the next command to type).

The summary is plain lines of at most :data:`WIDTH` columns (a terminal's default): every
figure on a row of its own, named in words a reader reads once, with what it means beside it
or under it. Times are times; counts carry thousands separators.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from symfonic_stream.sdk.reader import RunReader
from symfonic_stream.tools.render import RunRenderer

if TYPE_CHECKING:
    from symfonic_stream.tools.demo.context import DemoContext

#: The widest line the summary and the closing print (URLs with a token excepted).
WIDTH = 80
#: Row labels, then one column per output (right-aligned).
_LABEL, _COLUMN = 50, 11


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
    return "n/a" if seconds is None else f"{seconds * 1000:,.0f} ms"


def _row(label: str, values: list[str]) -> str:
    return (f"  {label:<{_LABEL}}" + "".join(f"{v:>{_COLUMN}}" for v in values)).rstrip()


def _words(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False)


def summary(ctx: DemoContext) -> list[str]:
    """The summary's lines: what went in, what came out, how long it took."""
    published = len(ctx.events)
    resent = published - len({(e["run_id"], e["index"]) for e in ctx.events})
    options = ctx.options
    lines = [*_words(f"In: {len(ctx.run_ids):,} runs, {published:,} events, on "
                     f"{ctx.names.agent_events}"),
             *_words(f"{resent:,} of the events were re-sent: a kernel that is not sure an "
                     "event was written sends it again.", "  "),
             *_words(f"{len(ctx.lost):,} runs each lost one event on purpose: their later "
                     f"events wait for the {options.gap_timeout_s:g} s gap timeout, then "
                     "a gap record says what is missing.", "  "),
             *_words(f"{ctx.bad_published} bad records: not JSON, an index that is a string, "
                     "a key that is not the run id.", "  "),
             ""]
    shown = [(topic, consumer) for topic, consumer in ctx.output_topics.items()
             if topic in ctx.outputs]
    names = [consumer for _, consumer in shown]
    lines += [_row("Out, read back as a reader reads (committed)", names),
              *_outputs(ctx, shown, resent), ""]
    lines += _latency(ctx, shown, names)
    lines += ["", _row("Records out, by type", names)]
    for kind in sorted({kind for topic, _ in shown for kind in ctx.outputs[topic].by_type}):
        counts = [ctx.outputs[topic].by_type.get(kind, 0) for topic, _ in shown]
        lines.append(_row(f"  {kind}", [f"{n:,}" if n else "" for n in counts]))
    letters = Counter(ctx.dead_letters)
    lines += ["", *_words("Dead letters (each bad record once per consumer of the raw topic, "
                          f"on {ctx.names.dead_letter}): "
                          + (", ".join(f"{reason} {n}" for reason, n in sorted(letters.items()))
                             or "none"))]
    if not ctx.complete:
        lines.append(f"NOT every run ended within {options.timeout_s:g} s.")
    return lines


def _outputs(ctx: DemoContext, shown: list[tuple[str, str]], resent: int) -> list[str]:
    runs = len(ctx.run_ids)
    rows: list[tuple[str, list[str]]] = [("records written", []), ("runs ended", []),
                                         ("re-sent events dropped (each written once)", []),
                                         ("late events dropped (came after their gap)", []),
                                         ("gaps (lost events reported, never invented)", [])]
    for topic, consumer in shown:
        stats = ctx.outputs[topic]
        # The guard counts both kinds of drop as duplicates: an index already released (a
        # re-sent event) and one a gap already covered (late). What was re-sent is known.
        dropped = metric_total(ctx.metrics.get(consumer, ""),
                               "symfonic_stream_duplicates_total", consumer)
        rows[0][1].append(f"{sum(stats.by_type.values()):,}")
        rows[1][1].append(f"{len(stats.ended):,}/{runs:,}")
        rows[2][1].append("n/a" if dropped is None else f"{min(int(dropped), resent):,}")
        rows[3][1].append("n/a" if dropped is None else f"{max(0, int(dropped) - resent):,}")
        rows[4][1].append(f"{stats.by_type.get('gap', 0):,}")
    return [_row(label, values) for label, values in rows]


def _latency(ctx: DemoContext, shown: list[tuple[str, str]], names: list[str]) -> list[str]:
    options = ctx.options
    phases = (("steady, median (p50)", "steady", 0.5), ("steady, p99", "steady", 0.99),
              (f"in the first {options.startup_s:g} s (start-up), p99", "start-up", 0.99),
              ("behind a lost event, median", "behind a gap", 0.5))
    lines = [*_words("Latency: from an event's timestamp, stamped as it is published "
                     f"({options.rate:,.0f} events/s), to its output record read back "
                     "committed."),
             _row("", names)]
    for label, phase, q in phases:
        lines.append(_row(label, [_ms(percentile(ctx.outputs[t].latencies[phase], q))
                                  for t, _ in shown]))
    lines += _words("Start-up is the consumers' first fetches and transactions; behind a "
                    "lost event waits for the gap timeout. Not the benchmark's figures "
                    "(tens of ms: docs/benchmarks.md): there one projector runs alone on a "
                    "stream in the kernel's order; here four consumers, the gateway, the "
                    "publisher and this reader share the machine, and the stream is "
                    "reordered on purpose (an event that comes early waits for the ones "
                    "before it).")
    return lines


def print_summary(ctx: DemoContext) -> None:
    for line in summary(ctx):
        ctx.console.print(line, markup=False, highlight=False, soft_wrap=True)


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
    ctx.rendered_run = run_id
    renderer = RunRenderer(ctx.console)
    async with RunReader(run_id, ctx.settings, idle_timeout_s=15) as reader:
        async for record in reader:
            renderer.render(record)
    renderer.finish()


def command_path() -> str:
    """How a person types this program again: ``.venv/bin/symfonic-stream`` (relative when
    it lies under the working directory), ``symfonic-stream`` when that is what PATH finds."""
    script = Path(sys.executable).parent / "symfonic-stream"
    found = shutil.which("symfonic-stream")
    if found is not None and Path(found).resolve() == script.resolve():
        return "symfonic-stream"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def closing(ctx: DemoContext, *, keeping: bool) -> list[str]:
    """The last lines: what still runs (``keeping``: until Ctrl-C) and what to type next."""
    exe, prefix = command_path(), ctx.settings.topic_prefix
    kept = keeping or ctx.options.keep_topics
    topics = (f"the demo's topics ({prefix}.*) stay" if ctx.options.keep_topics else
              f"the demo's topics ({prefix}.*) are deleted" + (" then" if keeping else ""))
    if not keeping:
        lines = [*_words("Stopped: the consumers and the gateway the demo started; "
                         f"{topics}.")]
    else:
        lines = [*_words("Still running until Ctrl-C (which stops them; "
                         f"{topics}):"),
                 *_words(", ".join(f"{name} (/metrics on port {port})"
                                   for name, port in ctx.metrics_ports.items()), "  ")]
        if ctx.gateway_urls:
            lines += ["  the gateway, tenant acme's token in each URL: a run live, and the "
                      "review", "  console (open them in a browser):",
                      *(f"  {url}" for url in ctx.gateway_urls)]
    if kept:
        lines += ["Next, in another terminal, with the demo's topics:",
                  f"  export SYMFONIC_BOOTSTRAP_SERVERS={ctx.settings.bootstrap_servers}",
                  f"  export SYMFONIC_TOPIC_PREFIX={prefix}",
                  f"  {exe} tail {ctx.rendered_run or ctx.run_ids[0]}"]
    if not keeping:
        again = ("make demo DEMO_ARGS=--keep-running" if "MAKELEVEL" in os.environ
                 else f"{exe} demo --keep-running")
        lines += ["To keep everything running after the summary, to look around:",
                  f"  {again}"]
    return lines
