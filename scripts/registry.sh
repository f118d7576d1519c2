#!/usr/bin/env bash
# The project's own schema registry for development and tests: Apicurio Registry 2.4.2.Final
# with in-memory storage, built once from the public Maven repository (scripts/registry/pom.xml)
# into a cache outside git, serving Confluent's Schema Registry API at
# http://HOST:PORT/apis/ccompat/v7 (docs/schema-registry.md).
#
#   scripts/registry.sh start    build once (cached), start, wait until /health/ready says UP;
#                                reuses a registry this script already runs on the port
#   scripts/registry.sh stop     stop the one this script started on the port (SIGTERM, then KILL)
#   scripts/registry.sh status   running or not (exit 0 when running, 3 when not)
#   scripts/registry.sh url      the Confluent-compatible base URL (what
#                                SYMFONIC_SCHEMA_REGISTRY_URL takes)
#   scripts/registry.sh run CMD  start (or reuse) it, run CMD with SYMFONIC_REGISTRY_URL set to
#                                the URL, then stop it if this run started it; CMD's status
#   scripts/registry.sh build    only the build (for a CI cache warm-up)
#   scripts/registry.sh logs     the end of the registry's log
#
# Settings (environment), each checked before any command runs:
#   SYMFONIC_REGISTRY_PORT           HTTP port (default 8081, Confluent's)
#   SYMFONIC_REGISTRY_HOST           address it listens on (default 127.0.0.1)
#   SYMFONIC_REGISTRY_HOME           the build cache (default ~/.cache/symfonic-stream/
#                                    apicurio-registry-<version>)
#   SYMFONIC_REGISTRY_STATE          pid file and log (default build/registry-<port> in the
#                                    repository)
#   SYMFONIC_REGISTRY_START_TIMEOUT  seconds to wait for the health check (default 120)
#   SYMFONIC_REGISTRY_HEAP_OPTS      JVM heap options (default -Xms64m -Xmx512m)
#   SYMFONIC_REGISTRY_MAVEN_ARGS     extra Maven arguments for the build
#   SYMFONIC_REGISTRY_STARTED_FLAG   a file written with the pid when start really started one
set -euo pipefail

NAME=registry.sh
VERSION=2.4.2.Final
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"

log() { echo "$NAME: $*" >&2; }
die() { echo "$NAME: error: $*" >&2; exit 1; }

number() { # name value
  [[ "$2" =~ ^[0-9]+$ ]] || die "$1 must be a whole number, not '$2'"
}

command -v curl >/dev/null 2>&1 || die "curl is required (the health check)"

PORT="${SYMFONIC_REGISTRY_PORT:-8081}"
number SYMFONIC_REGISTRY_PORT "$PORT"
{ [ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ]; } || die "SYMFONIC_REGISTRY_PORT must be a port (1-65535), not '$PORT'"
HOST="${SYMFONIC_REGISTRY_HOST:-127.0.0.1}"
[[ "$HOST" =~ ^[A-Za-z0-9.:-]+$ ]] || die "SYMFONIC_REGISTRY_HOST: '$HOST' is not a host name or address"
TIMEOUT="${SYMFONIC_REGISTRY_START_TIMEOUT:-120}"
number SYMFONIC_REGISTRY_START_TIMEOUT "$TIMEOUT"
HOME_DIR="${SYMFONIC_REGISTRY_HOME:-${HOME}/.cache/symfonic-stream/apicurio-registry-$VERSION}"
STATE="${SYMFONIC_REGISTRY_STATE:-$ROOT/build/registry-$PORT}"
read -r -a HEAP <<<"${SYMFONIC_REGISTRY_HEAP_OPTS:--Xms64m -Xmx512m}"
read -r -a MAVEN_ARGS <<<"${SYMFONIC_REGISTRY_MAVEN_ARGS:-}"
RUNNER="$HOME_DIR/build/registry-runtime-$VERSION-runner.jar"
PID_FILE="$STATE/registry.pid"
LOG="$STATE/registry.log"
BASE="http://$HOST:$PORT"
URL="$BASE/apis/ccompat/v7"

built() { [ "$(cat "$HOME_DIR/.complete" 2>/dev/null)" = "$VERSION" ] && [ -f "$RUNNER" ]; }

# Once per cache: the stand-in deployment artifact into the local Maven repository, then the
# registry's runner jar; checked, then marked complete (the marker is written last). Two
# callers at once are serialised on a lock in the cache.
build() {
  built && return 0
  command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is required to build the registry once"
  command -v java >/dev/null 2>&1 || die "Java 17 or newer is required"
  mkdir -p "$HOME_DIR"
  exec 9>"$HOME_DIR/.build.lock"
  flock 9
  if built; then exec 9>&-; return 0; fi
  log "building Apicurio Registry $VERSION with Maven into $HOME_DIR (once) ..."
  local t0=$SECONDS
  rm -rf "$HOME_DIR/build" "$HOME_DIR/stand-in"
  if ! { mvn -B -q -Dstyle.color=never -f "$HERE/registry/stand-in/pom.xml" \
           -Dregistry.build.directory="$HOME_DIR/stand-in" "${MAVEN_ARGS[@]}" install &&
         mvn -B -q -Dstyle.color=never -f "$HERE/registry/pom.xml" \
           -Dregistry.build.directory="$HOME_DIR/build" "${MAVEN_ARGS[@]}" package; } \
       >"$HOME_DIR/build.log" 2>&1; then
    log "Maven could not build the registry; the end of $HOME_DIR/build.log:"
    tail -n 20 "$HOME_DIR/build.log" >&2
    exit 1
  fi
  [ -f "$RUNNER" ] || die "the build made no $RUNNER (see $HOME_DIR/build.log)"
  echo "$VERSION" >"$HOME_DIR/.complete"
  log "Apicurio Registry $VERSION built in $((SECONDS - t0)) s"
  exec 9>&-
}

pid_alive() {
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  # Our process only: the pid's command line names our runner jar.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$RUNNER" || return 1
  echo "$pid"
}

ready() {
  local body
  body="$(curl -sf --max-time 2 "$BASE/health/ready" 2>/dev/null)" || return 1
  [[ "$body" == *'"status": "UP"'* || "$body" == *'"status":"UP"'* ]]
}

start() {
  local pid
  if pid="$(pid_alive)"; then
    if ready; then log "Apicurio Registry is already running (pid $pid) on $BASE; reusing it"; echo "$URL"; return 0; fi
    die "the registry process $pid is alive but not ready on $BASE ($NAME logs; $NAME stop)"
  fi
  if curl -s --max-time 2 -o /dev/null "$BASE/" 2>/dev/null; then
    die "something else already serves on $BASE: set SYMFONIC_REGISTRY_PORT to a free port"
  fi
  build
  mkdir -p "$STATE"
  log "starting Apicurio Registry $VERSION on $BASE (log: $LOG) ..."
  local t0=$SECONDS
  # setsid: its own session, so a Ctrl-C in the caller's terminal does not reach it.
  setsid java "${HEAP[@]}" -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
    -Dquarkus.http.host="$HOST" -Dquarkus.http.port="$PORT" \
    -Dquarkus.log.console.color=false -Dquarkus.banner.enabled=false \
    -jar "$RUNNER" >"$LOG" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PID_FILE"
  while ! ready; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "the registry exited while starting; the end of $LOG:"; tail -n 20 "$LOG" >&2; rm -f "$PID_FILE"; exit 1
    fi
    if [ $((SECONDS - t0)) -ge "$TIMEOUT" ]; then
      kill "$pid" 2>/dev/null || true
      die "the registry was not ready on $BASE within $TIMEOUT s (SYMFONIC_REGISTRY_START_TIMEOUT; $LOG)"
    fi
    sleep 0.3
  done
  [ -z "${SYMFONIC_REGISTRY_STARTED_FLAG:-}" ] || echo "$pid" >"$SYMFONIC_REGISTRY_STARTED_FLAG"
  log "Apicurio Registry ready (pid $pid) on $BASE in $((SECONDS - t0)) s"
  echo "$URL"
}

stop() {
  local pid
  if ! pid="$(pid_alive)"; then log "no registry of this script runs on port $PORT"; rm -f "$PID_FILE"; return 0; fi
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then log "still running after 10 s: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$PID_FILE"
  log "stopped (pid $pid)"
}

status() {
  local pid
  if pid="$(pid_alive)" && ready; then echo "running (pid $pid) on $BASE: $URL"; return 0; fi
  echo "not running on port $PORT"; return 3
}

run() {
  local url flag started=0 rc=0
  [ $# -gt 0 ] || die "run: no command given"
  flag="$(mktemp)"; rm -f "$flag"
  url="$(SYMFONIC_REGISTRY_STARTED_FLAG="$flag" start)"
  if [ -s "$flag" ]; then started=1; fi
  rm -f "$flag"
  # shellcheck disable=SC2317  # (called by the trap)
  stop_if_started() { if [ "$started" = 1 ]; then stop || true; fi; }
  trap stop_if_started EXIT; trap 'exit 130' INT; trap 'exit 143' TERM
  SYMFONIC_REGISTRY_URL="$url" "$@" || rc=$?
  exit "$rc"
}

case "${1:-help}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) echo "$URL" ;;
  run) shift; run "$@" ;;
  build) build; echo "$RUNNER" ;;
  logs) tail -n "${SYMFONIC_REGISTRY_LOG_LINES:-200}" "$LOG" ;;
  help|-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$1' (start, stop, status, url, run, build, logs, help)" ;;
esac
