#!/usr/bin/env bash
# The container image, built and run without a Docker daemon: Debian's buildah, podman and
# skopeo, the base made from Debian's packages by mmdebstrap (docs/deploy.md, "The image").
# `make image` and `make dist` call it; root is needed (mmdebstrap, rootful podman).
#
#   scripts/image.sh base [--force]      the base image BASE_IMAGE: Debian SUITE, minimal
#                                        (no apt), with python3, python3-venv, CA certificates
#                                        and libstdc++ (google-re2's wheel links it)
#   scripts/image.sh wheels WHEEL        dist/image-wheels/: WHEEL and a wheel of each of its
#                                        [deploy] dependencies, at the versions the venv holds
#   scripts/image.sh build VERSION       the Dockerfile, WHEELS=context, on BASE_IMAGE ->
#                                        IMAGE_NAME:VERSION
#   scripts/image.sh run ARGS...         `podman run ARGS...` with the flags this machine needs
#   scripts/image.sh report IMAGE        size, user, entrypoint and labels, one line each
#   scripts/image.sh save IMAGE FILE     the image as an OCI archive (skopeo)
#
# Environment:
#   IMAGE_NAME   default localhost/symfonic-stream
#   BASE_IMAGE   default localhost/symfonic-stream-base:$SUITE
#   SUITE        Debian suite of the base, default bookworm (its python3 is 3.11)
#   PYTHON       the interpreter whose pip collects the wheels, default .venv/bin/python
#   OCI_RUNTIME  the runtime `run` uses, default runc (below)
#   BUILDAH_ISOLATION  buildah's own variable; default chroot here (below)
#
# Why these flags (measured on the development machine, itself a container with cgroup v1
# and no CAP_SYS_RESOURCE; the exact errors are in docs/deploy.md):
# - podman's default runtime, crun, refuses there: "setrlimit `RLIMIT_NOFILE`: Operation
#   not permitted" (rootful podman raises nofile and nproc by default), then, with lower
#   limits, "cgroups in hybrid mode not supported". runc runs the container when nofile is
#   no higher than this shell's and nproc is modest, hence --ulimit below.
# - buildah runs a RUN step in a runtime too (the same refusal); chroot isolation runs it
#   without one. The image's only RUN step installs local wheels and needs no network.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

SUITE="${SUITE:-bookworm}"
IMAGE_NAME="${IMAGE_NAME:-localhost/symfonic-stream}"
BASE_IMAGE="${BASE_IMAGE:-localhost/symfonic-stream-base:$SUITE}"
PYTHON="${PYTHON:-.venv/bin/python}"
OCI_RUNTIME="${OCI_RUNTIME:-runc}"
export BUILDAH_ISOLATION="${BUILDAH_ISOLATION:-chroot}"
WHEELS_DIR=dist/image-wheels

log() { echo "image.sh: $*" >&2; }
need() {
  local tool missing=()
  for tool in "$@"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  if ((${#missing[@]})); then
    log "missing: ${missing[*]} (Debian: apt-get install buildah podman skopeo mmdebstrap runc)"
    exit 1
  fi
}

base() {
  need mmdebstrap podman
  if [[ "${1:-}" != "--force" ]] && podman image exists "$BASE_IMAGE"; then
    log "$BASE_IMAGE exists (--force makes it again)"
    return
  fi
  local tar out
  tar="$(mktemp --suffix=.tar)"
  out="$(mktemp)"
  trap 'rm -f "$tar" "$out"' RETURN
  log "mmdebstrap $SUITE: python3, python3-venv, ca-certificates, libstdc++6 -> $BASE_IMAGE"
  # essential: Debian's Essential packages only (no apt); merged-usr without the usrmerge
  # package (which would bring perl); no documentation, manual pages or translations.
  mmdebstrap --quiet --variant=essential \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=python3,python3-venv,ca-certificates,passwd,libstdc++6 \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$SUITE" "$tar" >"$out" 2>&1 || { cat "$out" >&2; log "mmdebstrap failed"; exit 1; }
  # An imported root file system has no environment: give it Debian's PATH.
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/sh"]' "$tar" "$BASE_IMAGE" >/dev/null
  log "$BASE_IMAGE: $(podman image inspect --format '{{.Size}}' "$BASE_IMAGE") bytes"
}

wheels() {
  local wheel="$1" arch platforms=() v
  [[ -f "$wheel" ]] || { log "no wheel at $wheel (make wheel)"; exit 1; }
  arch="$(uname -m)"
  # Binary wheels for the base's CPython 3.11 on glibc (bookworm: 2.36), whatever Python
  # runs pip here. pip does not widen a manylinux tag to older ones by itself: list them.
  platforms=(--platform "linux_$arch" --platform "manylinux2014_$arch")
  for v in $(seq 17 36); do platforms+=(--platform "manylinux_2_${v}_$arch"); done
  rm -rf "$WHEELS_DIR"
  mkdir -p "$WHEELS_DIR"
  cp "$wheel" "$WHEELS_DIR/"
  local constraints
  constraints="$(mktemp)"
  trap 'rm -f "$constraints"' RETURN
  # The versions the tests ran with (the venv's), not whatever is newest today.
  "$PYTHON" -m pip freeze --exclude-editable --disable-pip-version-check >"$constraints"
  local name version
  name="$(basename "$wheel" | cut -d- -f1 | tr _ -)"
  version="$(basename "$wheel" | cut -d- -f2)"
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --dest "$WHEELS_DIR" \
    --only-binary=:all: --python-version 3.11 --implementation cp "${platforms[@]}" \
    --find-links "$WHEELS_DIR" --constraint "$constraints" "$name[deploy]==$version"
  log "$WHEELS_DIR: $(find "$WHEELS_DIR" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEELS_DIR" | cut -f1)"
}

build() {
  local version="$1"
  need buildah podman
  [[ -d "$WHEELS_DIR" ]] || { log "no $WHEELS_DIR (scripts/image.sh wheels WHEEL)"; exit 1; }
  podman image exists "$BASE_IMAGE" || { log "no $BASE_IMAGE (scripts/image.sh base)"; exit 1; }
  # The wheels' digest keys the cached install layer (a bind mount's content does not).
  local digest
  digest="$(cd "$WHEELS_DIR" && sha256sum -- *.whl | sha256sum | cut -d' ' -f1)"
  buildah bud --quiet --layers \
    --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg WHEELS=context \
    --build-arg WHEELS_DIGEST="$digest" \
    --build-arg VERSION="$version" --tag "$IMAGE_NAME:$version" . >/dev/null
  log "built $IMAGE_NAME:$version"
}

run() {
  need podman "$OCI_RUNTIME"
  exec podman --runtime "$OCI_RUNTIME" run \
    --ulimit "nofile=$(ulimit -Sn):$(ulimit -Hn)" --ulimit nproc=4096:4096 "$@"
}

report() {
  podman image inspect --format \
    $'size {{.Size}}\nuser {{.Config.User}}\nentrypoint {{.Config.Entrypoint}}\nlabels {{json .Config.Labels}}' \
    "$1"
}

save() {
  need skopeo
  rm -f "$2"
  # (skopeo says which storage driver it found on stderr, at info level: not news)
  skopeo copy --quiet "containers-storage:$1" "oci-archive:$2:$1" 2> >(grep -v 'level=info' >&2)
}

command="${1:-}"
shift || true
case "$command" in
  base) base "$@" ;;
  wheels) wheels "$@" ;;
  build) build "$@" ;;
  run) run "$@" ;;
  report) report "$@" ;;
  save) save "$@" ;;
  *) echo "usage: $0 base|wheels WHEEL|build VERSION|run ARGS...|report IMAGE|save IMAGE FILE" >&2
     exit 2 ;;
esac
