# symfonic-stream — developer entry points (GNU make).
#
#   make test        venv + lint + chart-check + pytest on the project's Kafka (defaults,
#                    secure listeners), the schema registry (mk/registry.mk), the
#                    OpenTelemetry Collector (mk/otel.mk), then the
#                    3-node cluster, the other Kafka versions, the authorizer broker and the
#                    container image (make image)
#   make demo        the whole pipeline on synthetic kernel runs
#   make bench       the benchmark
#
# The Kafka broker comes from scripts/kafka.sh (see docs/dev-broker.md). When
# SYMFONIC_BOOTSTRAP_SERVERS is set (environment or command line), that Kafka is used and no
# broker is started or stopped. Otherwise a broker is started when none runs, and stopped
# afterwards only when this make run started it.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.symfonic-installed
KAFKA := scripts/kafka.sh
# Candidates for the interpreter that creates the venv; the first one that is 3.11+ wins.
PYTHON ?= python3.11
PYTHON_CANDIDATES := $(PYTHON) python3.13 python3.12 python3.11 python3

PYTEST_ARGS ?=
DEMO_ARGS ?=
BENCH_ARGS ?=

# Every pytest call of a test target prints its 15 slowest tests and writes a JUnit report,
# build/test-reports/<$(1)>.xml: where the time goes is measured on every run.
REPORTS := build/test-reports
pytest_run = $(BIN)/pytest -p no:cacheprovider --durations=15 --junitxml=$(REPORTS)/$(1).xml
# Broker tests run TEST_WORKERS at a time (pytest-xdist): each works under its own topic
# prefix and group, with ports the system picks, and mostly waits on the broker (sessions,
# rebalances, transactions); measured on the 2-core machine, 4 at a time keeps both cores
# busy (docs/testing.md). Tests that must share a worker say so with xdist_group.
# TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 4
parallel = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

# An externally provided Kafka: decided before the default below is applied.
EXTERNAL_KAFKA := $(if $(strip $(SYMFONIC_BOOTSTRAP_SERVERS)),$(filter environment command,$(firstword $(origin SYMFONIC_BOOTSTRAP_SERVERS))))
export SYMFONIC_BOOTSTRAP_SERVERS ?= 127.0.0.1:$(or $(SYMFONIC_KAFKA_PORT),9092)

include mk/chart.mk
include mk/brokers.mk
include mk/release.mk
include mk/registry.mk
include mk/otel.mk

.PHONY: help venv web lint test test-main test-bench mutate demo bench schemas schemas-check chart-check \
	broker-start broker-stop broker-status broker-logs

help:
	@echo "make venv          create $(VENV) and install the package with its dev extras"
	@echo "make web           bundle the review console (committed) and the tests' AG-UI client (npm, esbuild)"
	@echo "make lint          ruff + mypy --strict, cargo fmt + clippy + test (native/)"
	@echo "make test          venv, lint, chart-check, then every suite below (PYTEST_ARGS=...)"
	@echo "make test-main     the whole suite on the single broker (Kafka's defaults, secure listeners)"
	@echo "make test-registry the schema registry round trip on scripts/registry.sh's Apicurio Registry"
	@echo "make test-tracing  tests/tracing/ against scripts/otelcol.sh's OpenTelemetry Collector"
	@echo "make test-cluster  broker failures on the 3-node cluster, and the fencing suite there"
	@echo "make test-versions the protocol-sensitive tests on Kafka $(MATRIX_VERSIONS)"
	@echo "make test-acls     every consumer with only its ACLs, on an authorizer broker"
	@echo "make test-faults   every row of the fault table (make test runs the quick ones)"
	@echo "make test-bench    the benchmark's own checks (make test keeps one quick smoke)"
	@echo "make mutate        mutation testing: mutmut (MUTATE=...), cargo-mutants (MUTATE_NATIVE=...)"
	@echo "  TEST_WORKERS=N   broker tests N at a time (default 4; 0: one process)"
	@echo "make demo          run the demo pipeline against Kafka (DEMO_ARGS=...)"
	@echo "make bench         run the benchmark against Kafka (BENCH_ARGS=...)"
	@echo "make schemas       regenerate schemas/ and the chart's generated files from the models and consumers/"
	@echo "make schemas-check the generated files are current; the AsyncAPI document parses (@asyncapi/parser)"
	@echo "make wheel | sdist the one wheel (native extension inside) | the sdist, into dist/"
	@echo "make image         build the container image from the wheel (buildah), run it against Kafka"
	@echo "make dist          wheel, sdist, image archive, packaged chart and SHA256SUMS in dist/"
	@echo "make broker-start | broker-stop | broker-status | broker-logs"
	@echo "Kafka: $(SYMFONIC_BOOTSTRAP_SERVERS)$(if $(EXTERNAL_KAFKA), (external: never started or stopped here))"

# --------------------------------------------------------------------------- venv

venv: $(STAMP)

# The browser code, bundled by esbuild from npm's packages (web/package-lock.json): the review
# console into the Python package, the stock @ag-ui/client and a page on the AI SDK's useChat
# into web/build/ for the browser tests. Needs Node.js and npm (as `make schemas-check` does).
# The console's bundle is committed (package data: `pip install .` from a clone, the sdist,
# the wheel and the image all carry it, with no npm): after a change under web/, `make web`
# and commit the bundle with it; tests/packaging/test_console_bundle.py rebuilds it from the
# lock file and compares.
WEB_BUNDLES := symfonic_stream/gateway/static/console.js web/build/agui-client.js \
	web/build/aisdk-chat.js
web: $(WEB_BUNDLES)

$(WEB_BUNDLES) &: web/package.json web/package-lock.json web/build.mjs $(wildcard web/src/*.js) \
		$(wildcard web/src/*.jsx)
	@command -v npm >/dev/null 2>&1 || { echo "make: npm (Node.js) is required to bundle web/" >&2; exit 1; }
	cd web && npm ci --no-audit --no-fund --loglevel=error && node build.mjs

$(STAMP): pyproject.toml native/Cargo.toml native/Cargo.lock symfonic_stream/_native.pyi $(wildcard native/src/*.rs)
	@py=""; \
	for c in $(PYTHON_CANDIDATES); do \
	  if command -v "$$c" >/dev/null 2>&1 && \
	     "$$c" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then \
	    py="$$c"; break; \
	  fi; \
	done; \
	if [ -z "$$py" ]; then echo "make: Python 3.11 or newer is required (tried: $(PYTHON_CANDIDATES))" >&2; exit 1; fi; \
	if [ -x $(BIN)/python ] && ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then \
	  echo "make: $(VENV) has an old Python; recreating it"; rm -rf $(VENV); \
	fi; \
	if [ ! -x $(BIN)/python ]; then echo "make: creating $(VENV) with $$py"; "$$py" -m venv $(VENV); fi; \
	PATH="$$PATH:$$HOME/.cargo/bin"; \
	if ! command -v cargo >/dev/null 2>&1; then \
	  echo "make: cargo (Rust) is required to build native/, the native hot path" >&2; exit 1; \
	fi; \
	echo "make: pip install -e '.[dev]' (with the native extension: docs/engine.md: Decoding, Producing)"; \
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'; \
	$(BIN)/python -c 'import symfonic_stream.native as n, sys; sys.exit(n.MISSING and "make: the native extension was not built: " + n.MISSING)'
	@touch $@

# --------------------------------------------------------------------------- checks

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	cd native && export PATH="$$PATH:$$HOME/.cargo/bin" PYO3_PYTHON="$(abspath $(BIN)/python)" && \
	  cargo fmt --check && cargo clippy --release --quiet --all-targets -- -D warnings && \
	  cargo test --release --quiet

# Runs $(1) with a Kafka available, and stops the broker afterwards only when this run
# started it (a broker that was already running, maybe used by someone else, stays up), also
# when $(1) fails or the run is interrupted. Exits with $(1)'s status. $(2): options for
# `kafka.sh start`; the tests pass --fresh, so a broker they launch does not first load every
# topic that earlier runs left in its storage.
define with_kafka
	@started=0; \
	if [ -z "$(EXTERNAL_KAFKA)" ]; then \
	  flag="$$(mktemp)"; rm -f "$$flag"; \
	  SYMFONIC_KAFKA_STARTED_FLAG="$$flag" $(KAFKA) start $(2); \
	  if [ -s "$$flag" ]; then started=1; fi; \
	  rm -f "$$flag"; \
	else \
	  echo "make: using the Kafka at $$SYMFONIC_BOOTSTRAP_SERVERS (SYMFONIC_BOOTSTRAP_SERVERS is set)"; \
	fi; \
	stop_if_started() { if [ "$$started" = 1 ]; then $(KAFKA) stop || true; fi; }; \
	trap stop_if_started EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	t0=$$SECONDS; rc=0; $(1) || rc=$$?; \
	if [ "$$rc" -ne 0 ]; then echo "make: $(firstword $(1)) exited with status $$rc" >&2; fi; \
	echo "make: $@ finished in $$((SECONDS - t0)) s"; \
	exit "$$rc"
endef

# In this order (a serial make runs prerequisites left to right); each part says its time.
test: venv lint schemas-check chart-check test-main test-registry test-tracing test-cluster \
	test-versions test-acls image

# Every suite on the single broker with Kafka's default settings (the benchmark's own checks
# and the fault table's other rows have their targets: test-bench, test-faults).
test-main: venv web
	$(call with_kafka,$(call pytest_run,main) $(parallel) $(PYTEST_ARGS),--fresh)

# The benchmark's own checks (python -m bench --quick and each experiment, end to end): minutes
# of CPU that prove nothing about the consumers, so not part of make test (which keeps the
# gateway benchmark's quick smoke). Run them when bench/ changes.
test-bench: venv
	$(call with_kafka,SYMFONIC_TEST_BENCH=1 $(call pytest_run,bench) tests/integration/test_bench_smoke.py $(PYTEST_ARGS),--fresh)

# Mutation testing (docs/testing.md, "Mutation testing"): mutmut over the pure packages with
# the unit tests as the judges, cargo-mutants over native/ with its cargo test. A whole run
# takes hours on two cores: by default the modules issues 34 and 45 named. MUTATE: mutmut's
# mutant names (globs, '*' for all of pyproject.toml's only_mutate, state/ and gateway/
# included); MUTATE_NATIVE: the native/ files cargo-mutants mutates and MUTATE_NATIVE_RE a
# regex of the mutants it keeps (empty: all of those files').
MUTATE ?= symfonic_stream.processors.pauses.validator* symfonic_stream.processors.pauses.router* \
	symfonic_stream.models.decoding* symfonic_stream.state.restore* symfonic_stream.state.kept*
MUTATE_NATIVE ?= src/lib.rs
MUTATE_NATIVE_RE ?= Scanner.*::(object|number)$$
mutate: venv
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,mutate]'
	rm -rf mutants; mkdir -p build/mutate
	$(BIN)/mutmut run $(foreach m,$(MUTATE),'$(m)') || true
	@# Each survivor with its diff into build/mutate/, then mutants/ goes: it holds copies of
	@# docs/ and tests/ that the link and size checks would otherwise walk.
	@$(BIN)/mutmut results | tee build/mutate/mutmut.txt; \
	for m in $$($(BIN)/mutmut results | grep -v 'not checked' | cut -d: -f1); do \
	  $(BIN)/mutmut show "$$m"; done > build/mutate/mutmut-survivors.diff; \
	rm -rf mutants; echo "make: mutmut's survivors: build/mutate/mutmut.txt, their diffs beside it"
	@PATH="$$PATH:$$HOME/.cargo/bin"; command -v cargo-mutants >/dev/null || \
	  cargo install --locked cargo-mutants
	@libdir="$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')"; \
	cd native && PATH="$$PATH:$$HOME/.cargo/bin" PYO3_PYTHON="$(abspath $(BIN)/python)" \
	  LD_LIBRARY_PATH="$$libdir$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
	  cargo mutants --no-shuffle $(foreach f,$(MUTATE_NATIVE),--file $(f)) \
	    $(if $(MUTATE_NATIVE_RE),--re '$(MUTATE_NATIVE_RE)') || true; \
	echo "make: cargo-mutants' survivors: native/mutants.out/missed.txt"

demo: venv
	$(call with_kafka,$(BIN)/symfonic-stream demo $(DEMO_ARGS))

bench: venv
	$(call with_kafka,$(BIN)/python -m bench $(BENCH_ARGS))

schemas: venv
	$(BIN)/symfonic-stream schemas generate
	$(BIN)/python -m symfonic_stream.tools.chart --write

# Drift of every generated file (also a unit test), then the official AsyncAPI parser
# (npm, installed into a cache outside git by the script): 0 errors and 0 warnings.
schemas-check: venv
	$(BIN)/symfonic-stream schemas check
	$(BIN)/python -m symfonic_stream.tools.chart --check
	scripts/asyncapi-check.sh schemas/asyncapi.yaml

# --------------------------------------------------------------------------- the broker

broker-start:
ifeq ($(EXTERNAL_KAFKA),)
	$(KAFKA) start
else
	@echo "make: SYMFONIC_BOOTSTRAP_SERVERS=$(SYMFONIC_BOOTSTRAP_SERVERS) is set: not starting a broker"
endif

broker-stop:
ifeq ($(EXTERNAL_KAFKA),)
	$(KAFKA) stop
else
	@echo "make: SYMFONIC_BOOTSTRAP_SERVERS=$(SYMFONIC_BOOTSTRAP_SERVERS) is set: not stopping anything"
endif

broker-status:
	$(KAFKA) status

broker-logs:
	$(KAFKA) logs
