# syntax=docker/dockerfile:1
#
# symfonic-stream container image: the consumers, the gateway, the persistent state store, the
# schema registry client and the OpenTelemetry SDK (`symfonic-stream[deploy]`).
#
#   docker build --build-arg VERSION=0.1.0 -t symfonic-stream:0.1.0 .
#   docker run --rm --read-only symfonic-stream:0.1.0 run typed    # typed|chunks|pauses|resumes
#
# Stages (docs/deploy.md, "The image"):
#   wheels-source   builds the project's one wheel (the package with its native extension,
#                   Rust, and the review console's committed bundle) and collects the wheels of
#                   its runtime dependencies (WHEELS=source, the default: needs RUST_IMAGE and
#                   the package index);
#   wheels-context  takes those wheels from the build context's dist/image-wheels/ instead
#                   (WHEELS=context: what `make image` builds, from the wheel `make wheel` made,
#                   the bundle inside; the wheels-source stage is then not built);
#   wheels          the one of the two that WHEELS names;
#   runtime         installs only those wheels into a venv on BASE_IMAGE (no index, no
#                   compiler, no source tree), then runs as a non-root numeric user, so
#                   `runAsNonRoot` and `readOnlyRootFilesystem` work unchanged.
# BASE_IMAGE needs a Python 3.11+ with its venv module: python:3.11-slim-bookworm, or Debian
# bookworm's python3 and python3-venv (`make image-base` makes one with mmdebstrap).

ARG BASE_IMAGE=python:3.11-slim-bookworm
ARG RUST_IMAGE=rust:1-slim-bookworm
ARG WHEELS=source

# ---------------------------------------------------------------- wheels-source
# Bookworm's python3 is 3.11: the wheel is abi3 for 3.11 and newer.
FROM ${RUST_IMAGE} AS wheels-source
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends python3 python3-venv \
 && python3 -m venv /build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE MANIFEST.in ./
COPY symfonic_stream/ symfonic_stream/
# symfonic_stream/consumers is a link to the declarations at the top (the design card's
# layout): the link's target comes too, so the link resolves in the build stage.
COPY consumers/ consumers/
COPY native/ native/
# The project wheel (setuptools-rust builds native/ into it) and a wheel for every runtime
# dependency of the image's role, into /wheels.
RUN /build/bin/pip wheel --wheel-dir /wheels ".[deploy]"

# ---------------------------------------------------------------- wheels-context
FROM scratch AS wheels-context
COPY dist/image-wheels/ /wheels/

# ---------------------------------------------------------------- wheels
FROM wheels-${WHEELS} AS wheels

# ---------------------------------------------------------------- runtime
FROM ${BASE_IMAGE} AS runtime

ARG UID=10001
ARG GID=10001
# The project's version (pyproject.toml's; `make image` passes it): the label says it, and
# the build fails when the wheel installed is another version.
ARG VERSION=""

LABEL org.opencontainers.image.title="symfonic-stream" \
      org.opencontainers.image.description="Exactly-once Kafka consumers for LLM-agent kernel events" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/symfonic-stream/bin:$PATH \
    SYMFONIC_METRICS_PORT=9400

# The wheels' digest (`make image` passes it): a bind mount is not part of a cached layer's
# key, so without it a rebuild with other wheels of the same version reuses the layer that
# installed the old ones (buildah --layers did: the image tested was an earlier build).
ARG WHEELS_DIGEST=""

# Install from the wheels only (bind-mounted: they never become a layer) into a venv, check
# the version, the native extension and the review console's bundle, then remove the
# installers themselves: nothing in this image can build or fetch packages.
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    echo "wheels ${WHEELS_DIGEST:-not given}" \
 && python3 -m venv /opt/symfonic-stream \
 && pip install --no-index --find-links /wheels "symfonic-stream[deploy]${VERSION:+==$VERSION}" \
 && python -c 'import symfonic_stream._native' \
 && python -c 'import importlib.resources as r; r.files("symfonic_stream.gateway").joinpath("static", "console.js").read_bytes()' \
 && pip uninstall --yes pip setuptools \
 && groupadd --system --gid "${GID}" symfonic \
 && useradd --system --uid "${UID}" --gid "${GID}" --no-create-home \
            --home-dir /nonexistent --shell /usr/sbin/nologin symfonic

# Numeric, so Kubernetes can verify runAsNonRoot without resolving a user name.
USER ${UID}:${GID}
WORKDIR /tmp

# Prometheus /metrics, /healthz (liveness) and /readyz (readiness).
EXPOSE 9400

ENTRYPOINT ["symfonic-stream"]
CMD ["--help"]
