"""The kernel's side of a pause: the accepted answers on ``<prefix>.resumes``, each checked to
be its own run's (contract §9).

    owners = {"run-42": "acme"}                      # whose each of my runs is
    mine = lambda run_id: owners.get(run_id, Unowned.NOT_MINE)
    async with ResumeReader("kernel-1", mine) as resumes:    # SYMFONIC_* from the env
        async for resume in resumes:
            continue_run(resume.run_id, resume.interrupt_id, resume.answer)
            await resumes.commit()                  # handled: not given again

A run id belongs to one tenant, and the resume validator writes every resume with its run's
tenant as a field and as the ``symfonic-tenant`` header. A resume is given to the kernel only
when both say the tenant the kernel knows the run by (``owner``, called with the run id;
``None`` for a run of no tenant, ``Unowned.NOT_MINE`` for a run it does not know): a resume of
a run id the kernel does not own, or written by anything but the validator, is skipped and
counted (:attr:`ResumeReader.skipped`), never taken for an answer to one of its runs. (A
kernel that serves one tenant passes ``lambda run_id: "acme"``; one that keeps a map passes
``lambda run_id: owners.get(run_id, Unowned.NOT_MINE)``.)

The topic is read ``read_committed`` in the kernel's own consumer group from its committed
position; :meth:`ResumeReader.commit` marks what was given so far as handled. Each resume
has its record's W3C trace context as ``resume.trace_context`` (docs/metrics.md, "Tracing").
"""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaConnectionError
from pydantic import ValidationError

from symfonic_stream.config import Settings, load_settings
from symfonic_stream.kafka.clients import client_kwargs
from symfonic_stream.kafka.retry import KafkaUnavailable
from symfonic_stream.models.headers import TENANT_HEADER
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import Resume

__all__ = ["ResumeReader", "Unowned", "resume_for"]

log = logging.getLogger(__name__)

class Unowned(enum.Enum):
    """What ``owner`` returns for a run the kernel does not know (no tenant name, since a
    hostile kernel may name its tenant anything: no resume carries this)."""

    NOT_MINE = enum.auto()


#: The tenant the kernel knows a run by (None: a run of no tenant), or ``NOT_MINE``.
Owner = Callable[[str], "str | Unowned | None"]

Headers = Sequence[tuple[str, bytes | None]]


def resume_for(value: bytes | None, headers: Headers | None, owner: Owner) -> Resume | None:
    """The resume in a record of ``<prefix>.resumes`` when it is its run's owner's: its
    ``tenant`` field and its ``symfonic-tenant`` header both ``owner(run_id)``; None for
    anything else (another tenant's run id, a record that is no resume, one whose header
    and field disagree)."""
    try:
        resume = Resume.model_validate_json(value or b"")
    except ValidationError:
        return None
    header = [v for name, v in headers or () if name == TENANT_HEADER]
    said = header[0].decode("utf-8", "replace") if header and header[0] is not None else None
    if len(header) > 1 or said != resume.tenant or owner(resume.run_id) != resume.tenant:
        return None
    resume.traced(headers)
    return resume


class ResumeReader:
    """The accepted answers to one kernel's pauses: an async iterator of
    :class:`~symfonic_stream.models.pauses.Resume`, and an async context manager."""

    def __init__(self, group_id: str, owner: Owner, settings: Settings | None = None) -> None:
        self._settings = settings or load_settings()
        self._topic = TopicNames(self._settings.topic_prefix).resumes
        self._group_id = group_id
        self._owner = owner
        self._consumer: AIOKafkaConsumer | None = None
        #: Resumes read and not given: another tenant's run id, or not the validator's.
        self.skipped = 0

    async def __aenter__(self) -> ResumeReader:
        consumer = AIOKafkaConsumer(
            self._topic,
            **client_kwargs(self._settings, f"resumes-{self._group_id}"),
            group_id=self._group_id,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        try:
            await consumer.start()
        except KafkaConnectionError as exc:
            await consumer.stop()
            raise KafkaUnavailable(f"resume reader {self._group_id}: {exc}") from exc
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, traceback: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    def __aiter__(self) -> AsyncIterator[Resume]:
        return self._resumes()

    async def _resumes(self) -> AsyncIterator[Resume]:
        assert self._consumer is not None, "use `async with ResumeReader(...)`"
        async for message in self._consumer:
            resume = resume_for(message.value, message.headers, self._owner)
            if resume is None:
                self.skipped += 1
                # (no run id in the line: the offset finds the record)
                log.warning("a record on the resumes topic that is not one of this kernel's "
                            "runs' resumes: skipped", extra={
                                "topic": message.topic, "partition": message.partition,
                                "offset": message.offset})
                continue
            yield resume

    async def commit(self) -> None:
        """Mark every resume given so far (and those skipped before it) as handled."""
        if self._consumer is not None:
            await self._consumer.commit()
