"""Secrets never reach a log line, even in a library's own message (SPEC §8)."""

from __future__ import annotations

import io
import logging

import orjson
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
