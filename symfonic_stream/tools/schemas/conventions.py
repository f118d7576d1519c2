"""What the generated files share: the default topic prefix, the do-not-edit note, names."""

from __future__ import annotations

#: The files show names with the default prefix: one committed set, not one per deployment.
DEFAULT_PREFIX = "symfonic"

DEAD_LETTER_HEADERS_FILE = "dead-letter-headers.json"

REGENERATE_HINT = "run `make schemas` (symfonic-stream schemas generate) and commit schemas/"
GENERATED_NOTE = (
    "Generated from symfonic_stream/models by `symfonic-stream schemas generate` "
    "(make schemas). Do not edit by hand."
)
