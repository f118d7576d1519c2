# The broker matrix: the parts of `make test` that need brokers other than the main one.
# Included by the main Makefile. Every part starts its own brokers from scripts/kafka.sh
# (fresh storage) and stops them afterwards, also when the tests fail.
#
#   test-cluster    the 3-node KRaft cluster (RF 3, min ISR 2): broker kills, a consumer
#                   restarted while a broker is down, a rolling restart, plus the crash and
#                   fencing suites
#   test-versions   the engine suite on the last 3.x release and the newest release, each on
#                   a broker of its own (MATRIX_VERSIONS)
#   test-faults     only the fault matrix, with SEEDS seeds (default 3)
#
# They need the project's own brokers: with SYMFONIC_BOOTSTRAP_SERVERS set by the caller
# (an external Kafka) they say so and do nothing.

MATRIX_VERSIONS ?= 3.9.1 4.4.0
MATRIX_PORT ?= 29092
CLUSTER_BOOTSTRAP := 127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096
ENGINE_SUITE := tests/integration/test_engine_copier.py tests/integration/test_engine_crash.py \
	tests/integration/test_engine_fencing.py tests/integration/test_engine_lifecycle.py \
	tests/integration/test_engine_restore.py tests/integration/test_engine_topics.py \
	tests/integration/test_engine_typed.py tests/integration/test_projectors.py
CLUSTER_SUITE := tests/integration/test_cluster.py tests/integration/test_engine_crash.py \
	tests/integration/test_engine_fencing.py
SEEDS ?= 3

.PHONY: test-cluster test-versions test-faults

test-cluster: venv
ifneq ($(EXTERNAL_KAFKA),)
	@echo "make: test-cluster needs the project's 3-node cluster; SYMFONIC_BOOTSTRAP_SERVERS is set: skipped"
else
	@t0=$$SECONDS; \
	$(KAFKA) cluster-start --fresh; \
	trap '$(KAFKA) cluster-stop || true' EXIT; \
	SYMFONIC_TEST_CLUSTER=1 SYMFONIC_BOOTSTRAP_SERVERS=$(CLUSTER_BOOTSTRAP) \
	  SYMFONIC_REPLICATION_FACTOR=3 SYMFONIC_MIN_INSYNC_REPLICAS=2 \
	  $(BIN)/pytest -p no:cacheprovider $(CLUSTER_SUITE) $(PYTEST_ARGS); \
	echo "make: test-cluster passed in $$((SECONDS - t0)) s"
endif

test-versions: venv
ifneq ($(EXTERNAL_KAFKA),)
	@echo "make: test-versions needs the project's brokers; SYMFONIC_BOOTSTRAP_SERVERS is set: skipped"
else
	@for version in $(MATRIX_VERSIONS); do \
	  t0=$$SECONDS; \
	  echo "make: the engine suite on Kafka $$version (127.0.0.1:$(MATRIX_PORT))"; \
	  SYMFONIC_KAFKA_VERSION=$$version SYMFONIC_KAFKA_PORT=$(MATRIX_PORT) $(KAFKA) start --fresh; \
	  rc=0; \
	  SYMFONIC_BOOTSTRAP_SERVERS=127.0.0.1:$(MATRIX_PORT) \
	    $(BIN)/pytest -p no:cacheprovider $(ENGINE_SUITE) $(PYTEST_ARGS) || rc=$$?; \
	  SYMFONIC_KAFKA_VERSION=$$version SYMFONIC_KAFKA_PORT=$(MATRIX_PORT) $(KAFKA) stop || true; \
	  if [ "$$rc" -ne 0 ]; then echo "make: the engine suite failed on Kafka $$version" >&2; exit "$$rc"; fi; \
	  echo "make: the engine suite passed on Kafka $$version in $$((SECONDS - t0)) s"; \
	done
endif

test-faults: venv
	$(call with_kafka,SYMFONIC_FAULT_SEEDS=$$(seq -s, 1 $(SEEDS)) $(BIN)/pytest -p no:cacheprovider tests/integration/test_fault_matrix.py $(PYTEST_ARGS),--fresh)
