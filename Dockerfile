# syntax=docker/dockerfile:1
#
# symfonic-stream container image.
#
#   docker build -t symfonic-stream:0.1.0 .
#   docker run --rm symfonic-stream:0.1.0 run typed      # one consumer: typed|chunks|pauses|resumes
#
# Stage 1 builds the native hot path (native/, Rust: the decoder's scanner, the record
# batches) into a wheel. Stage 2 builds the project wheel and collects the wheels of its runtime dependencies. Stage 3 installs
# only those wheels (no index, no compiler, no source tree) and runs as a non-root numeric
# user, so `runAsNonRoot` and `readOnlyRootFilesystem` work unchanged.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG RUST_IMAGE=rust:1-slim-bookworm
ARG NODE_IMAGE=node:20-slim

# ---------------------------------------------------------------- native
# Bookworm's python3 is 3.11, the runtime's: the wheel is abi3 for 3.11 and newer.
FROM ${RUST_IMAGE} AS native
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends python3 python3-venv \
 && python3 -m venv /maturin && /maturin/bin/pip install --no-cache-dir "maturin>=1.5,<2"
WORKDIR /src
COPY native/ native/
RUN /maturin/bin/maturin build --release --manifest-path native/Cargo.toml --out /wheels

# ---------------------------------------------------------------- web
# The review console's script, bundled from npm's packages (web/package-lock.json) into the
# package's data: the image serves it, no browser fetches anything from a CDN.
FROM ${NODE_IMAGE} AS web
WORKDIR /src/web
COPY web/package.json web/package-lock.json web/build.mjs ./
COPY web/src/ src/
RUN mkdir -p ../symfonic_stream/gateway/static ../build/web \
 && npm ci --no-audit --no-fund --loglevel=error && node build.mjs

# ---------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md, LICENSE, the Python packages and native/.
COPY . .
COPY --from=web /src/symfonic_stream/gateway/static/console.js symfonic_stream/gateway/static/
# The project wheel plus a wheel for every runtime dependency, into /wheels.
RUN python -m pip wheel --wheel-dir /wheels .
COPY --from=native /wheels/ /wheels/

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime

ARG UID=10001
ARG GID=10001

LABEL org.opencontainers.image.title="symfonic-stream" \
      org.opencontainers.image.description="Exactly-once Kafka consumers for LLM-agent kernel events" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SYMFONIC_METRICS_PORT=9400

# Install from the builder's wheels only (bind-mounted: they never become a layer), then
# remove the installers themselves: nothing in this image can build or fetch packages.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links /wheels symfonic-stream symfonic-scan \
 && python -m pip uninstall --yes pip setuptools wheel \
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
