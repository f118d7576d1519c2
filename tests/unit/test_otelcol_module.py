"""scripts/otelcol/go.mod keeps every Collector module at the one release scripts/otelcol.sh
names (the core's v0.x modules at it, its stable v1.x modules at the release they ship with,
contrib's at it): modules of two releases do not build together."""

from __future__ import annotations

import re

from tests.docs_blocks import ROOT

_SCRIPT = ROOT / "scripts" / "otelcol.sh"
_GO_MOD = ROOT / "scripts" / "otelcol" / "go.mod"
_CORE = "go.opentelemetry.io/collector"
_CONTRIB = "github.com/open-telemetry/opentelemetry-collector-contrib"


def test_every_collector_module_is_at_the_scripts_release() -> None:
    release = re.search(r"^RELEASE=(\d+\.\d+\.\d+)$", _SCRIPT.read_text(), re.M)
    assert release is not None
    minor = int(release.group(1).split(".")[1])
    # The core's stable modules go with it: v0.161.0 with v1.67.0 (v0.165.0 with v1.71.0).
    stable = f"v1.{minor - 94}.0"
    modules = dict(re.findall(r"^\s*(\S+) (v\S+)(?: // indirect)?$", _GO_MOD.read_text(), re.M))
    collector = {name: v for name, v in modules.items()
                 if name == _CORE or name.startswith((_CORE + "/", _CONTRIB + "/"))}
    assert f"{_CONTRIB}/exporter/fileexporter" in collector
    assert f"{_CORE}/otelcol" in collector
    wrong = {name: v for name, v in collector.items() if v not in (f"v{release.group(1)}", stable)}
    assert not wrong, f"not at v{release.group(1)} or {stable}: {wrong}"
    assert all(v == f"v{release.group(1)}" for name, v in collector.items()
               if name.startswith(_CONTRIB))
