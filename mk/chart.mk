# Helm chart checks. Included by the main Makefile (`make chart-check`, run by `make test`)
# and usable alone:  make -f mk/chart.mk chart-check
#
#   chart-tools      build the pinned helm, helm-unittest and promtool once (scripts/tools.sh,
#                    cached)
#   chart-lint       helm lint --strict: default values and every ci/*-values.yaml scenario
#   chart-template   helm template of the same scenarios into $(CHART_OUT)/rendered/
#   chart-negative   values that must fail to render (tests/chart/invalid/*.yaml, `# expect:`)
#   chart-unittest   helm-unittest suites (helm/symfonic-stream/tests/*_test.yaml)
#   chart-validate   rendered manifests against the Kubernetes schemas, offline (CRDs skipped)
#   chart-alerts     promtool check rules + promtool test rules (helm/symfonic-stream/tests/alerts/)
#   chart-dashboard  every panel query run by promtool on two releases' series: each release
#                    picked alone, and both apart (tests/chart/dashboard_releases.py)
#   chart-docs       rewrite the chart README's values table from values.yaml
#
# Recipes are plain POSIX sh, so they behave the same under the main Makefile's bash.

CHART_DIR ?= helm/symfonic-stream
CHART_RELEASE ?= symfonic
CHART_NAMESPACE ?= streaming
# Kubernetes versions the rendered manifests are validated against: the chart's floor
# (Chart.yaml kubeVersion) and a newer one; both ship with kubernetes-validate >= 1.30.
CHART_KUBE_VERSIONS ?= 1.28.0 1.30.0
CHART_OUT ?= build/chart
CHART_PYTHON ?= .venv/bin/python
CHART_TOOLS_DIR ?= $(or $(SYMFONIC_TOOLS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/symfonic-stream/tools)

CHART_HELM := $(CHART_TOOLS_DIR)/bin/helm
# helm's own config/cache stay inside the build dir; plugins come from the tools cache.
CHART_HELM_ENV := HELM_PLUGINS="$(CHART_TOOLS_DIR)/helm-plugins" \
	HELM_CONFIG_HOME="$(abspath $(CHART_OUT))/helm/config" \
	HELM_CACHE_HOME="$(abspath $(CHART_OUT))/helm/cache" \
	HELM_DATA_HOME="$(abspath $(CHART_OUT))/helm/data"
CHART_RUN_HELM := $(CHART_HELM_ENV) "$(CHART_HELM)"
CHART_PROMTOOL := $(CHART_TOOLS_DIR)/bin/promtool
CHART_RULES := $(CHART_DIR)/files/prometheus-rules.yaml
CHART_ALERT_TESTS = $(sort $(wildcard $(CHART_DIR)/tests/alerts/*.yaml))
CHART_SCENARIOS = $(sort $(wildcard $(CHART_DIR)/ci/*-values.yaml))
CHART_INVALID = $(sort $(wildcard tests/chart/invalid/*.yaml))
# Under the main Makefile, $(STAMP) is the venv's install stamp (target `venv`); alone, the
# venv must already exist.
CHART_VENV := $(STAMP)

.PHONY: chart-check chart-tools chart-lint chart-template chart-negative chart-unittest \
	chart-validate chart-alerts chart-dashboard chart-docs chart-docs-check chart-venv

chart-check: chart-lint chart-template chart-negative chart-unittest chart-validate chart-alerts \
	chart-dashboard chart-docs-check
	@echo "chart-check: OK"

chart-tools:
	@SYMFONIC_TOOLS_DIR="$(CHART_TOOLS_DIR)" scripts/tools.sh >/dev/null

chart-venv: $(CHART_VENV)
	@test -x "$(CHART_PYTHON)" || { echo "chart-check: $(CHART_PYTHON) is missing: run 'make venv'" >&2; exit 1; }

chart-lint: chart-tools
	@set -e; \
	for values in "" $(CHART_SCENARIOS); do \
	  echo "helm lint --strict $(CHART_DIR) $${values:+-f $$values}"; \
	  $(CHART_RUN_HELM) lint --strict --quiet $(CHART_DIR) $${values:+-f "$$values"} >/dev/null; \
	done

chart-template: chart-tools
	@set -e; rm -rf "$(CHART_OUT)/rendered"; mkdir -p "$(CHART_OUT)/rendered"; \
	for values in "" $(CHART_SCENARIOS); do \
	  name=$$(basename "$${values:-default-values.yaml}" .yaml); \
	  echo "helm template $(CHART_DIR) $${values:+-f $$values} > $(CHART_OUT)/rendered/$$name.yaml"; \
	  $(CHART_RUN_HELM) template $(CHART_RELEASE) $(CHART_DIR) --namespace $(CHART_NAMESPACE) \
	    $${values:+-f "$$values"} > "$(CHART_OUT)/rendered/$$name.yaml"; \
	done

chart-negative: chart-tools
	@set -e; mkdir -p "$(CHART_OUT)"; out="$(CHART_OUT)/negative.txt"; \
	for values in $(CHART_INVALID); do \
	  expect=$$(sed -n 's/^# expect: //p' "$$values"); \
	  test -n "$$expect" || { echo "chart-negative: $$values has no '# expect:' line" >&2; exit 1; }; \
	  if $(CHART_RUN_HELM) template $(CHART_RELEASE) $(CHART_DIR) -f "$$values" >"$$out" 2>&1; then \
	    echo "chart-negative: $$values rendered, but must fail with: $$expect" >&2; exit 1; \
	  fi; \
	  if ! grep -Eq -- "$$expect" "$$out"; then \
	    echo "chart-negative: $$values failed, but not with: $$expect" >&2; cat "$$out" >&2; exit 1; \
	  fi; \
	  echo "rejected as expected: $$values ($$(grep -Eo -m1 -- "$$expect" "$$out"))"; \
	done

chart-unittest: chart-tools
	@echo "helm unittest --strict $(CHART_DIR)"
	@$(CHART_RUN_HELM) unittest --strict --color=false --file 'tests/*_test.yaml' $(CHART_DIR)

chart-validate: chart-template chart-venv
	@"$(CHART_PYTHON)" tests/chart/validate_manifests.py \
	  $(addprefix --kube-version ,$(CHART_KUBE_VERSIONS)) $(CHART_OUT)/rendered/*.yaml

# Every alert fires in a test and stays quiet in another (tests/unit/test_alert_rules.py checks
# that each alert has both); the rules file itself must load.
chart-alerts: chart-tools
	@echo "promtool check rules $(CHART_RULES)"
	@"$(CHART_PROMTOOL)" check rules $(CHART_RULES)
	@echo "promtool test rules $(CHART_ALERT_TESTS)"
	@"$(CHART_PROMTOOL)" test rules $(CHART_ALERT_TESTS)

# Grafana's dashboard-linter does not build from the Go module proxy (docs/metrics.md,
# "Dashboard"): its rules are tests/unit/test_dashboard_lint.py's, and Prometheus' engine runs
# every panel's query here.
chart-dashboard: chart-tools chart-venv
	@"$(CHART_PYTHON)" -m tests.chart.dashboard_releases --promtool "$(CHART_PROMTOOL)" \
	  --out $(CHART_OUT)

chart-docs-check: chart-venv
	@"$(CHART_PYTHON)" tests/chart/values_doc.py --check

chart-docs: chart-venv
	@"$(CHART_PYTHON)" tests/chart/values_doc.py --write
