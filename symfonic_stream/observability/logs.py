"""JSON logs: one object per line on stderr, with secrets redacted (SPEC §8).

Each line has ``time`` (ISO-8601 UTC, milliseconds), ``level``, ``consumer`` (and ``worker``,
the index of a worker process of ``run --workers N``), ``logger`` and ``message``, then
whatever context the call passed with ``extra={...}`` (topic, partition, offset, …), and
``exception`` / ``stack`` when present. Usage::

    log.warning("dead-lettered", extra={"topic": t, "partition": p, "offset": o})

Redaction runs on every line, because a secret reaches a log through code nobody reviews for
it (an exception message, a config dump): any key containing ``password``, ``secret``,
``token`` or ``sasl`` has its value replaced with ``<redacted>``, at any depth, and
``key=value`` / ``key: value`` pairs with such keys are redacted inside text too. This
over-redacts (``input_tokens`` too) by design: a missing number in a log is cheap, a
leaked credential is not.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any, Final

import orjson

REDACTED: Final = "<redacted>"
_SECRET_KEY = re.compile(r"password|secret|token|sasl", re.IGNORECASE)
# ``password=x``, ``sasl_password: 'x'``, ``"token": "x"``: the key, its separator, the value.
_SECRET_PAIR = re.compile(
    r"""(?P<key>[\w.-]*(?:password|secret|token|sasl)[\w.-]*["']?\s*[=:]\s*)"""
    r"""(?P<value>"[^"]*"|'[^']*'|[^\s,;&}\]]+)""",
    re.IGNORECASE,
)
_MAX_DEPTH: Final = 8

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD_ATTRS: Final = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)
_OWN_FIELDS: Final = ("time", "level", "consumer", "logger", "message", "exception", "stack")
_HANDLER_MARK: Final = "_symfonic_stream_json"


def redact_text(text: str) -> str:
    """``text`` with the values of secret-looking ``key=value`` pairs replaced."""
    return _SECRET_PAIR.sub(lambda m: m.group("key") + REDACTED, text)


def redact(value: Any, key: str = "", _depth: int = 0) -> Any:
    """``value`` with every secret-looking key's value replaced, recursively.

    ``key`` is the name ``value`` is stored under; strings are scanned with
    :func:`redact_text`. Deeper than a few levels (or a cycle), the rest becomes text.
    """
    if key and _SECRET_KEY.search(key):
        return REDACTED
    if _depth > _MAX_DEPTH:
        return redact_text(repr(value))
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {str(k): redact(v, str(k), _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(v, "", _depth + 1) for v in value]
    if isinstance(value, bool | int | float) or value is None:
        return value
    # Anything else is logged as its text, which may hold a secret too.
    return redact_text(_text(value))


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (no newline inside) with secrets redacted."""

    def __init__(self, consumer: str, worker: int | None = None) -> None:
        super().__init__()
        self.consumer = consumer
        self.worker = worker
        # A worker's index is a fixed field too; elsewhere ``worker`` is ordinary context
        # (the supervisor's lines about one of its workers).
        self._own: tuple[str, ...] = _OWN_FIELDS if worker is None else (*_OWN_FIELDS, "worker")

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "consumer": self.consumer,
        }
        if self.worker is not None:
            payload["worker"] = self.worker
        payload["logger"] = record.name
        payload["message"] = redact_text(record.getMessage())
        for key, value in vars(record).items():
            # The fixed fields win: an ``extra`` cannot forge the level or the consumer.
            if key not in _STANDARD_ATTRS and key not in self._own:
                payload[key] = redact(value, key)
        if record.exc_info:
            payload["exception"] = redact_text(self.formatException(record.exc_info))
        elif record.exc_text:
            payload["exception"] = redact_text(record.exc_text)
        if record.stack_info:
            payload["stack"] = redact_text(self.formatStack(record.stack_info))
        try:
            return orjson.dumps(payload, default=_text, option=orjson.OPT_NON_STR_KEYS).decode()
        except orjson.JSONEncodeError:
            # e.g. an int beyond 64 bits: a log line must never be lost to its context.
            safe = {k: v if isinstance(v, str) else repr(v) for k, v in payload.items()}
            return orjson.dumps(safe).decode()


#: aiokafka's lines for one failed connection attempt (its client's bootstrap).
_CONNECT_FAILURES: Final = ("Unable connect to", "Unable to request metadata")


class _DemoteConnectFailures(logging.Filter):
    """aiokafka logs every failed connection attempt at ERROR. A consumer waiting for a
    Kafka that is not up yet already logs one line per attempt with the same error
    (``waiting for Kafka``, see symfonic_stream/kafka/retry.py), so these become DEBUG."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self._level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("aiokafka") and str(record.msg).startswith(_CONNECT_FAILURES):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return self._level <= logging.DEBUG
        return True


class _RedactValues(logging.Filter):
    """Replaces given values (a password, a key file's path) wherever a line holds them:
    a library may print them in a message of its own, where no key names them."""

    def __init__(self, values: tuple[str, ...]) -> None:
        super().__init__()
        self._values = values

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(value in message for value in self._values):
            for value in self._values:
                message = message.replace(value, REDACTED)
            record.msg, record.args = message, None
        return True


def configure_logging(
    consumer: str,
    level: str,
    *,
    stream: IO[str] | None = None,
    secrets: tuple[str, ...] = (),
    worker: int | None = None,
) -> logging.Handler:
    """Send every log record of the process as JSON lines to ``stream`` (default stderr).

    ``level`` is a level name (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``; any case). The
    root logger's existing handlers are replaced, so calling this again reconfigures rather
    than duplicates lines: a process's logging is configured here and nowhere else.
    Python ``warnings`` are routed into the log too. ``secrets`` (the SASL password, the
    TLS key's path) are replaced wherever a message holds them. ``worker``, a worker
    process's index, is on every line. Returns the installed handler.
    """
    levels = logging.getLevelNamesMapping()
    numeric = levels.get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter(consumer, worker))
    handler.addFilter(_DemoteConnectFailures(numeric))
    shown = tuple(value for value in secrets if len(value) >= 4)
    if shown:
        handler.addFilter(_RedactValues(shown))
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        if getattr(old, _HANDLER_MARK, False):
            old.close()
    root.addHandler(handler)
    root.setLevel(numeric)
    logging.captureWarnings(True)
    return handler
