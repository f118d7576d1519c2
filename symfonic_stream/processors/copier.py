"""The copier: every record of the raw topic, copied unchanged to one output topic (its trace
headers checked: docs/metrics.md, "Tracing").

No decoding and no state: what it costs is the engine's cost alone (consume, one
transaction per partition batch, produce), which makes it the benchmark baseline, and its
output is trivially checkable, which makes it the engine's test processor.
"""

from __future__ import annotations

from symfonic_stream.engine.processor import Collector, InputRecord, OutputRecord, Stateless
from symfonic_stream.models.trace import without_trace

#: ``OutputRecord.record_type`` of a copied record (the records-out metric label).
RECORD_TYPE = "copy"
#: The copier reads nothing: the ``type`` of every record in.
INPUT_TYPE = "raw"


class Copier(Stateless):
    """Copies key, value and headers of each record to ``output_topic`` (its trace headers
    checked: :meth:`Collector.emit` carries the valid ones, an invalid one is dropped)."""

    def __init__(self, output_topic: str) -> None:
        self.output_topic = output_topic

    def process(self, record: InputRecord, now: float, out: Collector) -> None:
        out.count_input(INPUT_TYPE)
        out.emit(
            OutputRecord(
                topic=self.output_topic,
                key=record.key,
                value=record.value,
                record_type=RECORD_TYPE,
                # The producer's timestamp stands in for the kernel's: end-to-end latency.
                source_ts=record.timestamp_ms / 1000 if record.timestamp_ms > 0 else None,
                headers=without_trace(record.headers) if record.headers else (),
            )
        )
