"""Waiting out a broker that is down or restarting: which errors mean "not now", and how
long to keep asking.

A healthy cluster of three with one broker in a rolling restart answers most requests, but
not those aiokafka happens to send to the missing node: the admin client picks a random
broker for DescribeConfigs and Metadata, and a node that is down gives ``NodeNotReadyError``
or a connection error. A consumer started before its Kafka (the usual order in Kubernetes)
sees the same errors from every node. Neither is an answer, and neither may end the process:
:func:`retrying` repeats the call with a growing, jittered back-off (each attempt may land on
another, live node) until it succeeds, fails with an error that is an answer, or its
deadline passes. ``on_wait`` hears about every failed attempt, so the caller can log one line
and let ``/readyz`` say why it waits. The loop is tenacity's; what is Kafka's (which errors
mean "not now", the words when giving up) is here.

How long a start waits is the settings' (``Settings.startup_wait_s``: a service's minutes, a
command's seconds); the error when it gives up names that setting and what it tried. aiokafka
logs every failed bootstrap connection itself, unprefixed, and then raises an error that
names no cause: :func:`fold_bootstrap_noise` drops those lines and keeps their cause for the
one line of ours (:func:`error_text`).
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, NoReturn, TypeVar

from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    RequestTimedOutError,
    for_code,
)
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_before_delay

T = TypeVar("T")

#: First and largest delay between two attempts (seconds); jittered by up to a quarter.
FIRST_BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0


class KafkaUnavailable(Exception):
    """Kafka did not answer within the deadline; the message says what was tried."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One failed attempt, as :func:`retrying` reports it to ``on_wait``."""

    what: str
    number: int
    error: BaseException
    retry_in_s: float
    waited_s: float

    def describe(self) -> str:
        return (
            f"{self.what}: attempt {self.number} failed ({error_text(self.error)}); "
            f"retrying in {self.retry_in_s:.1f} s"
        )


#: aiokafka's own lines for a failed bootstrap connection (aiokafka/client.py), by format.
_BOOTSTRAP_LINES: Final = ('Unable connect to "%s:%s": %s',
                           'Unable to request metadata from "%s:%s": %s')
#: The text aiokafka's KafkaConnectionError has when no bootstrap address answered.
_NO_BOOTSTRAP: Final = "Unable to bootstrap from"
#: Each bootstrap address's last failure ("host:port" -> its cause), as aiokafka logged it.
_bootstrap_causes: dict[str, str] = {}


class _BootstrapNoise(logging.Filter):
    """Drops aiokafka's line per failed bootstrap address, keeping its cause."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg not in _BOOTSTRAP_LINES or not isinstance(record.args, tuple):
            return True
        host, port, cause = record.args
        _bootstrap_causes[f"{host}:{port}"] = str(cause)
        return False


_NOISE_FILTER: Final = _BootstrapNoise()


def fold_bootstrap_noise() -> None:
    """From now on, aiokafka's lines for failed bootstrap connections are not logged; their
    causes go into the error of :func:`retrying` instead (idempotent). Called where every
    client's settings are built (``symfonic_stream.kafka.clients``)."""
    client_log = logging.getLogger("aiokafka")  # (aiokafka/client.py logs on it)
    if _NOISE_FILTER not in client_log.filters:
        client_log.addFilter(_NOISE_FILTER)


def error_text(error: BaseException) -> str:
    """``Name: message`` once (aiokafka's errors already start their text with their name);
    for a bootstrap that failed, what each address answered instead of aiokafka's list of
    address tuples."""
    name, text = type(error).__name__, str(error)
    if _NO_BOOTSTRAP in text:  # its addresses, as aiokafka's tuples: ('host', port, family)
        tried = [f"{host}:{port}" for host, port in re.findall(r"\('([^']*)', (\d+)", text)]
        causes = [f"{where}: {_bootstrap_causes[where]}" for where in tried
                  if where in _bootstrap_causes]
        if causes:
            return "; ".join(causes)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


OnWait = Callable[[Attempt], None]


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` says "not now" (a node down, a leader or coordinator moving)."""
    if isinstance(error, KafkaConnectionError | NodeNotReadyError | RequestTimedOutError):
        return True
    if isinstance(error, KafkaTimeoutError | TimeoutError | ConnectionError):
        return True
    return isinstance(error, KafkaError) and bool(getattr(error, "retriable", False))


def transient_code(code: int) -> bool:
    """Whether a per-topic error code in a response is worth asking again (e.g.
    LEADER_NOT_AVAILABLE right after a topic was created, NOT_CONTROLLER while it moves)."""
    return bool(getattr(for_code(code), "retriable", False))


def _backoff(state: RetryCallState) -> float:
    """Doubling from FIRST_BACKOFF_S up to MAX_BACKOFF_S, less up to a quarter (jitter)."""
    base: float = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2.0 ** (state.attempt_number - 1))
    return base * random.uniform(0.75, 1.0)


async def retrying(
    what: str,
    call: Callable[[], Awaitable[T]],
    *,
    timeout_s: float,
    on_wait: OnWait | None = None,
    setting: str = "",
) -> T:
    """``await call()`` until it succeeds, raises a non-transient error (raised as is), or
    the next wait would end past ``timeout_s`` (then :class:`KafkaUnavailable`, naming
    ``what``, the last error and ``setting``: the setting that chose ``timeout_s``, as
    ``NAME=value``)."""

    def failed(state: RetryCallState) -> BaseException:
        assert state.outcome is not None
        error = state.outcome.exception()
        assert error is not None
        return error

    def heard(state: RetryCallState) -> None:
        if on_wait is not None:
            on_wait(Attempt(what, state.attempt_number, failed(state), state.upcoming_sleep,
                            state.seconds_since_start or 0.0))

    def give_up(state: RetryCallState) -> NoReturn:
        waited = f"{state.seconds_since_start or 0.0:.0f} s"
        how_long = f"; {setting} is how long it waits" if setting else ""
        raise KafkaUnavailable(
            f"{what}: no answer in {waited}, {state.attempt_number} attempts "
            f"(last: {error_text(failed(state))}){how_long}"
        ) from None

    async def attempt() -> T:
        # A coroutine function: tenacity calls anything else (a lambda returning an
        # awaitable, as callers pass) as synchronous and hands back the unawaited result.
        return await call()

    attempts = AsyncRetrying(retry=retry_if_exception(is_transient), wait=_backoff,
                             stop=stop_before_delay(timeout_s), before_sleep=heard,
                             retry_error_callback=give_up)
    return await attempts(attempt)
