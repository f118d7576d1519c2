# Packaging and release. Included by the main Makefile (it uses $(BIN), venv, with_kafka and
# the chart's helm from mk/chart.mk).
#
#   wheel        dist/symfonic_stream-<version>-cp311-abi3-<platform>.whl, the extension and the
#                review console's bundle (committed; make web remakes it) inside
#   sdist        dist/symfonic_stream-<version>.tar.gz
#   image-base   the base image from Debian's packages (mmdebstrap; made once, then kept)
#   image        the image from the wheel (buildah), then run: tests/integration/test_image.py
#                against a broker (--version, the role's commands, the golden run via `run typed`)
#   dist         wheel, sdist, the image as an OCI archive, the packaged chart, SHA256SUMS
#
# The version is pyproject.toml's, the one place it is written: the package reads it from its
# installed metadata, the image's label and the packaged chart's appVersion get it from here,
# and tests/unit/test_release.py holds Chart.yaml to it.

VERSION := $(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml | head -n1)
DIST := dist
IMAGE_NAME ?= localhost/symfonic-stream
IMAGE := $(IMAGE_NAME):$(VERSION)
IMAGE_SCRIPT := IMAGE_NAME=$(IMAGE_NAME) PYTHON=$(BIN)/python scripts/image.sh
# The wheel's platform tag is the build machine's: found (by the shell, when the recipe
# runs: make's own wildcard may not see a file an earlier recipe made), not spelled.
WHEEL := $$(ls $(DIST)/symfonic_stream-$(VERSION)-cp311-abi3-*.whl)

.PHONY: wheel sdist image-base image dist

# setuptools' own build folders (a stale build/lib would put files since removed into the
# wheel); the rest of build/ stays: the browser tests' screenshots (build/test-artefacts),
# which `make test` takes before it builds the image.
SETUPTOOLS_BUILD := build/lib build/lib.* build/bdist.* build/temp.*

wheel: venv
	@rm -rf $(SETUPTOOLS_BUILD) $(DIST)/symfonic_stream-*.whl
	@PATH="$$PATH:$$HOME/.cargo/bin" $(BIN)/python -m pip wheel --quiet --no-deps \
	  --no-build-isolation --disable-pip-version-check --wheel-dir $(DIST) . 2>&1 \
	  | { grep -v 'tool.distutils' || true; }
	@rm -rf $(SETUPTOOLS_BUILD)
	@wheel=$(WHEEL); \
	$(BIN)/python -c 'import sys, zipfile; sys.exit(sys.argv[2] not in \
	  zipfile.ZipFile(sys.argv[1]).namelist())' "$$wheel" symfonic_stream/_native.abi3.so || \
	  { echo "make: $$wheel has no native extension (is cargo on PATH?)" >&2; exit 1; }; \
	$(BIN)/python -c 'import sys, zipfile; sys.exit(sys.argv[2] not in \
	  zipfile.ZipFile(sys.argv[1]).namelist())' "$$wheel" symfonic_stream/gateway/static/console.js || \
	  { echo "make: $$wheel has no review console bundle (git checkout it, or make web)" >&2; exit 1; }; \
	echo "make: $$wheel ($$(stat -c %s "$$wheel") bytes, the native extension and the console's bundle inside)"

sdist: venv
	@rm -f $(DIST)/symfonic_stream-*.tar.gz
	@out=$$(mktemp); $(BIN)/python -c 'import sys; from setuptools import build_meta as b; \
	  b.build_sdist(sys.argv[1])' $(DIST) >"$$out" 2>&1 || { cat "$$out" >&2; rm -f "$$out"; exit 1; }; \
	  rm -f "$$out"
	@echo "make: $$(ls $(DIST)/symfonic_stream-$(VERSION).tar.gz)"

image-base:
	@scripts/image.sh base

image: wheel image-base
	@$(IMAGE_SCRIPT) wheels $(WHEEL)
	@$(IMAGE_SCRIPT) build $(VERSION)
	@$(IMAGE_SCRIPT) report $(IMAGE)
	$(call with_kafka,SYMFONIC_TEST_IMAGE=$(IMAGE) $(call pytest_run,image) tests/integration/test_image.py $(PYTEST_ARGS),--fresh)

dist: wheel sdist image chart-tools
	@$(IMAGE_SCRIPT) save $(IMAGE) $(DIST)/symfonic-stream-image-$(VERSION).oci.tar
	@$(CHART_RUN_HELM) package $(CHART_DIR) --destination $(DIST) \
	  --version $(VERSION) --app-version $(VERSION) >/dev/null
	@wheel=$$(basename $(WHEEL)); cd $(DIST) && rm -f SHA256SUMS && sha256sum \
	  "$$wheel" symfonic_stream-$(VERSION).tar.gz \
	  symfonic-stream-image-$(VERSION).oci.tar symfonic-stream-$(VERSION).tgz > SHA256SUMS
	@cd $(DIST) && ls -l $$(cut -d' ' -f3 SHA256SUMS) SHA256SUMS
