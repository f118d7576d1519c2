# The broker matrix: the parts of `make test` that need brokers other than the main one.
# Included by the main Makefile. Every part starts its own brokers from scripts/kafka.sh
# (fresh storage) and stops them afterwards, also when the tests fail.
#
#   test-cluster    the 3-node KRaft cluster (RF 3, min ISR 2): the broker that leads an input
#                   partition or coordinates the group killed, a consumer restarted while
#                   a broker is down, a rolling restart; and the fencing suite there
#   test-versions   the protocol-sensitive tests on the last 3.x release and the newest
#                   release, each on a broker of its own (MATRIX_VERSIONS)
#   test-faults     every row of the fault table (make test runs its quick rows)
#   test-acls       least privilege on the authorizer broker (scripts/kafka.sh auth-start):
#                   each consumer with only its ACLs, reviewers and consumers refused the
#                   rest (tests/integration/test_acls_live.py), per version (ACLS_VERSIONS)
#
# They need the project's own brokers: with SYMFONIC_BOOTSTRAP_SERVERS set by the caller
# (an external Kafka) they say so and do nothing. Every port follows an environment
# variable, so a second run on the same machine can take other ports:
# SYMFONIC_KAFKA_PORT (test-main), SYMFONIC_KAFKA_CLUSTER_BASE_PORT (the cluster: that port,
# +2 and +4), MATRIX_PORT, ACLS_PORT.
#
# Where a test runs in more than one part, the reason is written beside the suite.

# A part that cannot run on an external Kafka says so in this one form, and exits 0 (a
# developer's make test against their Kafka goes on); .ci/run fails on it (.ci/verdict.py).
skip = @echo "make: $@ needs $(1); SYMFONIC_BOOTSTRAP_SERVERS is set: skipped"

MATRIX_VERSIONS ?= 3.9.1 4.4.0
MATRIX_PORT ?= 29092
# The cluster's three brokers (scripts/kafka.sh: the base port, +2, +4).
CLUSTER_BASE_PORT := $(or $(SYMFONIC_KAFKA_CLUSTER_BASE_PORT),19092)
CLUSTER_BOOTSTRAP := $(foreach n,0 2 4,127.0.0.1:$(shell expr $(CLUSTER_BASE_PORT) + $(n)))
# The cluster and the version brokers skip Kafka's 3 s group.initial.rebalance.delay.ms (a new
# group's first rebalance waits that long for more members): those parts prove broker
# failures and protocol versions, not default settings. test-main and test-acls keep every
# default, as users' brokers have them.
NO_JOIN_DELAY := group.initial.rebalance.delay.ms=0
comma := ,
# Run again on the cluster (after test-main): the fencing suite, since there the transaction
# coordinator, the group coordinator and the partitions' leaders are different nodes, so a
# fence and its abort markers cross brokers, which a single broker never shows. The crash
# suite is not: test_cluster.py kills a consumer mid-transaction there.
CLUSTER_FENCING := tests/integration/test_engine_fencing.py
# Run again on each other version (after test-main, on 4.1.1): what depends on the broker's
# protocol versions, each test once: transactions and fencing (the broker floor, zombies,
# group fencing), restoring a changelog and the position in it, topic creation and configs,
# every compression codec, one SIGKILL mid-stream, and a static member's LeaveGroup v3 (which
# aiokafka does not send: kafka/leave_group.py). The rest of the suite runs the same
# requests through the same code.
VERSIONS_SUITE := tests/integration/test_broker_floor.py \
	tests/integration/test_engine_fencing.py tests/integration/test_group_fencing.py \
	tests/integration/test_engine_restore.py tests/integration/test_engine_position.py \
	tests/integration/test_engine_topics.py tests/integration/test_static_leave.py \
	tests/integration/test_projectors.py::test_outputs_are_written_with_each_compression_codec \
	tests/integration/test_engine_crash.py::test_sigkill_mid_stream_then_restart_is_exactly_once
# The authorizer broker's client port (+1 controller, +2 the anonymous probe listener the
# test session's fixtures are pointed at).
ACLS_VERSIONS ?= 4.1.1 3.9.1
ACLS_PORT ?= 29192

.PHONY: test-cluster test-versions test-faults test-acls

# The fencing suite in parallel, then the cluster tests one at a time (each kills brokers).
test-cluster: venv
ifneq ($(EXTERNAL_KAFKA),)
	$(call skip,the project's 3-node cluster)
else
	@t0=$$SECONDS; \
	SYMFONIC_KAFKA_EXTRA_CONFIG='$(NO_JOIN_DELAY)' $(KAFKA) cluster-start --fresh; \
	trap '$(KAFKA) cluster-stop || true' EXIT; \
	export SYMFONIC_TEST_CLUSTER=1 SYMFONIC_BOOTSTRAP_SERVERS=$(subst $(eval) ,$(comma),$(CLUSTER_BOOTSTRAP)) \
	  SYMFONIC_REPLICATION_FACTOR=3 SYMFONIC_MIN_INSYNC_REPLICAS=2; \
	$(call pytest_run,cluster-fencing) $(parallel) $(CLUSTER_FENCING) $(PYTEST_ARGS); \
	$(call pytest_run,cluster) tests/integration/test_cluster.py $(PYTEST_ARGS); \
	echo "make: test-cluster passed in $$((SECONDS - t0)) s"
endif

test-versions: venv
ifneq ($(EXTERNAL_KAFKA),)
	$(call skip,the project's brokers)
else
	@t_all=$$SECONDS; \
	for version in $(MATRIX_VERSIONS); do \
	  t0=$$SECONDS; \
	  echo "make: the protocol-sensitive tests on Kafka $$version (127.0.0.1:$(MATRIX_PORT))"; \
	  SYMFONIC_KAFKA_EXTRA_CONFIG='$(NO_JOIN_DELAY)' SYMFONIC_KAFKA_VERSION=$$version \
	    SYMFONIC_KAFKA_PORT=$(MATRIX_PORT) $(KAFKA) start --fresh; \
	  rc=0; \
	  SYMFONIC_BOOTSTRAP_SERVERS=127.0.0.1:$(MATRIX_PORT) \
	    $(call pytest_run,versions-$$version) $(parallel) $(VERSIONS_SUITE) $(PYTEST_ARGS) || rc=$$?; \
	  SYMFONIC_KAFKA_VERSION=$$version SYMFONIC_KAFKA_PORT=$(MATRIX_PORT) $(KAFKA) stop || true; \
	  if [ "$$rc" -ne 0 ]; then echo "make: the protocol-sensitive tests failed on Kafka $$version" >&2; exit "$$rc"; fi; \
	  echo "make: the protocol-sensitive tests passed on Kafka $$version in $$((SECONDS - t0)) s"; \
	done; \
	echo "make: test-versions passed in $$((SECONDS - t_all)) s"
endif

test-faults: venv
	$(call with_kafka,SYMFONIC_TEST_FAULT_TABLE=full $(call pytest_run,faults) $(parallel) tests/integration/test_fault_matrix.py $(PYTEST_ARGS),--fresh)

test-acls: venv
ifneq ($(EXTERNAL_KAFKA),)
	$(call skip,the project's authorizer broker)
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
	    $(call pytest_run,acls-$$version) tests/integration/test_acls_live.py $(PYTEST_ARGS) || rc=$$?; \
	  stop; trap - EXIT; \
	  if [ "$$rc" -ne 0 ]; then echo "make: the ACL suite failed on Kafka $$version" >&2; exit "$$rc"; fi; \
	  echo "make: the ACL suite passed on Kafka $$version in $$((SECONDS - t0)) s"; \
	done; \
	echo "make: test-acls passed in $$((SECONDS - t_all)) s"
endif
