"""The text of every file in schemas/: deterministic JSON and YAML, so drift is a plain diff."""

from __future__ import annotations

import json
from typing import Any

import yaml

from symfonic_stream.tools.schemas.asyncapi import asyncapi_document
from symfonic_stream.tools.schemas.conventions import GENERATED_NOTE
from symfonic_stream.tools.schemas.json_schema import json_schemas

ASYNCAPI_FILE = "asyncapi.yaml"


def dump_json(schema: dict[str, Any]) -> str:
    """Deterministic JSON text: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


class _NoAliasDumper(yaml.SafeDumper):
    """Writes a value shared by two places twice, never as a YAML anchor and alias.

    The builders reuse one object where two places say the same thing (a channel
    parameter, an example); that sharing is an implementation detail, and anchors would
    make the committed document change whenever it does.
    """

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(document: dict[str, Any]) -> str:
    """Deterministic YAML text: keys in the document's order, a header saying not to edit."""
    header = f"# {GENERATED_NOTE}\n"
    return header + yaml.dump(
        document,
        Dumper=_NoAliasDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


def generate() -> dict[str, str]:
    """Every file of schemas/, by file name, as the text to write. Pure and deterministic."""
    files = {name: dump_json(schema) for name, schema in sorted(json_schemas().items())}
    files[ASYNCAPI_FILE] = dump_yaml(asyncapi_document())
    return files
