#!/bin/sh
# The project's own Apache Kafka for development and tests: the Python package beside this file
# (scripts/kafka/, standard library only; docs/dev-broker.md). `scripts/kafka.sh help` for usage.
exec "${SYMFONIC_KAFKA_PYTHON:-python3}" "$(dirname "$0")/kafka" "$@"
