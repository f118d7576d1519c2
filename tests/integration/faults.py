"""Fault injection for the integration tests: freeze a consumer process in a named phase,
then kill it or let it go on as a zombie.

A consumer started with ``fault_freeze="<phase>:<n>"`` (``SYMFONIC_FAULT_FREEZE``, see
``symfonic_stream/faults.py``) stops itself with SIGSTOP the n-th time it passes that
phase, after logging ``fault point reached: <phase>``. :func:`wait_frozen` waits until it is
stopped *and* its log says it stopped in that phase: a fault that did not land where it
names fails the test. Then :func:`kill` (SIGKILL, no clean-up at all) or
:func:`freeze_past_session_timeout` followed by :func:`thaw` (SIGCONT: the zombie wakes
up to find a successor owns its partitions and has fenced its producer).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from dataclasses import dataclass
from typing import Literal

from .harness import ConsumerProcess

#: The engine's session timeout (kafka/clients.py); a zombie is frozen longer than this.
SESSION_TIMEOUT_S = 10.0

Mode = Literal["kill", "freeze"]

#: Phases a first instance can be frozen in, and those of its successor (which restores).
FIRST_PHASES = ("fetched", "in_transaction", "commit_logged", "init_producer", "revoking")
SUCCESSOR_PHASES = ("restoring", "init_producer", "fetched", "in_transaction", "commit_logged")
#: How many passes of a phase before it freezes, at most (it must come up while input flows).
MAX_PASS = {"fetched": 6, "in_transaction": 6, "commit_logged": 6, "init_producer": 1,
            "revoking": 1, "restoring": 1}


@dataclass(frozen=True, slots=True)
class Fault:
    phase: str
    nth: int
    mode: Mode = "kill"

    @property
    def setting(self) -> str:
        return f"{self.phase}:{self.nth}"

    def __str__(self) -> str:
        return f"{self.mode} at {self.phase}#{self.nth}"


def plan(seed: int, *, stateful: bool, replay: bool = False) -> tuple[Fault, Fault]:
    """The two faults of one seeded run: the first instance's, then its successor's."""
    rng = random.Random(seed)
    if replay:  # a replay has one producer and no group: only its transaction phases
        phases: tuple[str, ...] = ("in_transaction", "commit_logged")
        first = Fault(rng.choice(phases), rng.randint(2, 5))
        return first, Fault(rng.choice(phases), rng.randint(1, 3))
    first_phase = rng.choice(FIRST_PHASES)
    successors = [p for p in SUCCESSOR_PHASES if stateful or p != "restoring"]
    second_phase = rng.choice(successors)
    mode: Mode = "freeze" if rng.random() < 0.4 and first_phase != "revoking" else "kill"
    first = Fault(first_phase, rng.randint(1, MAX_PASS[first_phase]), mode)
    second = Fault(second_phase, rng.randint(1, MAX_PASS[second_phase]))
    return first, second


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


async def freeze_past_session_timeout(extra_s: float = 3.0) -> None:
    """Keep a frozen process frozen until the group must have expired its session."""
    await asyncio.sleep(SESSION_TIMEOUT_S + extra_s)


def thaw(process: ConsumerProcess) -> None:
    assert process.proc is not None
    process.proc.send_signal(signal.SIGCONT)
