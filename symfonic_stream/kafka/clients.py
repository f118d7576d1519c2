"""aiokafka keyword arguments built from :class:`~symfonic_stream.config.Settings`.

Every client the project opens (group consumer, restore consumer, transactional producers,
admin client, test helpers) takes its connection and security settings from here, so TLS
and SASL are configured in exactly one place. Secrets are read from ``SecretStr`` only at
the moment the kwargs are built and never logged.
"""

from __future__ import annotations

import ssl
from typing import Any

from symfonic_stream import __version__
from symfonic_stream.config import Settings
from symfonic_stream.kafka.retry import fold_bootstrap_noise

#: Producer batches: big enough that a copier at full speed sends few requests, small
#: enough that 12 per-partition producers per process stay cheap.
PRODUCER_MAX_BATCH_BYTES = 512 * 1024
#: Room for the dead-letter headers on top of a record at the size limit.
_DLQ_HEADROOM_BYTES = 64 * 1024


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context for ``SSL``/``SASL_SSL``, or ``None`` for plaintext protocols.

    Without ``SYMFONIC_SSL_CAFILE`` the system trust store is used (a managed Kafka with a
    public CA); a client certificate is only sent when both cert and key files are set.
    """
    if not settings.security_protocol.endswith("SSL"):
        return None
    # The standard library's, not aiokafka's create_ssl_context: that one logs the key
    # file's path (DEBUG), and the key's path is kept out of every log line.
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.ssl_cafile)
    if settings.ssl_certfile is not None and settings.ssl_keyfile is not None:
        context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
    return context


def client_kwargs(settings: Settings, client_id: str) -> dict[str, Any]:
    """Connection and security kwargs shared by consumers, producers and the admin client.

    Every client is made from these, so here aiokafka's own lines for a failed bootstrap
    give way to the one line of the wait that retries it (kafka/retry.py)."""
    fold_bootstrap_noise()
    kwargs: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": f"symfonic-stream-{__version__}-{client_id}",
        "security_protocol": settings.security_protocol,
    }
    context = ssl_context(settings)
    if context is not None:
        kwargs["ssl_context"] = context
    if settings.security_protocol.startswith("SASL_"):
        # Settings validation guarantees mechanism, username and password are all set.
        assert settings.sasl_mechanism is not None and settings.sasl_password is not None
        kwargs["sasl_mechanism"] = settings.sasl_mechanism
        # aiokafka uses the "plain" username/password for SCRAM as well.
        kwargs["sasl_plain_username"] = settings.sasl_username
        kwargs["sasl_plain_password"] = settings.sasl_password.get_secret_value()
    return kwargs


def group_consumer_kwargs(settings: Settings, group_id: str) -> dict[str, Any]:
    """The engine's input consumer: read_committed, manual (transactional) offsets."""
    return {
        **client_kwargs(settings, group_id),
        "group_id": group_id,
        # Only committed input: an upstream producer's aborted writes are never projected.
        "isolation_level": "read_committed",
        # Offsets are committed only inside the output transaction (send_offsets_to_transaction).
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_bytes": settings.batch_max_bytes,
        "max_partition_fetch_bytes": settings.batch_max_bytes,
        "max_poll_records": settings.batch_max_records,
        # aiokafka defaults the rebalance timeout to the session timeout (10 s); revoking
        # finishes the transaction in flight, which may take longer than a heartbeat gap.
        "session_timeout_ms": 10_000,
        # A member learns that the group rebalances at its next heartbeat, so a leaving
        # instance's partitions wait up to one interval for the others to rejoin: 3 s (the
        # Java default) left them 3.1 s without output in bench.rebalance (docs/benchmarks.md).
        "heartbeat_interval_ms": 1_000,
        "rebalance_timeout_ms": 30_000,
    }


def request_rejoin(consumer: Any) -> None:
    """Make the consumer's group rebalance (so partitions given back get an owner).

    aiokafka has no public call for it; ``request_rejoin`` is what it uses itself when the
    metadata changes. Raises RuntimeError on an aiokafka without it (a version check)."""
    request = getattr(getattr(consumer, "_coordinator", None), "request_rejoin", None)
    if request is None:
        raise RuntimeError("this aiokafka version cannot force a group rejoin")
    request()


def restore_consumer_kwargs(settings: Settings, name: str) -> dict[str, Any]:
    """A group-less consumer that replays changelog partitions (read_committed)."""
    return groupless_consumer_kwargs(settings, f"{name}-restore")


def groupless_consumer_kwargs(settings: Settings, client_id: str) -> dict[str, Any]:
    """A consumer without a group, assigned and positioned by its caller, reading only
    committed records (restores, replays, the gateway's tails and read-backs)."""
    return {
        **client_kwargs(settings, client_id),
        "group_id": None,
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_bytes": settings.batch_max_bytes,
        "max_partition_fetch_bytes": settings.batch_max_bytes,
    }


#: Retry delay of the transactional producers (aiokafka's default: 100 ms).
TRANSACTIONAL_RETRY_BACKOFF_MS = 20


def transactional_producer_kwargs(settings: Settings, transactional_id: str) -> dict[str, Any]:
    """One partition's producer: idempotent, ``acks=all``, fenced by ``transactional_id``."""
    return {
        **client_kwargs(settings, transactional_id),
        "transactional_id": transactional_id,
        "transaction_timeout_ms": settings.transaction_timeout_ms,
        "enable_idempotence": True,
        "acks": "all",
        "compression_type": compression_type(settings),
        "linger_ms": 0,
        # aiokafka's 100 ms retry delay was paid by 3 % of transactions: the group
        # coordinator refuses a TxnOffsetCommit (COORDINATOR_NOT_AVAILABLE) for the moment
        # it takes to apply the previous transaction's marker (bench/results/HISTORY.md, change 5).
        "retry_backoff_ms": TRANSACTIONAL_RETRY_BACKOFF_MS,
        "max_batch_size": PRODUCER_MAX_BATCH_BYTES,
        # A dead letter carries a whole record that may be at (or, for too_large, above)
        # the size limit, plus headers; aiokafka refuses locally anything above this.
        "max_request_size": max(1_048_576, settings.max_record_bytes * 2 + _DLQ_HEADROOM_BYTES),
    }


def plain_producer_kwargs(settings: Settings, name: str) -> dict[str, Any]:
    """A non-transactional, idempotent producer (publishing tools and tests)."""
    return {
        **client_kwargs(settings, name),
        "enable_idempotence": True,
        "acks": "all",
        "compression_type": compression_type(settings),
    }


#: One admin request's bound: a broker that does not answer within it is asked again, maybe
#: another one (aiokafka's default is 40 s, a long time to wait on a node that is gone).
ADMIN_REQUEST_TIMEOUT_MS = 15_000


def admin_kwargs(settings: Settings) -> dict[str, Any]:
    """The admin client (``topics ensure``, start-up checks)."""
    return {**client_kwargs(settings, "admin"), "request_timeout_ms": ADMIN_REQUEST_TIMEOUT_MS}


def compression_type(settings: Settings) -> str | None:
    """``SYMFONIC_COMPRESSION`` as aiokafka expects it (``none`` means no codec)."""
    return None if settings.compression == "none" else settings.compression
