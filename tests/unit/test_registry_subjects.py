"""What ``schemas register`` registers (symfonic_stream/tools/schemas/subjects.py), derived
from the declarations through the AsyncAPI document: every declared topic whose messages have
a payload schema, each family topic under the names the deployment's wiring gives it, one
``anyOf`` schema for a topic carrying several record types, the files' text with draft-07
named; and scripts/registry.sh refusing bad settings by name before it does anything."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from symfonic_stream.config import Settings
from symfonic_stream.consumers import deployed, engines
from symfonic_stream.models.names import TopicNames
from symfonic_stream.tools.schemas import json_schemas
from symfonic_stream.tools.schemas.asyncapi.channels import document_topics
from symfonic_stream.tools.schemas.subjects import REGISTERED_DIALECT, value_schemas

ROOT = Path(__file__).resolve().parents[2]


def test_each_topic_with_a_payload_schema_gets_one() -> None:
    settings = Settings(topic_prefix="p")
    names = TopicNames("p")
    found = value_schemas(settings)
    declared = {t.name(names) for t in document_topics() if not t.family}
    families = {name for e in engines(deployed()) for name in e.wire(settings, names).family_topics}
    # Every declared topic but the dead letters (any record's bytes: no value schema).
    assert set(found) == (declared - {names.dead_letter}) | families
    assert {"p.human.default", "p.human.expired"} <= families


def test_the_registered_text_is_the_files_with_draft_07() -> None:
    found = value_schemas(Settings(topic_prefix="p"))
    files = json_schemas()
    resumes = json.loads(found["p.resumes"])
    assert resumes == {**files["resume.json"], "$schema": REGISTERED_DIALECT}
    assert json.loads(found["p.human.default"]) == json.loads(found["p.human.expired"])
    either = json.loads(found["p.resume-requests"])
    assert either["$schema"] == REGISTERED_DIALECT
    assert [part["$id"] for part in either["anyOf"]] == [
        files["resume-request.json"]["$id"], files["claim-request.json"]["$id"]]
    assert all("$schema" not in part for part in either["anyOf"])
    # The same schema is the same text every time (a registry finds it unchanged).
    assert value_schemas(Settings(topic_prefix="p")) == found


@pytest.mark.parametrize(("name", "value"), [
    ("SYMFONIC_REGISTRY_PORT", "http"),
    ("SYMFONIC_REGISTRY_PORT", "70000"),
    ("SYMFONIC_REGISTRY_START_TIMEOUT", "soon"),
    ("SYMFONIC_REGISTRY_HOST", "a host"),
])
def test_the_script_refuses_a_bad_setting_by_name(name: str, value: str) -> None:
    done = subprocess.run([str(ROOT / "scripts" / "registry.sh"), "status"],
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", name: value},
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1
    assert done.stderr.startswith(f"registry.sh: error: {name}")


def test_the_script_says_its_url() -> None:
    done = subprocess.run([str(ROOT / "scripts" / "registry.sh"), "url"],
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
                               "SYMFONIC_REGISTRY_PORT": "18123"},
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout == "http://127.0.0.1:18123/apis/ccompat/v7\n"
