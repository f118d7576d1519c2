"""The rows of the benchmark's report: which consumers run at once, and the baseline."""

from __future__ import annotations

#: Rows of the report: name → the consumers run at once.
ROWS: dict[str, tuple[str, ...]] = {
    "copier": ("copier",),
    "typed": ("typed",),
    "chunks": ("chunks",),
    "typed+chunks": ("typed", "chunks"),
    "pauses": ("pauses",),
}
#: The row every other row's figures are divided by.
BASELINE = "copier"
