"""A static member leaving its group on purpose: LeaveGroup v3 with its instance id.

A member with a ``group.instance.id`` (static membership, KIP-345) sends no LeaveGroup
when it stops: a restart then gets its partitions back without a rebalance, but a member
that goes for good (a scale-down) holds its partitions unassigned until its session times
out, 10 s by default. aiokafka 0.14 speaks LeaveGroup v0 and v1 only, which name a member
by its member id and cannot remove a static member, so a consumer told to
(``SYMFONIC_LEAVE_GROUP_ON_STOP``) sends v3 itself once it stopped, naming its instance id and
the member id it last had, as Kafka Streams' ``close(leaveGroup=true)`` does (KIP-812). A
successor that already took the instance id over has another member id, and the
coordinator answers FENCED_INSTANCE_ID instead of removing it.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import CoordinationType
from aiokafka.errors import for_code
from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from symfonic_stream.config import Settings
from symfonic_stream.kafka.clients import admin_kwargs
from symfonic_stream.kafka.group_fencing import OneVersion

log = logging.getLogger(__name__)

#: How long a stopping consumer tries to leave before it lets the session timeout do it.
LEAVE_TIMEOUT_S = 5.0
_MEMBER = (("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]  # aiokafka's naming
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("members", Array(*_MEMBER, ("error_code", Int16))),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(("group_id", String("utf-8")), ("members", Array(*_MEMBER)))


class LeaveGroupV3(OneVersion):
    API_KEY = 13


async def leave_group(settings: Settings, group_id: str, instance_id: str,
                      member_id: str) -> bool:
    """Remove this static member from ``group_id``; whether the coordinator did. Through a
    client of its own (the consumer's is stopped by then: a consumer still running would
    rejoin at its next heartbeat). A failure is logged, not raised: the session timeout
    still ends the membership."""
    admin = AIOKafkaAdminClient(**admin_kwargs(settings))
    try:
        async with asyncio.timeout(LEAVE_TIMEOUT_S):
            await admin.start()
            client = admin._client
            node = await client.coordinator_lookup(CoordinationType.GROUP, group_id)
            response = await client.send(node, LeaveGroupV3(
                LeaveGroupRequest_v3, group_id, [(member_id, instance_id)]))
    except Exception as exc:  # (a stop must go on: the session timeout is the fallback)
        log.warning("leaving the group failed; its session timeout will end the membership",
                    extra={"group": group_id, "error": repr(exc)})
        return False
    finally:
        await admin.close()
    errors = [response.error_code, *(member[2] for member in response.members)]
    failed = next((code for code in errors if code != 0), 0)
    if failed:
        log.warning("the coordinator refused to remove this member",
                    extra={"group": group_id, "error": for_code(failed).__name__})
        return False
    log.info("left the group", extra={"group": group_id, "group_instance_id": instance_id})
    return True
