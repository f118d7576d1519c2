"""What the script says: progress on stderr, errors as ``kafka.sh: error: ...`` and status 1.

Results (a path, "started", "stopped") go to stdout, everything else to stderr, so a caller
can take ``$(scripts/kafka.sh secure-env mtls)`` as a path.
"""

from __future__ import annotations

import sys
import time

NAME = "kafka.sh"


class Failed(Exception):
    """The command cannot go on; ``cli.main`` prints the message and exits with status 1."""


def log(*words: object) -> None:
    print(f"{NAME}:", *words, file=sys.stderr, flush=True)


def say(*words: object) -> None:
    """A result line on stdout."""
    print(*words, flush=True)


def die(message: str) -> Failed:
    """The error to raise: ``raise die("...")``."""
    return Failed(message)


class Clock:
    """Seconds since it was made, as the messages print them (one decimal, cut, not rounded)."""

    def __init__(self) -> None:
        self._began = time.monotonic()

    def since(self) -> str:
        tenths = int((time.monotonic() - self._began) * 10)
        return f"{tenths // 10}.{tenths % 10}"
