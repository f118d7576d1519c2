#!/usr/bin/env bash
# Build the pinned chart tools from Go module sources, once, into a cache outside git:
#
#   helm            helm.sh/helm/v3/cmd/helm                       (go install, pinned)
#   helm-unittest   github.com/helm-unittest/helm-unittest         (go build, pinned)
#   promtool        github.com/prometheus/prometheus/cmd/promtool  (go install, pinned)
#
# Nothing is fetched from GitHub or a release page: every tool comes from the Go module
# proxy configured in `go env GOPROXY` (with checksum verification left on), so this works
# on a machine whose only network access is the package registries.
#
# helm-unittest's go.mod carries a `replace` directive, which `go install pkg@version`
# refuses; so its module is downloaded (`go mod download`), copied to a writable directory
# and built with `go build`. It is installed as a helm plugin by writing a plugin.yaml next
# to the binary in a plugin directory that callers point HELM_PLUGINS at.
#
# Usage:  scripts/tools.sh            build what is missing, print the bin dir
#         scripts/tools.sh --env      print `export` lines (HELM, HELM_PLUGINS, PATH)
#         scripts/tools.sh --force    rebuild even when the pinned versions are present
#
# Environment:
#   SYMFONIC_TOOLS_DIR   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/symfonic-stream/tools)
#   HELM_VERSION, HELM_UNITTEST_VERSION, PROMTOOL_VERSION   override the pins (CI should not)
#
# A cold build (empty cache, 2 cores) takes 4-7 minutes (helm and helm-unittest measured
# 200 s idle, 311 s on a busy machine; with promtool 399 s on a busy one: helm 82 s,
# helm-unittest 76 s, promtool 212 s), almost all of it compiling Kubernetes client
# libraries and Prometheus; the Go build and module caches live under the cache root, so
# helm-unittest reuses most of what the helm build compiled, and a warm run is instant.
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.21.3}"
# helm-unittest v1.1.2 is built against helm.sh/helm/v3 v3.21.3: the same helm library
# renders in `helm template` and in the unit tests.
HELM_UNITTEST_VERSION="${HELM_UNITTEST_VERSION:-v1.1.2}"
# Prometheus v3.16.0's module version (its Go module is tagged v0.<major><minor>.<patch>):
# promtool checks the chart's alert rules and runs their unit tests (`promtool test rules`).
PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.316.0}"

TOOLS_DIR="${SYMFONIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/symfonic-stream/tools}"
BIN_DIR="$TOOLS_DIR/bin"
PLUGINS_DIR="$TOOLS_DIR/helm-plugins"
UNITTEST_DIR="$PLUGINS_DIR/unittest"

mode="build"
case "${1:-}" in
  --env) mode="env" ;;
  --force) mode="force" ;;
  "") ;;
  *) echo "usage: $0 [--env|--force]" >&2; exit 2 ;;
esac

print_env() {
  echo "export HELM='$BIN_DIR/helm'"
  echo "export HELM_PLUGINS='$PLUGINS_DIR'"
  echo "export PATH='$BIN_DIR':\"\$PATH\""
}

log() { echo "tools.sh: $*" >&2; }

helm_stamp="$BIN_DIR/.helm-$HELM_VERSION"
unittest_stamp="$UNITTEST_DIR/.unittest-$HELM_UNITTEST_VERSION"
promtool_stamp="$BIN_DIR/.promtool-$PROMTOOL_VERSION"

if [[ "$mode" == "env" ]]; then
  print_env
  exit 0
fi

ready() {
  [[ -x "$BIN_DIR/helm" && -f "$helm_stamp" && -x "$UNITTEST_DIR/untt" && -f "$unittest_stamp"
     && -x "$BIN_DIR/promtool" && -f "$promtool_stamp" ]]
}

if [[ "$mode" != "force" ]] && ready; then
  echo "$BIN_DIR"
  exit 0
fi

command -v go >/dev/null || { log "Go is required (https://go.dev/dl/)"; exit 1; }

mkdir -p "$BIN_DIR" "$UNITTEST_DIR"
# One build at a time (parallel make runs, several checkouts sharing the cache).
if command -v flock >/dev/null; then
  exec 9>"$TOOLS_DIR/.lock"
  flock 9
  if [[ "$mode" != "force" ]] && ready; then
    echo "$BIN_DIR"
    exit 0
  fi
fi
# Keep every Go byte under the cache root; use the installed Go (each module needs 1.26+)
# unless GOTOOLCHAIN says otherwise.
export GOPATH="$TOOLS_DIR/go"
export GOMODCACHE="$TOOLS_DIR/go/pkg/mod"
export GOCACHE="$TOOLS_DIR/go-build"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0

start=$SECONDS

# Version information helm's own Makefile injects: without it a `go install`ed helm reports
# "v3.21" and assumes Kubernetes 1.20 for .Capabilities.KubeVersion.
helm_ldflags() {
  local gomod client_go major minor
  gomod="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  client_go="$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")"   # v0.36.2
  major=$(( $(echo "$client_go" | cut -d. -f1 | tr -d v) + 1 ))
  minor="$(echo "$client_go" | cut -d. -f2)"
  echo "-s -w" \
    "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "-X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=$major" \
    "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor" \
    "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=$major" \
    "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
}
LDFLAGS="$(helm_ldflags)"

if [[ "$mode" == "force" || ! -x "$BIN_DIR/helm" || ! -f "$helm_stamp" ]]; then
  log "building helm $HELM_VERSION (go install)"
  rm -f "$BIN_DIR"/.helm-*
  GOBIN="$BIN_DIR" go install -trimpath -ldflags "$LDFLAGS" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  touch "$helm_stamp"
fi

if [[ "$mode" == "force" || ! -x "$UNITTEST_DIR/untt" || ! -f "$unittest_stamp" ]]; then
  log "building helm-unittest $HELM_UNITTEST_VERSION (go mod download + go build)"
  rm -f "$UNITTEST_DIR"/.unittest-*
  src="$(go mod download -json "github.com/helm-unittest/helm-unittest@$HELM_UNITTEST_VERSION" \
         | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  work="$TOOLS_DIR/src/helm-unittest@$HELM_UNITTEST_VERSION"
  rm -rf "$work"
  mkdir -p "$(dirname "$work")"
  cp -R "$src" "$work"
  chmod -R u+w "$work"
  (cd "$work" && go build -trimpath -ldflags "$LDFLAGS" -o "$UNITTEST_DIR/untt" ./cmd/helm-unittest)
  # The upstream plugin.yaml points at per-platform release binaries and an install hook
  # that downloads them; this one runs the binary built above.
  cat > "$UNITTEST_DIR/plugin.yaml" <<EOF
name: "unittest"
version: "${HELM_UNITTEST_VERSION#v}"
usage: "unittest for helm charts"
description: "helm-unittest ${HELM_UNITTEST_VERSION}, built from its Go module by scripts/tools.sh"
ignoreFlags: false
platformCommand:
  - command: "\$HELM_PLUGIN_DIR/untt"
EOF
  cp "$work/LICENSE" "$UNITTEST_DIR/LICENSE"
  touch "$unittest_stamp"
fi

if [[ "$mode" == "force" || ! -x "$BIN_DIR/promtool" || ! -f "$promtool_stamp" ]]; then
  log "building promtool $PROMTOOL_VERSION (go install)"
  rm -f "$BIN_DIR"/.promtool-*
  # The version Prometheus' own build (.promu.yml) injects; its module's VERSION file says it.
  prom_release="$(go mod download -json "github.com/prometheus/prometheus@$PROMTOOL_VERSION" \
                  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/VERSION"
  # remove_all_sd leaves out the service-discovery plugins (AWS, Azure, GCE, Kubernetes, ...),
  # which rule checks and tests never use: 2.5 instead of 6.5 minutes of CPU to compile.
  GOBIN="$BIN_DIR" go install -trimpath -tags netgo,remove_all_sd \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$(cat "$prom_release")" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION"
  touch "$promtool_stamp"
fi

log "tools ready in $((SECONDS - start))s: $BIN_DIR, plugins in $PLUGINS_DIR"
"$BIN_DIR/helm" version --short >&2
"$BIN_DIR/promtool" --version 2>&1 | head -1 >&2
HELM_PLUGINS="$PLUGINS_DIR" "$BIN_DIR/helm" plugin list >&2
echo "$BIN_DIR"
