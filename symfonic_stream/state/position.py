"""Where a task stands: its position, kept as one record of its changelog.

A task with a changelog writes its next input offset into it at commit step 2 of every
transaction, beside its state, so the position and the outputs commit together. A replay
has no group: its tasks also keep what they have done so far, for the replay's summary. A
consumer's group is told the same offset in the same transaction (TxnOffsetCommit, commit
step 6), and the record carries it: set-up resumes at the changelog's position unless the
two disagree, when the restore missed the changelog's tail or someone else moved the
group's offset (:func:`resume_offset`, docs/engine.md, "The position in the changelog").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from symfonic_stream.state.store import Codec, StateStore


class _Typed(Protocol):
    @property
    def record_type(self) -> str: ...


class Counted(Protocol):
    """What one transaction carries, as the totals count it (the engine's Collector)."""

    @property
    def outputs(self) -> Sequence[_Typed]: ...

    @property
    def dead_letters(self) -> Sized: ...

    @property
    def counts(self) -> Mapping[str, int]: ...


#: The one key of a task's position store.
KEY = "next"


@dataclass(slots=True)
class Progress:
    """A task's next offset; a bounded task's running totals; what its group was told."""

    next_offset: int
    #: The end of its range was committed, with what the processor held back to the end.
    ended: bool = False
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    #: The group's committed offset as of this record (None: never committed), written by
    #: the same transactions that move it. A group offset that differs was moved by someone
    #: else (an operator's reset): set-up then follows the group (:func:`resume_offset`).
    group_offset: int | None = None

    def add(self, out: Counted, consumed: int) -> None:
        """Count one transaction's worth into the totals."""
        self.records_in += consumed
        self.records_out += len(out.outputs)
        self.dead_letters += len(out.dead_letters)
        types = Counter(record.record_type for record in out.outputs)
        for name, n in types.items():
            self.by_type[name] = self.by_type.get(name, 0) + n
        for name, n in out.counts.items():
            self.counts[name] = self.counts.get(name, 0) + n


def _encode(progress: Progress) -> bytes:
    return orjson.dumps(progress)  # a dataclass: its fields, as a JSON object


def _decode(data: bytes) -> Progress:
    saved = orjson.loads(data)
    return Progress(
        next_offset=int(saved["next_offset"]),
        ended=bool(saved.get("ended", False)),
        records_in=int(saved.get("records_in", 0)),
        records_out=int(saved.get("records_out", 0)),
        dead_letters=int(saved.get("dead_letters", 0)),
        by_type={str(k): int(v) for k, v in saved.get("by_type", {}).items()},
        counts={str(k): int(v) for k, v in saved.get("counts", {}).items()},
        group_offset=None if saved.get("group_offset") is None else int(saved["group_offset"]),
    )


PROGRESS_CODEC: Codec[Progress] = Codec(_encode, _decode)


def position_store() -> StateStore[Progress]:
    return StateStore("position", PROGRESS_CODEC)


def resume_offset(saved: Progress | None, group_offset: int | None) -> int | None:
    """Where a group task resumes, from its changelog's position and its group's committed
    offset (both final once the task's producer fenced every earlier one). The changelog's
    position, when the group's offset is still the one it last wrote with it; else the
    group's (a reset by an operator, a changelog written before positions), or None, the
    partition's beginning, when the group never committed."""
    if saved is not None and saved.group_offset == group_offset:
        return saved.next_offset
    return group_offset
