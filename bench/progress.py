"""Progress lines of a benchmark run."""

from __future__ import annotations

import sys


def say(text: str) -> None:
    # stderr, so that stdout carries only the report.
    print(text, file=sys.stderr, flush=True)
