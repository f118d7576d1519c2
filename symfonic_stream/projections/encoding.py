"""Compact JSON text for values embedded as strings (``args_delta``, chunk content)."""

from __future__ import annotations

from typing import Any

import orjson


def compact_json(value: Any) -> str:
    """JSON with no whitespace, keys in received order, UTF-8 characters unescaped."""
    return orjson.dumps(value).decode()
