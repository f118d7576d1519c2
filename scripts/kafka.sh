#!/usr/bin/env bash
# The project's own Apache Kafka (KRaft, no ZooKeeper, no Docker) for development and tests.
#
#   scripts/kafka.sh start | stop | status | logs [-f] | reset | fetch
#   scripts/kafka.sh cluster-start | cluster-stop | cluster-status
#   scripts/kafka.sh kill-node N | start-node N | logs N [-f]
#
# The broker's jars are resolved once with Maven into a cache outside git; data, logs and pid
# files live in a state directory outside git. See docs/dev-broker.md.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HELPER_DIR="$SCRIPT_DIR/kafka"
CACHE_ROOT="$HOME/.cache/symfonic-stream"

# Tried in order until Maven resolves one; SYMFONIC_KAFKA_VERSION pins one (or a list).
KAFKA_VERSIONS="${SYMFONIC_KAFKA_VERSION:-4.1.1 4.1.0 4.0.1 4.0.0}"
STATE_ROOT="${SYMFONIC_KAFKA_STATE:-$CACHE_ROOT/state}"
HOST="${SYMFONIC_KAFKA_HOST:-127.0.0.1}"
PORT="${SYMFONIC_KAFKA_PORT:-9092}"
CONTROLLER_PORT="${SYMFONIC_KAFKA_CONTROLLER_PORT:-9093}"
HEAP_OPTS="${SYMFONIC_KAFKA_HEAP_OPTS:--Xms512m -Xmx1g}"
CLUSTER_BASE_PORT="${SYMFONIC_KAFKA_CLUSTER_BASE_PORT:-19092}"
CLUSTER_HEAP_OPTS="${SYMFONIC_KAFKA_CLUSTER_HEAP_OPTS:--Xms512m -Xmx512m}"
CLUSTER_SIZE=3
START_TIMEOUT="${SYMFONIC_KAFKA_START_TIMEOUT:-90}"
START_LIMIT="${SYMFONIC_KAFKA_START_LIMIT:-600}"
STOP_TIMEOUT="${SYMFONIC_KAFKA_STOP_TIMEOUT:-30}"
PYTHON="${SYMFONIC_KAFKA_PYTHON:-python3}"
JVM_OPTS=(-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
  -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true)
# shellcheck disable=SC2206  # word splitting of user-supplied JVM options is intended
JVM_OPTS+=(${SYMFONIC_KAFKA_JVM_OPTS:-})

# A broker on a non-default port gets its own directory, so brokers on different ports never
# share data or pid files.
SINGLE_DIR="$STATE_ROOT/single"
[[ "$PORT" == 9092 ]] || SINGLE_DIR="$STATE_ROOT/single-$PORT"
CLUSTER_DIR="$STATE_ROOT/cluster"
[[ "$CLUSTER_BASE_PORT" == 19092 ]] || CLUSTER_DIR="$STATE_ROOT/cluster-$CLUSTER_BASE_PORT"

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { printf 'kafka.sh: error: %s\n' "$*" >&2; exit 1; }

usage() {
  cat >&2 <<EOF
usage: scripts/kafka.sh COMMAND

single broker (broker+controller on ${HOST}:${PORT}, controller ${HOST}:${CONTROLLER_PORT}):
  start [--fresh]  resolve Kafka if needed, format storage once, start, wait until it serves
                   (reuses a broker that already answers on the port); --fresh: a broker
                   this command launches starts from empty storage (make test uses it)
  stop             SIGTERM, wait up to ${STOP_TIMEOUT}s, then SIGKILL
  status           exit 0 when a broker answers metadata requests, 1 when none runs
  logs [-f]        the broker log (last 200 lines, or follow)
  reset            delete the single broker's data (it must be stopped)
  fetch            only resolve the Kafka jars into the cache (no broker)

three nodes on one host (brokers ${CLUSTER_BASE_PORT}/$((CLUSTER_BASE_PORT + 2))/$((CLUSTER_BASE_PORT + 4)), controllers +1):
  cluster-start | cluster-stop | cluster-status
  kill-node N      SIGKILL node N (1..3)
  start-node N     start node N again and wait until it is back in the cluster
  logs N [-f]      node N's log
  cluster-reset    delete the three nodes' data (they must be stopped)

environment: SYMFONIC_KAFKA_VERSION, SYMFONIC_KAFKA_HOME (jar cache), SYMFONIC_KAFKA_STATE,
SYMFONIC_KAFKA_PORT, SYMFONIC_KAFKA_CONTROLLER_PORT, SYMFONIC_KAFKA_CLUSTER_BASE_PORT,
SYMFONIC_KAFKA_HEAP_OPTS, SYMFONIC_KAFKA_START_TIMEOUT (seconds without progress while
starting), SYMFONIC_KAFKA_START_LIMIT (seconds in all), SYMFONIC_KAFKA_STOP_TIMEOUT,
SYMFONIC_KAFKA_MAVEN_ARGS, SYMFONIC_KAFKA_STARTED_FLAG (a file written when start really
started a broker, for callers that must stop only what they started).
EOF
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
    die "Java 17 or newer is required to run Kafka 4, but $JAVA is Java '${spec:-unknown}' \
(set JAVA_HOME to a JDK 17+)"
  fi
}

need_mvn() {
  command -v mvn >/dev/null 2>&1 || die "Maven ('mvn') is required to fetch the Kafka broker jars \
once (install the Debian package maven, or set SYMFONIC_KAFKA_HOME to a directory that already \
holds a complete resolve)"
}

# --------------------------------------------------------------------------- Kafka jars

KAFKA_VERSION=""
LIBS=""

kafka_home_for() { printf '%s\n' "${SYMFONIC_KAFKA_HOME:-$CACHE_ROOT/kafka-$1}"; }

cached_version() { # prints the first candidate version with a complete resolve
  local v home
  for v in $KAFKA_VERSIONS; do
    home="$(kafka_home_for "$v")"
    if [[ -f "$home/.complete" && "$(cat "$home/.complete")" == "$v" ]]; then
      printf '%s\n' "$v"
      return 0
    fi
  done
  return 1
}

resolve_version() { # $1 version, $2 home: mvn copy-dependencies, marker written last
  local v="$1" home="$2" tmp t0 jar
  tmp="$home/libs.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  log "resolving Apache Kafka $v and its runtime dependencies with Maven into $home (once) ..."
  t0=$SECONDS
  # shellcheck disable=SC2086  # extra Maven arguments are meant to be split
  if ! mvn -B -q -Dstyle.color=never -f "$HELPER_DIR/pom.xml" -Dkafka.version="$v" ${SYMFONIC_KAFKA_MAVEN_ARGS:-} \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
    >"$home/resolve.log" 2>&1; then
    log "Maven could not resolve Kafka $v; the end of its output:"
    tail -n 15 "$home/resolve.log" >&2 || true
    rm -rf "$tmp"
    return 1
  fi
  for jar in "kafka_2.13-$v.jar" "kafka-server-$v.jar" "kafka-clients-$v.jar" \
    "kafka-metadata-$v.jar" "kafka-raft-$v.jar" "kafka-storage-$v.jar" \
    "kafka-group-coordinator-$v.jar" "kafka-transaction-coordinator-$v.jar"; do
    [[ -f "$tmp/$jar" ]] || { log "the resolve of Kafka $v lacks $jar"; rm -rf "$tmp"; return 1; }
  done
  compgen -G "$tmp/log4j-slf4j*-impl-*.jar" >/dev/null \
    || { log "the resolve of Kafka $v lacks a log4j slf4j binding"; rm -rf "$tmp"; return 1; }
  rm -rf "$home/libs"
  mv "$tmp" "$home/libs"
  printf '%s\n' "$v" >"$home/.complete"
  log "Kafka $v resolved in $((SECONDS - t0)) s ($(find "$home/libs" -name '*.jar' | wc -l) jars)"
}

ensure_kafka() {
  local v home
  if v="$(cached_version)"; then
    KAFKA_VERSION="$v"
    LIBS="$(kafka_home_for "$v")/libs"
    return 0
  fi
  need_mvn
  for v in $KAFKA_VERSIONS; do
    home="$(kafka_home_for "$v")"
    mkdir -p "$home"
    # Two callers resolving at once would corrupt each other: serialise on the cache.
    exec 8>"$home/.resolve.lock"
    flock 8
    if [[ -f "$home/.complete" && "$(cat "$home/.complete")" == "$v" ]] \
      || resolve_version "$v" "$home"; then
      exec 8>&-
      KAFKA_VERSION="$v"
      LIBS="$home/libs"
      return 0
    fi
    exec 8>&-
    log "trying the next candidate version ..."
  done
  die "none of the Kafka versions '$KAFKA_VERSIONS' could be resolved with Maven \
(see resolve.log under $(dirname "$(kafka_home_for x)"))"
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

write_log4j() { # $1 node dir
  local dir="$1"
  cat >"$dir/log4j2.properties" <<EOF
# generated by scripts/kafka.sh
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
}

write_config() { # dir node_id broker_port controller_port voters rf min_isr
  local dir="$1" id="$2" bport="$3" cport="$4" voters="$5" rf="$6" isr="$7"
  mkdir -p "$dir/logs" "$dir/data"
  cat >"$dir/server.properties" <<EOF
# generated by scripts/kafka.sh on every start: edit the script, not this file
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$bport,CONTROLLER://$HOST:$cport
advertised.listeners=PLAINTEXT://$HOST:$bport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$dir/data

# Topics are created explicitly (topics ensure, test fixtures): a typo must fail loudly.
auto.create.topics.enable=false
num.partitions=4
default.replication.factor=$rf
min.insync.replicas=$isr

offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=12
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=12
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
transaction.abort.timed.out.transaction.cleanup.interval.ms=10000
transaction.remove.expired.transaction.cleanup.interval.ms=60000

# Small machine: few threads.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=24
EOF
  write_log4j "$dir"
}

format_storage() { # dir cluster_id: once, when the data dir has no meta.properties
  local dir="$1" cid="$2" out
  [[ -f "$dir/data/meta.properties" ]] && return 0
  rm -rf "$dir/data"
  mkdir -p "$dir/data"
  if ! out="$("$JAVA" -Xmx256m -Dlog4j2.configurationFile="$dir/tools-log4j2.properties" \
    -cp "$LIBS/*" kafka.tools.StorageTool format -t "$cid" -c "$dir/server.properties" 2>&1)"; then
    printf '%s\n' "$out" >&2
    die "formatting the KRaft storage in $dir/data failed"
  fi
}

new_cluster_id() { # a Kafka Uuid: 16 random bytes, URL-safe base64 without padding
  "$PYTHON" -c 'import base64, uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))'
}

launch_node() { # dir heap_opts
  local dir="$1" heap="$2" i
  [[ -f "$dir/logs/stdout.log" ]] && mv -f "$dir/logs/stdout.log" "$dir/logs/stdout.log.prev"
  rm -f "$dir/pid"
  printf '%s\n' "$KAFKA_VERSION" >"$dir/version"
  # A new session (setsid) so the broker outlives this shell, make and CI steps; the pid is
  # written by the shell that then execs the JVM, so it is the JVM's pid. The state lock's
  # descriptor is closed so the broker does not hold it.
  # shellcheck disable=SC2086,SC2016  # heap options are split; $$ expands in the child
  setsid nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' symfonic-kafka "$dir/pid" \
    "$JAVA" $heap "${JVM_OPTS[@]}" \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" -Dkafka.logs.dir="$dir/logs" \
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
    if probe "$addr" --quiet "$@"; then
      return 0
    fi
    if ((SECONDS >= deadline)); then
      log "the broker on $addr did not serve metadata (no progress in its log for" \
        "${START_TIMEOUT}s, or ${START_LIMIT}s in all); the end of its log:"
      tail -n 30 "$dir/logs/server.log" >&2 2>/dev/null || true
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
    sleep 0.3
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
  local pid rc=0 t0=$SECONDS
  if pid="$(node_pid "$SINGLE_DIR")"; then
    if wait_ready "$SINGLE_DIR" "$HOST:$PORT"; then
      echo "kafka.sh: a broker is already running (pid $pid) on $HOST:$PORT; reusing it"
      return 0
    fi
    die "the broker process $pid is alive but does not serve on $HOST:$PORT \
(scripts/kafka.sh logs; scripts/kafka.sh stop)"
  fi
  probe "$HOST:$PORT" --quiet || rc=$?
  if ((rc == 0)); then
    echo "kafka.sh: a Kafka broker not started by this script already answers on $HOST:$PORT; reusing it"
    return 0
  elif ((rc == 2)); then
    die "$HOST:$PORT is taken by something that is not a Kafka broker (set SYMFONIC_KAFKA_PORT)"
  fi
  need_java
  ensure_kafka
  local voters="1@$HOST:$CONTROLLER_PORT"
  if ((fresh)) && [[ -d "$SINGLE_DIR/data" ]]; then
    # Topics left by earlier runs only slow the start (every partition's log is loaded).
    rm -rf "$SINGLE_DIR/data"
    log "--fresh: deleted the old storage in $SINGLE_DIR/data"
  fi
  write_config "$SINGLE_DIR" 1 "$PORT" "$CONTROLLER_PORT" "$voters" 1 1
  if [[ ! -f "$SINGLE_DIR/data/meta.properties" ]]; then
    new_cluster_id >"$SINGLE_DIR/cluster.id"
    format_storage "$SINGLE_DIR" "$(cat "$SINGLE_DIR/cluster.id")"
  fi
  launch_node "$SINGLE_DIR" "$HEAP_OPTS"
  if ! wait_ready "$SINGLE_DIR" "$HOST:$PORT"; then
    signal_node "$SINGLE_DIR" KILL || true
    rm -f "$SINGLE_DIR/pid"
    die "the Kafka broker did not come up (full log: $SINGLE_DIR/logs/server.log)"
  fi
  pid="$(cat "$SINGLE_DIR/pid")"
  if [[ -n "${SYMFONIC_KAFKA_STARTED_FLAG:-}" ]]; then
    printf '%s\n' "$pid" >"$SYMFONIC_KAFKA_STARTED_FLAG"
  fi
  echo "kafka.sh: Kafka $KAFKA_VERSION started (pid $pid) on $HOST:$PORT in $((SECONDS - t0)) s;" \
    "log: $SINGLE_DIR/logs/server.log"
}

cmd_stop() {
  lock_state
  local pid
  if ! pid="$(node_pid "$SINGLE_DIR")"; then
    rm -f "$SINGLE_DIR/pid"
    echo "kafka.sh: no broker started by this script is running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  wait_gone "$SINGLE_DIR" "$STOP_TIMEOUT"
  echo "kafka.sh: stopped the broker (pid $pid)"
}

cmd_status() {
  need_python
  local pid rc=0 out
  out="$(probe "$HOST:$PORT" 2>&1)" || rc=$?
  if pid="$(node_pid "$SINGLE_DIR")"; then
    if ((rc == 0)); then
      echo "running: pid $pid, bootstrap $HOST:$PORT, Kafka $(cat "$SINGLE_DIR/version" 2>/dev/null)," \
        "state $SINGLE_DIR"
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

cmd_reset() {
  lock_state
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
  local n="$1" dir voters="" m
  dir="$(node_dir "$n")"
  for ((m = 1; m <= CLUSTER_SIZE; m++)); do voters+="${voters:+,}$m@$HOST:$(node_cport "$m")"; done
  write_config "$dir" "$n" "$(node_port "$n")" "$(node_cport "$n")" "$voters" 3 2
  format_storage "$dir" "$(cat "$CLUSTER_DIR/cluster.id")"
}

cmd_cluster_start() {
  need_python
  lock_state
  local n dir started=() t0=$SECONDS
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    dir="$(node_dir "$n")"
    node_pid "$dir" >/dev/null && continue
    if probe "$HOST:$(node_port "$n")" --quiet; then
      die "$HOST:$(node_port "$n") already serves a broker not started by this script"
    fi
    if ((${#started[@]} == 0)); then
      need_java
      ensure_kafka
      mkdir -p "$CLUSTER_DIR"
      [[ -s "$CLUSTER_DIR/cluster.id" ]] || new_cluster_id >"$CLUSTER_DIR/cluster.id"
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
    echo "kafka.sh: the 3-node cluster is already running; reusing it"
  else
    echo "kafka.sh: 3-node cluster up in $((SECONDS - t0)) s (started nodes ${started[*]})"
  fi
  echo "bootstrap servers: $(cluster_bootstrap)"
}

cmd_cluster_stop() {
  lock_state
  local n any=0
  # SIGTERM all nodes at once: each does a controlled shutdown while the quorum still stands.
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    signal_node "$(node_dir "$n")" TERM && any=1
  done
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    wait_gone "$(node_dir "$n")" "$STOP_TIMEOUT"
  done
  if ((any)); then echo "kafka.sh: cluster stopped"; else echo "kafka.sh: no cluster node was running"; fi
}

cmd_cluster_status() {
  need_python
  local n dir pid healthy=0
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    dir="$(node_dir "$n")"
    if pid="$(node_pid "$dir")"; then
      if probe "$HOST:$(node_port "$n")" --quiet --expect-node "$n"; then
        echo "node $n: running, pid $pid, broker $HOST:$(node_port "$n"), controller $HOST:$(node_cport "$n")"
        healthy=$((healthy + 1))
      else
        echo "node $n: pid $pid alive but not serving on $HOST:$(node_port "$n")"
      fi
    else
      echo "node $n: not running"
    fi
  done
  echo "bootstrap servers: $(cluster_bootstrap)"
  ((healthy == CLUSTER_SIZE))
}

cmd_kill_node() {
  check_node_arg "${1:-}"
  lock_state
  local dir pid
  dir="$(node_dir "$1")"
  pid="$(node_pid "$dir")" || die "node $1 is not running"
  kill -KILL "$pid"
  wait_gone "$dir" 10
  echo "kafka.sh: node $1 (pid $pid) killed with SIGKILL"
}

cmd_start_node() {
  check_node_arg "${1:-}"
  need_python
  lock_state
  local n="$1" dir pid t0=$SECONDS
  dir="$(node_dir "$n")"
  if pid="$(node_pid "$dir")"; then
    echo "kafka.sh: node $n is already running (pid $pid)"
    return 0
  fi
  [[ -s "$CLUSTER_DIR/cluster.id" ]] || die "no cluster yet: scripts/kafka.sh cluster-start"
  need_java
  ensure_kafka
  prepare_node "$n"
  launch_node "$dir" "$CLUSTER_HEAP_OPTS"
  wait_ready "$dir" "$HOST:$(node_port "$n")" --expect-node "$n" \
    || die "node $n did not come back (scripts/kafka.sh logs $n)"
  echo "kafka.sh: node $n back (pid $(cat "$dir/pid")) on $HOST:$(node_port "$n") in $((SECONDS - t0)) s"
}

cmd_cluster_reset() {
  lock_state
  local n
  for ((n = 1; n <= CLUSTER_SIZE; n++)); do
    node_pid "$(node_dir "$n")" >/dev/null && die "node $n is running: scripts/kafka.sh cluster-stop first"
  done
  rm -rf "$CLUSTER_DIR"
  echo "kafka.sh: deleted $CLUSTER_DIR"
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
    logs)
      if [[ "${1:-}" =~ ^[1-3]$ ]]; then
        tail_logs "$(node_dir "$1")" "${2:-}"
      else
        tail_logs "$SINGLE_DIR" "${1:-}"
      fi
      ;;
    cluster-start) cmd_cluster_start ;;
    cluster-stop) cmd_cluster_stop ;;
    cluster-status) cmd_cluster_status ;;
    cluster-reset) cmd_cluster_reset ;;
    kill-node) cmd_kill_node "${1:-}" ;;
    start-node) cmd_start_node "${1:-}" ;;
    -h | --help | help) usage ;;
    *)
      usage
      exit 2
      ;;
  esac
}

main "$@"
