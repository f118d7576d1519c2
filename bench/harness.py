"""The harness every benchmark stands on: its command line, progress on stderr, tables on
stdout (stdout carries only the report, so it can be kept as printed) and its result as
JSON; the machine and the broker, CPU and collector pauses, the percentiles and best-of
timings every figure uses; and a function run in an interpreter of its own.

Light on purpose (the standard library, psutil and orjson): a benchmark of its own
process's memory imports it (``python -m bench soak`` reports the process's peak RSS; a
child process's peak RSS starts at its parent's, so ``python -m bench answers`` stays as
light as the children whose peaks it measures). What talks to Kafka is in
:mod:`bench.kafka_io` and :mod:`bench.processes`.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import inspect
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def started(argv: list[str] | None = None) -> dict[str, Any]:
    """A result's first fields: its command line (``python -m bench ...``), when, and on
    what machine."""
    return {"command": "python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": machine()}


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info
                          if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def broker_version(bootstrap: str) -> str:
    """From ``scripts/kafka.sh status`` about the port of ``bootstrap`` (``host:port``)
    when the project's broker runs, else unknown."""
    env = dict(os.environ)
    port = bootstrap.split(",")[0].rpartition(":")[2]
    if port.isdigit() and "SYMFONIC_KAFKA_PORT" not in env:
        env["SYMFONIC_KAFKA_PORT"] = port
    try:
        done = subprocess.run([str(ROOT / "scripts" / "kafka.sh"), "status"],
                              capture_output=True, text=True, timeout=30, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    said = done.stdout + done.stderr
    return next((word for word in said.replace(",", " ").split()
                 if word[:1].isdigit() and word.count(".") == 2 and "Kafka" in said),
                "unknown")


def rss_bytes() -> int:
    """This process's resident set now (not its peak)."""
    return int(psutil.Process().memory_info().rss)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, every process) since boot."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def own_cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


class BrokerCpu:
    """CPU seconds of the broker process serving ``bootstrap``, when it runs on this machine
    (the broker shares the cores with the consumers: its share is part of every result)."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self._process: psutil.Process | None = None
        if host not in ("127.0.0.1", "localhost", "::1", "") or not port.isdigit():
            return
        try:
            self._process = next((psutil.Process(c.pid) for c in psutil.net_connections("tcp")
                                  if c.status == psutil.CONN_LISTEN and c.laddr
                                  and c.laddr.port == int(port) and c.pid is not None), None)
        except (psutil.Error, OSError):  # not allowed to see other processes' sockets
            self._process = None

    def seconds(self) -> float | None:
        """The broker's user + system CPU seconds so far; None when it is not found here."""
        try:
            times = self._process.cpu_times() if self._process is not None else None
        except psutil.Error:
            return None
        return None if times is None else float(times.user + times.system)


class CollectorPauses:
    """The collector's pauses in this process while recording (``gc.callbacks``): their
    total, the longest of any generation and the longest full one. :meth:`close` stops."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self.longest_ms = 0.0
        self.longest_full_ms = 0.0
        self._started = 0.0
        gc.callbacks.append(self._observe)

    def close(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took_ms = (time.perf_counter() - self._started) * 1000
        self.total_s += took_ms / 1000
        self.longest_ms = max(self.longest_ms, took_ms)
        if info["generation"] == 2:
            self.longest_full_ms = max(self.longest_full_ms, took_ms)


def rank(values: list[float], share: float) -> float:
    """The ``share`` quantile (0..1) of ``values`` by nearest rank, as every figure takes
    it (the product's :func:`~symfonic_stream.tools.demo.report.percentile`, imported when
    called: it brings the SDK, and the harness stays light); 0 when empty."""
    from symfonic_stream.tools.demo.report import percentile

    return percentile(values, share) or 0.0


def p99_by_second(timed: Iterable[tuple[float, float]]) -> list[float]:
    """The p99 of the values of each whole second of their times (``(time, value)``), in
    the seconds' order: a rising series means what is measured fell behind."""
    seconds: dict[int, list[float]] = {}
    for at, value in timed:
        seconds.setdefault(int(at), []).append(value)
    return [round(rank(values, 0.99), 1) for _, values in sorted(seconds.items())]


def best_of(repeat: int, work: Callable[[], T],
            clock: Callable[[], float] = time.process_time) -> tuple[float, T]:
    """The least CPU time (of ``clock``) of ``repeat`` runs of ``work``, and what that run
    returned: on a shared machine the wall clock also counts other processes' time."""
    best: tuple[float, T] | None = None
    for _ in range(repeat):
        start = clock()
        got = work()
        took = clock() - start
        if best is None or took < best[0]:
            best = (took, got)
    assert best is not None
    return best


def call_command(function: Callable[..., Any], *args: str, json_out: bool = False) -> list[str]:
    """The command that calls ``function(*args)`` in a new interpreter: its return value is
    the exit status, or with ``json_out`` printed as JSON."""
    module = sys.modules[function.__module__]
    where = module.__spec__.name if module.__spec__ else module.__name__  # (run as -m: __main__)
    call = "print(json.dumps(f(*sys.argv[1:])))" if json_out else "sys.exit(f(*sys.argv[1:]))"
    return [sys.executable, "-c",
            f"import json, sys; from {where} import {function.__qualname__} as f; {call}", *args]


def fresh_interpreter(function: Callable[..., Any], *args: str) -> Any:
    """``function(*args)``'s JSON result, from an interpreter of its own: what it measures
    of memory is not hidden by what this process freed."""
    done = subprocess.run(call_command(function, *args, json_out=True), capture_output=True,
                          text=True, check=True, timeout=900)
    return json.loads(done.stdout.strip().splitlines()[-1])


def options(prog: str, argv: list[str] | None, about: str | None = None,
            quick_sizes: dict[str, Any] | None = None, **defaults: Any) -> argparse.Namespace:
    """``python -m <prog>``'s options, one per keyword (``--the-name``): its default, whose
    type it takes (a type: none), ``False`` for a flag, or a tuple of that and its help.
    With ``quick_sizes``, ``--quick`` makes those the defaults (a value given still wins)."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}",
                                     description=inspect.cleandoc(about or "") or None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in defaults.items():
        default, about_it = default if isinstance(default, tuple) else (default, None)
        flag = "--" + name.replace("_", "-")
        if default is False:
            parser.add_argument(flag, action="store_true", help=about_it)
        elif isinstance(default, type):
            parser.add_argument(flag, type=default, help=about_it)
        else:
            parser.add_argument(flag, type=type(default), default=default, help=about_it)
    if quick_sizes and parser.parse_args(argv).quick:
        parser.set_defaults(**quick_sizes)
    return parser.parse_args(argv)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def table(lines: list[list[str]]) -> str:
    """A header and rows, aligned: figures to the right, words (the first column's, a
    verdict's) to the left; a rule under the header (a reader splits rows on white space)."""
    columns = list(zip(*lines, strict=True))
    widths = [max(map(len, column)) for column in columns]
    right = [i > 0 and all(c[:1] in "0123456789-.(" for c in column[1:])
             for i, column in enumerate(columns)]

    def row(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w)
                         for c, w, r in zip(cells, widths, right, strict=True)).rstrip()

    return "\n".join([row(lines[0]), "  ".join("-" * w for w in widths),
                      *(row(line) for line in lines[1:])])


def markdown(lines: list[list[str]]) -> str:
    """The same header and rows as a Markdown table (as docs/benchmarks.md shows them)."""
    return "\n".join(["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(lines[0]),
                      *("| " + " | ".join(line) + " |" for line in lines[1:])])


def write_json(path: Path, result: Any) -> None:
    """``result`` to ``path`` whole or not at all (a run cut short leaves the last file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
                                 | orjson.OPT_NON_STR_KEYS))
    tmp.replace(path)
    say(f"wrote {path}")
