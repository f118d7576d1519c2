"""``group_offsets`` waits out a group coordinator that is not ready, and nothing else."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import GroupAuthorizationFailedError, GroupCoordinatorNotAvailableError
from aiokafka.structs import OffsetAndMetadata

from symfonic_stream.kafka.admin import group_offsets
from symfonic_stream.kafka.retry import KafkaUnavailable


class _ScriptedAdmin:
    """Answers ``list_consumer_group_offsets`` from a script of errors and results."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def list_consumer_group_offsets(self, group: str) -> Any:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_retries_while_the_coordinator_is_not_available() -> None:
    tp = TopicPartition("t", 0)
    admin = _ScriptedAdmin(
        GroupCoordinatorNotAvailableError(),
        GroupCoordinatorNotAvailableError(),
        {tp: OffsetAndMetadata(42, "")},
    )
    assert await group_offsets(admin, "g") == {tp: 42}  # type: ignore[arg-type]
    assert admin.calls == 3


async def test_a_non_retriable_error_is_raised_at_once() -> None:
    admin = _ScriptedAdmin(GroupAuthorizationFailedError(), {})
    with pytest.raises(GroupAuthorizationFailedError):
        await group_offsets(admin, "g")  # type: ignore[arg-type]
    assert admin.calls == 1


async def test_gives_up_after_the_bound() -> None:
    admin = _ScriptedAdmin(*[GroupCoordinatorNotAvailableError() for _ in range(50)])
    with pytest.raises(KafkaUnavailable, match="GroupCoordinatorNotAvailableError"):
        await group_offsets(admin, "g", within_s=0.25)  # type: ignore[arg-type]
    assert 2 <= admin.calls < 50
