"""Pydantic models: the single source of every record's wire format (and of schemas/)."""
