# The schema registry part of `make test`. Included by the main Makefile (it uses $(BIN),
# venv and pytest_run).
#
#   test-registry   tests/registry/ against Apicurio Registry from scripts/registry.sh
#                   (docs/schema-registry.md): built once with Maven (cached), started on
#                   REGISTRY_PORT, stopped afterwards when this run started it, also when the
#                   tests fail (`registry.sh run`); and Kafka as test-main has it (the
#                   schema id header's live test), also an external one.
#
# The part's time includes the registry's build on a machine without the cache (about 80 s,
# measured) and its start (a few seconds).

REGISTRY_PORT ?= 28081
REGISTRY := scripts/registry.sh

.PHONY: test-registry

test-registry: export SYMFONIC_REGISTRY_PORT := $(REGISTRY_PORT)
test-registry: venv
	$(call with_kafka,$(REGISTRY) run $(call pytest_run,registry) tests/registry $(PYTEST_ARGS),--fresh)
