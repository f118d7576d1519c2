"""Secrets never reach a log line, even in a library's own message (contract §8)."""

from __future__ import annotations

import io
import logging
from collections.abc import Callable

import orjson
import pytest
from pydantic import SecretStr

from symfonic_stream.config import Settings
from symfonic_stream.observability.logs import REDACTED, configure_logging


def test_settings_name_the_password_and_the_keys_path_as_secrets(tmp_path: object) -> None:
    settings = Settings(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
        sasl_username="u", sasl_password=SecretStr("hunter2-password"),
    )
    assert settings.secrets() == ("hunter2-password",)
    assert Settings().secrets() == ()


def test_a_third_party_message_holding_a_secret_is_redacted() -> None:
    stream = io.StringIO()
    handler = configure_logging("typed", "DEBUG", stream=stream,
                                secrets=("/etc/kafka/client.key", "hunter2-password"))
    try:
        # As aiokafka's create_ssl_context words it, with %-style arguments.
        logging.getLogger("aiokafka").debug("Loading SSL Key from %s", "/etc/kafka/client.key")
        logging.getLogger("other").info("login hunter2-password ok")
        logging.getLogger("other").info("nothing secret here")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [orjson.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["message"] for line in lines] == [
        f"Loading SSL Key from {REDACTED}",
        f"login {REDACTED} ok",
        "nothing secret here",
    ]


def _logged(secrets: tuple[str, ...], emit: Callable[[logging.Logger], None]) -> str:
    """Everything ``emit`` logs through the configured handler, as text."""
    stream = io.StringIO()
    handler = configure_logging("typed", "DEBUG", stream=stream, secrets=secrets)
    try:
        emit(logging.getLogger("symfonic_stream.test"))
    finally:
        logging.getLogger().removeHandler(handler)
    return stream.getvalue()


PASSWORD = "hunter2-password"
KEY_PATH = "/etc/kafka/tls/client.key"


def test_a_secret_in_an_extra_field_is_redacted_whatever_its_key() -> None:
    """Issue 33: the key path and the password came through ``extra`` fields whose names
    do not look secret."""
    text = _logged((PASSWORD, KEY_PATH), lambda log: log.info("connecting", extra={
        "client": {"ssl": {"cert": "/etc/kafka/tls/client.crt", "key": KEY_PATH}},
        "dsn": f"scram://svc:{PASSWORD}@broker:9093",
        "attempts": [KEY_PATH, 3],
    }))
    assert PASSWORD not in text and KEY_PATH not in text
    (line,) = [orjson.loads(x) for x in text.splitlines()]
    assert line["client"] == {"ssl": {"cert": "/etc/kafka/tls/client.crt", "key": REDACTED}}
    assert line["dsn"] == f"scram://svc:{REDACTED}@broker:9093"
    assert line["attempts"] == [REDACTED, 3]


class _LoginFailed(Exception):
    pass


def _fail_login(password: str) -> None:
    try:
        raise OSError(f"connection refused, offered {password!r}")
    except OSError as cause:
        raise _LoginFailed(("sasl", "svc", password)) from cause


def test_a_secret_in_an_exception_its_repr_and_its_cause_is_redacted() -> None:
    def emit(log: logging.Logger) -> None:
        try:
            _fail_login(PASSWORD)
        except _LoginFailed as exc:
            log.exception("login failed: %r", exc, extra={"error": exc})

    text = _logged((PASSWORD,), emit)
    assert PASSWORD not in text
    (line,) = [orjson.loads(x) for x in text.splitlines()]
    assert "_LoginFailed" in line["exception"] and "connection refused" in line["exception"]
    assert REDACTED in line["exception"] and REDACTED in line["message"]
    assert REDACTED in line["error"]


def test_a_secret_in_the_stack_is_redacted() -> None:
    def emit(log: logging.Logger) -> None:
        # The stack shows each frame's source line, the comment on it included.
        log.warning("here", stack_info=True)  # hunter2-password

    text = _logged((PASSWORD,), emit)
    (line,) = [orjson.loads(x) for x in text.splitlines()]
    assert "test_a_secret_in_the_stack_is_redacted" in line["stack"]
    assert PASSWORD not in text and REDACTED in line["stack"]


def test_a_secret_in_its_escaped_forms_is_redacted() -> None:
    odd = 'pa"ss\\word-with-quotes'
    text = _logged((odd,), lambda log: log.error("bad %r", ValueError(odd), extra={"v": odd}))
    assert odd not in text and repr(odd)[1:-1] not in text
    (line,) = [orjson.loads(x) for x in text.splitlines()]
    assert line["message"] == f"bad ValueError('{REDACTED}')" and line["v"] == REDACTED


@pytest.mark.parametrize("secret", ["q", "x7", "k3y"])
def test_a_short_secret_is_redacted_as_a_token_and_nowhere_else(secret: str) -> None:
    """Issue 33: secrets under 4 characters were never redacted. Replaced as whole tokens,
    a one-character password leaves the rest of a line readable."""
    def emit(log: logging.Logger) -> None:
        log.info("login as svc with %s", secret)
        log.info("config", extra={"conf": {"pw": secret}, "url": f"scram://svc:{secret}@h"})
        log.info("queue q1 quietly took x72 and k3yboard")
        try:
            raise ValueError(secret)
        except ValueError:
            log.exception("refused")

    first, second, third, fourth = [orjson.loads(x) for x in _logged((secret,), emit).splitlines()]
    assert first["message"] == f"login as svc with {REDACTED}"
    assert second["conf"] == {"pw": REDACTED} and second["url"] == f"scram://svc:{REDACTED}@h"
    assert third["message"] == "queue q1 quietly took x72 and k3yboard"
    assert fourth["exception"].endswith(f"ValueError: {REDACTED}")


def test_the_key_path_setting_is_a_secret_name_too() -> None:
    text = _logged((), lambda log: log.info("settings ssl_keyfile=/run/k.pem",
                                            extra={"gateway_jwt_key": "abc"}))
    assert "/run/k.pem" not in text and "abc" not in text
