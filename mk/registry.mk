# The schema registry part of `make test`. Included by the main Makefile (it uses $(BIN),
# venv and pytest_run).
#
#   test-registry   tests/registry/ against Apicurio Registry from scripts/registry.sh
#                   (docs/schema-registry.md): built once with Maven (cached), started on
#                   REGISTRY_PORT, stopped afterwards when this run started it, also when the
#                   tests fail. Needs no Kafka, so it runs the same with an external one.
#
# The part's time includes the registry's build on a machine without the cache (about 80 s,
# measured) and its start (a few seconds).

REGISTRY := scripts/registry.sh
REGISTRY_PORT ?= 28081

.PHONY: test-registry

test-registry: venv
	@t0=$$SECONDS; export SYMFONIC_REGISTRY_PORT=$(REGISTRY_PORT); \
	started=0; flag="$$(mktemp)"; rm -f "$$flag"; \
	stop_if_started() { if [ "$$started" = 1 ]; then $(REGISTRY) stop || true; fi; }; \
	trap stop_if_started EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	url="$$(SYMFONIC_REGISTRY_STARTED_FLAG="$$flag" $(REGISTRY) start)"; \
	if [ -s "$$flag" ]; then started=1; fi; rm -f "$$flag"; \
	rc=0; SYMFONIC_TEST_REGISTRY_URL="$$url" \
	  $(call pytest_run,registry) tests/registry $(PYTEST_ARGS) || rc=$$?; \
	if [ "$$rc" -ne 0 ]; then echo "make: pytest exited with status $$rc" >&2; fi; \
	echo "make: test-registry finished in $$((SECONDS - t0)) s"; \
	exit "$$rc"
