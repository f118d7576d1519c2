"""The decoder's cost against a record's number of keys (issue 33, item 2).

    python -m bench.decoder [--keys 10000,20000,40000] [--repeat 5]

One object of ``n`` keys in an AgentEvent, three ways, each the reference decoder's
(``decode_record_reference``: orjson, its shape checks, pydantic) and the native scanner's
(``decode_record`` with ``symfonic-scan``):

* ``distinct``: every key once, plain values: the one walk of the tree decides;
* ``colons``: every key once, each value a string with a colon in it: the walk's count of
  colons cannot decide, one ``orjson.dumps`` does;
* ``twice``: one key twice (the first one, last): the exact re-parse, which must name the
  key, decides (before issue 33 a count of the list of keys per key: 40,000 keys, 20 s).

Times are CPU seconds of the process (``time.process_time``), best of ``--repeat``. What
shows linear growth is the ratio of each size's time to the smallest size's, beside the
ratio of the sizes: a quadratic check grows with its square.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable

from symfonic_stream.models import decoding
from symfonic_stream.models.decoding import DecodeError, DecodeLimits

SHAPES = ("distinct", "colons", "twice")
_LIMITS = DecodeLimits(max_bytes=None)


def record(keys: int, shape: str) -> bytes:
    """An AgentEvent whose ``m`` holds ``keys`` members of ``shape``."""
    value = '"at 10:30"' if shape == "colons" else "1"
    members = [f'"key-{n}":{value}' for n in range(keys)]
    if shape == "twice":
        members.append('"key-0":2')
    body = ",".join(members)
    return (f'{{"run_id":"r","index":0,"kind":"x","timestamp":1,"m":{{{body}}}}}').encode()


def cpu_seconds(decode: Callable[[], object], repeat: int) -> float:
    """The best of ``repeat`` runs of ``decode``, a refusal counting as a decision."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        with contextlib.suppress(DecodeError):
            decode()
        best = min(best, time.process_time() - start)
    return best


def measure(keys: int, shape: str, repeat: int) -> dict[str, float]:
    value = record(keys, shape)
    times = {"reference": cpu_seconds(
        lambda: decoding.decode_record_reference(value, None, False, _LIMITS), repeat)}
    if decoding.NATIVE_SCAN:
        times["native"] = cpu_seconds(
            lambda: decoding.decode_record(value, None, False, _LIMITS), repeat)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="10000,20000,40000",
                        help="sizes, comma-separated, smallest first")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.keys.split(",")]
    print(f"{'shape':<9} {'keys':>7} {'bytes':>9} {'reference s':>12} {'ratio':>6} "
          f"{'native s':>9} {'ratio':>6}  (sizes' ratio)")
    for shape in SHAPES:
        first: dict[str, float] = {}
        for keys in sizes:
            times = measure(keys, shape, args.repeat)
            first = first or times
            native = times.get("native")
            native_cells = (f"{native:9.4f} {native / first['native']:6.2f}"
                            if native is not None else f"{'-':>9} {'-':>6}")
            print(f"{shape:<9} {keys:7,} {len(record(keys, shape)):9,} "
                  f"{times['reference']:12.4f} {times['reference'] / first['reference']:6.2f} "
                  f"{native_cells}  ({keys / sizes[0]:.0f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
