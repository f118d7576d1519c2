"""SYMFONIC_SCHEMA_ID_FRAMING=header (docs/schema-registry.md): every output the producer path
writes to a registered topic carries its value schema's id in ``__value_schema_id`` (magic
byte 0, the id in 4 bytes big-endian), on the native batches and aiokafka's alike; the
value stays byte for byte what it was; a tombstone and a topic without a schema get no
header. The settings that go with it fail naming themselves.

No broker: the transaction's batches are built as the sender builds them, then read back.
"""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.record.default_records import DefaultRecordBatch

from symfonic_stream.config import ConfigError, load_settings
from symfonic_stream.engine.processor import OutputRecord
from symfonic_stream.kafka.producer import (
    VALUE_SCHEMA_ID_HEADER,
    PartitionWrites,
    TransactionBatches,
    with_value_schema_ids,
)
from symfonic_stream.kafka.schema_registry import RegistryError, schema_id_header, subject_of


def _writes() -> PartitionWrites:
    outputs = [
        OutputRecord("events", b"run-1", b'{"seq":0}', "text", None,
                     (("symfonic-tenant", b"a"),)),
        OutputRecord("events", b"run-1", b'{"seq":1}', "text"),
        OutputRecord("tickets", b"t-1", None, "tombstone"),
        OutputRecord("other", b"run-1", b"{}", "text"),
    ]
    return PartitionWrites(0, outputs, [], None, {}, None)


def _read_back(writes: PartitionWrites, native: bool
               ) -> list[tuple[bytes | None, list[tuple[str, bytes]]]]:
    batches = TransactionBatches(AIOKafkaProducer(transactional_id="t"), native=native)
    batches.append_writes(writes, lambda topic, key, keyless: 0,
                          {"events": 1, "tickets": 1, "other": 1})
    found = []
    for _, batch in batches.in_send_order():
        read = DefaultRecordBatch(bytes(batch._build()))
        found.extend((record.value, list(record.headers)) for record in read)
    return found


def test_the_header_encodes_the_id_after_magic_byte_zero() -> None:
    assert schema_id_header(7) == b"\x00\x00\x00\x00\x07"
    assert schema_id_header(2**31 - 1) == b"\x00\x7f\xff\xff\xff"
    for wrong in (-1, 2**31):
        with pytest.raises(RegistryError):
            schema_id_header(wrong)
    assert subject_of("symfonic.resumes") == "symfonic.resumes-value"


@pytest.mark.parametrize("native", [True, False])
async def test_outputs_to_registered_topics_carry_their_schema_id(native: bool) -> None:
    ids = {"events": schema_id_header(3), "tickets": schema_id_header(9)}
    before = _writes()
    written = _read_back(with_value_schema_ids([before], ids)[0], native)

    header = (VALUE_SCHEMA_ID_HEADER, b"\x00\x00\x00\x00\x03")
    assert written == [
        (b'{"seq":0}', [("symfonic-tenant", b"a"), header]),
        (b'{"seq":1}', [header]),
        (None, []),  # a tombstone: no value, no schema
        (b"{}", []),  # no schema registered for this topic
    ]
    # The writes the engine keeps (a retried transaction appends them again) are unchanged.
    assert before.outputs == _writes().outputs
    assert all(VALUE_SCHEMA_ID_HEADER not in dict(headers)
               for _, headers in _read_back(before, native))


async def test_without_ids_nothing_changes() -> None:
    assert _read_back(with_value_schema_ids([_writes()], {})[0], False) == \
        _read_back(_writes(), False)


@pytest.mark.parametrize(("env", "named"), [
    ({"SYMFONIC_SCHEMA_REGISTRY_URL": "localhost:8081"}, "SYMFONIC_SCHEMA_REGISTRY_URL"),
    ({"SYMFONIC_SCHEMA_REGISTRY_URL": "ftp://registry"}, "SYMFONIC_SCHEMA_REGISTRY_URL"),
    ({"SYMFONIC_SCHEMA_REGISTRY_URL": "http://a b"}, "SYMFONIC_SCHEMA_REGISTRY_URL"),
    ({"SYMFONIC_SCHEMA_ID_FRAMING": "header"}, "SYMFONIC_SCHEMA_REGISTRY_URL"),
    ({"SYMFONIC_SCHEMA_ID_FRAMING": "prefix"}, "SYMFONIC_SCHEMA_ID_FRAMING"),
    ({"SYMFONIC_SCHEMA_REGISTRY_COMPATIBILITY": "SIDEWAYS"},
     "SYMFONIC_SCHEMA_REGISTRY_COMPATIBILITY"),
    ({"SYMFONIC_SCHEMA_REGISTRY_USERNAME": "u"}, "SYMFONIC_SCHEMA_REGISTRY_PASSWORD"),
    ({"SYMFONIC_SCHEMA_REGISTRY_URL": "http://r:8081",
      "SYMFONIC_SCHEMA_REGISTRY_CAFILE": "/no/such/ca.pem"}, "SYMFONIC_SCHEMA_REGISTRY_CAFILE"),
])
def test_bad_registry_settings_fail_naming_the_setting(
        env: dict[str, str], named: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=named):
        load_settings()


def test_the_registry_password_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYMFONIC_SCHEMA_REGISTRY_PASSWORD", "hunter2-secret")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert "hunter2-secret" not in str(caught.value)
    monkeypatch.setenv("SYMFONIC_SCHEMA_REGISTRY_USERNAME", "u")
    settings = load_settings()
    assert "hunter2-secret" in settings.secrets()
    assert "hunter2-secret" not in repr(settings)
