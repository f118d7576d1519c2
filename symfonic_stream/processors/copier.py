"""The copier: every record of the raw topic, copied unchanged to one output topic.

No decoding and no state: what it costs is the engine's cost alone (consume, one
transaction per partition batch, produce), which makes it the benchmark baseline, and its
output is trivially checkable, which makes it the engine's test processor.
"""

from __future__ import annotations

from symfonic_stream.engine.records import Collector, InputRecord, OutputRecord

#: ``OutputRecord.record_type`` of a copied record (the records-out metric label).
RECORD_TYPE = "copy"
#: The copier reads nothing: the ``type`` of every record in.
INPUT_TYPE = "raw"


class Copier:
    """Copies key, value and headers of each record to ``output_topic``."""

    #: Stateless: no state store.
    stores: tuple[()] = ()

    def __init__(self, output_topic: str) -> None:
        self.output_topic = output_topic

    def restored(self) -> None:
        """Stateless: there is never anything to restore."""

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
                headers=record.headers,
            )
        )

    def punctuate(self, now: float, out: Collector) -> None:
        """No timers."""

    def end_of_input(self, out: Collector) -> None:
        """Nothing held back."""

    @property
    def buffered_events(self) -> int:
        return 0

    @property
    def active_runs(self) -> int:
        return 0
