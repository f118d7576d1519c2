def scan(value: bytes, max_depth: int, max_integer: int) -> tuple[str, str] | None:
    """None when ``value`` is a JSON object the project can carry, else ``(kind, detail)``:
    kind "json", "type", "depth", "integer" or "duplicate_key" (native/src/lib.rs)."""
