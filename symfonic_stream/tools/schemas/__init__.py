"""schemas/: a JSON Schema for every record type and an AsyncAPI document of the topics.

Everything here is generated from the models (``symfonic_stream.models``) and the topic
names (``symfonic_stream.models.names``), so the files in schemas/ are never edited by hand: run
``make schemas`` (``symfonic-stream schemas generate``) and commit the result. The unit
tests fail when the committed files drift from what :func:`generate` returns.

Two directions, two kinds of schema:

* Records the project *reads* from outside (AgentEvent, ResumeRequest) get pydantic's
  *validation* schema: what a consumer accepts. Fields with a default may be absent.
* Records the project *writes* (envelopes, events, tickets, resumes, rejections) get the
  *serialization* schema with every field required: every field is always on the wire,
  ``null`` included, which is what a reader of those topics can rely on.

The generator is pure: :func:`generate` returns ``{filename: text}`` and touches no file.
Output is deterministic (sorted keys, 2-space indent, trailing newline).

Modules: :mod:`.records` lists the record schemas, :mod:`.json_schema` builds them,
:mod:`.asyncapi` builds the AsyncAPI document, :mod:`.files` renders every file's text.
Writing and drift checking are the CLI's (:mod:`symfonic_stream.cli.schemas`).
"""

from symfonic_stream.tools.schemas.asyncapi import (
    ACCEPTED_OUTCOME,
    ASYNCAPI_VERSION,
    KAFKA_BINDING_VERSION,
    PAYLOAD_SCHEMA_FORMAT,
    TICKET_MARK,
    asyncapi_document,
)
from symfonic_stream.tools.schemas.conventions import (
    DEAD_LETTER_HEADERS_FILE,
    DEFAULT_PREFIX,
    GENERATED_NOTE,
    REGENERATE_HINT,
)
from symfonic_stream.tools.schemas.files import ASYNCAPI_FILE, dump_json, dump_yaml, generate
from symfonic_stream.tools.schemas.json_schema import (
    JSON_SCHEMA_DIALECT,
    SCHEMA_ID_BASE,
    dead_letter_headers_schema,
    json_schemas,
)
from symfonic_stream.tools.schemas.records import RECORD_SCHEMAS, RecordSchema

__all__ = [
    "ACCEPTED_OUTCOME",
    "ASYNCAPI_FILE",
    "ASYNCAPI_VERSION",
    "DEAD_LETTER_HEADERS_FILE",
    "DEFAULT_PREFIX",
    "GENERATED_NOTE",
    "JSON_SCHEMA_DIALECT",
    "KAFKA_BINDING_VERSION",
    "PAYLOAD_SCHEMA_FORMAT",
    "RECORD_SCHEMAS",
    "REGENERATE_HINT",
    "SCHEMA_ID_BASE",
    "TICKET_MARK",
    "RecordSchema",
    "asyncapi_document",
    "dead_letter_headers_schema",
    "dump_json",
    "dump_yaml",
    "generate",
    "json_schemas",
]
