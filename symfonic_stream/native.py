"""The native hot path: the Rust extension ``symfonic_stream._native`` (the crate in
``native/``), built into the package by ``pip install`` wherever cargo is.

Two paths use it: the decoder's strict-JSON scan (``models/decoding.py``) and a
transaction's record batches (``kafka/producer.py``, only when the producer does not
compress). Without it, both run their pure-Python equivalents, which give the same results
more slowly: an install without the extension is a different product from the one
benchmarked, so it says so: a warning when a consumer starts, ``native="false"`` on the
``symfonic_stream_build_info`` metric, and ``symfonic-stream --version``.
"""

from __future__ import annotations

import logging
from types import ModuleType

from symfonic_stream import installed_version

extension: ModuleType | None
#: Why the extension is not there (the ImportError's words), or None when it is.
MISSING: str | None
try:
    from symfonic_stream import _native as extension
except ImportError as exc:  # built where no cargo was found, or a foreign platform's wheel
    extension, MISSING = None, str(exc)
else:
    MISSING = None

#: Whether this install carries the native extension.
AVAILABLE = extension is not None

#: What a user reads when it is missing (the consumers' start-up warning names it too).
FALLBACK_WARNING = (
    "the native extension symfonic_stream._native is not installed: the decoder and the "
    "record batches run in pure Python, correct but slower than the figures in "
    "docs/benchmarks.md (install a wheel, or build with cargo on PATH: README, Install)"
)


def warn_if_missing(log: logging.Logger) -> None:
    """At a consumer's start: a warning when the pure-Python paths will run."""
    if not AVAILABLE:
        log.warning(FALLBACK_WARNING, extra={"error": MISSING})


def paths() -> dict[str, str]:
    """Each native path and whether it is active, in words."""
    if not AVAILABLE:
        return {"json scan": "off (pure Python)", "record batches": "off (aiokafka's builder)"}
    return {"json scan": "native",
            "record batches": "native (when the producer does not compress)"}


def version_report(version: str) -> str:
    """What ``symfonic-stream --version`` prints: the version, the native paths, the Kafka
    client's version."""
    lines = [f"symfonic-stream {version}"]
    lines += [f"{name}: {state}" for name, state in paths().items()]
    if MISSING is not None:
        lines.append(f"native extension missing: {MISSING}")
    lines.append(f"aiokafka {installed_version('aiokafka')}")
    return "\n".join(lines)
