"""Where a task without a group stands: its position, kept in its state store.

A consumer's position is its group's committed offset, moved by TxnOffsetCommit inside each
transaction. A replay has no group: each of its tasks keeps its next offset (and what it
has done so far, for the replay's summary) as one record of its state store, written at
commit step 2 with everything else, so the position and the outputs commit together.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import orjson

from symfonic_stream.engine.records import Collector
from symfonic_stream.engine.store import Codec, StateStore

#: The one key of a task's position store.
KEY = "next"


@dataclass(slots=True)
class Progress:
    """A bounded task's next offset and its running totals."""

    next_offset: int
    #: The end of its range was committed, with what the processor held back to the end.
    ended: bool = False
    records_in: int = 0
    records_out: int = 0
    dead_letters: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, out: Collector, consumed: int) -> None:
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
    )


PROGRESS_CODEC: Codec[Progress] = Codec(_encode, _decode)


def position_store() -> StateStore[Progress]:
    return StateStore("position", PROGRESS_CODEC)
