"""``symfonic-stream acls``: print (or create) the ACLs each principal needs, and no more.

The plan comes from :mod:`symfonic_stream.app.acls` (derived from the topologies). Printed
as ``kafka-acls.sh --add`` lines, one per principal and resource pattern; ``--apply``
creates them through the admin API as the configured user (a super user, or one allowed to
Alter the cluster), idempotently: an ACL that exists already is not an error.

aiokafka's admin client (0.14) has no ``create_acls``, but aiokafka ships the CreateAcls
request's wire format (``aiokafka.protocol.admin.CreateAclsRequest_v1``); its request
builder sends one ACL per request, so a small builder here sends the whole plan in one.

Exit status: 0 printed or created; 1 Kafka refused or could not be reached; 2 bad usage.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

import click
from aiokafka.errors import KafkaError

from symfonic_stream.app.acls import (
    WILDCARD,
    AclBinding,
    AclPlan,
    AclPlanError,
    ReviewerSpec,
    build_plan,
    kafka_acls_command,
    plan_names,
)
from symfonic_stream.cli.common import kafka_help
from symfonic_stream.config import ConfigError, Settings, load_settings
from symfonic_stream.consumers import deployed_names
from symfonic_stream.kafka.admin import Admin
from symfonic_stream.kafka.retry import KafkaUnavailable

EXIT_KAFKA = 1
EXIT_USAGE = 2

# Kafka's wire codes (org.apache.kafka.common.resource / acl).
_RESOURCE_CODE = {"TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5}
_PATTERN_CODE = {"LITERAL": 3, "PREFIXED": 4}
_OPERATION_CODE = {"READ": 3, "WRITE": 4, "CREATE": 5, "DESCRIBE": 8, "DESCRIBE_CONFIGS": 10,
                   "IDEMPOTENT_WRITE": 12}
_ALLOW = 3


class AclError(Exception):
    """The broker refused to create an ACL."""


def _create_acls_request(bindings: Sequence[AclBinding]) -> Any:
    from aiokafka.errors import IncompatibleBrokerVersion
    from aiokafka.protocol.admin import (
        CreateAclsRequest_v0,
        CreateAclsRequest_v1,
    )
    from aiokafka.protocol.api import Request

    creations = [
        (_RESOURCE_CODE[b.resource_type], b.resource_name, _PATTERN_CODE[b.pattern],
         b.principal, "*", _OPERATION_CODE[b.operation], _ALLOW)
        for b in bindings
    ]

    class CreateAcls(Request[CreateAclsRequest_v0 | CreateAclsRequest_v1]):  # type: ignore[misc]
        API_KEY = 30

        def build(self, struct: Any) -> Any:
            # v0 has no pattern type: every ACL would be LITERAL, prefixed ones silently wrong.
            if struct.API_VERSION < 1:
                raise IncompatibleBrokerVersion("CreateAcls v1 (Kafka 2.0+) is needed")
            return struct(creations)

    return CreateAcls()


async def apply_plan(settings: Settings, plan: AclPlan) -> int:
    """Create every binding of ``plan``; returns how many. Raises :class:`AclError`."""
    from aiokafka.errors import for_code

    request = _create_acls_request(plan.bindings)
    async with Admin(settings) as admin:
        # A random live broker takes it (KRaft forwards it to the controller); CreateAcls is
        # idempotent, so the retries of a broker that does not answer are safe.
        response = await admin.call("creating ACLs", lambda c: c._send_request(request))
    refused = [
        f"{b.principal} {b.operation} {b.resource_type} {b.pattern} {b.resource_name}: "
        f"{for_code(code).__name__} {message or ''}".rstrip()
        for b, (code, message) in zip(plan.bindings, response.creation_responses, strict=True)
        if code != 0
    ]
    if refused:
        raise AclError("the broker refused: " + "; ".join(refused))
    return len(plan.bindings)


def _principals(pairs: Sequence[str]) -> dict[str, str]:
    chosen: dict[str, str] = {}
    for pair in pairs:
        key, sep, principal = pair.partition("=")
        if not sep or not key:
            raise AclPlanError(f"--principal {pair!r}: expected CONSUMER=User:NAME "
                               "or reviewer:TENANT=User:NAME")
        chosen[key] = principal  # checked by build_plan, wildcards too
    return chosen


@click.command("acls", epilog=kafka_help())
@click.option("--consumer", "consumers", multiple=True, type=click.Choice(plan_names()),
              help="A consumer (or the gateway) whose ACLs to print (repeatable; default: "
                   "every consumer of a deployment).")
@click.option("--reviewer", "reviewers", multiple=True, metavar="TENANT[:QUEUE]",
              help="A human-review tool of TENANT (all its queues, or QUEUE only); repeatable.")
@click.option("--principal", "principals", multiple=True, metavar="KEY=User:NAME",
              help="The principal of a consumer (typed=User:x) or a reviewer "
                   "(reviewer:acme=User:y); default User:<prefix>-<consumer>, "
                   "User:reviewer-<tenant>.")
@click.option("--allow-wildcard", is_flag=True,
              help="Accept a --principal of every user (User:*); refused without it.")
@click.option("--no-consumers", is_flag=True, help="Only the --reviewer principals.")
@click.option("--command-config", metavar="FILE",
              help="Printed into each kafka-acls.sh line (the admin's client properties).")
@click.option("--apply", "apply_", is_flag=True,
              help="Create the ACLs through the admin API (SYMFONIC_* as the admin user).")
def command(consumers: tuple[str, ...], reviewers: tuple[str, ...],
            principals: tuple[str, ...], allow_wildcard: bool, no_consumers: bool,
            command_config: str | None, apply_: bool) -> None:
    """Print the least-privilege ACLs of the consumers (and reviewers) as kafka-acls.sh lines.

    Topic, group and transactional-id names follow SYMFONIC_TOPIC_PREFIX, the routing rules
    and SYMFONIC_TENANT_QUEUES, as the consumers themselves do. See docs/security.md.
    """
    try:
        settings = load_settings().for_process(command=True)  # (--apply waits seconds)
        chosen = () if no_consumers else (consumers or deployed_names())
        plan = build_plan(settings, chosen, [ReviewerSpec.parse(r) for r in reviewers],
                          _principals(principals), allow_wildcard)
    except (ConfigError, AclPlanError) as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except Exception as exc:  # the routing rules file, read by the router's topology
        click.echo(f"symfonic-stream: cannot build the ACL plan: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    for principal in plan.principals():
        kind, _, name = principal.partition(":")
        if name == WILDCARD:
            click.echo(f"symfonic-stream: warning: {principal} grants to every {kind} "
                       "(--allow-wildcard)", err=True)
    if not apply_:
        for grant in plan.grants():
            click.echo(kafka_acls_command(grant, settings.bootstrap_servers, command_config))
        return
    try:
        created = asyncio.run(apply_plan(settings, plan))
    except (AclError, KafkaUnavailable, KafkaError, OSError) as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_KAFKA)
    click.echo(f"created {created} ACLs for {', '.join(plan.principals())} "
               f"on {settings.bootstrap_servers}")
