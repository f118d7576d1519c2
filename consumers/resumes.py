"""The resume validator and its intake: humans' answers checked against their tickets before
they reach the kernel (SPEC §7). One process, two engines: the intake appends each answer
to the registrations topic under its ticket id, after the router's registration of it; the
validator reads that topic."""

from __future__ import annotations

from symfonic_stream.config import Settings
from symfonic_stream.consumers.declaration import Consumer, Engine, Resources, Wiring, Write
from symfonic_stream.consumers.projectors import DECODE_SETTINGS
from symfonic_stream.consumers.topics import (
    PAUSE_REGISTRATIONS,
    REGISTERED_ANSWER,
    RESUME_REJECTIONS,
    RESUME_REQUESTS,
    RESUMES,
)
from symfonic_stream.models.names import TopicNames
from symfonic_stream.processors.pauses.intake import ResumeIntake
from symfonic_stream.processors.pauses.validator import ResumeValidator

#: The intake's engine: group ``<prefix>-resume-intake``, stateless.
INTAKE = "resume-intake"


def _intake(settings: Settings, names: TopicNames) -> Wiring:
    decode = settings.decode_limits()
    return Wiring(lambda partition: ResumeIntake(names.pause_registrations, decode))


def _validator(settings: Settings, names: TopicNames) -> Wiring:
    return Wiring(lambda partition: ResumeValidator(
        names, grace_s=settings.closed_run_grace_s, decode=settings.decode_limits(),
        max_lifetime_s=settings.ticket_max_lifetime_s,
        punctuate_budget_s=settings.punctuate_budget_ms / 1000,
        max_answer_bytes=settings.max_answer_bytes,
    ))


RESUMES_CONSUMER = Consumer(
    name="resumes",
    title="the resume validator",
    summary="`<prefix>.resume-requests`, through its intake and `<prefix>.pause-registrations`, "
    "to `<prefix>.resumes` / `<prefix>.resume-rejections`",
    engines=(
        Engine(
            name=INTAKE,
            reads=RESUME_REQUESTS,
            writes=(Write(PAUSE_REGISTRATIONS,
                          "Each answer, keyed by its ticket id, after its registration.",
                          (REGISTERED_ANSWER,)),),
            wire=_intake,
            settings=DECODE_SETTINGS,
        ),
        Engine(
            name="resumes",
            reads=PAUSE_REGISTRATIONS,
            writes=(Write(RESUMES, "Accepted answers, keyed by run id."),
                    Write(RESUME_REJECTIONS, "Refused answers, with the reason.")),
            wire=_validator,
            stores=("tenant-ticket", "ticket"),
            settings=("closed_run_grace_s", "ticket_max_lifetime_s", "punctuate_budget_ms",
                      "max_answer_bytes", *DECODE_SETTINGS),
        ),
    ),
    scales_on="resumes",
    resources=Resources(cpu="50m", memory="192Mi", memory_limit="384Mi"),
)
