"""``python -m bench.rebalance`` (the package's docstring says what it measures)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from bench.progress import say
from bench.rebalance import __doc__ as DOC
from bench.rebalance.partitions import PartitionsOutcome, many_partitions
from bench.rebalance.scenarios import Outcome, scale
from symfonic_stream.config import Settings


def report(outcome: Outcome) -> str:
    lines = ["| event | longest stall (s) | changelog records read at set-up | probe outputs/s "
             "before → after |", "|---|---|---|---|"]
    for event in outcome.events:
        lines.append(f"| {event.name} | {event.longest_s:.2f} | {event.restored_records:,.0f} "
                     f"| {event.outputs_before:.0f} → {event.outputs_after:.0f} |")
    lines.append(f"\n{outcome.runs:,} runs on {outcome.partitions} partitions, "
                 f"{outcome.instances} instances (+1 joining), persistent store "
                 f"{'on' if outcome.state_dir else 'off'}, static membership "
                 f"{'on' if outcome.static else 'off'}"
                 f"{' (leaving on stop)' if outcome.leave_on_stop else ''}, cache keys "
                 f"{'default' if outcome.cache_keys is None else outcome.cache_keys}: "
                 f"runs differing from the reference **{outcome.runs_differing:,}** "
                 f"{outcome.example}")
    for tag, (now, peak) in sorted(outcome.rss_mib.items()):
        lines.append(f"- {tag}: RSS {now:.0f} MiB with every run open (peak {peak:.0f} MiB)")
    return "\n".join(lines)


def report_partitions(outcome: PartitionsOutcome) -> str:
    return (f"{outcome.partitions} partitions, one instance: first output "
            f"{outcome.first_output_s:.2f} s after start, "
            f"{outcome.first_output_s - outcome.assigned_s:.2f} s after its partitions were "
            f"assigned; at {outcome.rate:.0f} events/s, "
            f"{outcome.transactions_per_s:.1f} transactions/s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rebalance", description=DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--hold-s", type=float, default=20.0,
                        help="how long the deployment runs after each event")
    parser.add_argument("--state-dir", action="store_true",
                        help="each instance keeps its state on disk (SYMFONIC_STATE_DIR)")
    parser.add_argument("--cache-keys", type=int, metavar="N",
                        help="with --state-dir: SYMFONIC_STATE_CACHE_KEYS (values per store "
                             "and partition kept in memory; 0: all, loaded at start)")
    parser.add_argument("--static", action="store_true",
                        help="static group membership (SYMFONIC_GROUP_INSTANCE_ID per instance)")
    parser.add_argument("--leave-on-stop", action="store_true",
                        help="with --static: SYMFONIC_LEAVE_GROUP_ON_STOP (a SIGTERMed "
                             "instance leaves its group)")
    parser.add_argument("--partitions-only", type=int, metavar="N",
                        help="only the one instance on N partitions (first output, txn/s)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    base = Settings()
    log_dir = Path(tempfile.mkdtemp(prefix="bench-rebalance-"))
    say(f"consumer logs in {log_dir}")
    if args.partitions_only:
        many = asyncio.run(many_partitions(base, args.partitions_only, log_dir))
        print(report_partitions(many))
        figures: object = asdict(many)
        ok = True
    else:
        state_dir = log_dir / "state" if args.state_dir else None
        outcome = asyncio.run(scale(base, args.runs, args.partitions, args.instances,
                                    args.hold_s, log_dir, state_dir, args.static,
                                    args.cache_keys, args.leave_on_stop))
        print(report(outcome))
        figures, ok = asdict(outcome), outcome.runs_differing == 0
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
