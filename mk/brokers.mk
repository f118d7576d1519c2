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
#   test-acls       least privilege on the authorizer broker (scripts/kafka.sh auth-start):
#                   each consumer with only its ACLs, reviewers and consumers refused the
#                   rest (tests/integration/test_acls_live.py), per version (ACLS_VERSIONS)
#
# They need the project's own brokers: with SYMFONIC_BOOTSTRAP_SERVERS set by the caller
# (an external Kafka) they say so and do nothing.

MATRIX_VERSIONS ?= 3.9.1 4.4.0
MATRIX_PORT ?= 29092
CLUSTER_BOOTSTRAP := 127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096
ENGINE_SUITE := tests/integration/test_engine_copier.py tests/integration/test_engine_crash.py \
	tests/integration/test_engine_fencing.py tests/integration/test_engine_lifecycle.py \
	tests/integration/test_engine_restore.py tests/integration/test_engine_topics.py \
	tests/integration/test_engine_position.py \
	tests/integration/test_engine_typed.py tests/integration/test_projectors.py \
	tests/integration/test_group_fencing.py
CLUSTER_SUITE := tests/integration/test_cluster.py tests/integration/test_engine_crash.py \
	tests/integration/test_engine_fencing.py
SEEDS ?= 3
# The authorizer broker's client port (+1 controller, +2 the anonymous probe listener the
# test session's fixtures are pointed at).
ACLS_VERSIONS ?= 4.1.1 3.9.1
ACLS_PORT ?= 29192

.PHONY: test-cluster test-versions test-faults test-acls

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

test-acls: venv
ifneq ($(EXTERNAL_KAFKA),)
	@echo "make: test-acls needs the project's authorizer broker; SYMFONIC_BOOTSTRAP_SERVERS is set: skipped"
else
	@t_all=$$SECONDS; \
	for version in $(ACLS_VERSIONS); do \
	  t0=$$SECONDS; \
	  echo "make: the ACL suite on Kafka $$version (authorizer broker 127.0.0.1:$(ACLS_PORT))"; \
	  stop() { SYMFONIC_KAFKA_VERSION=$$version SYMFONIC_KAFKA_AUTH_PORT=$(ACLS_PORT) $(KAFKA) auth-stop || true; }; \
	  trap stop EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	  SYMFONIC_KAFKA_VERSION=$$version SYMFONIC_KAFKA_AUTH_PORT=$(ACLS_PORT) $(KAFKA) auth-start --fresh; \
	  rc=0; \
	  SYMFONIC_TEST_AUTHORIZER=1 SYMFONIC_KAFKA_AUTH_PORT=$(ACLS_PORT) \
	    SYMFONIC_BOOTSTRAP_SERVERS=127.0.0.1:$$(($(ACLS_PORT) + 2)) \
	    $(BIN)/pytest -p no:cacheprovider tests/integration/test_acls_live.py $(PYTEST_ARGS) || rc=$$?; \
	  stop; trap - EXIT; \
	  if [ "$$rc" -ne 0 ]; then echo "make: the ACL suite failed on Kafka $$version" >&2; exit "$$rc"; fi; \
	  echo "make: the ACL suite passed on Kafka $$version in $$((SECONDS - t0)) s"; \
	done; \
	echo "make: test-acls passed in $$((SECONDS - t_all)) s"
endif
