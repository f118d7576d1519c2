"""How the engine uses CPython's cyclic garbage collector: seldom, and never over the
state it restored (docs/engine.md, "The heap").

A record's objects die by reference counting when its transaction commits; only cycles
need the collector. At CPython's defaults it ran a young collection every 700 new
objects, and a consume loop holds tens of thousands in flight (fetched records, a
transaction's outputs): each collection walked them all, and full collections walked the
restored state too, about a tenth of a projector's CPU and stalls of tens of ms.
"""

from __future__ import annotations

import gc

#: Net new container objects between two young collections (CPython's default: 700),
#: above what one loop turn holds in flight, so those die before a collection sees them.
YOUNG_THRESHOLD = 50_000


def settle() -> None:
    """After a set-up: one full collection (what an earlier freeze kept out included),
    then everything alive is frozen out of later collections, and the young threshold is
    :data:`YOUNG_THRESHOLD`. Run after each restore, when the heap is mostly state that
    lives as long as its task."""
    tune()
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def tune() -> None:
    """Raise the young generation's threshold to :data:`YOUNG_THRESHOLD`. A collector
    disabled (threshold 0) or set higher by an embedding application is left alone."""
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, middle, old)
