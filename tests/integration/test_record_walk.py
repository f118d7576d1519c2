"""The walk of one typed record from the fetch to its commit (issue 45, docs/engine.md,
"Following one record"), measured as it runs, not read.

A typed projector runs in this test's event loop on the real broker. Its run is open (its
first event committed); then one ``text_delta`` is fetched, processed and committed while
a profiler (``sys.setprofile``) notes every call into, and every return to, the package's
code on the record's behalf, in two legs: from the engine handing the fetch to its task
until :meth:`StreamTask.absorb` returns (the record then rests in the task's pending
work), and from the committer's take of it (commit step 1, :meth:`StreamTask.take`) until
its task advanced (step 9, :meth:`StreamTask.committed`). The package's files are the
rooms; a *return* is entering a file the walk had left, whether by a call or by a callee
returning to it. The metrics of step 8 (``observability/``) are left out, as they are of
the walk in docs/engine.md.
"""

from __future__ import annotations

import dis
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from symfonic_stream.app.topologies import projector_topology
from symfonic_stream.models.names import TopicNames

from .harness import (  # noqa: F401  (prefix_fixture provides the ``prefix`` fixture)
    InProcessEngine,
    create_topics,
    prefix_fixture,
    produce,
    wait_caught_up,
)
from .observe import wait_until

PACKAGE = Path(__file__).resolve().parents[2] / "symfonic_stream"
TASK = "engine/task.py"
#: The walk's bounds (docs/engine.md, "Following one record"; issue 45).
MOST_FILES, MOST_RETURNS = 8, 10
_YIELD, _RESUME = dis.opmap["YIELD_VALUE"], dis.opmap["RESUME"]


def _room(frame: FrameType | None) -> str | None:
    """The package file a frame runs, relative to the package (None: not ours)."""
    if frame is None:
        return None
    path = frame.f_code.co_filename
    if not path.startswith(str(PACKAGE)) or "/observability/" in path:
        return None
    return str(Path(path).relative_to(PACKAGE))


def _is(frame: FrameType | None, name: str) -> bool:
    return frame is not None and frame.f_code.co_name == name and _room(frame) == TASK


def _under(frame: FrameType | None, name: str) -> bool:
    while frame is not None:
        if _is(frame, name):
            return True
        frame = frame.f_back
    return False


class Walk:
    """The rooms entered, in order (a room once per stay), over the record's two legs."""

    def __init__(self) -> None:
        self.rooms: list[str] = []
        self.leg = "waiting"  # then "absorbing", "resting", "committing", "done"

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return") or self.leg == "done":
            return
        code = frame.f_code.co_code
        if event == "call":
            # A coroutine that awaited is resumed by the event loop: not the code's path.
            if code[frame.f_lasti] == _RESUME and code[frame.f_lasti + 1] != 0:
                return
            if self.leg == "waiting" and _is(frame, "absorb"):
                self.leg = "absorbing"
                self._enter(_room(frame.f_back))
            elif self.leg == "resting" and _is(frame, "take"):
                self.leg = "committing"
            room = _room(frame)
        else:
            if code[frame.f_lasti] == _YIELD:
                return  # suspended at an await, not returned
            if self.leg == "absorbing" and _is(frame, "absorb"):
                self.leg = "resting"  # the record waits in the task's pending work
                return
            room = _room(frame.f_back)  # where control goes back to
            if self.leg == "committing" and _is(frame, "committed"):
                self._enter(room)
                self.leg = "done"
                return
        if (self.leg == "absorbing" and _under(frame, "absorb")) or (
                self.leg == "committing" and _under(frame, "_commit_pending")):
            self._enter(room)

    def _enter(self, room: str | None) -> None:
        if room is not None and (not self.rooms or self.rooms[-1] != room):
            self.rooms.append(room)

    @property
    def files(self) -> list[str]:
        return list(dict.fromkeys(self.rooms))

    @property
    def returns(self) -> int:
        return len(self.rooms) - len(self.files)


async def test_one_typed_record_walks_through_a_few_files(
        bootstrap_servers: str, prefix: str) -> None:
    settings = await create_topics(prefix, with_copier=False)
    names = TopicNames(prefix)

    def event(index: int) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        return b"walk", orjson.dumps({"run_id": "walk", "index": index, "kind": "text_delta",
                                      "timestamp": time.time(), "text": f"t{index}"}), []

    async with InProcessEngine(projector_topology("typed", settings), settings) as running:
        await produce(names.agent_events, [event(0)])  # the run is open, its state committed
        await wait_caught_up(names.group("typed"), names.agent_events)
        walk = Walk()
        sys.setprofile(walk)
        try:
            await produce(names.agent_events, [event(1)])

            async def committed() -> bool:
                return running.sample("records_out_total", topic=names.stream_events,
                                      type="text_delta") >= 2

            await wait_until(committed, "the second record committed", within=30)
        finally:
            sys.setprofile(None)
    print("\nthe walk:", " -> ".join(walk.rooms))
    print(f"{len(walk.files)} files, {walk.returns} returns: {walk.files}")
    assert walk.leg == "done", walk.leg
    assert walk.rooms[0] == "engine/engine.py" and "kafka/producer.py" in walk.files
    assert len(walk.files) <= MOST_FILES, walk.files
    assert walk.returns <= MOST_RETURNS, walk.rooms
