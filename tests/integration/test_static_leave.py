"""A static member (``SYMFONIC_GROUP_INSTANCE_ID``) told to leave when it stops
(``SYMFONIC_LEAVE_GROUP_ON_STOP``) is out of its group when its process has exited, so its
partitions move at once; one not told stays a member until its session times out (10 s),
so that a restart finds its partitions waiting (``kafka/leave_group.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from symfonic_stream.models.names import TopicNames

from .harness import (
    ConsumerProcess,
    create_topics,
    prefix_fixture,  # noqa: F401  (provides the ``prefix`` fixture)
)
from .observe import describe_group


@pytest.mark.parametrize("leave", [True, False])
async def test_a_static_member_leaves_its_group_on_stop_only_when_told(
    bootstrap_servers: str, prefix: str, tmp_path: Path, leave: bool
) -> None:
    await create_topics(prefix, with_copier=False)
    group = TopicNames(prefix).group("typed")
    first = ConsumerProcess("typed", prefix, tmp_path, name="-a", group_instance_id="a",
                            leave_group_on_stop=leave)
    second = ConsumerProcess("typed", prefix, tmp_path, name="-b", group_instance_id="b")
    try:
        await first.start().wait_ready()
        await second.start().wait_ready()
        before = await describe_group(bootstrap_servers, group)
        assert sorted(m.split("-", 1)[0] for m in before.members) == ["a", "b"], before
        first.terminate()
        assert await first.wait(within=30) == 0, first.log()
        # Right after the exit, well inside the 10 s session: only a leave removed it.
        after = await describe_group(bootstrap_servers, group)
        members = sorted(m.split("-", 1)[0] for m in after.members)
        assert members == (["b"] if leave else ["a", "b"]), (after, first.log(tail=30))
        assert ("left the group" in first.log(tail=30)) is leave
    finally:
        first.stop()
        second.stop()
