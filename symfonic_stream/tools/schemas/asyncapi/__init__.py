"""The AsyncAPI 3.0 document of every topic, built as a Python object.

:mod:`.objects` holds the small building blocks, :mod:`.messages` the record types (the
pause path's in :mod:`.pause_messages`),
:mod:`.channels` the topics, :mod:`.operations` who sends and receives, and
:mod:`.document` puts them together.
"""

from symfonic_stream.tools.schemas.asyncapi.document import ASYNCAPI_VERSION, asyncapi_document
from symfonic_stream.tools.schemas.asyncapi.objects import (
    KAFKA_BINDING_VERSION,
    PAYLOAD_SCHEMA_FORMAT,
)
from symfonic_stream.tools.schemas.asyncapi.pause_messages import ACCEPTED_OUTCOME, TICKET_MARK

__all__ = [
    "ACCEPTED_OUTCOME",
    "ASYNCAPI_VERSION",
    "KAFKA_BINDING_VERSION",
    "PAYLOAD_SCHEMA_FORMAT",
    "TICKET_MARK",
    "asyncapi_document",
]
