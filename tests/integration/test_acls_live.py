"""Least privilege on a real authorizer (issue 17): the ACL plan is enough, and no more.

Runs against ``scripts/kafka.sh auth-start`` (``make test-acls`` starts it fresh and stops it):
a broker with ``StandardAuthorizer`` and ``allow.everyone.if.no.acl.found=false``, whose
SCRAM users are ``admin`` (super user), one per consumer and two reviewers. The test makes
a deployment as admin (``topics ensure``, ``symfonic-stream acls --apply``), then:

- every consumer runs end to end as its own user with only its ACLs: the projectors
  project, the pause router routes tickets (creating a new tenant's queue on use), a
  reviewer reads its ticket and answers, and the resumes process (intake and validator)
  gives the verdict;
- the broker refuses a reviewer what is not its own (the registrations, another tenant's
  queue, the verdicts, another group) and a consumer what is outside its plan.

``SYMFONIC_BOOTSTRAP_SERVERS`` is the broker's probe listener (anonymous, no rights): the
session fixtures of conftest.py list topics there and see none.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from pydantic import SecretStr

from scripts.kafka.auth import REVIEWER_TENANTS
from symfonic_stream.config import Settings
from symfonic_stream.consumers import deployed_names
from symfonic_stream.kafka.admin import ensure_topics, partition_counts
from symfonic_stream.kafka.clients import client_kwargs, plain_producer_kwargs
from symfonic_stream.kafka.specs import topic_spec
from symfonic_stream.models.names import TopicNames
from symfonic_stream.models.pauses import Ticket
from symfonic_stream.sdk.reviewer import OutcomesUnavailable, Reviewer

from .conftest import register_name
from .gateway_harness import running_gateway
from .harness import ConsumerProcess, run_cli, unique_prefix

pytestmark = [pytest.mark.slow, pytest.mark.authorizer, pytest.mark.timeout(240)]

KAFKA_SH = Path(__file__).resolve().parents[2] / "scripts" / "kafka.sh"
PARTITIONS = 2
#: The broker's users for the consumers (their default principals under prefix symfonic).
USERS = {consumer: f"symfonic-{consumer}" for consumer in deployed_names()}
GATEWAY_USER = "symfonic-gateway"
GATEWAY_KEY = "an-hs256-key-of-at-least-32-bytes-for-the-acl-test"


def user_env(user: str) -> dict[str, str]:
    """The ``SYMFONIC_*`` client settings of one of the authorizer broker's users."""
    done = subprocess.run([str(KAFKA_SH), "auth-env", user], capture_output=True, text=True,
                          timeout=30, check=False)
    if done.returncode != 0:
        pytest.fail(f"no authorizer broker with user {user}: run `make test-acls` or "
                    f"scripts/kafka.sh auth-start ({done.stderr.strip()})", pytrace=False)
    pairs = (line.split("=", 1) for line in Path(done.stdout.strip()).read_text().splitlines())
    return {key: value for key, value in pairs}


def settings_as(user: str, prefix: str) -> Settings:
    values = {k.removeprefix("SYMFONIC_").lower(): v for k, v in user_env(user).items()}
    return Settings(**values, topic_prefix=prefix, partitions=PARTITIONS,  # type: ignore[arg-type]
                    tenant_queues=True)


def cli_env(user: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    return {**env, **user_env(user), "SYMFONIC_TOPIC_PREFIX": prefix,
            "SYMFONIC_PARTITIONS": str(PARTITIONS), "SYMFONIC_TENANT_QUEUES": "true"}


def consumer_as(consumer: str, prefix: str, log_dir: Path) -> ConsumerProcess:
    """``symfonic-stream run <consumer>`` as its own user."""
    own = {k.removeprefix("SYMFONIC_").lower(): v for k, v in user_env(USERS[consumer]).items()}
    return ConsumerProcess(consumer, prefix, log_dir, partitions=PARTITIONS,
                           tenant_queues="true", **own)


@dataclass(frozen=True)
class Deployment:
    prefix: str
    names: TopicNames
    admin: Settings


def _make_deployment() -> Deployment:
    prefix = unique_prefix()
    register_name(prefix)
    names = TopicNames(prefix)
    admin = settings_as("admin", prefix)
    started = time.monotonic()
    ensured = run_cli(["topics", "ensure"], cli_env("admin", prefix), 120)
    assert ensured.returncode == 0, ensured.stderr
    # The queues of the broker's reviewers' tenants (acme, globex: scripts/kafka/auth.py) exist
    # ahead (as `tenants:` in the rules would make them);
    # initech's is made by the router on its first ticket.
    queues = [names.human_queue("default", tenant) for tenant in REVIEWER_TENANTS]
    report = asyncio.run(ensure_topics(admin, [topic_spec(admin, q, "queue") for q in queues]))
    assert report.ok, report.mismatches
    # Every consumer of the deployment and the gateway (a reader: named, not by default).
    args = ["acls", "--apply", *(arg for t in REVIEWER_TENANTS for arg in ("--reviewer", t))]
    for consumer, user in {**USERS, "gateway": GATEWAY_USER}.items():
        args += ["--consumer", consumer, "--principal", f"{consumer}=User:{user}"]
    applied = run_cli(args, cli_env("admin", prefix), 120)
    assert applied.returncode == 0, applied.stderr
    print(f"deployment {prefix}: topics and {applied.stdout.strip()} "
          f"in {time.monotonic() - started:.1f} s")
    return Deployment(prefix, names, admin)


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    yield _make_deployment()


# --------------------------------------------------------------------------- clients


async def produce_as(settings: Settings, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(**plain_producer_kwargs(settings, "it-acls"))
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, key=key, value=value)
    finally:
        await producer.stop()


async def read_until(settings: Settings, topic: str, count: int, within: float = 60.0,
                     group: str | None = None,
                     until: Callable[[list[bytes]], bool] | None = None) -> list[bytes]:
    """Committed values of ``topic`` (all partitions, from the start) until there are
    ``count`` of them (or ``until`` says so), or ``within`` seconds have passed."""
    enough = until or (lambda values: len(values) >= count)
    consumer = AIOKafkaConsumer(**client_kwargs(settings, "it-acls-read"), group_id=group,
                                isolation_level="read_committed", auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + within
        while not enough(values) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            values.extend(m.value or b"" for ms in batch.values() for m in ms)
    finally:
        await consumer.stop()
    return values


async def wait_for_topic(settings: Settings, topic: str, maker: ConsumerProcess) -> None:
    deadline = time.monotonic() + 60
    while topic not in await partition_counts(settings, [topic]):
        assert time.monotonic() < deadline, f"{topic} was not created\n{maker.log()}"
        await asyncio.sleep(0.5)


def pause_event(run_id: str, tenant: str) -> tuple[bytes, bytes]:
    event: dict[str, Any] = {
        # Now: a ticket older than SYMFONIC_TICKET_MAX_LIFETIME_S goes to the expired queue.
        "run_id": run_id, "index": 0, "kind": "ask_user", "timestamp": time.time(),
        "scope": {"tenant": tenant, "principal": "p"},
        "interrupt": {"name": "ask_user", "kind": "ask_user",
                      "payload": {"questions": [{"q": "ok?"}]}, "token": f"token-{run_id}",
                      "tool_call_id": "call-0", "interrupt_id": f"{run_id}-i0",
                      "run_id": run_id, "session_id": "s", "expires_at": 4_102_444_800.0,
                      "resumable": True},
    }
    return run_id.encode(), orjson.dumps(event)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[list[ConsumerProcess]]:
    processes: list[ConsumerProcess] = []
    yield processes
    for process in processes:
        process.stop()


# --------------------------------------------------------------------------- (a)


def text_events(tag: str, runs: int, indexes: range) -> list[tuple[bytes, bytes]]:
    return [(f"{tag}-{r}".encode(),
             orjson.dumps({"run_id": f"{tag}-{r}", "index": i, "kind": "text_delta",
                           "timestamp": 1.0 + i, "text": "x"}))
            for r in range(runs) for i in indexes]


@pytest.mark.parametrize("projection", ["typed", "chunks"])
async def test_a_projector_runs_with_only_its_acls(
    deployment: Deployment, projection: str, tmp_path: Path, running: list[ConsumerProcess]
) -> None:
    """Projects, then a successor restores the runs' state from the changelog (Read on it,
    which a fresh, empty changelog never needs) and continues their seqs."""
    names = deployment.names
    output = names.stream_events if projection == "typed" else names.stream_chunks

    def mine(values: list[bytes]) -> list[tuple[str, int]]:
        # Only this test's runs: the raw topic also holds the other tests' events.
        out = (orjson.loads(v) for v in values)
        return sorted((o["run_id"], o["seq"]) for o in out if o["run_id"].startswith(projection))

    for number, indexes in enumerate((range(10), range(10, 20))):
        await produce_as(deployment.admin, names.agent_events,
                         text_events(projection, 4, indexes))
        process = consumer_as(projection, deployment.prefix, tmp_path).start()
        running.append(process)
        await process.wait_ready(within=90)
        total = 4 * indexes.stop
        out = await read_until(deployment.admin, output, 0,
                               until=lambda values, total=total: len(mine(values)) >= total)
        expected = sorted((f"{projection}-{r}", i) for r in range(4) for i in range(total // 4))
        assert mine(out) == expected, process.log()
        assert "AuthorizationFailed" not in process.log(), process.log()
        if number == 0:  # SIGTERM: the next one takes over, restoring from the changelog
            await asyncio.to_thread(process.stop)


async def test_pauses_reviewer_and_resumes_run_with_only_their_acls(
    deployment: Deployment, tmp_path: Path, running: list[ConsumerProcess]
) -> None:
    names, prefix = deployment.names, deployment.prefix
    router = consumer_as("pauses", prefix, tmp_path).start()
    resumes = consumer_as("resumes", prefix, tmp_path).start()
    running.extend([router, resumes])
    await produce_as(deployment.admin, names.agent_events,
                     [pause_event("acme-run", "acme"), pause_event("initech-run", "initech")])
    await router.wait_ready(within=90)
    # A new tenant's queue is created by the router on its first ticket (Create, prefixed).
    initech_queue = names.human_queue("default", "initech")
    await wait_for_topic(deployment.admin, initech_queue, router)
    [initech] = await read_until(deployment.admin, initech_queue, 1)
    assert Ticket.model_validate_json(initech).tenant == "initech"
    reviewer = settings_as("reviewer-acme", prefix)
    group = f"{prefix}-review.acme.ui"
    async with Reviewer(group, reviewer, follow_outcomes=False) as tool:
        ticket = await asyncio.wait_for(anext(tool.tickets("default", tenant="acme")), 60)
        assert ticket.run_id == "acme-run"
        with pytest.raises(OutcomesUnavailable):
            await tool.outcome(ticket.ticket_id, timeout_s=1)
        await tool.submit(ticket.ticket_id, ticket.token, {"approved": True}, responder="pat")
        await tool.commit()
    await resumes.wait_ready(within=90)
    [verdict] = await read_until(deployment.admin, names.resumes, 1, within=90)
    assert orjson.loads(verdict)["ticket_id"] == ticket.ticket_id, resumes.log()
    for process in (router, resumes):
        assert "AuthorizationFailed" not in process.log(), process.log()


async def test_the_gateway_answers_for_a_reviewer_with_only_its_acls(
    deployment: Deployment, tmp_path: Path, running: list[ConsumerProcess]
) -> None:
    """The gateway as its own user (acls --consumer gateway): it reads the projections and
    review-tickets, claims a ticket through its console (a write to resume-requests), and
    may not read the verdict topics or the queues."""
    names, prefix = deployment.names, deployment.prefix
    router = consumer_as("pauses", prefix, tmp_path).start()
    resumes = consumer_as("resumes", prefix, tmp_path).start()
    running.extend([router, resumes])
    await produce_as(deployment.admin, names.agent_events, [pause_event("gw-run", "acme")])
    settings = settings_as(GATEWAY_USER, prefix).model_copy(update={
        "gateway_port": 0, "gateway_host": "127.0.0.1", "gateway_auth": "jwt",
        "gateway_jwt_key": SecretStr(GATEWAY_KEY), "gateway_jwt_audience": "acl-test"})
    async with running_gateway(settings) as (gateway, url):
        ticket = await gateway.reviews.wait(
            "acme", lambda: gateway.reviews.get("acme", "gw-run-i0"), 90)
        assert ticket is not None, resumes.log()
        now = int(time.time())
        bearer = jwt.encode({"tenant": "acme", "sub": "pat", "aud": "acl-test",
                             "scope": "runs:read reviews:answer", "queues": ["default"],
                             "iat": now, "exp": now + 300}, GATEWAY_KEY, algorithm="HS256")
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            claimed = await client.post("/v1/reviews/tickets/gw-run-i0/claim",
                                        headers={"Authorization": f"Bearer {bearer}"})
        assert claimed.json()["outcome"] == "claimed", (claimed.text, resumes.log())
    for topic in (names.resumes, names.human_queue("default", "acme"),
                  names.pause_registrations):
        await assert_cannot_read(settings, topic)
    for process in (router, resumes):
        assert "AuthorizationFailed" not in process.log(), process.log()


# --------------------------------------------------------------------------- (b)


async def test_a_reviewer_writes_only_answers_and_reads_only_its_queues(
    deployment: Deployment,
) -> None:
    names, prefix = deployment.names, deployment.prefix
    acme = settings_as("reviewer-acme", prefix)
    await produce_as(deployment.admin, names.human_queue("default", "acme"), [(b"k", b"mine")])
    await produce_as(deployment.admin, names.human_queue("default", "globex"), [(b"k", b"theirs")])
    # Its own queue, with a group of its own.
    mine = await read_until(acme, names.human_queue("default", "acme"), 1,
                            group=f"{prefix}-review.acme.check")
    assert b"mine" in mine
    # Answers: allowed (an idempotent producer, so no IdempotentWrite on the cluster needed).
    await produce_as(acme, names.resume_requests, [(b"t", b"{}")])
    # Not the registrations: only the router and the intake write them.
    with pytest.raises(TopicAuthorizationFailedError):
        await produce_as(acme, names.pause_registrations, [(b"t", b"{}")])
    for foreign in (names.human_queue("default", "globex"), names.resumes,
                    names.resume_rejections, names.agent_events):
        await assert_cannot_read(acme, foreign)
    with pytest.raises(GroupAuthorizationFailedError):
        await read_until(acme, names.human_queue("default", "acme"), 1, within=10,
                         group=names.group("resumes"))


async def assert_cannot_read(settings: Settings, topic: str) -> None:
    consumer = AIOKafkaConsumer(**client_kwargs(settings, "it-acls-denied"), group_id=None,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        # The broker answers TOPIC_AUTHORIZATION_FAILED for the topic's metadata: the
        # client never learns its partitions, let alone reads them.
        with pytest.raises(TopicAuthorizationFailedError):
            await consumer._client._wait_on_metadata(topic)
        assert consumer.partitions_for_topic(topic) is None
    finally:
        await consumer.stop()


# --------------------------------------------------------------------------- (c)


async def test_a_consumer_cannot_go_outside_its_plan(deployment: Deployment) -> None:
    names, prefix = deployment.names, deployment.prefix
    typed = settings_as(USERS["typed"], prefix)
    # Another consumer's output: not even described.
    with pytest.raises(TopicAuthorizationFailedError):
        await produce_as(typed, names.stream_chunks, [(b"k", b"v")])
    # Its own source: readable, but only the kernel writes it (the produce itself refused).
    with pytest.raises(TopicAuthorizationFailedError):
        await produce_as(typed, names.agent_events, [(b"k", b"v")])
    await assert_cannot_read(typed, names.resume_requests)
    # A transactional id outside its prefix.
    producer = AIOKafkaProducer(**client_kwargs(typed, "it-acls-txn"),
                                transactional_id=f"{names.group('chunks')}-stolen")
    try:
        # start() waits for InitProducerId; FindCoordinator for the id is refused first.
        with pytest.raises(TransactionalIdAuthorizationFailed):
            await asyncio.wait_for(producer.start(), 30)
    finally:
        await producer.stop()
