"""Instructions per event of the pure hot path, counted by valgrind (deterministic).

    python -m bench.instructions [--events 10000] [--what typed,chunks,decode,baseline]

Wall-clock and even CPU-time figures move by ±20 % on a shared 2-core machine; an
instruction count does not. Each figure runs the same loop under ``valgrind --tool=
cachegrind`` twice, once over the input and once not at all, so start-up and input
generation cancel out: (instructions with the loop - without) / events.

* ``baseline``: ``orjson.dumps(orjson.loads(value))`` per record (bench/offline.py's baseline);
* ``decode``: ``decode_agent_event`` with the key check, as the projectors call it;
* ``typed`` / ``chunks``: ``ProjectorProcessor.process`` per record and the stores' changes per
  250-record batch (a partition task's share of a 1,000-record fetch over 4 partitions).

valgrind is a system tool (``apt-get install valgrind``), not a Python dependency.
"""

from __future__ import annotations

import argparse
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BATCH = 250
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _loop(what: str, records_file: str, passes: int) -> None:
    """The measured loop (runs in the child process under valgrind)."""
    import orjson

    from symfonic_stream.engine.records import Collector, InputRecord
    from symfonic_stream.engine.store import write_changes
    from symfonic_stream.models.decoding import DecodeLimits, decode_agent_event
    from symfonic_stream.processors.ordering.guard import GuardLimits
    from symfonic_stream.processors.projector import PROJECTIONS, ProjectorProcessor

    with open(records_file, "rb") as handle:
        pairs: list[tuple[bytes, bytes]] = pickle.load(handle)
    inputs = [InputRecord("in", 0, n, k, v, (), 0) for n, (k, v) in enumerate(pairs)]
    for _ in range(passes):
        if what == "baseline":
            for record in inputs:
                orjson.dumps(orjson.loads(record.value or b""))
        elif what == "decode":
            for record in inputs:
                decode_agent_event(record.value, key=record.key, check_key=True,
                                   limits=DecodeLimits(1_048_576))
        else:
            processor = ProjectorProcessor(
                PROJECTIONS["typed" if what == "typed" else "chunks"], "out", GuardLimits(),
                decode=DecodeLimits(1_048_576),
            )
            for first in range(0, len(inputs), BATCH):
                out = Collector()
                for record in inputs[first : first + BATCH]:
                    processor.process(record, 1.0, out)
                write_changes(processor.stores, out.state)


def _count(valgrind: str, what: str, records_file: str, passes: int) -> int:
    done = subprocess.run(
        [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         sys.executable, "-m", "bench.instructions", "--child", what, records_file, str(passes)],
        capture_output=True, text=True, check=True,
    )
    found = _REFS.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def measure(events: int, whats: list[str]) -> dict[str, float]:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("valgrind is not installed")
    from bench.offline import engine_records, make_lines

    records = engine_records(make_lines(events))
    with tempfile.TemporaryDirectory() as tmp:
        records_file = str(Path(tmp) / "records.pkl")
        with open(records_file, "wb") as handle:
            pickle.dump(records, handle)
        return {
            what: (_count(valgrind, what, records_file, 1)
                   - _count(valgrind, what, records_file, 0)) / len(records)
            for what in whats
        }


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        _loop(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--what", default="baseline,decode,typed,chunks")
    args = parser.parse_args()
    figures = measure(args.events, args.what.split(","))
    base = figures.get("baseline")
    for what, count in figures.items():
        ratio = f"  {count / base:5.2f}x the baseline" if base else ""
        print(f"{what:<9} {count:10,.0f} instructions/event{ratio}")


if __name__ == "__main__":
    main()
