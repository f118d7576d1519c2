"""The gateway's recent-runs store: one output topic's runs, indexed and held in memory.

The topic's tail (:mod:`.tail`) appends every record to its run here; every viewer of a run
reads from the same held records with a cursor of its own (its next seq), so a thousand
viewers of a run cost one copy of it, and a slow viewer slows nobody but itself.

Two bounds, both settings:

* ``SYMFONIC_GATEWAY_CACHE_BYTES``: the records held. Over it, the least recently active
  runs lose their held records first (the newest run its oldest half); the run stays
  indexed, and a viewer that needs those records reads them back from Kafka, from the
  run's first offset (:func:`.tail.read_back`), never from offset 0.
* ``SYMFONIC_GATEWAY_MAX_RUNS``: the runs indexed. Over it, the least recently active run
  without a viewer is forgotten; opening it again waits like an unknown run.

A run is **pinned** to its tenant by the ``symfonic-tenant`` header of its records: the
projectors give every record of a run (events, gaps, ends) its owner's tenant, the tenant
of the run's first event, and dead-letter another tenant's events under that run id
(contract §9), so any record of a run names its owner, whichever this replica happened to
hold first, after a restart, an eviction or on another replica, on either stream. A record
naming another tenant than its run's is legitimate only as the start of a new lifetime of
the run id (seq 0: the projectors forgot the old run past its grace, and the id began
again, maybe another tenant's): the run starts over, pinned to it. Anything else naming
another tenant is never held nor served, only counted (``foreign``). A record without the
header and not projected from an event (a gap or an abandoned end an older projector
wrote of its own) is the run's whatever its tenant, and pins nothing. A closed run's seq 0
starts a new lifetime too, its tenant's.

Pure bookkeeping: no I/O; an ``asyncio.Event`` per run wakes its viewers.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from symfonic_stream.gateway.sse import Envelope
from symfonic_stream.models.trace import Headers

#: Bookkeeping bytes of one held record on top of its value (the object, the int, the str,
#: the timestamp's float).
HELD_OVERHEAD = 150

#: What :meth:`RunStore.append` did with a record (the tail's ``records`` metric).
Filing = Literal["filed", "repeated", "foreign"]


@dataclass(slots=True)
class Held:
    """One envelope as on the topic, ready to send."""

    seq: int
    name: str
    data: bytes
    closes: bool
    #: The record's Kafka timestamp (Unix s; 0: unknown, as for a read-back's records):
    #: where its delivery lag is measured from (:mod:`.viewer`).
    ts: float = 0.0
    #: Its SSE message, encoded once for every viewer (:func:`.fanout.frame`), and its
    #: translations (AG-UI, the AI SDK's), each made once for every viewer of the run
    #: (:class:`.fanout.Translation`); None until a viewer first needs them.
    frame: bytes | None = None
    translated: dict[Any, Any] | None = None


def _seq_of(held: Held) -> int:
    return held.seq


@dataclass(slots=True)
class Run:
    """One run of the topic: where it starts in its partition, and its recent records."""

    run_id: str
    partition: int
    #: The offset of the first record of this run the gateway saw.
    first_offset: int
    #: That record's seq: 0 unless the run began before the gateway's window.
    first_seq: int
    next_seq: int
    held: list[Held] = field(default_factory=list)
    held_bytes: int = 0
    closed: bool = False
    #: The tenant the run is pinned to: its records' ``symfonic-tenant`` (None: its owner
    #: has none). Never changes once pinned: a new lifetime of the id is a new Run.
    tenant: str | None = None
    pinned: bool = False
    #: Records under this run id of another tenant: neither held nor served.
    foreign: int = 0
    viewers: int = 0
    #: The checked trace headers of the first record filed under the run that had any (only
    #: when tracing is on): the run's context, its streams' spans' parent.
    trace: Headers = ()
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Per translated format, the run's one translation its viewers share
    #: (:class:`.fanout.Shared`); None until a viewer first translates.
    translations: dict[Any, Any] | None = None

    def serves(self, tenant: str | None, from_event: bool) -> bool:
        """Whether a record carrying ``tenant`` is this run's: its pinned tenant's, or one
        an older projector wrote of its own (no event, no header)."""
        if tenant is None and not from_event:
            return True
        return self.pinned and tenant == self.tenant

    def pin(self, tenant: str | None, from_event: bool) -> bool:
        """Pin the run to a record's ``tenant`` unless it is pinned or the record pins
        nothing (:meth:`serves`); whether it was pinned now."""
        if self.pinned or (tenant is None and not from_event):
            return False
        self.tenant, self.pinned = tenant, True
        return True

    def begins_again(self, envelope: Envelope, tenant: str | None) -> bool:
        """Whether ``envelope`` starts a new lifetime of the run id: its seq 0, naming
        another tenant than the run's, or after the run closed."""
        return envelope.seq == 0 and self.next_seq > 0 and (
            self.closed or (self.pinned and tenant != self.tenant
                            and (tenant is not None or envelope.from_event)))

    @property
    def held_from(self) -> int:
        """The lowest seq held in memory (``next_seq`` when none is)."""
        return self.held[0].seq if self.held else self.next_seq

    def held_after(self, seq: int) -> list[Held]:
        """The held records with a seq above ``seq``, in order."""
        held = self.held
        if not held or seq < held[0].seq:
            return held[:]
        if held[-1].seq - held[0].seq == len(held) - 1:  # dense, as the projectors write
            return held[seq + 1 - held[0].seq:]
        # A jump (a hole on the topic): the seqs still only grow.
        return held[bisect.bisect_right(held, seq, key=_seq_of):]

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class RunStore:
    """The runs of one output topic, least recently active first."""

    def __init__(self, *, cache_bytes: int, max_runs: int) -> None:
        self._cache_bytes = cache_bytes
        self._max_runs = max_runs
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self.held_bytes = 0
        #: Records below their run's next seq (repeats: counted, not held) and above it
        #: (a hole on the topic: held, the viewer sees the jump in ``id``).
        self.repeated = 0
        self.jumped = 0
        #: Records of another tenant than their run's (never held).
        self.foreign = 0
        #: The runs holding records, least recently active first (what the budget trims).
        self._holding: OrderedDict[str, Run] = OrderedDict()
        #: Per run id waited for: its arrival, and how many requests wait for it.
        self._arrivals: dict[str, tuple[asyncio.Event, list[int]]] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    def append(self, partition: int, offset: int, envelope: Envelope, data: bytes,
               tenant: str | None = None, ts: float = 0.0, trace: Headers = ()) -> Filing:
        """File one record under its run (creating the run at its first record, pinning
        it at its first from an event); what became of the record."""
        run = self._runs.get(envelope.run_id)
        if run is not None and run.begins_again(envelope, tenant):
            self._end_lifetime(run)
            run = None
        if run is None:
            run = self._runs[envelope.run_id] = Run(
                envelope.run_id, partition, offset, envelope.seq, envelope.seq)
            self._signal(envelope.run_id)
            self._forget_beyond_max_runs()
        else:
            self._runs.move_to_end(envelope.run_id)
        if run.pin(tenant, envelope.from_event):
            self._signal(envelope.run_id)  # (a request waiting for it may now read it)
        if not run.serves(tenant, envelope.from_event):
            run.foreign += 1
            self.foreign += 1
            return "foreign"
        if envelope.seq < run.next_seq:
            self.repeated += 1
            return "repeated"
        if envelope.seq > run.next_seq:
            self.jumped += 1
        run.held.append(Held(envelope.seq, envelope.name, data, envelope.closes, ts))
        if trace and not run.trace:
            run.trace = trace
        size = len(data) + HELD_OVERHEAD
        run.held_bytes += size
        self.held_bytes += size
        run.next_seq = max(run.next_seq, envelope.seq + 1)
        run.closed = run.closed or envelope.closes
        self._holding[run.run_id] = run
        self._holding.move_to_end(run.run_id)
        self._trim_to_budget(run)
        run.wake()
        return "filed"

    async def wait_for(self, run_id: str, readable: Callable[[Run], bool],
                       timeout_s: float) -> Run | None:
        """The run once it is indexed and ``readable``; None when it is not within
        ``timeout_s``. A run not seen and a run ``readable`` refuses are one case, so
        both wait the whole timeout on the same event (docs/gateway.md, "Who may read"):
        a request cannot tell them apart by when its answer comes."""
        deadline = time.monotonic() + timeout_s
        while True:
            run = self._runs.get(run_id)
            if run is not None and readable(run):
                return run
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await self._watch(run_id, left)

    def waiters(self, run_id: str) -> int:
        """Requests waiting for ``run_id`` to be indexed or pinned."""
        arrival = self._arrivals.get(run_id)
        return arrival[1][0] if arrival is not None else 0

    async def _watch(self, run_id: str, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for ``run_id`` to be indexed or pinned."""
        arrival, waiting = self._arrivals.setdefault(run_id, (asyncio.Event(), [0]))
        waiting[0] += 1
        try:
            await asyncio.wait_for(arrival.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            waiting[0] -= 1
            if waiting[0] == 0 and self._arrivals.get(run_id, (None,))[0] is arrival:
                del self._arrivals[run_id]  # the last one waiting gave up

    def _signal(self, run_id: str) -> None:
        arrival = self._arrivals.pop(run_id, None)
        if arrival is not None:
            arrival[0].set()

    def _trim_to_budget(self, newest: Run) -> None:
        """Drop held records until the held bytes fit: the least recently active runs'
        first, then the oldest half of the newest run's own."""
        holding = self._holding
        while self.held_bytes > self._cache_bytes and len(holding) > 1:
            _, oldest = holding.popitem(last=False)  # (never the newest: it was moved last)
            self._drop_held(oldest, len(oldest.held))
        while self.held_bytes > self._cache_bytes and len(newest.held) > 1:
            self._drop_held(newest, max(1, len(newest.held) // 2))

    def _drop_held(self, run: Run, count: int) -> None:
        dropped = sum(len(h.data) + HELD_OVERHEAD for h in run.held[:count])
        del run.held[:count]
        run.held_bytes -= dropped
        self.held_bytes -= dropped

    def _end_lifetime(self, run: Run) -> None:
        """Forget ``run``: its id begins again. Its viewers' streams end (they were of
        the old lifetime, which has no more records)."""
        self._drop_held(run, len(run.held))
        self._holding.pop(run.run_id, None)
        del self._runs[run.run_id]
        run.closed = True
        run.wake()

    def _forget_beyond_max_runs(self) -> None:
        if len(self._runs) <= self._max_runs:
            return
        for run in self._runs.values():
            if run.viewers == 0:
                break
        else:
            return  # every run has a viewer: the viewers' bound holds the index
        self._drop_held(run, len(run.held))
        self._holding.pop(run.run_id, None)
        del self._runs[run.run_id]
