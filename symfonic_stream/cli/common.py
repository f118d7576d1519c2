"""What the commands share: exit statuses, the TIME parameter, the settings or exit 2, and
quiet Kafka logs. Nothing here imports an extra's packages (``symfonic_stream.cli``)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from symfonic_stream.config import ConfigError, Settings, load_settings
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
    """The validated settings, or exit 2 with the message naming the bad variable."""
    try:
        return load_settings()
    except ConfigError as exc:
        click.echo(f"symfonic-stream: {exc}", err=True)
        sys.exit(EXIT_USAGE)
