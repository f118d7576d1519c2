"""A release a user can take: one version, written in pyproject.toml and followed everywhere
else; the license text the metadata names; a changelog whose latest release is that version.

Where a file must spell the version (Chart.yaml: helm reads no other file), this is the drift
check; where it need not, the version is derived (the package's installed metadata, the
image's label from `make image`, the packaged chart's appVersion from `make dist`).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

import symfonic_stream
from symfonic_stream.tools.schemas.asyncapi.document import asyncapi_document

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]


def test_the_package_reads_the_version_from_its_metadata() -> None:
    assert symfonic_stream.__version__ == VERSION  # stale? `make venv` reinstalls
    assert asyncapi_document()["info"]["version"] == VERSION
    source = (ROOT / "symfonic_stream" / "__init__.py").read_text()
    assert VERSION not in source


def test_the_chart_follows_the_version() -> None:
    chart = yaml.safe_load((ROOT / "helm" / "symfonic-stream" / "Chart.yaml").read_text())
    assert chart["appVersion"] == VERSION, "Chart.yaml's appVersion: set it to pyproject's"
    assert chart["version"] == VERSION, "Chart.yaml's version: set it to pyproject's"


def test_the_image_and_the_crate_spell_no_version() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ARG VERSION=""$', dockerfile, re.M)
    assert 'org.opencontainers.image.version="${VERSION}"' in dockerfile
    crate = tomllib.loads((ROOT / "native" / "Cargo.toml").read_text())["package"]
    assert "version" not in crate and crate["publish"] is False
    release_mk = (ROOT / "mk" / "release.mk").read_text()
    assert "VERSION := $(shell sed -n 's/^version = " in release_mk  # read from pyproject


def test_the_license_is_the_apache_2_text_the_metadata_names() -> None:
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert text.rstrip().endswith("limitations under the License.")
    assert len(text.split()) > 1500  # the whole text, not a notice
    crate = tomllib.loads((ROOT / "native" / "Cargo.toml").read_text())["package"]
    assert crate["license"] == "Apache-2.0"
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (ROOT / "Dockerfile").read_text()


def test_the_changelog_keeps_a_changelog_and_its_latest_release_is_the_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert headings[0] == ("Unreleased", "")
    released = [(name, date) for name, date in headings[1:]]
    assert released and all(date for _, date in released)  # every release is dated
    assert released[0][0] == VERSION, "CHANGELOG.md: the latest release must be pyproject's"
    sections = set(re.findall(r"^### (.+)$", text, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
