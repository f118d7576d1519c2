"""A small client of Confluent's Schema Registry API (which Confluent's registry, Karapace,
Apicurio's ``/apis/ccompat/v7`` and Redpanda serve): what ``schemas register`` and the
``__value_schema_id`` header need, and nothing more (docs/schema-registry.md).

Subjects follow Confluent's TopicNameStrategy: a topic's value schema is under
``<topic>-value``. Schemas are JSON Schema (``schemaType`` ``JSON``). Needs httpx (the
``registry`` extra); this module is imported only where a registry is used.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from symfonic_stream.config import ENV_PREFIX, Settings
from symfonic_stream.kafka.producer import VALUE_SCHEMA_ID_HEADER

__all__ = ["VALUE_SCHEMA_ID_HEADER", "Compatibility", "RegistryError", "SchemaRegistry",
           "schema_id_header", "subject_of", "value_schema_headers"]
#: Confluent's schema id encodings start with a magic byte: 0, then the id as a 4-byte
#: big-endian integer (the prefix framing's; what the header carries here), or 1, then the
#: schema's 16-byte GUID (which registries without GUIDs cannot resolve).
MAGIC_BYTE_ID = 0
_MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
_URL = f"{ENV_PREFIX}SCHEMA_REGISTRY_URL"


class RegistryError(Exception):
    """The registry cannot be reached or answered what it should not; the message says which
    setting or subject."""


def subject_of(topic: str) -> str:
    """The subject of ``topic``'s value schema (TopicNameStrategy)."""
    return f"{topic}-value"


def schema_id_header(schema_id: int) -> bytes:
    """The ``__value_schema_id`` header's value of ``schema_id``: magic byte 0, then the id
    (4 bytes, big-endian)."""
    if not 0 <= schema_id < 2**31:
        raise RegistryError(f"schema id {schema_id} is not a registry id (0 to 2^31-1)")
    return bytes([MAGIC_BYTE_ID]) + schema_id.to_bytes(4, "big")


@dataclass(frozen=True, slots=True)
class Compatibility:
    """The registry's verdict on a schema against a subject's latest version."""

    compatible: bool
    #: The registry's reasons when it is not.
    reasons: tuple[str, ...] = ()


class SchemaRegistry:
    """One registry (``SYMFONIC_SCHEMA_REGISTRY_*``); use as ``async with``."""

    def __init__(self, settings: Settings) -> None:
        if settings.schema_registry_url is None:
            raise RegistryError(f"{_URL} is not set: the registry's base URL, e.g. "
                                "http://127.0.0.1:8081 (docs/schema-registry.md)")
        self.url = settings.schema_registry_url.rstrip("/")
        auth = None
        if settings.schema_registry_username is not None and \
                settings.schema_registry_password is not None:
            auth = httpx.BasicAuth(settings.schema_registry_username,
                                   settings.schema_registry_password.get_secret_value())
        verify: ssl.SSLContext | bool = True
        if settings.schema_registry_cafile is not None:
            verify = ssl.create_default_context(cafile=str(settings.schema_registry_cafile))
        self._client = httpx.AsyncClient(
            base_url=self.url, auth=auth, verify=verify,
            timeout=settings.schema_registry_timeout_s,
            headers={"Accept": _MEDIA_TYPE, "Content-Type": _MEDIA_TYPE})

    async def __aenter__(self) -> SchemaRegistry:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None,
                    *, missing_ok: bool = False) -> Any:
        """The answer's JSON; None for a 404 when ``missing_ok``."""
        try:
            response = await self._client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise RegistryError(f"the schema registry at {self.url} ({_URL}) cannot be "
                                f"reached: {type(exc).__name__}: {exc}") from None
        if response.status_code == 404 and missing_ok:
            return None
        if response.status_code in (401, 403):
            raise RegistryError(
                f"the schema registry at {self.url} refused the request ({response.status_code}):"
                f" check {ENV_PREFIX}SCHEMA_REGISTRY_USERNAME and _PASSWORD")
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if response.is_error or answer is None:
            message = answer.get("message") if isinstance(answer, dict) else None
            raise RegistryError(
                f"the schema registry at {self.url} ({_URL}) answered {method} {path} with "
                f"{response.status_code}: {message or response.text[:200]!r}")
        return answer

    @staticmethod
    def _subject_path(subject: str) -> str:
        return f"/subjects/{quote(subject, safe='')}"

    @staticmethod
    def _body(schema: str) -> dict[str, Any]:
        return {"schemaType": "JSON", "schema": schema}

    async def set_compatibility(self, subject: str, level: str) -> None:
        await self._call("PUT", f"/config/{quote(subject, safe='')}", {"compatibility": level})

    async def lookup(self, subject: str, schema: str) -> int | None:
        """The id of ``schema`` when it is a version of ``subject`` already, else None."""
        answer = await self._call("POST", self._subject_path(subject), self._body(schema),
                                  missing_ok=True)
        return None if answer is None else _schema_id(answer, subject)

    async def check(self, subject: str, schema: str) -> Compatibility:
        """Whether ``schema`` may follow ``subject``'s latest version under the subject's
        compatibility level (a subject with no version takes anything)."""
        answer = await self._call(
            "POST", f"/compatibility{self._subject_path(subject)}/versions/latest?verbose=true",
            self._body(schema), missing_ok=True)
        if answer is None:
            return Compatibility(True)
        compatible = answer.get("is_compatible") if isinstance(answer, dict) else None
        if not isinstance(compatible, bool):
            raise RegistryError(f"the schema registry at {self.url} answered the compatibility "
                                f"check of {subject} without is_compatible")
        reasons = answer.get("messages") or answer.get("reason") or ()
        if isinstance(reasons, str):
            reasons = (reasons,)
        return Compatibility(compatible, tuple(str(r) for r in reasons))

    async def register(self, subject: str, schema: str) -> int:
        """Register ``schema`` as ``subject``'s next version; its id."""
        answer = await self._call("POST", f"{self._subject_path(subject)}/versions",
                                  self._body(schema))
        return _schema_id(answer, subject)

    async def latest_id(self, subject: str) -> int | None:
        """The id of ``subject``'s latest version; None when it has none."""
        answer = await self._call("GET", f"{self._subject_path(subject)}/versions/latest",
                                  missing_ok=True)
        return None if answer is None else _schema_id(answer, subject)


def _schema_id(answer: Any, subject: str) -> int:
    found = answer.get("id") if isinstance(answer, dict) else None
    if type(found) is not int or not 0 <= found < 2**31:
        raise RegistryError(f"the schema registry gave no schema id for {subject}")
    return found


async def value_schema_headers(settings: Settings, topics: tuple[str, ...]
                               ) -> dict[str, bytes]:
    """Each topic's ``__value_schema_id`` header value: its subject's latest version's id.
    Raises :class:`RegistryError` naming the topics whose subject has none."""
    found: dict[str, bytes] = {}
    async with SchemaRegistry(settings) as registry:
        for topic in topics:
            schema_id = await registry.latest_id(subject_of(topic))
            if schema_id is not None:
                found[topic] = schema_id_header(schema_id)
    missing = [topic for topic in topics if topic not in found]
    if missing:
        raise RegistryError(
            f"{ENV_PREFIX}SCHEMA_ID_FRAMING={settings.schema_id_framing}, but no schema is "
            f"registered for {', '.join(subject_of(t) for t in missing)} at "
            f"{settings.schema_registry_url}: run `symfonic-stream schemas register` first")
    return found
