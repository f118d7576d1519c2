# The tracing part of `make test`. Included by the main Makefile (it uses $(BIN), venv,
# pytest_run and with_kafka).
#
#   test-tracing   tests/tracing/ against the project's OpenTelemetry Collector from
#                  scripts/otelcol.sh (docs/testing.md, "Tracing"): built once from the Go
#                  module proxy (cached under ~/.cache/symfonic-stream/tools), started on
#                  OTELCOL_PORT, stopped afterwards when this run started it, also when the
#                  tests fail (`otelcol.sh run`); and Kafka as test-main has it, also an
#                  external one.
#
# The part's time includes the collector's build on a machine without the cache (206 s on 2
# busy cores from an empty cache, measured) and its start (under a second); warm, about 5 s.

OTELCOL_PORT ?= 24318
OTELCOL := scripts/otelcol.sh

.PHONY: test-tracing

test-tracing: export SYMFONIC_OTELCOL_PORT := $(OTELCOL_PORT)
test-tracing: venv
	$(call with_kafka,$(OTELCOL) run $(call pytest_run,tracing) tests/tracing $(PYTEST_ARGS),--fresh)
