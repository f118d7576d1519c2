"""``schemas register``: every topic's value schema (:mod:`.subjects`) under its subject in a
schema registry, with the compatibility level of SYMFONIC_SCHEMA_REGISTRY_COMPATIBILITY, each
subject reported as registered, unchanged or incompatible (docs/schema-registry.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from symfonic_stream.config import Settings
from symfonic_stream.kafka.schema_registry import SchemaRegistry, subject_of

Outcome = Literal["registered", "unchanged", "incompatible"]


@dataclass(frozen=True, slots=True)
class SubjectReport:
    """What became of one subject."""

    subject: str
    outcome: Outcome
    #: The schema's id (None when incompatible: nothing was registered).
    schema_id: int | None = None
    #: The registry's reasons, when incompatible.
    reasons: tuple[str, ...] = ()

    def line(self) -> str:
        if self.outcome == "incompatible":
            why = "; ".join(self.reasons) or "the registry gave no reason"
            return f"incompatible {self.subject}: {why}"
        return f"{self.outcome} {self.subject} (id {self.schema_id})"


async def register(settings: Settings, schemas: Mapping[str, str]) -> list[SubjectReport]:
    """Each topic's schema of ``schemas`` (topic → text) under ``<topic>-value``: the subject's
    compatibility level set, then nothing when the registry already holds the schema, else the
    registry's compatibility check against the latest version, then the registration when it
    passes. An incompatible schema is never registered."""
    reports = []
    level = settings.schema_registry_compatibility
    async with SchemaRegistry(settings) as registry:
        for topic, schema in schemas.items():
            subject = subject_of(topic)
            await registry.set_compatibility(subject, level)
            known = await registry.lookup(subject, schema)
            if known is not None:
                reports.append(SubjectReport(subject, "unchanged", known))
                continue
            verdict = await registry.check(subject, schema)
            if not verdict.compatible:
                reports.append(SubjectReport(subject, "incompatible", reasons=verdict.reasons))
                continue
            reports.append(SubjectReport(subject, "registered",
                                         await registry.register(subject, schema)))
    return reports
