"""The copier: the raw topic copied unchanged, the engine's cost alone (the benchmark
baseline, and the engine's test processor). ``run copier`` starts it; no deployment has it."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Consumer, Engine, Wiring, Write
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.topics import AGENT_EVENTS, COPIER_OUTPUT
from symfonic_stream.processors.copier import Copier


def _copier(settings: Settings, names: TopicNames) -> Wiring:
    output = names.copier_output
    return Wiring(lambda partition: Copier(output))


COPIER = Consumer(
    name="copier",
    title="the copier",
    summary="the raw topic copied unchanged to `<prefix>.copier-output` (benchmarks)",
    engines=(Engine(name="copier", reads=AGENT_EVENTS,
                    writes=(Write(COPIER_OUTPUT, "Every record, unchanged."),), wire=_copier),),
    scales_on="copier",
    metrics_port=9404,
    resources=None,  # a benchmark baseline: no deployment has it
)
