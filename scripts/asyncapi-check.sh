#!/usr/bin/env bash
# Check the AsyncAPI document with the official AsyncAPI parser (@asyncapi/parser, from npm):
# 0 errors and 0 warnings, or exit 1. The parser is installed once, from the pinned
# scripts/asyncapi/package-lock.json (`npm ci`, no install scripts), into a cache outside git
# and reinstalled only when the lock file changes.
#
# Usage:  scripts/asyncapi-check.sh [schemas/asyncapi.yaml]
# Environment: SYMFONIC_TOOLS_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/symfonic-stream/tools)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
document="${1:-schemas/asyncapi.yaml}"
tools="${SYMFONIC_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/symfonic-stream/tools}"
command -v node >/dev/null && command -v npm >/dev/null || {
  echo "asyncapi-check.sh: node and npm are required (Debian: apt-get install nodejs npm)" >&2
  exit 1
}
lock="$(sha256sum "$here/asyncapi/package-lock.json" | cut -c1-16)"
dir="$tools/asyncapi-$lock"
if [[ ! -f "$dir/.installed" ]]; then
  echo "asyncapi-check.sh: installing @asyncapi/parser into $dir (npm ci)" >&2
  rm -rf "$dir" && mkdir -p "$dir"
  cp "$here/asyncapi/package.json" "$here/asyncapi/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
  touch "$dir/.installed"
fi
NODE_PATH="$dir/node_modules" exec node "$here/asyncapi/check.cjs" "$document"
