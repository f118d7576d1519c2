"""What the engine refuses before asking the broker (``kafka/group_fencing.py``).

aiokafka forgets its generation (-1) and member id ("") when it learns its membership was
lost, then calls the revocation listener. The coordinator takes offsets with those without
any check, as a commit from outside the group, so a zombie's would commit: they are
refused here, before a request is sent. The broker's side is
tests/integration/test_group_fencing.py.
"""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from symfonic_stream.kafka.group import GenerationFenced, GroupMetadata
from symfonic_stream.kafka.producer import send_offsets_fenced


class _Untouchable:
    """A producer any use of which fails the test."""

    def __getattr__(self, name: str) -> None:
        raise AssertionError(f"the producer was used: {name}")


@pytest.mark.parametrize(("generation", "member"), [(-1, ""), (-1, "m-1"), (3, "")])
async def test_offsets_of_a_member_without_a_generation_are_refused_unsent(
    generation: int, member: str
) -> None:
    lost = GroupMetadata("group", generation, member)
    assert not lost.in_generation
    with pytest.raises(GenerationFenced, match="membership was lost"):
        await send_offsets_fenced(_Untouchable(),  # type: ignore[arg-type]
                                  {TopicPartition("t", 0): 5}, lost)


def test_a_member_of_a_generation_is_in_it() -> None:
    assert GroupMetadata("group", 0, "m-1").in_generation
    assert GroupMetadata("group", 7, "m-1", "pod-0").in_generation
