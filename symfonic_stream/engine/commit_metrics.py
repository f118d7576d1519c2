"""What a committed transaction tells the metrics: records in by type, records out by type,
end-to-end latency, dead letters, tickets, resumes and claims, the processors' counts.

Called once per committed transaction, never per record on the way: a transaction that
aborts counts nothing, so the counters agree with what read_committed readers see.
"""

from __future__ import annotations

import operator
import time
from collections import Counter

from symfonic_stream.engine.records import Collector
from symfonic_stream.observability.metrics import ConsumerMetrics

_TOPIC = operator.attrgetter("topic")
_RECORD_TYPE = operator.attrgetter("record_type")
_SOURCE_TS = operator.attrgetter("source_ts")

#: The ``type`` of records in that the processor did not classify.
UNCLASSIFIED_INPUT = "unclassified"


def report_commit(metrics: ConsumerMetrics, topic: str, out: Collector, consumed: int) -> None:
    """Count one committed transaction of ``consumed`` records read from ``topic``."""
    if consumed:
        for record_type, n in out.inputs.items():
            metrics.record_in(topic, record_type, n)
        unread = consumed - sum(out.inputs.values())
        if unread > 0:  # a processor that does not say what it read
            metrics.record_in(topic, UNCLASSIFIED_INPUT, unread)
    # Per output record, the one per-record loop of a commit: C-level counting (map,
    # zip, Counter) and one comprehension, a Python loop with a Counter update per record
    # cost ~1 µs per record (docs/benchmarks.md).
    outputs = out.outputs
    produced = Counter(zip(map(_TOPIC, outputs), map(_RECORD_TYPE, outputs), strict=True))
    now = time.time()
    metrics.observe_end_to_end_many(
        [now - ts for ts in map(_SOURCE_TS, outputs) if ts is not None])
    for (out_topic, record_type), n in produced.items():  # one increment per type
        metrics.record_out(out_topic, record_type, n)
    for letter in out.dead_letters:
        metrics.dead_letter(str(letter.reason))
    if out.counts:
        metrics.add_counts(out.counts)
    for (queue, kind), n in out.tickets.items():
        metrics.ticket_routed(queue, kind, n)
    for outcome, n in out.resumes.items():
        metrics.resume(outcome, n)
    for (queue, outcome), n in out.claims.items():
        metrics.claim(queue, outcome, n)
