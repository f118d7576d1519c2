#!/usr/bin/env bash
# The project's own Apache Kafka (KRaft, no ZooKeeper, no Docker) for development and tests.
#
#   scripts/kafka.sh start [--fresh] | stop | status | logs [-f] | reset | fetch
#   scripts/kafka.sh secure-env sasl_ssl|mtls
#   scripts/kafka.sh cluster-start [--fresh] | cluster-stop | cluster-status | cluster-reset
#   scripts/kafka.sh kill-node N | stop-node N | start-node N | logs N [-f]
#   scripts/kafka.sh auth-start [--fresh] | auth-stop | auth-status | auth-env USER
#
# Kafka runs with what Apache Kafka's own quickstart config/server.properties of that release
# sets and otherwise its code defaults: what the users' brokers run. The single broker also
# has a SASL_SSL (SCRAM-SHA-512) and an SSL (mutual TLS) listener, with certificates and a
# SCRAM user made here. The broker's jars are resolved once with Maven into a cache outside
# git, one per version; data, logs, certificates and pid files live in a state directory
# outside git, one per port and version. The authorizer broker (auth-*) is a third, separate
# single node that enforces ACLs, with SCRAM users for the project's principals (issue 17).
# See docs/dev-broker.md and docs/security.md.
set -euo pipefail

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { printf 'kafka.sh: error: %s\n' "$*" >&2; exit 1; }

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HELPER_DIR="$SCRIPT_DIR/kafka"
CACHE_ROOT="$HOME/.cache/symfonic-stream"

# Tried in order until Maven resolves one; SYMFONIC_KAFKA_VERSION pins one (or a list).
# Supported: 4.x (4.1.1 is the default; 4.4.0 tested) and 3.9.x (3.9.1 tested).
DEFAULT_KAFKA_VERSIONS="4.1.1 4.1.0 4.0.1 4.0.0"
KAFKA_VERSIONS="${SYMFONIC_KAFKA_VERSION:-$DEFAULT_KAFKA_VERSIONS}"
STATE_ROOT="${SYMFONIC_KAFKA_STATE:-$CACHE_ROOT/state}"
HOST="${SYMFONIC_KAFKA_HOST:-127.0.0.1}"
PORT="${SYMFONIC_KAFKA_PORT:-9092}"
[[ "$PORT" =~ ^[0-9]+$ ]] || die "SYMFONIC_KAFKA_PORT must be a port number, not '$PORT'"
# Every other port of the single broker follows its PLAINTEXT port, so a second broker on
# another SYMFONIC_KAFKA_PORT never collides with the first.
CONTROLLER_PORT="${SYMFONIC_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}"
SASL_SSL_PORT="${SYMFONIC_KAFKA_SASL_SSL_PORT:-$((PORT + 2))}"
MTLS_PORT="${SYMFONIC_KAFKA_MTLS_PORT:-$((PORT + 3))}"
SCRAM_USER="${SYMFONIC_KAFKA_SCRAM_USER:-symfonic}"
# Opt-in only: server.properties lines (one per line) added after Kafka's defaults, e.g.
# 'group.initial.rebalance.delay.ms=0' (see docs/dev-broker.md). Empty: Kafka's defaults.
EXTRA_CONFIG="${SYMFONIC_KAFKA_EXTRA_CONFIG:-}"
HEAP_OPTS="${SYMFONIC_KAFKA_HEAP_OPTS:--Xms512m -Xmx1g}"
CLUSTER_BASE_PORT="${SYMFONIC_KAFKA_CLUSTER_BASE_PORT:-19092}"
CLUSTER_HEAP_OPTS="${SYMFONIC_KAFKA_CLUSTER_HEAP_OPTS:--Xms512m -Xmx512m}"
CLUSTER_SIZE=3
# The authorizer broker: its SASL_PLAINTEXT (SCRAM-SHA-512) client port; the others follow it.
AUTH_PORT="${SYMFONIC_KAFKA_AUTH_PORT:-29192}"
[[ "$AUTH_PORT" =~ ^[0-9]+$ ]] || die "SYMFONIC_KAFKA_AUTH_PORT must be a port number, not '$AUTH_PORT'"
AUTH_CONTROLLER_PORT="${SYMFONIC_KAFKA_AUTH_CONTROLLER_PORT:-$((AUTH_PORT + 1))}"
AUTH_PROBE_PORT="${SYMFONIC_KAFKA_AUTH_PROBE_PORT:-$((AUTH_PORT + 2))}"
# The super user (creates the ACLs), then one user per consumer (the default principals
# User:symfonic-<consumer> of `symfonic-stream acls`) and two reviewers.
AUTH_ADMIN=admin
AUTH_USERS="${SYMFONIC_KAFKA_AUTH_USERS:-symfonic-typed symfonic-chunks symfonic-pauses symfonic-resumes symfonic-gateway reviewer-acme reviewer-globex}"
START_TIMEOUT="${SYMFONIC_KAFKA_START_TIMEOUT:-90}"
START_LIMIT="${SYMFONIC_KAFKA_START_LIMIT:-600}"
STOP_TIMEOUT="${SYMFONIC_KAFKA_STOP_TIMEOUT:-30}"
PYTHON="${SYMFONIC_KAFKA_PYTHON:-python3}"
JVM_OPTS=(-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
  -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true)
# shellcheck disable=SC2206  # word splitting of user-supplied JVM options is intended
JVM_OPTS+=(${SYMFONIC_KAFKA_JVM_OPTS:-})

for _p in "$CONTROLLER_PORT" "$SASL_SSL_PORT" "$MTLS_PORT" "$CLUSTER_BASE_PORT" \
  "$AUTH_CONTROLLER_PORT" "$AUTH_PROBE_PORT"; do
  [[ "$_p" =~ ^[0-9]+$ ]] || die "'$_p' is not a port number (SYMFONIC_KAFKA_*_PORT)"
done
[[ "$SCRAM_USER" =~ ^[A-Za-z0-9._-]+$ ]] || die "SYMFONIC_KAFKA_SCRAM_USER: letters, digits, . _ - only"
for _u in $AUTH_USERS; do
  [[ "$_u" =~ ^[A-Za-z0-9._-]+$ && "$_u" != "$AUTH_ADMIN" ]] \
    || die "SYMFONIC_KAFKA_AUTH_USERS: '$_u' (letters, digits, . _ - only; not $AUTH_ADMIN)"
done
while IFS= read -r _line; do
  [[ -z "${_line//[[:space:]]/}" || "$_line" =~ ^[[:space:]]*# ]] && continue
  [[ "$_line" =~ ^[[:space:]]*[a-z0-9][a-z0-9._-]*[[:space:]]*=.* ]] \
    || die "SYMFONIC_KAFKA_EXTRA_CONFIG: '$_line' is not a name=value line"
done <<<"$EXTRA_CONFIG"

usage() {
  cat >&2 <<EOF
usage: scripts/kafka.sh COMMAND

single broker (combined broker+controller), on ${HOST}:
  PLAINTEXT ${PORT}, controller ${CONTROLLER_PORT}, SASL_SSL/SCRAM-SHA-512 ${SASL_SSL_PORT}, SSL/mutual TLS ${MTLS_PORT}
  start [--fresh]  resolve Kafka if needed, make certificates and the SCRAM user once, format
                   storage once, start, wait until it serves (reuses a broker that already
                   answers on the port); --fresh: a broker this command launches starts from
                   empty storage (make test uses it)
  stop             SIGTERM, wait up to ${STOP_TIMEOUT}s, then SIGKILL
  status           exit 0 when a broker answers metadata requests, 1 when none runs
  logs [-f]        the broker log (last 200 lines, or follow)
  secure-env sasl_ssl|mtls
                   print the path of the env file (SYMFONIC_* variables) for that listener
                   of the running broker; exit 1 when it has none
  reset            delete this version's single-broker state (it must be stopped)
  fetch            only resolve the Kafka jars into the cache (no broker)

three nodes on one host (brokers ${CLUSTER_BASE_PORT}/$((CLUSTER_BASE_PORT + 2))/$((CLUSTER_BASE_PORT + 4)), controllers +1), PLAINTEXT:
  cluster-start [--fresh] | cluster-stop | cluster-status
  kill-node N      SIGKILL node N (1..3)
  stop-node N      SIGTERM node N (controlled shutdown) and wait until it is gone
  start-node N     start node N again; wait until it is back in the cluster and in the ISR
                   of every partition it replicates
  logs N [-f]      node N's log
  cluster-reset    delete this version's three nodes' data (they must be stopped)

the authorizer broker (ACLs enforced: StandardAuthorizer, allow.everyone.if.no.acl.found=false), on ${HOST}:
  SASL_PLAINTEXT/SCRAM-SHA-512 ${AUTH_PORT} (clients), controller ${AUTH_CONTROLLER_PORT} (mutual TLS),
  PLAINTEXT ${AUTH_PROBE_PORT} (the readiness probe only: anonymous, no rights)
  auth-start [--fresh]  as start, with SCRAM users $AUTH_ADMIN (super user) and: $AUTH_USERS
  auth-stop | auth-status
  auth-env USER    print the path of USER's env file (SYMFONIC_* variables); exit 1 when none

environment: SYMFONIC_KAFKA_VERSION (default 4.1.1; 4.x or 3.9.x), SYMFONIC_KAFKA_HOME (the
jar cache of that one version), SYMFONIC_KAFKA_STATE, SYMFONIC_KAFKA_PORT,
SYMFONIC_KAFKA_CONTROLLER_PORT, SYMFONIC_KAFKA_SASL_SSL_PORT, SYMFONIC_KAFKA_MTLS_PORT,
SYMFONIC_KAFKA_SCRAM_USER, SYMFONIC_KAFKA_CLUSTER_BASE_PORT, SYMFONIC_KAFKA_HEAP_OPTS,
SYMFONIC_KAFKA_AUTH_PORT, SYMFONIC_KAFKA_AUTH_CONTROLLER_PORT, SYMFONIC_KAFKA_AUTH_PROBE_PORT,
SYMFONIC_KAFKA_AUTH_USERS,
SYMFONIC_KAFKA_EXTRA_CONFIG (opt-in server.properties lines beyond Kafka's defaults),
SYMFONIC_KAFKA_START_TIMEOUT (seconds without progress while starting),
SYMFONIC_KAFKA_START_LIMIT (seconds in all), SYMFONIC_KAFKA_STOP_TIMEOUT,
SYMFONIC_KAFKA_MAVEN_ARGS, SYMFONIC_KAFKA_STARTED_FLAG (a file written when start really
started a broker, for callers that must stop only what they started).
EOF
}

now_us() { printf '%s\n' "${EPOCHREALTIME//[!0-9]/}"; } # microseconds (any decimal separator)
since() { # $1 start (now_us): seconds elapsed, one decimal
  local d=$(($(now_us) - $1))
  printf '%d.%d\n' $((d / 1000000)) $((d % 1000000 / 100000))
}

# --------------------------------------------------------------------------- versions

valid_version() { [[ "$1" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; }
version_major() { printf '%s\n' "${1%%.*}"; }
version_minor() {
  local rest="${1#*.}"
  printf '%s\n' "${rest%%.*}"
}
version_at_least() { # version major minor
  local ma mi
  ma="$(version_major "$1")"
  mi="$(version_minor "$1")"
  ((ma > $2 || (ma == $2 && mi >= $3)))
}

for _v in $KAFKA_VERSIONS; do
  valid_version "$_v" || die "SYMFONIC_KAFKA_VERSION: '$_v' is not a Kafka version (e.g. 4.1.1)"
  version_at_least "$_v" 3 9 \
    || die "Kafka $_v is not supported here: 4.x or 3.9.x (the KRaft settings below differ before 3.9)"
done

first_version() {
  # shellcheck disable=SC2086  # the candidate list is meant to be split
  set -- $KAFKA_VERSIONS
  printf '%s\n' "$1"
}

maven_profile() { # version: the pom profile with that major version's logging binding
  if (($(version_major "$1") >= 4)); then echo kafka-4; else echo kafka-3; fi
}

required_jars() { # version: the jars a complete resolve of that version must hold
  local v="$1" name
  for name in kafka_2.13 kafka-server kafka-server-common kafka-clients kafka-metadata \
    kafka-raft kafka-storage kafka-group-coordinator kafka-transaction-coordinator kafka-tools; do
    printf '%s\n' "$name-$v.jar"
  done
  if (($(version_major "$v") >= 4)); then
    printf '%s\n' "kafka-coordinator-common-$v.jar" "kafka-share-coordinator-$v.jar"
  fi
}

check_libs() { # version dir: status 0 when dir is a complete resolve of version; else says why
  local v="$1" dir="$2" jar bad=0
  while read -r jar; do
    [[ -f "$dir/$jar" ]] || { echo "lacks $jar"; bad=1; }
  done < <(required_jars "$v")
  if (($(version_major "$v") >= 4)); then
    # Kafka 4 logs through log4j2: its slf4j binding and log4j-core, and no log4j 1 binding.
    compgen -G "$dir/log4j-slf4j-impl-*.jar" >/dev/null || { echo "lacks the log4j2 slf4j binding"; bad=1; }
    compgen -G "$dir/log4j-core-*.jar" >/dev/null || { echo "lacks log4j-core"; bad=1; }
    if compgen -G "$dir/slf4j-reload4j-*.jar" >/dev/null; then echo "has a second slf4j binding (slf4j-reload4j)"; bad=1; fi
  else
    # Kafka 3.9 logs through log4j 1.x (reload4j): that binding, and no log4j2 binding.
    compgen -G "$dir/slf4j-reload4j-*.jar" >/dev/null || { echo "lacks the reload4j slf4j binding"; bad=1; }
    compgen -G "$dir/reload4j-*.jar" >/dev/null || { echo "lacks reload4j"; bad=1; }
    if compgen -G "$dir/log4j-slf4j-impl-*.jar" >/dev/null; then echo "has a second slf4j binding (log4j-slf4j-impl)"; bad=1; fi
  fi
  return "$bad"
}

# --------------------------------------------------------------------------- requirements

need_python() {
  command -v "$PYTHON" >/dev/null 2>&1 \
    || die "$PYTHON is required (the readiness probe is a small standard-library script)"
}

JAVA=""
need_java() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    JAVA="$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    JAVA="$(command -v java)"
  else
    die "Java 17 or newer is required to run the Kafka broker, and no 'java' was found \
(install a JDK/JRE 17+, e.g. the Debian package openjdk-17-jre-headless, or set JAVA_HOME)"
  fi
  local spec major
  spec="$("$JAVA" -XshowSettings:properties -version 2>&1 \
    | awk -F'= ' '/java.specification.version/ {print $2; exit}')"
  major="${spec#1.}"
  major="${major%%.*}"
  if ! [[ "$major" =~ ^[0-9]+$ ]] || ((major < 17)); then
    die "Java 17 or newer is required to run Kafka, but $JAVA is Java '${spec:-unknown}' \
(set JAVA_HOME to a JDK 17+)"
  fi
}

need_mvn() {
  command -v mvn >/dev/null 2>&1 || die "Maven ('mvn') is required to fetch the Kafka broker jars \
once (install the Debian package maven, or set SYMFONIC_KAFKA_HOME to a directory that already \
holds a complete resolve of that version)"
}

need_tls_tools() {
  command -v openssl >/dev/null 2>&1 || die "openssl is required to make the secure listeners' certificates"
  local keytool="keytool"
  [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/keytool" ]] && keytool="$JAVA_HOME/bin/keytool"
  command -v "$keytool" >/dev/null 2>&1 || die "keytool (part of the JDK) is required for the broker's truststore"
  KEYTOOL="$keytool"
}

# --------------------------------------------------------------------------- Kafka jars

KAFKA_VERSION=""
LIBS=""

# One jar cache per version. SYMFONIC_KAFKA_HOME names the cache of one version: it is never
# overwritten with another version's jars.
kafka_home_for() { printf '%s\n' "${SYMFONIC_KAFKA_HOME:-$CACHE_ROOT/kafka-$1}"; }

is_cached() { # version
  local home
  home="$(kafka_home_for "$1")"
  [[ -f "$home/.complete" && "$(cat "$home/.complete")" == "$1" ]] && check_libs "$1" "$home/libs" >/dev/null
}

cached_version() { # versions...: prints the first candidate with a complete resolve
  local v
  for v in "$@"; do
    if is_cached "$v"; then
      printf '%s\n' "$v"
      return 0
    fi
  done
  return 1
}

# The version a command that launches nothing refers to: the first candidate already in the
# cache, else the first candidate (no Maven).
offline_version() {
  # shellcheck disable=SC2086
  cached_version $KAFKA_VERSIONS || first_version
}

resolve_version() { # $1 version, $2 home: mvn copy-dependencies, marker written last
  local v="$1" home="$2" tmp t0 problems
  if [[ -f "$home/.complete" && "$(cat "$home/.complete")" != "$v" ]]; then
    log "$home holds a resolve of Kafka $(cat "$home/.complete"), not $v: not overwriting another" \
      "version's jars (unset SYMFONIC_KAFKA_HOME, or point it at an empty directory)"
    return 1
  fi
  tmp="$home/libs.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  log "resolving Apache Kafka $v and its runtime dependencies with Maven into $home (once) ..."
  t0="$(now_us)"
  # shellcheck disable=SC2086  # extra Maven arguments are meant to be split
  if ! mvn -B -q -Dstyle.color=never -f "$HELPER_DIR/pom.xml" -P "$(maven_profile "$v")" \
    -Dkafka.version="$v" ${SYMFONIC_KAFKA_MAVEN_ARGS:-} \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
    >"$home/resolve.log" 2>&1; then
    log "Maven could not resolve Kafka $v; the end of its output:"
    tail -n 15 "$home/resolve.log" >&2 || true
    rm -rf "$tmp"
    return 1
  fi
  if ! problems="$(check_libs "$v" "$tmp")"; then
    log "the resolve of Kafka $v is not usable: $(echo "$problems" | paste -sd ';' -)"
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$home/libs"
  mv "$tmp" "$home/libs"
  printf '%s\n' "$v" >"$home/.complete"
  log "Kafka $v resolved in $(since "$t0") s ($(find "$home/libs" -name '*.jar' | wc -l) jars)"
}

ensure_kafka() { # [versions...] (default: the candidates): sets KAFKA_VERSION and LIBS
  local v home
  (($#)) || {
    # shellcheck disable=SC2086
    set -- $KAFKA_VERSIONS
  }
  if v="$(cached_version "$@")"; then
    KAFKA_VERSION="$v"
    LIBS="$(kafka_home_for "$v")/libs"
    return 0
  fi
  need_mvn
  for v in "$@"; do
    home="$(kafka_home_for "$v")"
    mkdir -p "$home"
    # Two callers resolving at once would corrupt each other: serialise on the cache.
    exec 8>"$home/.resolve.lock"
    flock 8
    if is_cached "$v" || resolve_version "$v" "$home"; then
      exec 8>&-
      KAFKA_VERSION="$v"
      LIBS="$home/libs"
      return 0
    fi
    exec 8>&-
    (($# > 1)) && log "trying the next candidate version ..."
  done
  die "none of the Kafka versions '$*' could be resolved with Maven \
(see resolve.log under $(dirname "$(kafka_home_for x)"))"
}

# --------------------------------------------------------------------------- state dirs

# One state directory per port and version: versions never share data (a 3.9 broker cannot
# read storage a 4.x broker wrote) nor pid files. Commands that only look at a broker (stop,
# status, logs, secure-env, the cluster's node commands) act on the broker this script runs on
# the port, whatever its version; start and cluster-start launch the requested version.
single_dir_of() { printf '%s\n' "$STATE_ROOT/single-$PORT-$1"; }
cluster_dir_of() { printf '%s\n' "$STATE_ROOT/cluster-$CLUSTER_BASE_PORT-$1"; }

single_dirs_on_port() { # every single-broker state dir for $PORT, this layout and the old one
  local d
  for d in "$STATE_ROOT/single-$PORT-"*; do [[ -d "$d" ]] && printf '%s\n' "$d"; done
  [[ -d "$STATE_ROOT/single-$PORT" ]] && printf '%s\n' "$STATE_ROOT/single-$PORT"
  [[ "$PORT" == 9092 && -d "$STATE_ROOT/single" ]] && printf '%s\n' "$STATE_ROOT/single"
  return 0
}

cluster_dirs_on_port() {
  local d
  for d in "$STATE_ROOT/cluster-$CLUSTER_BASE_PORT-"*; do [[ -d "$d" ]] && printf '%s\n' "$d"; done
  [[ -d "$STATE_ROOT/cluster-$CLUSTER_BASE_PORT" ]] && printf '%s\n' "$STATE_ROOT/cluster-$CLUSTER_BASE_PORT"
  [[ "$CLUSTER_BASE_PORT" == 19092 && -d "$STATE_ROOT/cluster" ]] && printf '%s\n' "$STATE_ROOT/cluster"
  return 0
}

is_legacy_dir() { # a state dir of the kafka.sh before versioned directories
  [[ "$(basename "$1")" =~ ^(single|cluster)(-[0-9]+)?$ ]]
}

dir_version() { # state dir: the Kafka version that last ran there
  local dir="$1"
  if [[ -s "$dir/version" ]]; then cat "$dir/version"
  elif [[ -s "$dir/node1/version" ]]; then cat "$dir/node1/version"
  else echo "unknown"
  fi
}

SINGLE_DIR=""
pick_single_dir() { # the broker this script runs on $PORT (any version), else the requested one's
  local d
  SINGLE_DIR="$(single_dir_of "$(offline_version)")"
  node_pid "$SINGLE_DIR" >/dev/null && return 0
  while read -r d; do
    if node_pid "$d" >/dev/null; then
      SINGLE_DIR="$d"
      return 0
    fi
  done < <(single_dirs_on_port)
  return 0
}

CLUSTER_DIR=""
cluster_alive() { # cluster dir: status 0 when one of its nodes runs
  local n
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do node_pid "$1/node$n" >/dev/null && return 0; done
  return 1
}
pick_cluster_dir() {
  local d
  CLUSTER_DIR="$(cluster_dir_of "$(offline_version)")"
  cluster_alive "$CLUSTER_DIR" && return 0
  while read -r d; do
    if cluster_alive "$d"; then
      CLUSTER_DIR="$d"
      return 0
    fi
  done < <(cluster_dirs_on_port)
  return 0
}

# --------------------------------------------------------------------------- one node

lock_state() {
  mkdir -p "$STATE_ROOT"
  # One start/stop at a time (two `make test` runs at once must not both launch a broker).
  exec 9>"$STATE_ROOT/.lock"
  flock 9
}

node_pid() { # $1 node dir: prints the pid when that node's JVM is alive
  local dir="$1" pid
  [[ -f "$dir/pid" ]] || return 1
  pid="$(cat "$dir/pid" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against pid reuse: the process must be this node's broker.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "kafka.Kafka $dir/server.properties" \
    || return 1
  printf '%s\n' "$pid"
}

probe() { # $1 host:port, then probe.py options
  "$PYTHON" "$HELPER_DIR/probe.py" "$@"
}

write_log4j() { # $1 node dir: the broker's and the tools' logging, for $KAFKA_VERSION
  local dir="$1"
  if (($(version_major "$KAFKA_VERSION") >= 4)); then
    cat >"$dir/log4j2.properties" <<EOF
# generated by scripts/kafka.sh (Kafka 4: log4j2)
status = warn
name = symfonic-kafka
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = $dir/logs/server.log
appender.file.filePattern = $dir/logs/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.request.additivity = false
logger.request.appenderRef.file.ref = file
EOF
    cat >"$dir/tools-log4j2.properties" <<EOF
# generated by scripts/kafka.sh: command-line tools log warnings to stderr
status = warn
name = symfonic-kafka-tools
appender.err.type = Console
appender.err.name = stderr
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = stderr
EOF
  else
    cat >"$dir/log4j.properties" <<EOF
# generated by scripts/kafka.sh (Kafka 3.9: log4j 1.x through reload4j)
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=$dir/logs/server.log
log4j.appender.file.MaxFileSize=50MB
log4j.appender.file.MaxBackupIndex=3
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
EOF
    cat >"$dir/tools-log4j.properties" <<EOF
# generated by scripts/kafka.sh: command-line tools log warnings to stderr
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
  fi
}

log_opts() { # $1 node dir, $2 broker|tools: the JVM option naming the logging config
  local dir="$1" which="$2" prefix=""
  [[ "$which" == tools ]] && prefix="tools-"
  if (($(version_major "$KAFKA_VERSION") >= 4)); then
    printf '%s\n' "-Dlog4j2.configurationFile=$dir/${prefix}log4j2.properties"
  else
    printf '%s\n' "-Dlog4j.configuration=file:$dir/${prefix}log4j.properties"
  fi
}

# The broker's configuration: what Apache Kafka's quickstart config/server.properties of
# $KAFKA_VERSION sets (config/kraft/server.properties in 3.9), line for line, with this node's
# ports and directories; the cluster replaces the quickstart's one-node replication settings
# with a production cluster's; the single broker adds its secure listeners. Nothing else:
# every other setting is Kafka's code default, as on a broker run with the shipped config.
tls_stores_config() { # secure dir, store password: the broker's keystore and the CA truststore
  cat <<EOF
ssl.keystore.type=PKCS12
ssl.keystore.location=$1/broker.keystore.p12
ssl.keystore.password=$2
ssl.key.password=$2
ssl.truststore.type=PKCS12
ssl.truststore.location=$1/truststore.p12
ssl.truststore.password=$2
EOF
}

write_config() { # dir kind(single|cluster|auth) node_id broker_port controller_port
  local dir="$1" kind="$2" id="$3" bport="$4" cport="$5" v="$KAFKA_VERSION" major voters="" m
  local listeners advertised recovery=1 qs="quickstart config/server.properties"
  major="$(version_major "$v")"
  ((major >= 4)) || qs="quickstart config/kraft/server.properties"
  # 4.2 changed the quickstart's (and the code default's) recovery threads from 1 to 2.
  version_at_least "$v" 4 2 && recovery=2
  mkdir -p "$dir/logs" "$dir/data"
  listeners="PLAINTEXT://$HOST:$bport"
  [[ "$kind" == single ]] && listeners+=",SASL_SSL://$HOST:$SASL_SSL_PORT,SSL://$HOST:$MTLS_PORT"
  [[ "$kind" == auth ]] && listeners+=",SASL_PLAINTEXT://$HOST:$AUTH_PORT"
  advertised="$listeners,CONTROLLER://$HOST:$cport"
  listeners+=",CONTROLLER://$HOST:$cport"
  # The file holds the key and trust store passwords of the secure listeners.
  (
    umask 077
    {
      cat <<EOF
# Generated by scripts/kafka.sh at every start of this node: edit the script, not this file.
#
# Kafka $v, $(case "$kind" in single) echo "the single broker" ;; auth) echo "the authorizer broker (ACLs enforced)" ;; *) echo "node $id of the 3-node cluster" ;; esac).
# Every setting here is either one that Apache Kafka $v's own $qs
# (KRaft, combined broker+controller) sets, with the value it sets, or one this node's ports,
# directories, node id and listeners need. Everything else is Kafka's code default, as on a
# broker run with the shipped config: auto.create.topics.enable=true,
# group.initial.rebalance.delay.ms=3000, offsets.topic.num.partitions=50,
# transaction.state.log.num.partitions=50, log.retention.hours=168, num.partitions=1 ...
# Users run their brokers like that; the tests must see what they see.

############################# Server basics

# quickstart: combined broker and controller (KRaft mode)
process.roles=broker,controller
# quickstart sets 1; $( [[ "$kind" != cluster ]] && echo "this single node is 1" || echo "the cluster numbers its nodes 1..3")
node.id=$id
EOF
      if [[ "$kind" == cluster ]]; then
        for ((m = 1; m <= CLUSTER_SIZE; m++)); do voters+="${voters:+,}$m@$HOST:$(node_cport "$m")"; done
        cat <<EOF
# three controllers in a static quorum (kraft.version 0), as KRaft clusters were set up
# before dynamic quorums: the voters are fixed here; a node keeps its identity across
# restarts, which is all failure tests need
controller.quorum.voters=$voters
EOF
      elif ((major >= 4)); then
        cat <<EOF
# quickstart ($v): the controller quorum is found through this address, and the storage was
# formatted with --standalone, as the quickstart does: a dynamic quorum (kraft.version 1)
# of this one controller
controller.quorum.bootstrap.servers=$HOST:$cport
EOF
      else
        cat <<EOF
# quickstart ($v): a static quorum of this one controller
controller.quorum.voters=1@$HOST:$cport
EOF
      fi
      if [[ "$kind" == auth ]]; then
        auth_listeners_config "$dir" "$listeners" "$advertised"
      else
        cat <<EOF

############################# Listeners

# quickstart: PLAINTEXT://:9092,CONTROLLER://:9093 on every interface. Here: $HOST only, this
# node's ports$( [[ "$kind" == single ]] && echo ", and two secure listeners (below): SASL_SSL with
# SCRAM-SHA-512 on $SASL_SSL_PORT, SSL with mutual TLS on $MTLS_PORT")
listeners=$listeners
# quickstart: the brokers talk to each other over PLAINTEXT
inter.broker.listener.name=PLAINTEXT
# quickstart: the client listeners and the controller listener are advertised
advertised.listeners=$advertised
# quickstart
controller.listener.names=CONTROLLER
# quickstart, unchanged: each listener is named after its security protocol
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
EOF
      fi
      cat <<EOF

############################# Threads and sockets: quickstart (each is also the code default)

num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log basics

# quickstart: /tmp/kraft-combined-logs; here: this node's state directory
log.dirs=$dir/data
# quickstart (also the code default): a topic created without a partition count, e.g. an
# auto-created one, has 1 partition
num.partitions=1
# quickstart (also the code default in $v)
num.recovery.threads.per.data.dir=$recovery

############################# Internal topics

EOF
      if [[ "$kind" != cluster ]]; then
        cat <<EOF
# quickstart: one node can hold one replica. The code defaults (3 replicas, 2 in sync)
# would leave a one-node cluster without consumer offsets and transactions.
offsets.topic.replication.factor=1
EOF
        ((major >= 4)) && cat <<EOF
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
EOF
        cat <<EOF
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
EOF
      else
        cat <<EOF
# Not the quickstart's one-node values but what a production cluster sets: every topic
# (default.replication.factor, code default 1) and every internal topic has three replicas,
# and acks=all needs two in sync (min.insync.replicas, code default 1). For the internal
# topics 3 and 2 are also the code defaults; written out so the file says it.
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
EOF
        ((major >= 4)) && cat <<EOF
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
EOF
        cat <<EOF
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
EOF
      fi
      cat <<EOF

############################# Retention: quickstart (each is also the code default)

log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
EOF
      if [[ "$kind" == single ]]; then
        local s="$dir/secure" pw
        pw="$(cat "$s/store.password")"
        cat <<EOF

############################# Secure listeners (scripts/kafka.sh; not in the quickstart)

# The broker's certificate (signed by this state directory's own CA, subjectAltName
# 127.0.0.1 and localhost) and the CA that client certificates must be signed by, as PKCS12
# stores made with openssl and keytool. Used by both TLS listeners.
$(tls_stores_config "$s" "$pw")
# Mutual TLS on the SSL listener only: a client without a certificate signed by the CA is
# refused during the TLS handshake (the SASL_SSL listener asks for none).
listener.name.ssl.ssl.client.auth=required
# SCRAM-SHA-512 on the SASL_SSL listener. The user "$SCRAM_USER" was created when the
# storage was formatted (kafka-storage format --add-scram); its password is in
# $s/scram.password.
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
      fi
      if [[ -n "${EXTRA_CONFIG//[[:space:]]/}" ]]; then
        cat <<EOF

############################# SYMFONIC_KAFKA_EXTRA_CONFIG: NOT Kafka's defaults

# Set by whoever started this node (an opt-in, e.g. to skip the 3 s initial rebalance delay
# of new consumer groups); a later line wins over an earlier one with the same name.
$EXTRA_CONFIG
EOF
      fi
    } >"$dir/server.properties.tmp"
    mv -f "$dir/server.properties.tmp" "$dir/server.properties"
  )
  write_log4j "$dir"
}

format_storage() { # dir cluster_id [extra StorageTool options...]: once, when the data dir has no meta.properties
  local dir="$1" cid="$2" out
  shift 2
  [[ -f "$dir/data/meta.properties" ]] && return 0
  rm -rf "$dir/data"
  mkdir -p "$dir/data"
  if ! out="$("$JAVA" -Xmx256m "$(log_opts "$dir" tools)" -cp "$LIBS/*" kafka.tools.StorageTool \
    format -t "$cid" -c "$dir/server.properties" "$@" 2>&1)"; then
    printf '%s\n' "$out" | sed -E 's/(password=)[^],]*/\1***/g' >&2
    die "formatting the KRaft storage in $dir/data failed"
  fi
}

new_cluster_id() { # a Kafka Uuid: 16 random bytes, URL-safe base64 without padding
  # Never one starting with '-' (Kafka's Uuid.randomUuid avoids them too): the storage tool
  # would read it as an option and fail about one start in 32.
  "$PYTHON" -c 'import base64, uuid
while (cid := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
    pass
print(cid)'
}

ports_of() { # dir: the setting(s) that choose the ports of the node in dir
  case "$1" in
    "$STATE_ROOT"/auth-*) echo "SYMFONIC_KAFKA_AUTH_PORT (and _AUTH_CONTROLLER_PORT, _AUTH_PROBE_PORT)" ;;
    "$STATE_ROOT"/cluster-*) echo "SYMFONIC_KAFKA_CLUSTER_BASE_PORT" ;;
    *) echo "SYMFONIC_KAFKA_PORT (and _CONTROLLER_PORT, _SASL_SSL_PORT, _MTLS_PORT)" ;;
  esac
}

launch_node() { # dir heap_opts
  local dir="$1" heap="$2" i
  # Kafka binds its acceptors one after another and exits when one fails, after another has
  # served for a moment: a taken port is named here, before a JVM starts.
  "$PYTHON" "$HELPER_DIR/ports.py" free "$dir/server.properties" \
    || die "a port of the broker in $dir is taken: stop what holds it, or set $(ports_of "$dir")"
  [[ -f "$dir/logs/stdout.log" ]] && mv -f "$dir/logs/stdout.log" "$dir/logs/stdout.log.prev"
  rm -f "$dir/pid"
  printf '%s\n' "$KAFKA_VERSION" >"$dir/version"
  # A new session (setsid) so the broker outlives this shell, make and CI steps; the pid is
  # written by the shell that then execs the JVM, so it is the JVM's pid. The state lock's
  # descriptor is closed so the broker does not hold it.
  # shellcheck disable=SC2086,SC2016  # heap options are split; $$ expands in the child
  setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' symfonic-kafka "$dir/pid" \
    "$JAVA" $heap "${JVM_OPTS[@]}" \
    "$(log_opts "$dir" broker)" -Dkafka.logs.dir="$dir/logs" \
    -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
    >"$dir/logs/stdout.log" 2>&1 </dev/null 9>&- 8>&- &
  for ((i = 0; i < 50; i++)); do
    [[ -s "$dir/pid" ]] && return 0
    sleep 0.1
  done
  die "the broker process did not start (see $dir/logs/stdout.log)"
}

# A broker with thousands of partitions spends minutes loading its logs before it serves; a
# fixed bound would kill it half-way. The bound therefore counts time without progress (its
# log not growing), under a hard limit.
wait_ready() { # dir host:port probe-options...: until it serves, the JVM dies, or the bound
  local dir="$1" addr="$2" deadline limit size last_size=-1
  shift 2
  deadline=$((SECONDS + START_TIMEOUT))
  limit=$((SECONDS + START_LIMIT))
  while true; do
    size="$(stat -c %s "$dir/logs/server.log" 2>/dev/null || echo 0)"
    if ((size != last_size)); then
      last_size=$size
      deadline=$((SECONDS + START_TIMEOUT))
      ((deadline > limit)) && deadline=$limit
    fi
    if ! node_pid "$dir" >/dev/null; then
      log "the broker in $dir exited while starting; the end of its logs:"
      tail -n 30 "$dir/logs/server.log" >&2 2>/dev/null || true
      tail -n 10 "$dir/logs/stdout.log" >&2 2>/dev/null || true
      return 1
    fi
    # Served by one listener, and every other one open: an acceptor that failed to bind
    # stops the broker moments after the first served (scripts/kafka/ports.py).
    if probe "$addr" --quiet "$@" && "$PYTHON" "$HELPER_DIR/ports.py" open "$dir/server.properties"; then
      return 0
    fi
    if ((SECONDS >= deadline)); then
      log "the broker on $addr did not serve metadata (no progress in its log for" \
        "${START_TIMEOUT}s, or ${START_LIMIT}s in all); the end of its log:"
      tail -n 30 "$dir/logs/server.log" >&2 2>/dev/null || true
      probe "$addr" "$@" || true
      return 1
    fi
    sleep 0.5
  done
}

signal_node() { # dir signal: send, do not wait
  local pid
  pid="$(node_pid "$1")" || return 1
  kill "-$2" "$pid" 2>/dev/null || true
}

wait_gone() { # dir bound: wait until the node's JVM is gone; SIGKILL after the bound
  local dir="$1" bound="$2" deadline pid killed=0
  deadline=$((SECONDS + bound))
  while pid="$(node_pid "$dir")"; do
    if ((SECONDS >= deadline)); then
      ((killed)) && die "pid $pid survived SIGKILL for 10 s"
      log "pid $pid did not stop within ${bound}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      killed=1
      deadline=$((SECONDS + 10))
    fi
    sleep 0.2
  done
  rm -f "$dir/pid"
}

tail_logs() { # dir [-f]
  local dir="$1" follow="${2:-}"
  [[ -f "$dir/logs/server.log" ]] || die "no log yet at $dir/logs/server.log"
  if [[ "$follow" == "-f" ]]; then
    exec tail -n 200 -F "$dir/logs/server.log"
  fi
  tail -n "${SYMFONIC_KAFKA_LOG_LINES:-200}" "$dir/logs/server.log"
}

# --------------------------------------------------------------------------- secure listeners

KEYTOOL=""

# A CA, the broker's certificate (subjectAltName 127.0.0.1, localhost and $HOST) in a PKCS12
# keystore, the CA in a PKCS12 truststore, and a client certificate and key (PEM, as Python's
# ssl.SSLContext.load_cert_chain takes them) for the mutual-TLS listener. Made once per state
# directory; made again when a file is missing, $HOST changed, or the broker's certificate
# expires within 30 days. `reset` deletes them with the rest of the state.
ensure_certs() { # dir
  local s="$1/secure" tmp san
  if [[ -f "$s/.certs-complete" && "$(cat "$s/.certs-complete")" == "$HOST" ]] \
    && openssl x509 -checkend 2592000 -noout -in "$s/broker.pem" >/dev/null 2>&1 \
    && [[ -f "$s/broker.keystore.p12" && -f "$s/truststore.p12" && -f "$s/client.pem" \
      && -f "$s/client.key" && -f "$s/ca.pem" && -s "$s/store.password" ]]; then
    return 0
  fi
  need_tls_tools
  log "making the secure listeners' CA and certificates in $s ..."
  mkdir -p "$s"
  chmod 700 "$s"
  tmp="$s/.tmp.$$"
  rm -rf "$tmp"
  mkdir -m 700 "$tmp"
  san="IP:127.0.0.1,DNS:localhost"
  if [[ "$HOST" != 127.0.0.1 && "$HOST" != localhost ]]; then
    if [[ "$HOST" =~ ^[0-9.]+$ || "$HOST" == *:* ]]; then san+=",IP:$HOST"; else san+=",DNS:$HOST"; fi
  fi
  (
    set -e
    umask 077
    cd "$tmp"
    openssl rand -hex 24 >store.password
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
      -subj "/CN=symfonic-stream dev CA $(date -u +%Y%m%d%H%M%S)" -keyout ca.key -out ca.pem \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      >/dev/null 2>&1
    sign() { # name subject extensions
      openssl req -newkey rsa:2048 -nodes -sha256 -subj "$2" -keyout "$1.key" -out "$1.csr" >/dev/null 2>&1
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
        -days 825 -sha256 -extfile "$1.ext" -out "$1.pem" >/dev/null 2>&1
      rm -f "$1.csr" "$1.ext"
    }
    sign broker "/CN=localhost/O=symfonic-stream dev broker" \
      "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san"
    sign client "/CN=symfonic-client/O=symfonic-stream dev client" \
      "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
    openssl pkcs12 -export -in broker.pem -inkey broker.key -certfile ca.pem -name broker \
      -out broker.keystore.p12 -passout file:store.password
    "$KEYTOOL" -importcert -noprompt -alias symfonic-dev-ca -file ca.pem -keystore truststore.p12 \
      -storetype PKCS12 -storepass:file store.password >keytool.log 2>&1 || { cat keytool.log >&2; exit 1; }
    rm -f keytool.log
  ) || { rm -rf "$tmp"; die "making the certificates in $s failed"; }
  mv -f "$tmp"/* "$s"/
  rmdir "$tmp"
  printf '%s\n' "$HOST" >"$s/.certs-complete"
  # The SCRAM marker names the password the storage holds; certificates do not touch it.
}

ensure_scram_password() { # dir: the SCRAM user's password, made once, mode 600
  local s="$1/secure"
  mkdir -p "$s"
  chmod 700 "$s"
  if [[ ! -s "$s/scram.password" ]]; then
    (umask 077 && openssl rand -hex 24 >"$s/scram.password")
  fi
  chmod 600 "$s/scram.password"
}

scram_marker() { # dir: what the marker holds when the storage has the user with this password
  local dir="$1" cid
  cid="$(sed -n 's/^cluster.id=//p' "$dir/data/meta.properties" 2>/dev/null | head -n1)"
  printf '%s %s %s\n' "$cid" "$SCRAM_USER" \
    "$(sha256sum "$dir/secure/scram.password" | cut -d' ' -f1)"
}

scram_ok() { # dir: status 0 when the storage is known to hold the SCRAM user and password
  [[ -f "$1/secure/scram.formatted" && "$(cat "$1/secure/scram.formatted")" == "$(scram_marker "$1")" ]]
}

# A storage formatted without the SCRAM user (or with another password) gets it through the
# running broker, as an administrator would add one: kafka-configs --alter --add-config
# 'SCRAM-SHA-512=[...]' (AlterUserScramCredentials, supported in KRaft).
upsert_scram_user() { # dir
  local dir="$1" cls out
  cls="kafka.admin.ConfigCommand"
  # Kafka 4.4 moved ConfigCommand to the tools module.
  if "$PYTHON" - "$LIBS/kafka-tools-$KAFKA_VERSION.jar" <<'EOF'; then
import sys, zipfile
sys.exit(0 if "org/apache/kafka/tools/ConfigCommand.class" in zipfile.ZipFile(sys.argv[1]).namelist() else 1)
EOF
    cls="org.apache.kafka.tools.ConfigCommand"
  fi
  log "the storage in $dir/data has no SCRAM user $SCRAM_USER with the current password: adding it"
  if ! out="$("$JAVA" -Xmx256m "$(log_opts "$dir" tools)" -cp "$LIBS/*" "$cls" \
    --bootstrap-server "$HOST:$PORT" --alter --entity-type users --entity-name "$SCRAM_USER" \
    --add-config "SCRAM-SHA-512=[password=$(cat "$dir/secure/scram.password")]" 2>&1)"; then
    printf '%s\n' "$out" | sed -E 's/(password=)[^],]*/\1***/g' >&2
    return 1
  fi
  (umask 077 && scram_marker "$dir" >"$dir/secure/scram.formatted")
}

write_env_files() { # dir: one NAME=value file per secure listener, mode 600
  local s="$1/secure"
  (
    umask 077
    if scram_ok "$1"; then
      cat >"$s/sasl_ssl.env.tmp" <<EOF
SYMFONIC_BOOTSTRAP_SERVERS=$HOST:$SASL_SSL_PORT
SYMFONIC_SECURITY_PROTOCOL=SASL_SSL
SYMFONIC_SASL_MECHANISM=SCRAM-SHA-512
SYMFONIC_SASL_USERNAME=$SCRAM_USER
SYMFONIC_SASL_PASSWORD=$(cat "$s/scram.password")
SYMFONIC_SSL_CAFILE=$s/ca.pem
EOF
      mv -f "$s/sasl_ssl.env.tmp" "$s/sasl_ssl.env"
    fi
    cat >"$s/mtls.env.tmp" <<EOF
SYMFONIC_BOOTSTRAP_SERVERS=$HOST:$MTLS_PORT
SYMFONIC_SECURITY_PROTOCOL=SSL
SYMFONIC_SSL_CAFILE=$s/ca.pem
SYMFONIC_SSL_CERTFILE=$s/client.pem
SYMFONIC_SSL_KEYFILE=$s/client.key
EOF
    mv -f "$s/mtls.env.tmp" "$s/mtls.env"
  )
}

extra_config_note() {
  [[ -n "${EXTRA_CONFIG//[[:space:]]/}" ]] || return 0
  log "not Kafka's defaults: SYMFONIC_KAFKA_EXTRA_CONFIG added" \
    "$(grep -cvE '^[[:space:]]*(#|$)' <<<"$EXTRA_CONFIG") setting(s) to server.properties"
}

# --------------------------------------------------------------------------- single broker

cmd_start() { # [--fresh]
  local fresh=0
  case "${1:-}" in
    "") ;;
    --fresh) fresh=1 ;;
    *) die "start: unknown option '$1' (expected --fresh)" ;;
  esac
  need_python
  lock_state
  local pid rc=0 t0 d
  t0="$(now_us)"
  SINGLE_DIR="$(single_dir_of "$(offline_version)")"
  if pid="$(node_pid "$SINGLE_DIR")"; then
    if wait_ready "$SINGLE_DIR" "$HOST:$PORT"; then
      echo "kafka.sh: Kafka $(dir_version "$SINGLE_DIR") is already running (pid $pid) on $HOST:$PORT; reusing it"
      return 0
    fi
    die "the broker process $pid is alive but does not serve on $HOST:$PORT \
(scripts/kafka.sh logs; scripts/kafka.sh stop)"
  fi
  # Another version's broker (or one started by an older kafka.sh) on this port.
  while read -r d; do
    if pid="$(node_pid "$d")"; then
      wait_ready "$d" "$HOST:$PORT" || die "the broker process $pid ($d) is alive but does not serve on $HOST:$PORT"
      if is_legacy_dir "$d"; then
        log "the broker on $HOST:$PORT (pid $pid, state $d) was started by an older kafka.sh," \
          "without the secure listeners; reusing it. 'scripts/kafka.sh stop' stops it; the next" \
          "start runs from $SINGLE_DIR"
      else
        log "Kafka $(dir_version "$d") (pid $pid, state $d) already runs on $HOST:$PORT, not the" \
          "requested version; reusing it (scripts/kafka.sh stop stops it)"
      fi
      echo "kafka.sh: a broker is already running (pid $pid) on $HOST:$PORT; reusing it"
      return 0
    fi
  done < <(single_dirs_on_port)
  probe "$HOST:$PORT" --quiet || rc=$?
  if ((rc == 0)); then
    echo "kafka.sh: a Kafka broker not started by this script already answers on $HOST:$PORT; reusing it"
    return 0
  elif ((rc == 2)); then
    die "$HOST:$PORT is taken by something that is not a Kafka broker (set SYMFONIC_KAFKA_PORT)"
  fi
  need_java
  ensure_kafka
  SINGLE_DIR="$(single_dir_of "$KAFKA_VERSION")"
  mkdir -p "$SINGLE_DIR"
  if ((fresh)) && [[ -d "$SINGLE_DIR/data" ]]; then
    # Topics left by earlier runs only slow the start (every partition's log is loaded).
    rm -rf "$SINGLE_DIR/data"
    rm -f "$SINGLE_DIR/secure/scram.formatted"
    log "--fresh: deleted the old storage in $SINGLE_DIR/data"
  fi
  ensure_certs "$SINGLE_DIR"
  ensure_scram_password "$SINGLE_DIR"
  rm -f "$SINGLE_DIR/secure/sasl_ssl.env" "$SINGLE_DIR/secure/mtls.env"
  write_config "$SINGLE_DIR" single 1 "$PORT" "$CONTROLLER_PORT"
  if [[ ! -f "$SINGLE_DIR/data/meta.properties" ]]; then
    local extra=(--add-scram "SCRAM-SHA-512=[name=$SCRAM_USER,password=$(cat "$SINGLE_DIR/secure/scram.password")]")
    # The 4.x quickstart formats a dynamic quorum of this one controller; 3.9's is static.
    (($(version_major "$KAFKA_VERSION") >= 4)) && extra+=(--standalone)
    new_cluster_id >"$SINGLE_DIR/cluster.id"
    format_storage "$SINGLE_DIR" "$(cat "$SINGLE_DIR/cluster.id")" "${extra[@]}"
    (umask 077 && scram_marker "$SINGLE_DIR" >"$SINGLE_DIR/secure/scram.formatted")
  fi
  launch_node "$SINGLE_DIR" "$HEAP_OPTS"
  if ! wait_ready "$SINGLE_DIR" "$HOST:$PORT"; then
    signal_node "$SINGLE_DIR" KILL || true
    rm -f "$SINGLE_DIR/pid"
    die "the Kafka broker did not come up (full log: $SINGLE_DIR/logs/server.log)"
  fi
  if ! scram_ok "$SINGLE_DIR"; then
    upsert_scram_user "$SINGLE_DIR" \
      || log "could not add the SCRAM user: the SASL_SSL listener has no usable user and" \
        "no sasl_ssl.env (scripts/kafka.sh start --fresh formats the storage with it)"
  fi
  write_env_files "$SINGLE_DIR"
  pid="$(cat "$SINGLE_DIR/pid")"
  if [[ -n "${SYMFONIC_KAFKA_STARTED_FLAG:-}" ]]; then
    printf '%s\n' "$pid" >"$SYMFONIC_KAFKA_STARTED_FLAG"
  fi
  echo "kafka.sh: Kafka $KAFKA_VERSION started (pid $pid) in $(since "$t0") s: PLAINTEXT $HOST:$PORT," \
    "SASL_SSL $HOST:$SASL_SSL_PORT, SSL (mutual TLS) $HOST:$MTLS_PORT; state $SINGLE_DIR"
  extra_config_note
}

stop_node() { # state dir, port, what it is: SIGTERM and wait, or say none runs
  local dir="$1" port="$2" what="$3" pid
  if ! pid="$(node_pid "$dir")"; then
    echo "kafka.sh: no $what started by this script is running on port $port"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$dir" "$STOP_TIMEOUT"
  echo "kafka.sh: stopped the $what (pid $pid, Kafka $(dir_version "$dir"), state $dir)"
}

cmd_stop() {
  lock_state
  pick_single_dir
  stop_node "$SINGLE_DIR" "$PORT" broker
}

cmd_status() {
  need_python
  pick_single_dir
  local pid rc=0 out
  out="$(probe "$HOST:$PORT" 2>&1)" || rc=$?
  if pid="$(node_pid "$SINGLE_DIR")"; then
    if ((rc == 0)); then
      echo "running: pid $pid, bootstrap $HOST:$PORT, Kafka $(dir_version "$SINGLE_DIR")," \
        "state $SINGLE_DIR"
      if [[ -f "$SINGLE_DIR/secure/mtls.env" ]]; then
        echo "secure listeners: SASL_SSL $HOST:$SASL_SSL_PORT ($SINGLE_DIR/secure/sasl_ssl.env)," \
          "SSL/mutual TLS $HOST:$MTLS_PORT ($SINGLE_DIR/secure/mtls.env)"
      fi
      echo "$out"
      return 0
    fi
    echo "starting or unhealthy: pid $pid is alive but $HOST:$PORT does not serve metadata ($out)"
    return 2
  fi
  if ((rc == 0)); then
    echo "running: a broker not started by this script answers on $HOST:$PORT"
    echo "$out"
    return 0
  fi
  echo "not running ($out)"
  return 1
}

cmd_secure_env() { # sasl_ssl|mtls
  local which="${1:-}" file
  case "$which" in
    sasl_ssl | mtls) ;;
    *) die "secure-env: expected sasl_ssl or mtls" ;;
  esac
  pick_single_dir
  file="$SINGLE_DIR/secure/$which.env"
  if ! node_pid "$SINGLE_DIR" >/dev/null; then
    log "no broker started by this script runs on port $PORT"
    exit 1
  fi
  if [[ ! -f "$file" ]]; then
    log "the broker on port $PORT (state $SINGLE_DIR) has no $which listener env file"
    exit 1
  fi
  printf '%s\n' "$file"
}

cmd_reset() {
  lock_state
  SINGLE_DIR="$(single_dir_of "$(offline_version)")"
  node_pid "$SINGLE_DIR" >/dev/null && die "the broker is running: scripts/kafka.sh stop first"
  rm -rf "$SINGLE_DIR"
  echo "kafka.sh: deleted $SINGLE_DIR"
}

# --------------------------------------------------------------------------- three nodes

node_dir() { printf '%s\n' "$CLUSTER_DIR/node$1"; }
node_port() { printf '%s\n' $((CLUSTER_BASE_PORT + 2 * ($1 - 1))); }
node_cport() { printf '%s\n' $((CLUSTER_BASE_PORT + 2 * ($1 - 1) + 1)); }
cluster_bootstrap() {
  local n out=""
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do out+="${out:+,}$HOST:$(node_port "$n")"; done
  printf '%s\n' "$out"
}

check_node_arg() {
  [[ "${1:-}" =~ ^[1-3]$ ]] || die "a node number 1..$CLUSTER_SIZE is required"
}

prepare_node() { # n: config (every start) and storage (once)
  local n="$1" dir
  dir="$(node_dir "$n")"
  write_config "$dir" cluster "$n" "$(node_port "$n")" "$(node_cport "$n")"
  format_storage "$dir" "$(cat "$CLUSTER_DIR/cluster.id")"
}

cmd_cluster_start() { # [--fresh]
  local fresh=0
  case "${1:-}" in
    "") ;;
    --fresh) fresh=1 ;;
    *) die "cluster-start: unknown option '$1' (expected --fresh)" ;;
  esac
  need_python
  lock_state
  local n dir d running=0 started=() t0
  t0="$(now_us)"
  CLUSTER_DIR="$(cluster_dir_of "$(offline_version)")"
  while read -r d; do
    [[ "$d" == "$CLUSTER_DIR" ]] && continue
    cluster_alive "$d" && die "a cluster of Kafka $(dir_version "$d") (state $d) runs on these ports: \
scripts/kafka.sh cluster-stop first, or set SYMFONIC_KAFKA_CLUSTER_BASE_PORT"
  done < <(cluster_dirs_on_port)
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    node_pid "$(node_dir "$n")" >/dev/null && running=$((running + 1))
  done
  if ((fresh && running > 0 && running < CLUSTER_SIZE)); then
    die "--fresh: $running of the nodes are running; scripts/kafka.sh cluster-stop first"
  fi
  if ((running < CLUSTER_SIZE)); then
    need_java
    ensure_kafka
    CLUSTER_DIR="$(cluster_dir_of "$KAFKA_VERSION")"
    if ((fresh)) && [[ -d "$CLUSTER_DIR" ]]; then
      for ((n = 1; n <= CLUSTER_SIZE; n++)); do rm -rf "$(node_dir "$n")/data"; done
      rm -f "$CLUSTER_DIR/cluster.id"
      log "--fresh: deleted the old storage of the three nodes in $CLUSTER_DIR"
    fi
    mkdir -p "$CLUSTER_DIR"
    [[ -s "$CLUSTER_DIR/cluster.id" ]] || new_cluster_id >"$CLUSTER_DIR/cluster.id"
    printf '%s\n' "$KAFKA_VERSION" >"$CLUSTER_DIR/version"
  fi
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    dir="$(node_dir "$n")"
    node_pid "$dir" >/dev/null && continue
    if probe "$HOST:$(node_port "$n")" --quiet; then
      die "$HOST:$(node_port "$n") already serves a broker not started by this script"
    fi
    prepare_node "$n"
    launch_node "$dir" "$CLUSTER_HEAP_OPTS"
    started+=("$n")
  done
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    wait_ready "$(node_dir "$n")" "$HOST:$(node_port "$n")" --expect-brokers "$CLUSTER_SIZE" \
      || die "node $n did not come up (scripts/kafka.sh logs $n)"
  done
  if ((${#started[@]} == 0)); then
    echo "kafka.sh: the 3-node cluster (Kafka $(dir_version "$CLUSTER_DIR")) is already running; reusing it"
  else
    echo "kafka.sh: 3-node cluster of Kafka $KAFKA_VERSION up in $(since "$t0") s" \
      "(started nodes ${started[*]}; state $CLUSTER_DIR)"
  fi
  echo "bootstrap servers: $(cluster_bootstrap)"
  ((${#started[@]} == 0)) || extra_config_note
}

cmd_cluster_stop() {
  lock_state
  pick_cluster_dir
  local n any=0
  # SIGTERM all nodes at once: each does a controlled shutdown while the quorum still stands.
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    signal_node "$(node_dir "$n")" TERM && any=1
  done
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    wait_gone "$(node_dir "$n")" "$STOP_TIMEOUT"
  done
  if ((any)); then echo "kafka.sh: cluster stopped ($CLUSTER_DIR)"; else echo "kafka.sh: no cluster node was running"; fi
}

cmd_cluster_status() {
  need_python
  pick_cluster_dir
  local n dir pid healthy=0 first=""
  echo "Kafka $(dir_version "$CLUSTER_DIR"), state $CLUSTER_DIR"
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    dir="$(node_dir "$n")"
    if pid="$(node_pid "$dir")"; then
      if probe "$HOST:$(node_port "$n")" --quiet --expect-node "$n"; then
        echo "node $n: running, pid $pid, broker $HOST:$(node_port "$n"), controller $HOST:$(node_cport "$n")"
        healthy=$((healthy + 1))
        [[ -n "$first" ]] || first="$n"
      else
        echo "node $n: pid $pid alive but not serving on $HOST:$(node_port "$n")"
      fi
    else
      echo "node $n: not running"
    fi
  done
  if [[ -n "$first" ]]; then
    echo "partitions (as node $first sees them): $(probe "$HOST:$(node_port "$first")" --quiet --isr 2>&1 || true)"
  fi
  echo "bootstrap servers: $(cluster_bootstrap)"
  ((healthy == CLUSTER_SIZE))
}

cmd_kill_node() {
  check_node_arg "${1:-}"
  lock_state
  pick_cluster_dir
  local dir pid t0
  t0="$(now_us)"
  dir="$(node_dir "$1")"
  pid="$(node_pid "$dir")" || die "node $1 is not running"
  kill -KILL "$pid"
  wait_gone "$dir" 10
  echo "kafka.sh: node $1 (pid $pid) killed with SIGKILL in $(since "$t0") s"
}

cmd_stop_node() {
  check_node_arg "${1:-}"
  lock_state
  pick_cluster_dir
  local dir pid t0
  t0="$(now_us)"
  dir="$(node_dir "$1")"
  pid="$(node_pid "$dir")" || die "node $1 is not running"
  # A controlled shutdown: the node hands its partition leaderships to the others first.
  kill -TERM "$pid"
  wait_gone "$dir" "$STOP_TIMEOUT"
  echo "kafka.sh: node $1 (pid $pid) stopped (SIGTERM, controlled shutdown) in $(since "$t0") s"
}

cmd_start_node() {
  check_node_arg "${1:-}"
  need_python
  lock_state
  pick_cluster_dir
  local n="$1" dir pid t0 v
  t0="$(now_us)"
  dir="$(node_dir "$n")"
  if pid="$(node_pid "$dir")"; then
    echo "kafka.sh: node $n is already running (pid $pid)"
    return 0
  fi
  [[ -s "$CLUSTER_DIR/cluster.id" ]] || die "no cluster yet in $CLUSTER_DIR: scripts/kafka.sh cluster-start"
  is_legacy_dir "$CLUSTER_DIR" && die "the cluster in $CLUSTER_DIR was made by an older kafka.sh: \
scripts/kafka.sh cluster-stop, then cluster-start"
  v="$(dir_version "$CLUSTER_DIR")"
  valid_version "$v" || die "$CLUSTER_DIR does not say which Kafka version it runs"
  need_java
  ensure_kafka "$v"
  prepare_node "$n"
  launch_node "$dir" "$CLUSTER_HEAP_OPTS"
  # Back in the cluster (unfenced) is not enough for the next failure: until the node has
  # caught up and is in the ISR again, a second node going down can leave a partition below
  # min.insync.replicas. Wait for both.
  wait_ready "$dir" "$HOST:$(node_port "$n")" --expect-node "$n" --expect-in-sync "$n" \
    || die "node $n did not come back (scripts/kafka.sh logs $n)"
  echo "kafka.sh: node $n back (pid $(cat "$dir/pid")) on $HOST:$(node_port "$n") and in the ISR" \
    "of all its partitions in $(since "$t0") s"
}

cmd_cluster_reset() {
  lock_state
  CLUSTER_DIR="$(cluster_dir_of "$(offline_version)")"
  local n
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    node_pid "$(node_dir "$n")" >/dev/null && die "node $n is running: scripts/kafka.sh cluster-stop first"
  done
  rm -rf "$CLUSTER_DIR"
  echo "kafka.sh: deleted $CLUSTER_DIR"
}

# --------------------------------------------------------------------------- authorizer broker

# A single node like the one above, but every client request is authorized: ACLs decide,
# nothing is allowed without one. It proves the ACL plan of `symfonic-stream acls` on a real
# authorizer (tests/integration/test_acls_live.py, make test-acls). Its own ports, state
# directory and certificates, so it runs beside the other brokers.
AUTH_DIR=""
auth_dir_of() { printf '%s\n' "$STATE_ROOT/auth-$AUTH_PORT-$1"; }

pick_auth_dir() { # the authorizer broker this script runs on $AUTH_PORT (any version)
  local d
  AUTH_DIR="$(auth_dir_of "$(offline_version)")"
  node_pid "$AUTH_DIR" >/dev/null && return 0
  for d in "$STATE_ROOT/auth-$AUTH_PORT-"*; do
    if [[ -d "$d" ]] && node_pid "$d" >/dev/null; then
      AUTH_DIR="$d"
      return 0
    fi
  done
  return 0
}

# shellcheck disable=SC2086  # the user list is meant to be split
auth_users() { printf '%s\n' "$AUTH_ADMIN" $AUTH_USERS; }

ensure_auth_passwords() { # dir: one random password per user, made once, mode 600
  local u="$1/secure/users" user
  mkdir -p "$u"
  chmod 700 "$1/secure" "$u"
  while read -r user; do
    [[ -s "$u/$user.password" ]] || (umask 077 && openssl rand -hex 24 >"$u/$user.password")
    chmod 600 "$u/$user.password"
  done < <(auth_users)
}

auth_marker() { # dir: the storage's cluster id and every user's password hash
  local dir="$1" user
  sed -n 's/^cluster.id=//p' "$dir/data/meta.properties" 2>/dev/null | head -n1
  while read -r user; do
    printf '%s %s\n' "$user" "$(sha256sum "$dir/secure/users/$user.password" | cut -d' ' -f1)"
  done < <(auth_users)
}

broker_principal() { # dir: the principal Kafka derives from the broker's certificate
  # Kafka's default principal builder names a TLS client by its certificate's subject in
  # RFC 2253 form (X500Principal.getName()), which openssl prints the same way.
  local subject
  subject="$(openssl x509 -noout -subject -nameopt RFC2253 -in "$1/secure/broker.pem")"
  printf 'User:%s\n' "${subject#subject=}"
}

# The Listeners part of the authorizer broker's server.properties (write_config kind auth),
# with its TLS stores, SASL settings and the authorizer.
auth_listeners_config() { # dir listeners advertised
  local dir="$1" s="$1/secure" pw admin_pw
  pw="$(cat "$s/store.password")"
  admin_pw="$(cat "$s/users/$AUTH_ADMIN.password")"
  cat <<EOF

############################# Listeners (the authorizer broker: not the quickstart's)

# SASL_PLAINTEXT with SCRAM-SHA-512 on $AUTH_PORT: the clients' listener; the users were
# created when the storage was formatted (kafka-storage format --add-scram), their
# passwords are in $s/users/. PLAINTEXT on $AUTH_PROBE_PORT is only for
# scripts/kafka.sh's readiness probe: its clients are User:ANONYMOUS, which no ACL names
# and is no super user, so it gets nothing an ACL guards (ApiVersions, and Metadata listing
# the brokers but no topic, need none).
listeners=$2
advertised.listeners=$3
controller.listener.names=CONTROLLER
# The broker's requests to itself (transaction markers: WriteTxnMarkers needs ClusterAction)
# go over the SCRAM listener as the super user $AUTH_ADMIN. Over PLAINTEXT they would come
# from User:ANONYMOUS, which would then have to be a super user: anyone on the probe port.
inter.broker.listener.name=SASL_PLAINTEXT
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
# The controller listener is mutual TLS: the broker reaches its controller (registration,
# heartbeats, forwarded CreateTopics and CreateAcls, all ClusterAction) with its own
# certificate, whose subject is in super.users. Not SCRAM: a KRaft controller listener cannot
# use it (the credentials live in the metadata the controller serves). Not PLAINTEXT: its
# principal User:ANONYMOUS would have to be a super user.
listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
listener.name.controller.ssl.client.auth=required
$(tls_stores_config "$s" "$pw")
sasl.enabled.mechanisms=SCRAM-SHA-512
# The server side ignores username/password; the broker's own client (inter-broker) uses them.
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$AUTH_ADMIN" password="$admin_pw";

############################# Authorization (the point of this broker)

# KRaft's authorizer: ACLs live in the metadata log, created through the admin API
# (symfonic-stream acls --apply, kafka-acls.sh).
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
# The code default, written out: a resource no ACL names is refused, not open to everyone.
allow.everyone.if.no.acl.found=false
# $AUTH_ADMIN creates the ACLs (and carries inter-broker traffic); the broker's certificate
# principal is the controller listener's client (above). Nobody else bypasses the ACLs.
super.users=User:$AUTH_ADMIN;$(broker_principal "$dir")
EOF
}

write_auth_env_files() { # dir: one env file per user, and a kafka-acls.sh --command-config
  local u="$1/secure/users" user pw
  (
    umask 077
    while read -r user; do
      pw="$(cat "$u/$user.password")"
      cat >"$u/$user.env.tmp" <<EOF
SYMFONIC_BOOTSTRAP_SERVERS=$HOST:$AUTH_PORT
SYMFONIC_SECURITY_PROTOCOL=SASL_PLAINTEXT
SYMFONIC_SASL_MECHANISM=SCRAM-SHA-512
SYMFONIC_SASL_USERNAME=$user
SYMFONIC_SASL_PASSWORD=$pw
EOF
      mv -f "$u/$user.env.tmp" "$u/$user.env"
    done < <(auth_users)
    cat >"$u/$AUTH_ADMIN.properties" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$AUTH_ADMIN" password="$(cat "$u/$AUTH_ADMIN.password")";
EOF
  )
}

auth_reuse() { # status 0 (and says so) when an authorizer broker of this script runs on the port
  local d pid
  for d in "$AUTH_DIR" "$STATE_ROOT/auth-$AUTH_PORT-"*; do
    [[ -d "$d" ]] || continue
    pid="$(node_pid "$d")" || continue
    wait_ready "$d" "$HOST:$AUTH_PROBE_PORT" || die "the authorizer broker $pid ($d) is alive but does not serve"
    echo "kafka.sh: the authorizer broker (Kafka $(dir_version "$d"), pid $pid) already runs on" \
      "$HOST:$AUTH_PORT; reusing it (its storage and ACLs as they are)"
    return 0
  done
  return 1
}

cmd_auth_start() { # [--fresh]
  local fresh=0 rc=0 t0 extra user pid
  case "${1:-}" in
    "") ;;
    --fresh) fresh=1 ;;
    *) die "auth-start: unknown option '$1' (expected --fresh)" ;;
  esac
  need_python
  lock_state
  t0="$(now_us)"
  AUTH_DIR="$(auth_dir_of "$(offline_version)")"
  auth_reuse && return 0
  probe "$HOST:$AUTH_PROBE_PORT" --quiet || rc=$?
  ((rc == 1)) || die "$HOST:$AUTH_PROBE_PORT is taken by something this script did not start \
(set SYMFONIC_KAFKA_AUTH_PORT)"
  need_java
  need_tls_tools
  ensure_kafka
  AUTH_DIR="$(auth_dir_of "$KAFKA_VERSION")"
  mkdir -p "$AUTH_DIR"
  if ((fresh)) && [[ -d "$AUTH_DIR/data" ]]; then
    rm -rf "$AUTH_DIR/data" "$AUTH_DIR/secure/users.formatted"
    log "--fresh: deleted the old storage (topics and ACLs) in $AUTH_DIR/data"
  fi
  ensure_certs "$AUTH_DIR"
  ensure_auth_passwords "$AUTH_DIR"
  write_config "$AUTH_DIR" auth 1 "$AUTH_PROBE_PORT" "$AUTH_CONTROLLER_PORT"
  if [[ ! -f "$AUTH_DIR/data/meta.properties" ]]; then
    extra=()
    while read -r user; do
      extra+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(cat "$AUTH_DIR/secure/users/$user.password")]")
    done < <(auth_users)
    (($(version_major "$KAFKA_VERSION") >= 4)) && extra+=(--standalone)
    format_storage "$AUTH_DIR" "$(new_cluster_id)" "${extra[@]}"
    (umask 077 && auth_marker "$AUTH_DIR" >"$AUTH_DIR/secure/users.formatted")
  elif [[ "$(cat "$AUTH_DIR/secure/users.formatted" 2>/dev/null)" != "$(auth_marker "$AUTH_DIR")" ]]; then
    die "the storage in $AUTH_DIR/data was formatted with other users or passwords \
(SYMFONIC_KAFKA_AUTH_USERS changed?): scripts/kafka.sh auth-start --fresh"
  fi
  launch_node "$AUTH_DIR" "$HEAP_OPTS"
  if ! wait_ready "$AUTH_DIR" "$HOST:$AUTH_PROBE_PORT"; then
    signal_node "$AUTH_DIR" KILL || true
    rm -f "$AUTH_DIR/pid"
    die "the authorizer broker did not come up (full log: $AUTH_DIR/logs/server.log)"
  fi
  write_auth_env_files "$AUTH_DIR"
  pid="$(cat "$AUTH_DIR/pid")"
  [[ -z "${SYMFONIC_KAFKA_STARTED_FLAG:-}" ]] || printf '%s\n' "$pid" >"$SYMFONIC_KAFKA_STARTED_FLAG"
  echo "kafka.sh: the authorizer broker (Kafka $KAFKA_VERSION, pid $pid) started in $(since "$t0") s:" \
    "SASL_PLAINTEXT/SCRAM-SHA-512 $HOST:$AUTH_PORT, users $AUTH_ADMIN (super user) $AUTH_USERS;" \
    "state $AUTH_DIR"
  extra_config_note
}

cmd_auth_stop() {
  lock_state
  pick_auth_dir
  stop_node "$AUTH_DIR" "$AUTH_PORT" "authorizer broker"
}

cmd_auth_status() {
  need_python
  pick_auth_dir
  local pid
  if pid="$(node_pid "$AUTH_DIR")" && probe "$HOST:$AUTH_PROBE_PORT" --quiet; then
    echo "running: pid $pid, SASL_PLAINTEXT $HOST:$AUTH_PORT, Kafka $(dir_version "$AUTH_DIR"), state $AUTH_DIR"
    return 0
  fi
  echo "not running (no authorizer broker of this script serves on $HOST:$AUTH_PORT)"
  return 1
}

cmd_auth_env() { # user
  local user="${1:-}" file
  [[ -n "$user" ]] || die "auth-env: expected a user: $(auth_users | paste -sd ' ' -)"
  pick_auth_dir
  if ! node_pid "$AUTH_DIR" >/dev/null; then
    log "no authorizer broker started by this script runs on port $AUTH_PORT (scripts/kafka.sh auth-start)"
    exit 1
  fi
  file="$AUTH_DIR/secure/users/$user.env"
  if [[ ! "$user" =~ ^[A-Za-z0-9._-]+$ || ! -f "$file" ]]; then
    log "the authorizer broker has no user '$user' (users: $(auth_users | paste -sd ' ' -))"
    exit 1
  fi
  printf '%s\n' "$file"
}


# --------------------------------------------------------------------------- main

main() {
  local cmd="${1:-}"
  shift || true
  case "$cmd" in
    start) cmd_start "$@" ;;
    fetch)
      ensure_kafka
      echo "kafka.sh: Kafka $KAFKA_VERSION jars in $LIBS"
      ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    reset) cmd_reset ;;
    secure-env) cmd_secure_env "${1:-}" ;;
    logs)
      if [[ "${1:-}" =~ ^[1-3]$ ]]; then
        pick_cluster_dir
        tail_logs "$(node_dir "$1")" "${2:-}"
      else
        pick_single_dir
        tail_logs "$SINGLE_DIR" "${1:-}"
      fi
      ;;
    cluster-start) cmd_cluster_start "$@" ;;
    auth-start) cmd_auth_start "$@" ;;
    auth-stop) cmd_auth_stop ;;
    auth-status) cmd_auth_status ;;
    auth-env) cmd_auth_env "${1:-}" ;;
    cluster-stop) cmd_cluster_stop ;;
    cluster-status) cmd_cluster_status ;;
    cluster-reset) cmd_cluster_reset ;;
    kill-node) cmd_kill_node "${1:-}" ;;
    stop-node) cmd_stop_node "${1:-}" ;;
    start-node) cmd_start_node "${1:-}" ;;
    -h | --help | help) usage ;;
    *)
      usage
      exit 2
      ;;
  esac
}

main "$@"
