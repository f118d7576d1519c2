"""``schemas register`` against a real registry (Apicurio Registry from scripts/registry.sh,
its Confluent-compatible API): every topic's value schema registered under ``<topic>-value``
with the BACKWARD level, found unchanged the second time; a compatible change (an optional
field added) registered as the next version; an incompatible one (a required field removed)
refused, named, and not registered; docs/schema-registry.md's commands as a reader runs them.

Each test works under its own topic prefix, so its subjects are its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from symfonic_stream.config import load_settings
from symfonic_stream.kafka.schema_registry import subject_of
from symfonic_stream.tools.schemas.register import register
from symfonic_stream.tools.schemas.subjects import value_schemas
from tests.docs_blocks import ROOT, Session, command_block, tool_env

_MEDIA = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def _prefix() -> str:
    return f"reg{uuid.uuid4().hex[:10]}"


def _cli(url: str, prefix: str) -> subprocess.CompletedProcess[str]:
    env = tool_env(schema_registry_url=url, topic_prefix=prefix)
    return subprocess.run([sys.executable, "-m", "symfonic_stream", "schemas", "register"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def _get(url: str, path: str) -> Any:
    response = httpx.get(url + path, headers=_MEDIA, timeout=10)
    response.raise_for_status()
    return response.json()


def _versions(url: str, subject: str) -> list[int]:
    return list(_get(url, f"/subjects/{subject}/versions"))


def test_every_topic_is_registered_once_then_found_unchanged(registry_url: str) -> None:
    prefix = _prefix()
    schemas = value_schemas(load_settings(topic_prefix=prefix))
    subjects = [subject_of(topic) for topic in schemas]

    first = _cli(registry_url, prefix)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [["registered", s] for s in subjects]
    assert lines[-1].endswith(f"(BACKWARD): {len(subjects)} registered, 0 unchanged, "
                              "0 incompatible")

    again = _cli(registry_url, prefix)
    assert again.returncode == 0, again.stderr
    assert [line.split()[:2] for line in again.stdout.splitlines()[:-1]] == \
        [["unchanged", s] for s in subjects]

    registered = set(_get(registry_url, "/subjects"))
    assert set(subjects) <= registered
    for subject, topic in zip(subjects, schemas, strict=True):
        assert _get(registry_url, f"/config/{subject}")["compatibilityLevel"] == "BACKWARD"
        latest = _get(registry_url, f"/subjects/{subject}/versions/latest")
        assert json.loads(latest["schema"]) == json.loads(schemas[topic])
        assert latest.get("schemaType") == "JSON"
    # Both queues named by the default rules, each its own subject; the dead letters none.
    assert f"{prefix}.human.default-value" in subjects
    assert f"{prefix}.human.expired-value" in subjects
    assert f"{prefix}.dead-letter-value" not in subjects


def _changed(schema_text: str, change: str) -> str:
    schema = json.loads(schema_text)
    if change == "add an optional field":
        schema["properties"]["note"] = {"type": "string"}
    else:  # remove a required field
        gone = schema["required"][0]
        schema["required"] = schema["required"][1:]
        del schema["properties"][gone]
    return json.dumps(schema, sort_keys=True)


async def test_a_compatible_change_is_registered_as_the_next_version(registry_url: str) -> None:
    settings = load_settings(topic_prefix=_prefix(), schema_registry_url=registry_url)
    topic = f"{settings.topic_prefix}.resumes"
    schema = value_schemas(settings)[topic]
    [first] = await register(settings, {topic: schema})
    assert first.outcome == "registered"

    [second] = await register(settings, {topic: _changed(schema, "add an optional field")})

    assert second.outcome == "registered", second.reasons
    assert second.schema_id != first.schema_id
    assert _versions(registry_url, subject_of(topic)) == [1, 2]


async def test_a_removed_required_field_is_refused_and_named(registry_url: str) -> None:
    prefix = _prefix()
    settings = load_settings(topic_prefix=prefix, schema_registry_url=registry_url)
    topic = f"{prefix}.resumes"
    schema = value_schemas(settings)[topic]
    await register(settings, {topic: schema})

    [refused] = await register(settings, {topic: _changed(schema, "remove a required field")})

    assert refused.outcome == "incompatible"
    assert refused.schema_id is None
    assert refused.reasons and any("incompatible" in r.lower() for r in refused.reasons)
    assert _versions(registry_url, subject_of(topic)) == [1]
    assert refused.line().startswith(f"incompatible {topic}-value: ")


def test_the_command_exits_1_naming_the_incompatible_subject(registry_url: str) -> None:
    """What the project's files describe removes a required field from what the registry
    holds (the registered version has one more): the command registers the other subjects,
    names the refused one with the registry's reason, and exits 1."""
    prefix = _prefix()
    topic = f"{prefix}.resumes"
    schema = json.loads(value_schemas(load_settings(topic_prefix=prefix))[topic])
    schema["properties"]["note"] = {"type": "string"}
    schema["required"] = [*schema["required"], "note"]
    body = {"schemaType": "JSON", "schema": json.dumps(schema)}
    httpx.post(f"{registry_url}/subjects/{topic}-value/versions", json=body, headers=_MEDIA,
               timeout=10).raise_for_status()

    done = _cli(registry_url, prefix)

    assert done.returncode == 1
    [named] = [line for line in done.stderr.splitlines() if line.startswith("incompatible")]
    assert named.startswith(f"incompatible {topic}-value: ")
    assert "0 unchanged, 1 incompatible" in done.stdout.splitlines()[-1]
    assert f"registered {prefix}.stream-events-value" in done.stdout


def test_an_unreachable_registry_fails_naming_the_setting() -> None:
    done = _cli("http://127.0.0.1:9", _prefix())
    assert done.returncode == 1
    assert "SYMFONIC_SCHEMA_REGISTRY_URL" in done.stderr
    malformed = _cli("127.0.0.1:8081", _prefix())
    assert malformed.returncode == 2
    assert "SYMFONIC_SCHEMA_REGISTRY_URL" in malformed.stderr


async def test_the_pages_commands(tmp_path: Path) -> None:
    """docs/schema-registry.md's session, on the registry make test-registry started (the
    script reuses it: the same port and cache), under a prefix of its own."""
    prefix = _prefix()
    env = tool_env(topic_prefix=prefix)
    env["PYTHONPATH"] = str(ROOT)  # this checkout's package, also in a git worktree
    # The script's own settings, as make test-registry gave them (its port, its cache).
    env.update({k: v for k, v in os.environ.items() if k.startswith("SYMFONIC_REGISTRY_")
                and k != "SYMFONIC_REGISTRY_URL"})
    session = Session([command_block("schema-registry.md", "symfonic-stream schemas register")],
                      ROOT, env, prefix=prefix)
    async with session:
        session.check()
