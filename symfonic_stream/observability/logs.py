"""JSON logs: one object per line on stderr, with secrets redacted (contract §8).

Each line has ``time`` (ISO-8601 UTC, milliseconds), ``level``, ``consumer`` (and ``worker``,
the index of a worker process of ``run --workers N``), ``logger`` and ``message``, then
whatever context the call passed with ``extra={...}`` (topic, partition, offset, …), and
``exception`` / ``stack`` when present. Usage::

    log.warning("dead-lettered", extra={"topic": t, "partition": p, "offset": o})

Redaction runs on every part of every line (the message, each ``extra`` at any depth, the
exception with its traceback and chained causes, the stack), because a secret reaches a log
through code nobody reviews for it (an exception's ``repr``, a library's message, a config
dump). Two rules, both applied everywhere:

- **Secret-looking names.** Any key containing ``password``, ``secret``, ``token``, ``sasl``
  or the name of a secret setting (``config.SECRET_SETTINGS``) has its value replaced with
  ``<redacted>``, and so do ``key=value`` / ``key: value`` pairs with such keys inside text.
  This over-redacts (``input_tokens`` too) by design: a missing number in a log is cheap, a
  leaked credential is not.
- **The configured secrets' values** (:class:`Secrets`: the SASL password, the HS256 key, the
  TLS key's path), whatever their length, also in their ``repr`` and JSON-escaped forms. One
  of at least :data:`ANYWHERE_MIN` characters is replaced wherever it occurs. A shorter one
  is replaced only where it stands as a whole token (no letter, digit or ``_`` touching it on
  either side): replaced anywhere, a one-character password would take that character out of
  every line. As a token it is still caught where a leak puts it (``password=x``, ``'x'``,
  ``: x``, a field's whole value); an ordinary word equal to it is redacted too.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import IO, Any, Final

import orjson

from symfonic_stream.config import SECRET_SETTINGS

REDACTED: Final = "<redacted>"
#: A configured secret this long or longer is redacted wherever it occurs; a shorter one
#: only as a whole token (see the module's docstring).
ANYWHERE_MIN: Final = 8
_SECRET_WORDS: Final = "|".join(("password", "secret", "token", "sasl", *SECRET_SETTINGS))
_SECRET_KEY = re.compile(_SECRET_WORDS, re.IGNORECASE)
# ``password=x``, ``sasl_password: 'x'``, ``"token": "x"``: the key, its separator, the value.
_SECRET_PAIR = re.compile(
    rf"""(?P<key>[\w.-]*(?:{_SECRET_WORDS})[\w.-]*["']?\s*[=:]\s*)"""
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


class Secrets:
    """Finds the configured secrets' values in text (see the module's docstring)."""

    def __init__(self, values: Iterable[str]) -> None:
        forms: set[str] = set()
        for value in values:
            if value:  # the text as it is, as ``repr`` shows it, as JSON escapes it
                forms.update((value, repr(value)[1:-1], orjson.dumps(value).decode()[1:-1]))
        # Longest first: at one position the alternation takes the first that matches.
        parts = [re.escape(form) if len(form) >= ANYWHERE_MIN
                 else rf"(?<!\w){re.escape(form)}(?!\w)"
                 for form in sorted(forms, key=lambda f: (-len(f), f))]
        self._found = re.compile("|".join(parts)) if parts else None

    def __call__(self, text: str) -> str:
        """``text`` with every configured secret and secret-looking pair replaced."""
        if self._found is not None:
            text = self._found.sub(REDACTED, text)
        return redact_text(text)


def redact(value: Any, key: str = "", _depth: int = 0,
           text: Callable[[str], str] = redact_text) -> Any:
    """``value`` with every secret-looking key's value replaced, recursively.

    ``key`` is the name ``value`` is stored under; strings (keys too) are scanned with
    ``text`` (a :class:`Secrets`, or :func:`redact_text`). Deeper than a few levels (or a
    cycle), the rest becomes text.
    """
    if key and _SECRET_KEY.search(key):
        return REDACTED
    if _depth > _MAX_DEPTH:
        return text(repr(value))
    if isinstance(value, str):
        return text(value)
    if isinstance(value, Mapping):
        return {text(str(k)): redact(v, str(k), _depth + 1, text) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(v, "", _depth + 1, text) for v in value]
    if isinstance(value, bool | int | float) or value is None:
        return value
    # Anything else is logged as its text, which may hold a secret too.
    return text(_text(value))


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object (no newline inside) with secrets redacted:
    ``secrets`` (the configured ones' values) and secret-looking names, in every field."""

    def __init__(self, consumer: str, worker: int | None = None,
                 secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.consumer = consumer
        self.worker = worker
        self._redact = Secrets(secrets)
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
        text = self._redact
        payload["message"] = text(record.getMessage())
        for key, value in vars(record).items():
            # The fixed fields win: an ``extra`` cannot forge the level or the consumer.
            if key not in _STANDARD_ATTRS and key not in self._own:
                payload[text(key)] = redact(value, key, text=text)
        if record.exc_info:
            payload["exception"] = text(self.formatException(record.exc_info))
        elif record.exc_text:
            payload["exception"] = text(record.exc_text)
        if record.stack_info:
            payload["stack"] = text(self.formatStack(record.stack_info))
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
    Python ``warnings`` are routed into the log too. ``secrets`` (``Settings.secrets()``: the
    SASL password, the HS256 key, the TLS key's path) are replaced in every part of every
    line, whatever their length (see the module's docstring). ``worker``, a worker
    process's index, is on every line. Returns the installed handler.
    """
    levels = logging.getLevelNamesMapping()
    numeric = levels.get(level.upper())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter(consumer, worker, secrets))
    handler.addFilter(_DemoteConnectFailures(numeric))
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
