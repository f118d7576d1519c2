"""Fault injection for the integration tests: freeze a consumer process in a named phase,
then kill it or let it go on as a zombie.

A consumer started with ``fault_freeze="<phase>:<n>"`` (``SYMFONIC_FAULT_FREEZE``, see
``symfonic_stream/faults.py``) stops itself with SIGSTOP the n-th time it passes that
phase, after logging ``fault point reached: <phase>``. :func:`wait_frozen` waits until it is
stopped *and* its log says it stopped in that phase: a fault that did not land where it
names fails the test. Then :func:`kill` (SIGKILL, no clean-up at all) or
:func:`thaw` once its successor took over (SIGCONT: the zombie wakes up to find a successor
owns its partitions and has fenced its producer). :data:`TABLE` is the fault table.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from typing import Literal

from .harness import ConsumerProcess

Mode = Literal["kill", "freeze"]


@dataclass(frozen=True, slots=True)
class Fault:
    """Stop in ``phase`` the ``nth`` time through it; then SIGKILL (``kill``), or wake it
    after its successor took over (``freeze``: a zombie)."""

    phase: str
    nth: int = 1
    mode: Mode = "kill"

    @property
    def setting(self) -> str:
        return f"{self.phase}:{self.nth}"

    @property
    def fence_guaranteed(self) -> bool:
        """A zombie woken in the middle of a transaction must send EndTxn with the epoch
        its successor's InitProducerId bumped: it is fenced, whatever else it learns first.
        Woken in another phase it may learn of the rebalance first and write nothing."""
        return self.mode == "freeze" and self.phase == "in_transaction"

    def __str__(self) -> str:
        return f"{self.mode} at {self.phase}#{self.nth}"


def kill_at(phase: str, nth: int = 1) -> Fault:
    return Fault(phase, nth)


def zombie_at(phase: str, nth: int = 1) -> Fault:
    return Fault(phase, nth, "freeze")


@dataclass(frozen=True, slots=True)
class Row:
    """One run of the fault table: ``consumer``'s first instance meets ``first``, the
    instance that succeeds it meets ``successor``. ``quick``: one of ``make test``'s rows."""

    consumer: str
    first: Fault
    successor: Fault
    quick: bool = False

    @property
    def name(self) -> str:
        first = f"{'zombie' if self.first.mode == 'freeze' else 'kill'}-{self.first.phase}"
        return f"{self.consumer}:{first}:then-{self.successor.phase}"


_F, _T, _C = "fetched", "in_transaction", "commit_logged"
_I, _V, _R = "init_producer", "revoking", "restoring"

#: The fault table: every consumer meets every named phase (symfonic_stream/faults.py's PHASES; a
#: stateless one has no ``restoring``) once as its first fault and once as its successor's
#: (each consumer's successors are another permutation of the phases).
#: ``in_transaction`` as the first fault is a zombie, which must be fenced; ``fetched``
#: also as a zombie, which may be fenced or give its partitions back having written
#: nothing. The ``quick`` rows (``make test``) hold each distinct first fault once: its
#: mode and phase, for a stateless consumer and for a stateful one (restores, changelog
#: writes and kept state are a stateful consumer's alone), and every phase as a successor's;
#: the other rows repeat one of those on another stateful consumer, whose processor differs
#: but not the engine's path through the fault. ``make test-faults`` runs every row.
#: tests/unit/test_fault_table.py checks all of that.
TABLE: tuple[Row, ...] = (
    Row("copier", kill_at(_F, 3), kill_at(_T, 2), quick=True),
    Row("copier", zombie_at(_T, 3), kill_at(_C, 2), quick=True),
    Row("copier", kill_at(_C, 2), kill_at(_I), quick=True),
    Row("copier", kill_at(_I), kill_at(_V), quick=True),
    Row("copier", kill_at(_V), kill_at(_F, 3), quick=True),
    Row("copier", zombie_at(_F, 2), kill_at(_T, 1), quick=True),
    Row("typed", kill_at(_F, 3), kill_at(_I), quick=True),
    Row("typed", zombie_at(_T, 2), kill_at(_F, 2), quick=True),
    Row("typed", kill_at(_C, 3), kill_at(_T, 2)),
    Row("typed", kill_at(_I), kill_at(_C, 2)),
    Row("typed", kill_at(_V), kill_at(_R), quick=True),
    Row("typed", kill_at(_R), kill_at(_V)),
    Row("typed", zombie_at(_F, 4), kill_at(_T, 1), quick=True),
    Row("chunks", kill_at(_F, 2), kill_at(_R)),
    Row("chunks", zombie_at(_T, 3), kill_at(_I)),
    Row("chunks", kill_at(_C, 2), kill_at(_V), quick=True),
    Row("chunks", kill_at(_I), kill_at(_F, 3)),
    Row("chunks", kill_at(_V), kill_at(_T, 3)),
    Row("chunks", kill_at(_R), kill_at(_C, 1)),
    Row("pauses", kill_at(_F, 4), kill_at(_C, 2)),
    Row("pauses", zombie_at(_T, 2), kill_at(_R)),
    Row("pauses", kill_at(_C, 3), kill_at(_V)),
    Row("pauses", kill_at(_I), kill_at(_T, 2), quick=True),
    Row("pauses", kill_at(_V), kill_at(_F, 2)),
    Row("pauses", kill_at(_R), kill_at(_I)),
    Row("resumes", kill_at(_F, 2), kill_at(_V)),
    Row("resumes", zombie_at(_T, 2), kill_at(_C, 3)),
    Row("resumes", kill_at(_C, 2), kill_at(_I)),
    Row("resumes", kill_at(_I), kill_at(_R)),
    Row("resumes", kill_at(_V), kill_at(_T, 2)),
    Row("resumes", kill_at(_R), kill_at(_F, 2), quick=True),
)

#: ``symfonic-stream replay`` (one producer, no group): killed in a transaction's phases,
#: rerun and killed again, then run to its end.
REPLAY_TABLE: tuple[tuple[Fault, Fault, bool], ...] = (
    (kill_at(_T, 3), kill_at(_C, 2), True),
    (kill_at(_C, 4), kill_at(_T, 1), True),
)


def process_state(pid: int) -> str:
    """The one-letter state of ``pid`` (``T`` stopped, ``Z`` zombie, ``R``/``S`` running)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


_MARK = "fault point reached: "


def frozen_in(process: ConsumerProcess) -> str | None:
    """The phase the process last reported freezing in, from its log (JSON or text)."""
    phase = None
    for line in process.log_path.read_text(errors="replace").splitlines():
        if _MARK in line:
            phase = line.split(_MARK, 1)[1].split('"', 1)[0].strip()
    return phase


async def wait_frozen(process: ConsumerProcess, fault: Fault, within: float = 90.0) -> None:
    """Until ``process`` stopped itself in ``fault.phase``; fails if it never does."""
    assert process.proc is not None
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.proc.poll() is not None:
            raise AssertionError(f"exited ({process.proc.returncode}) before {fault}:\n"
                                 + process.log())
        if process_state(process.pid) == "T" and frozen_in(process) == fault.phase:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(
        f"the fault '{fault}' did not land within {within} s (state "
        f"{process_state(process.pid)}, last phase {frozen_in(process)}):\n{process.log()}"
    )


def kill(process: ConsumerProcess) -> None:
    """SIGKILL a (frozen) process: nothing of it runs again."""
    process.kill()


def thaw(process: ConsumerProcess) -> None:
    assert process.proc is not None
    process.proc.send_signal(signal.SIGCONT)
