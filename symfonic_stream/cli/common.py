"""What the commands share: exit statuses, the TIME parameter, the settings or exit 2, and
quiet Kafka logs. Nothing here imports an extra's packages (``symfonic_stream.cli``)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from symfonic_stream.config import (
    COMMAND_STARTUP_TIMEOUT_S,
    SERVICE_STARTUP_TIMEOUT_S,
    ConfigError,
    Settings,
    load_settings,
)
from symfonic_stream.sdk.reader import parse_time

EXIT_BROKEN = 1
EXIT_USAGE = 2
EXIT_KAFKA = 3
EXIT_INTERRUPTED = 130


class TimeType(click.ParamType):  # type: ignore[type-arg]
    """TIME: ISO-8601 (a time without a zone is UTC) or Unix seconds."""

    name = "TIME"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


TIME = TimeType()


def quiet_kafka_logs() -> None:
    """Tools print their own messages; aiokafka's retries (a topic whose metadata has not
    propagated yet, a coordinator moving) are noise on a terminal unless they fail."""
    logging.getLogger("aiokafka").setLevel(logging.ERROR)


def settings_or_exit() -> Settings:
    """The validated settings of a command a person types (a start waits seconds for
    Kafka, not minutes: :meth:`Settings.for_process`), or exit 2 with the message naming
    the bad variable."""
    try:
        return load_settings().for_process(command=True)
    except ConfigError as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)


def kafka_help(*, command: bool = True) -> str:
    """What ``--help`` says of Kafka: where it is looked for and how long a start waits
    (the defaults, from the settings' declarations)."""
    wait = COMMAND_STARTUP_TIMEOUT_S if command else SERVICE_STARTUP_TIMEOUT_S
    kind = "for a command" if command else "for a service"
    bootstrap = Settings.model_fields["bootstrap_servers"].default
    return (f"Kafka: SYMFONIC_BOOTSTRAP_SERVERS (default {bootstrap}); a start waits up to "
            f"SYMFONIC_STARTUP_TIMEOUT_S for it (default {wait:g} s {kind}), then fails "
            "naming what it tried.")
