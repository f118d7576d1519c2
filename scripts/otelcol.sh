#!/usr/bin/env bash
# The project's own OpenTelemetry Collector for development and tests: the Collector's core
# (go.opentelemetry.io/collector/otelcol) with the OTLP receiver and the contrib file exporter,
# built once from the Go module proxy (scripts/otelcol/: go.mod, go.sum, main.go) into the
# tools cache scripts/tools.sh uses. It receives OTLP over HTTP and writes every span it
# receives to a file as OTLP JSON, one line per batch, which the tests read back
# (tests/tracing/conftest.py; docs/testing.md: Tracing).
#
#   scripts/otelcol.sh start    build once (cached), start, wait until the receiver answers;
#                               reuses a collector this script already runs on the port
#   scripts/otelcol.sh stop     stop the one this script started on the port (SIGTERM, then KILL)
#   scripts/otelcol.sh status   running or not (exit 0 when running, 3 when not)
#   scripts/otelcol.sh url      the OTLP/HTTP base URL (what OTEL_EXPORTER_OTLP_ENDPOINT takes)
#   scripts/otelcol.sh spans    the file the spans are written to
#   scripts/otelcol.sh run CMD  start (or reuse) it, run CMD with SYMFONIC_OTELCOL_URL and
#                               SYMFONIC_OTELCOL_SPANS set, then stop it if this run started
#                               it; CMD's status
#   scripts/otelcol.sh build    only the build (for a CI cache warm-up); prints the binary
#   scripts/otelcol.sh logs     the end of the collector's log
#
# Settings (environment), each checked before any command runs:
#   SYMFONIC_OTELCOL_PORT           OTLP/HTTP port (default 4318, OTLP's); no gRPC listener
#   SYMFONIC_OTELCOL_HOST           address it listens on (default 127.0.0.1)
#   SYMFONIC_OTELCOL_STATE          pid file, config, log and spans file (default
#                                   build/otelcol-<port> in the repository)
#   SYMFONIC_OTELCOL_START_TIMEOUT  seconds to wait for the receiver (default 60)
#   SYMFONIC_TOOLS_DIR              the build cache (default ~/.cache/symfonic-stream/tools,
#                                   scripts/tools.sh's): binary bin/otelcol-<release>-<sources>
#   SYMFONIC_OTELCOL_STARTED_FLAG   a file written with the pid when start really started one
#
# A cold build takes 2 to 3.5 minutes on 2 busy cores (206 s from an empty cache, 122 s where
# scripts/tools.sh had filled the module cache; about 10 s of it module downloads, the rest
# compiling gRPC, protobuf and the collector); a warm start takes under a second.
set -euo pipefail

NAME=otelcol.sh
PREFIX=SYMFONIC_OTELCOL_
# The collector's release: every go.opentelemetry.io/collector module at v0.161.0 (its stable
# modules at the matching v1.67.0) and the contrib file exporter at v0.161.0, as
# scripts/otelcol/go.mod pins them (tests/unit/test_otelcol_module.py holds the two together).
RELEASE=0.161.0
WHAT="the OpenTelemetry Collector $RELEASE"
DEFAULT_PORT=4318
DEFAULT_TIMEOUT=60
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
SRC="$HERE/otelcol"
# shellcheck source=scripts/lib/service.sh
. "$HERE/lib/service.sh"

TOOLS_DIR="${SYMFONIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/symfonic-stream/tools}"

# The binary's name carries the release and a digest of its sources: an edit to go.mod or
# main.go builds a new one, the same sources never build twice.
DIGEST="$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -c1-12)"
BINARY="$TOOLS_DIR/bin/otelcol-$RELEASE-$DIGEST"
PID_FILE="$STATE/otelcol.pid"
LOG="$STATE/otelcol.log"
CONFIG="$STATE/config.yaml"
SPANS="$STATE/spans.jsonl"
URL="http://$HOST:$PORT"
OWN="$CONFIG"

# Once per set of sources, with the Go and module caches under the tools cache (shared with
# scripts/tools.sh: gRPC, protobuf and the rest download once). Two callers at once are
# serialised on a lock in the cache.
build() {
  [ -x "$BINARY" ] && return 0
  command -v go >/dev/null 2>&1 || die "Go is required to build the collector once (go.mod says which)"
  mkdir -p "$TOOLS_DIR/bin"
  exec 9>"$TOOLS_DIR/.otelcol.lock"
  flock 9
  if [ -x "$BINARY" ]; then exec 9>&-; return 0; fi
  log "building the OpenTelemetry Collector $RELEASE from scripts/otelcol/ into $BINARY (once) ..."
  local t0=$SECONDS
  if ! (cd "$SRC" &&
        GOPATH="$TOOLS_DIR/go" GOMODCACHE="$TOOLS_DIR/go/pkg/mod" GOCACHE="$TOOLS_DIR/go-build" \
        GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
        go build -trimpath -ldflags "-s -w -X main.version=$RELEASE" -o "$BINARY.tmp" .) >"$TOOLS_DIR/otelcol-build.log" 2>&1; then
    log "go build failed; the end of $TOOLS_DIR/otelcol-build.log:"
    tail -n 20 "$TOOLS_DIR/otelcol-build.log" >&2
    exit 1
  fi
  mv "$BINARY.tmp" "$BINARY"
  # The binaries of earlier sources go (a running one keeps its file until it exits).
  find "$TOOLS_DIR/bin" -maxdepth 1 -name 'otelcol-*' ! -name "$(basename "$BINARY")" -delete
  log "the OpenTelemetry Collector $RELEASE built in $((SECONDS - t0)) s"
  exec 9>&-
}

# The receiver answers an empty OTLP/JSON export with 200.
ready() {
  local code
  code="$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' -X POST \
          -H 'Content-Type: application/json' --data '{}' "$URL/v1/traces" 2>/dev/null)" || return 1
  [ "$code" = 200 ]
}

config() {
  cat >"$CONFIG" <<YAML
# Written by scripts/otelcol.sh: OTLP/HTTP in, OTLP JSON lines out.
receivers:
  otlp:
    protocols:
      http:
        endpoint: "$HOST:$PORT"
exporters:
  file:
    path: "$SPANS"
    format: json
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: info
      encoding: console
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
YAML
}

launch_command() {
  config
  : >"$SPANS"
  LAUNCH=("$BINARY" --config "file:$CONFIG")
}

run_env() { export SYMFONIC_OTELCOL_URL="$1" SYMFONIC_OTELCOL_SPANS="$SPANS"; }

EXTRA_COMMANDS="spans, build"
extra_command() {
  case "$1" in
    spans) echo "$SPANS" ;;
    build) build; echo "$BINARY" ;;
    *) return 1 ;;
  esac
}

dispatch "$@"
