"""Waiting out Kafka, and never asking it to create a topic (issue 13), without a broker."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    LeaderNotAvailableError,
    NodeNotReadyError,
    TopicAuthorizationFailedError,
)
from aiokafka.protocol.metadata import MetadataRequest, MetadataRequest_v4, MetadataRequest_v5

import symfonic_stream.kafka  # noqa: F401  (applies the metadata guard)
from symfonic_stream.kafka.no_auto_create import metadata_allows_auto_creation
from symfonic_stream.kafka.retry import (
    Attempt,
    KafkaUnavailable,
    error_text,
    is_transient,
    retrying,
    transient_code,
)
from symfonic_stream.observability.health import HealthState


def test_no_metadata_request_asks_the_broker_to_create_a_topic() -> None:
    assert metadata_allows_auto_creation(4) is False
    assert metadata_allows_auto_creation(5) is False
    # What aiokafka's client and admin build (topics given, flag left out) asks for nothing.
    for struct in (MetadataRequest_v4, MetadataRequest_v5):
        built: Any = MetadataRequest(["t"]).build(struct)
        assert built.allow_auto_topic_creation is False
    # The workaround only changes the default: an explicit request still reaches the broker.
    explicit: Any = MetadataRequest(["t"], True).build(MetadataRequest_v5)
    assert explicit.allow_auto_topic_creation is True


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (KafkaConnectionError("gone"), True),
        (NodeNotReadyError("node 2"), True),
        (LeaderNotAvailableError(), True),
        (TimeoutError(), True),
        (TopicAuthorizationFailedError(), False),
        (ValueError("bug"), False),
    ],
)
def test_which_errors_mean_not_now(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


def test_per_topic_codes_worth_asking_again() -> None:
    assert transient_code(5)  # LEADER_NOT_AVAILABLE
    assert transient_code(41)  # NOT_CONTROLLER
    assert not transient_code(29)  # TOPIC_AUTHORIZATION_FAILED


def test_error_text_names_the_error_once() -> None:
    assert error_text(KafkaConnectionError("no route")) == "KafkaConnectionError: no route"
    assert error_text(ValueError("x")) == "ValueError: x"
    assert error_text(TimeoutError()) == "TimeoutError"


async def test_retrying_waits_out_transient_errors_and_reports_each_attempt() -> None:
    answers: list[Any] = [KafkaConnectionError("down"), NodeNotReadyError("node 2"), "ok"]
    heard: list[Attempt] = []

    async def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    # A callable returning an awaitable, as Admin.call passes (not a coroutine function).
    assert await retrying("asking", lambda: call(), timeout_s=10, on_wait=heard.append) == "ok"
    assert [a.number for a in heard] == [1, 2]
    assert [type(a.error) for a in heard] == [KafkaConnectionError, NodeNotReadyError]
    assert all(a.retry_in_s > 0 for a in heard)
    assert heard[1].describe().startswith("asking: attempt 2 failed (NodeNotReadyError")


async def test_retrying_raises_an_answer_at_once() -> None:
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise TopicAuthorizationFailedError()

    with pytest.raises(TopicAuthorizationFailedError):
        await retrying("asking", call, timeout_s=10)
    assert calls == 1


async def test_retrying_gives_up_after_its_bound_naming_what_and_the_last_error() -> None:
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise KafkaConnectionError("refused")

    with pytest.raises(KafkaUnavailable, match=r"^asking: no answer in \d+ s, \d+ attempts "
                       r"\(last: KafkaConnectionError: refused\); "
                       r"SYMFONIC_STARTUP_TIMEOUT_S=0.6 is how long"):
        await retrying("asking", call, timeout_s=0.6, setting="SYMFONIC_STARTUP_TIMEOUT_S=0.6")
    assert calls >= 2


def test_aiokafkas_line_per_failed_bootstrap_gives_its_cause_to_ours() -> None:
    """aiokafka logs each address it could not bootstrap from, unprefixed, then raises an
    error naming none: the line is dropped once clients are made, and its cause named."""
    import logging

    from aiokafka.errors import KafkaConnectionError

    from symfonic_stream.config import Settings
    from symfonic_stream.kafka.clients import client_kwargs
    from symfonic_stream.kafka.retry import error_text

    client_kwargs(Settings(), "test")  # every client is made from these
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    aiokafka_log = logging.getLogger("aiokafka")
    aiokafka_log.addHandler(handler)
    try:
        aiokafka_log.error('Unable connect to "%s:%s": %s', "127.0.0.1", 9,
                           ConnectionRefusedError(111, "Connect call failed"))
    finally:
        aiokafka_log.removeHandler(handler)
    assert seen == []
    failed = KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9, 2)]")
    assert error_text(failed) == "127.0.0.1:9: [Errno 111] Connect call failed"


def test_readyz_reason_is_one_bounded_line_and_cleared_when_ready() -> None:
    health = HealthState()
    assert not health.ready and health.reason == "starting"
    health.set_ready(False, "waiting for Kafka:\n" + "x" * 2000)
    assert "\n" not in health.reason and len(health.reason) == 500
    health.set_ready(True, "ignored")
    assert health.ready and health.reason == ""
    health.set_ready(False)
    assert health.reason == "not ready"
