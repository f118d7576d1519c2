"""Fault points: the named moments where the fault-injection tests freeze a consumer.

The integration tests kill or freeze a consumer process in a chosen phase of its work and
check that nothing is lost or duplicated (docs/testing.md). A phase lasts milliseconds, so
aiming at it from outside (sleeps, polling) lands anywhere. Instead a test starts the
process with ``SYMFONIC_FAULT_FREEZE=<phase>:<n>``: the n-th time the process passes
``<phase>`` it logs ``fault point reached: <phase>`` and stops itself with SIGSTOP, there. The
test sees the process stopped, then SIGKILLs it, or leaves it frozen past its session
timeout and lets it go on with SIGCONT (a zombie its successor must have fenced).

Unset, as always outside those tests, a fault point on the hot path is one attribute read
(``if faults.ARMED``). Set, it changes nothing but timing, as a GC pause or a descheduled
process would.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections import Counter
from typing import Final

log = logging.getLogger(__name__)

ENV: Final = "SYMFONIC_FAULT_FREEZE"

#: Each phase and where it is (the tests name them; docs/testing.md explains each).
PHASES: Final = {
    "fetched": "records fetched, not yet processed",
    "in_transaction": "a transaction's records and offsets acknowledged, not committed",
    "commit_logged": "EndTxn answered, the markers maybe not yet written",
    "restoring": "part of a changelog partition restored",
    "revoking": "partitions (at least one) being revoked, their pending work not yet committed",
    "init_producer": "InitProducerId answered (epoch bumped), nothing restored yet",
}


class FaultConfigError(ValueError):
    """``SYMFONIC_FAULT_FREEZE`` is not ``<phase>:<n>`` with a known phase and n >= 1."""


def _parse(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    phase, _, nth = text.partition(":")
    if phase not in PHASES or not nth.isdigit() or int(nth) < 1:
        raise FaultConfigError(
            f"{ENV}={text!r}: expected <phase>:<n>, n >= 1, phase one of {', '.join(PHASES)}"
        )
    return phase, int(nth)


_armed: tuple[str, int] | None = _parse(os.environ.get(ENV))
_passes: Counter[str] = Counter()
#: Whether a test armed a fault point in this process: the hot path reads this, and calls
#: :func:`fault_point` only then (not even a call when unset).
ARMED: Final = _armed is not None


def fault_point(phase: str) -> None:
    """Freeze the process here if a test armed this phase and this is its n-th pass."""
    if _armed is None or _armed[0] != phase:
        return
    _passes[phase] += 1
    if _passes[phase] != _armed[1]:
        return
    # The phase in the text too: a command without JSON logging prints only the message.
    log.warning("fault point reached: %s", phase, extra={"phase": phase, "pass": _passes[phase]})
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGSTOP)
