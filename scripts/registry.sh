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
PREFIX=SYMFONIC_REGISTRY_
VERSION=2.4.2.Final
WHAT="Apicurio Registry $VERSION"
DEFAULT_PORT=8081
DEFAULT_TIMEOUT=120
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
# shellcheck source=scripts/lib/service.sh
. "$HERE/lib/service.sh"

HOME_DIR="${SYMFONIC_REGISTRY_HOME:-${HOME}/.cache/symfonic-stream/apicurio-registry-$VERSION}"
read -r -a HEAP <<<"${SYMFONIC_REGISTRY_HEAP_OPTS:--Xms64m -Xmx512m}"
read -r -a MAVEN_ARGS <<<"${SYMFONIC_REGISTRY_MAVEN_ARGS:-}"
RUNNER="$HOME_DIR/build/registry-runtime-$VERSION-runner.jar"
PID_FILE="$STATE/registry.pid"
LOG="$STATE/registry.log"
BASE="http://$HOST:$PORT"
URL="$BASE/apis/ccompat/v7"
OWN="$RUNNER"

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

ready() {
  local body
  body="$(curl -sf --max-time 2 "$BASE/health/ready" 2>/dev/null)" || return 1
  [[ "$body" == *'"status": "UP"'* || "$body" == *'"status":"UP"'* ]]
}

launch_command() {
  LAUNCH=(java "${HEAP[@]}" -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
          -Dquarkus.http.host="$HOST" -Dquarkus.http.port="$PORT"
          -Dquarkus.log.console.color=false -Dquarkus.banner.enabled=false -jar "$RUNNER")
}

run_env() { export SYMFONIC_REGISTRY_URL="$1"; }

EXTRA_COMMANDS="build"
extra_command() {
  case "$1" in
    build) build; echo "$RUNNER" ;;
    *) return 1 ;;
  esac
}

dispatch "$@"
