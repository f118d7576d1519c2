"""Settings: every ``SYMFONIC_*`` environment variable, its default, and its validation.

One pydantic-settings model is the single place a setting is named. A bad value fails
start-up with a message naming the variable (see :func:`load_settings`), and so does a
``SYMFONIC_*`` variable that is no setting (a misspelling would otherwise start with the
default). Secrets are ``SecretStr`` so they never reach a log line or a repr, and no
message shows the value of a :data:`SECRET_SETTINGS` entry.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import fnmatch
import importlib.util
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final, Literal

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from symfonic_stream.models.decoding import DecodeLimits
from symfonic_stream.models.pauses import DEFAULT_MAX_ANSWER_BYTES

ENV_PREFIX = "SYMFONIC_"

#: ``SYMFONIC_*`` variables that are not settings (fnmatch patterns), which the unknown-variable
#: check lets pass: the development broker's, registry's and collector's
#: (scripts/kafka.sh, scripts/registry.sh, scripts/otelcol.sh), the tests' and the fault
#: injection's namespaces, the index a supervisor gives each worker process, and two names
#: of the test and chart tooling. No
#: setting may start with one of these namespaces (tests/unit/test_config.py checks it, and
#: that the repository uses no other name).
NOT_SETTINGS: Final = ("SYMFONIC_KAFKA_*", "SYMFONIC_REGISTRY_*", "SYMFONIC_OTELCOL_*",
                       "SYMFONIC_TEST_*", "SYMFONIC_FAULT_*", "SYMFONIC_WORKER_INDEX",
                       "SYMFONIC_UPDATE_GOLDEN",
                       "SYMFONIC_TOOLS_DIR")

#: Settings whose value no message shows (config errors, logs): the SASL password, the HS256
#: key, the TLS key's path (where the private key lives is worth hiding too), and the schema
#: registry's password.
SECRET_SETTINGS: Final = ("sasl_password", "ssl_keyfile", "gateway_jwt_key",
                           "schema_registry_password")

#: The first path segments of the gateway's own routes (gateway/app.py), which the AI SDK's
#: chat routes (SYMFONIC_GATEWAY_CHAT_API) must leave alone (and the chart's values.schema.json
#: refuses for gateway.chatApi).
GATEWAY_ROUTES: Final = ("v1", "review", "static")

#: ``SYMFONIC_METRICS_PORT`` of the first consumer when unset (the contract's default); each
#: other kind of process takes the next port, in the registry's order, so processes started
#: side by side on one machine never share one (``symfonic_stream.consumers.metrics_port``).
METRICS_PORT_BASE: Final = 9400

#: How long a process waits for Kafka at start when ``SYMFONIC_STARTUP_TIMEOUT_S`` is unset:
#: a service (``run``, ``gateway``, a program using the SDK) may start before its Kafka does,
#: as pods do; a person who typed a command (``topics ensure``, ``publish``, ``tail``, ...)
#: wants to hear within seconds that the address is wrong.
SERVICE_STARTUP_TIMEOUT_S: Final = 300.0
COMMAND_STARTUP_TIMEOUT_S: Final = 15.0

#: Shortest HS256 key (SYMFONIC_GATEWAY_JWT_KEY), in bytes of its UTF-8 text: SHA-256's output.
HS256_MIN_KEY_BYTES: Final = 32

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
EventLoop = Literal["uvloop", "asyncio"]
#: A schema registry subject's compatibility level (Confluent's names).
Compatibility = Literal["BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                        "FULL", "FULL_TRANSITIVE", "NONE"]
#: How a record names its value's schema: not at all, or in the ``__value_schema_id`` header
#: (docs/schema-registry.md). The 5-byte prefix framing is not offered (it changes the value).
SchemaIdFraming = Literal["none", "header"]


class ConfigError(Exception):
    """A setting is missing or malformed; the message names the environment variable."""


class PortInUse(ConfigError):
    """A port a setting names is taken by another process: the message names the setting."""


@contextlib.contextmanager
def binding(setting: str, port: int, *, off: str = "") -> Iterator[None]:
    """Around binding ``port`` (the value of ``setting``, or its default): a port in use
    becomes :class:`PortInUse`, one line naming the setting (``off``: what 0 means, when
    it means something), instead of the socket's ``OSError`` and its traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        zero = f" ({ENV_PREFIX}{setting}=0 {off})" if off else ""
        raise PortInUse(f"port {port} is in use by another process: set {ENV_PREFIX}{setting} "
                        f"to a free port{zero}") from None


class Settings(BaseSettings):
    """Runtime configuration, read from ``SYMFONIC_*`` environment variables."""

    # An empty variable counts as unset (templating tools render unset values as "").
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", frozen=True, env_ignore_empty=True
    )

    # Kafka access
    bootstrap_servers: str = Field("127.0.0.1:9092", min_length=1)
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None

    # Naming
    topic_prefix: str = Field("symfonic", pattern=r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,100}$")

    # Ordering guard (contract §5)
    gap_timeout_s: float = Field(30.0, gt=0)
    run_buffer_max: int = Field(1000, ge=1)
    closed_run_grace_s: float = Field(600.0, ge=0)
    run_idle_timeout_s: float = Field(3600.0, ge=0)

    # State bounds (docs/engine.md, "Bounds")
    buffer_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    max_output_bytes: int = Field(1_000_000, ge=1024)
    max_state_record_bytes: int = Field(2 * 1024 * 1024, ge=1024)
    punctuate_budget_ms: int = Field(50, ge=1)

    # Pauses (contract §7)
    routing_rules: Path | None = None
    tenant_queues: bool = False
    ticket_max_lifetime_s: float = Field(86_400.0, gt=0)
    max_answer_bytes: int = Field(DEFAULT_MAX_ANSWER_BYTES, ge=1024)
    # How long a reviewer's claim of a ticket holds (the validator decides; docs/pauses.md).
    review_claim_lease_s: float = Field(300.0, gt=0)
    # A claim's total lifetime, renewals included; its holder then rests a lease.
    review_claim_max_s: float = Field(1800.0, gt=0)
    # Whether a pause's typed event on stream-events carries its ticket's token (contract
    # §3 says it does; false: "" for deployments that answer only through the gateway).
    stream_ticket_tokens: bool = True

    # Operations
    # Unset: the process kind's own port (METRICS_PORT_BASE and on; for_process fills it in).
    metrics_port: int | None = Field(None, ge=0, le=65535)
    # Worker processes of one `run` (runtime/workers.py): more than 1 makes it a supervisor.
    workers: int = Field(1, ge=1, le=64)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Other SYMFONIC_* variables to let pass (names or fnmatch patterns, comma-separated).
    ignored_variables: str = ""

    # The SSE gateway (`symfonic-stream gateway`, docs/gateway.md)
    gateway_port: int = Field(8400, ge=0, le=65535)
    gateway_host: str = Field("0.0.0.0", min_length=1)
    gateway_lookback_s: float = Field(86_400.0, ge=0)
    gateway_cache_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    gateway_max_runs: int = Field(200_000, ge=1)
    gateway_run_wait_s: float = Field(30.0, ge=0)
    gateway_heartbeat_s: float = Field(15.0, gt=0)
    gateway_send_timeout_s: float = Field(10.0, gt=0)
    gateway_max_clients: int = Field(10_000, ge=1)
    gateway_max_clients_per_tenant: int = Field(1_000, ge=1)
    gateway_cors_origins: str = ""
    gateway_auth: Literal["none", "jwt"] = "none"
    gateway_jwt_key: SecretStr | None = None
    gateway_jwks_file: Path | None = None
    gateway_jwt_audience: str | None = None
    gateway_jwt_issuer: str | None = None
    # Longest a token may live (exp - iat); an hour, since tokens travel in query strings.
    gateway_jwt_max_lifetime_s: float = Field(3600.0, gt=0)
    # Reachable from outside the cluster (the chart sets it with an Ingress or a LoadBalancer).
    gateway_exposed: bool = False
    # Exposed without tokens anyway (the chart's gateway.auth.allowUnauthenticated).
    gateway_allow_unauthenticated: bool = False
    # A token with no scope claim may read runs (what such a token could before scopes);
    # off, it has no right at all.
    gateway_unscoped_tokens_read: bool = False
    # Review requests (claim, release, answer) one responder may send a minute.
    gateway_review_requests_per_minute: int = Field(30, ge=1)
    # The HTTP edge (docs/gateway.md, "Limits"): connections open at once, the bytes of a
    # request's line and headers, and how long its headers (and then its body) may take.
    gateway_max_connections: int = Field(11_000, ge=1)
    gateway_max_header_bytes: int = Field(32 * 1024, ge=1024)
    gateway_request_timeout_s: float = Field(10.0, gt=0)
    # How long an answer or claim sent through the gateway waits for the validator's verdict.
    gateway_verdict_wait_s: float = Field(30.0, gt=0)
    # Where AI SDK chat clients send (POST) and resume (GET <path>/<run id>/stream): the
    # `api` of useChat's DefaultChatTransport, whose default is /api/chat.
    gateway_chat_api: str = Field(
        "/api/chat", pattern=r"^(/[A-Za-z0-9._~-]+)+$", max_length=200)

    # The schema registry (docs/schema-registry.md): Confluent's Schema Registry API at this
    # base URL (`schemas register`; the `__value_schema_id` header's ids).
    schema_registry_url: str | None = Field(
        None, pattern=r"^https?://[A-Za-z0-9._~%-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%/-]*)?$",
        max_length=2000)
    schema_registry_username: str | None = None
    schema_registry_password: SecretStr | None = None
    schema_registry_cafile: Path | None = None
    schema_registry_compatibility: Compatibility = "BACKWARD"
    schema_registry_timeout_s: float = Field(10.0, gt=0)
    schema_id_framing: SchemaIdFraming = "none"

    # Topic creation (`topics ensure`)
    partitions: int = Field(12, ge=1)
    replication_factor: int = Field(1, ge=1)
    min_insync_replicas: int = Field(1, ge=1)

    # Engine tuning
    max_record_bytes: int = Field(1_048_576, ge=1)
    # What an accepted record may hold (models/decoding.py): nesting and integer range
    max_json_depth: int = Field(64, ge=2, le=200)
    max_integer: int = Field(2**63 - 1, ge=1, le=2**63 - 1)
    batch_max_records: int = Field(1000, ge=1)
    batch_max_bytes: int = Field(4_194_304, ge=1024)
    batch_max_latency_ms: int = Field(5, ge=0)
    group_offset_interval_ms: int = Field(1000, ge=0)
    state_keep_s: float = Field(900.0, ge=0)
    state_dir: Path | None = None
    state_cache_keys: int = Field(100_000, ge=0)
    group_instance_id: str | None = Field(None, pattern=r"^[A-Za-z0-9._-]{1,200}$")
    leave_group_on_stop: bool = False
    compression: Compression = "none"
    event_loop: EventLoop = "uvloop"
    transaction_timeout_ms: int = Field(60_000, ge=1000)
    shutdown_timeout_s: float = Field(30.0, gt=0)
    # Waiting out Kafka (symfonic_stream/kafka/retry.py). Unset: SERVICE_STARTUP_TIMEOUT_S,
    # or COMMAND_STARTUP_TIMEOUT_S for a command a person types (for_process fills it in).
    startup_timeout_s: float | None = Field(None, gt=0)
    admin_timeout_s: float = Field(120.0, gt=0)

    def for_process(self, *, metrics_port: int = METRICS_PORT_BASE,
                    command: bool = False) -> Settings:
        """These settings with the defaults of one kind of process filled in where the
        variable is unset: its metrics port, and how long it waits for Kafka at start (a
        command's seconds, or a service's minutes)."""
        fill: dict[str, object] = {}
        if self.metrics_port is None:
            fill["metrics_port"] = metrics_port
        if self.startup_timeout_s is None:
            fill["startup_timeout_s"] = (COMMAND_STARTUP_TIMEOUT_S if command
                                         else SERVICE_STARTUP_TIMEOUT_S)
        return self.model_copy(update=fill)

    @property
    def metrics_port_or_default(self) -> int:
        """``SYMFONIC_METRICS_PORT``, or the process's default (:meth:`for_process`;
        without it, METRICS_PORT_BASE)."""
        return METRICS_PORT_BASE if self.metrics_port is None else self.metrics_port

    @property
    def startup_wait_s(self) -> float:
        """``SYMFONIC_STARTUP_TIMEOUT_S``, or the process's default (:meth:`for_process`;
        without it, a service's)."""
        return (SERVICE_STARTUP_TIMEOUT_S if self.startup_timeout_s is None
                else self.startup_timeout_s)

    def startup_wait_words(self) -> str:
        """The setting and its value, as an error names them."""
        return f"{ENV_PREFIX}STARTUP_TIMEOUT_S={self.startup_wait_s:g}"

    def decode_limits(self) -> DecodeLimits:
        """What every consumer accepts of a record (contract §6's ``too_large`` and
        ``invalid_event`` bounds)."""
        return DecodeLimits(self.max_record_bytes, self.max_json_depth, self.max_integer)

    def secrets(self) -> tuple[str, ...]:
        """What no log line may show: the values of :data:`SECRET_SETTINGS` that are set."""
        found = []
        for name in SECRET_SETTINGS:
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                found.append(value.get_secret_value())
            elif value is not None:
                found.append(str(value))
        return tuple(found)

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        if self.security_protocol.startswith("SASL_"):
            if self.sasl_mechanism is None:
                raise ValueError(
                    f"{ENV_PREFIX}SASL_MECHANISM is required when "
                    f"{ENV_PREFIX}SECURITY_PROTOCOL is {self.security_protocol}"
                )
            if not self.sasl_username or self.sasl_password is None:
                raise ValueError(
                    f"{ENV_PREFIX}SASL_USERNAME and {ENV_PREFIX}SASL_PASSWORD are required "
                    f"when {ENV_PREFIX}SECURITY_PROTOCOL is {self.security_protocol}"
                )
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(
                f"{ENV_PREFIX}MIN_INSYNC_REPLICAS ({self.min_insync_replicas}) cannot exceed "
                f"{ENV_PREFIX}REPLICATION_FACTOR ({self.replication_factor})"
            )
        if self.gateway_auth == "jwt" and (self.gateway_jwt_key is None) == (
                self.gateway_jwks_file is None):
            raise ValueError(
                f"{ENV_PREFIX}GATEWAY_AUTH=jwt needs exactly one of {ENV_PREFIX}GATEWAY_JWT_KEY "
                f"(an HS256 secret) and {ENV_PREFIX}GATEWAY_JWKS_FILE (a JWKS file)"
            )
        self._check_gateway_auth()
        if self.gateway_chat_api.split("/")[1] in GATEWAY_ROUTES:
            raise ValueError(
                f"{ENV_PREFIX}GATEWAY_CHAT_API must not be under the gateway's own routes "
                f"({', '.join('/' + r for r in GATEWAY_ROUTES)}), got {self.gateway_chat_api!r}"
            )
        if self.event_loop == "uvloop" and not _installed("uvloop"):
            raise ValueError(
                f"{ENV_PREFIX}EVENT_LOOP=uvloop, but uvloop is not installed here: install it "
                f"(a dependency on Linux and macOS), or set {ENV_PREFIX}EVENT_LOOP=asyncio"
            )
        self._check_schema_registry()
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "gateway_jwks_file",
                     "schema_registry_cafile"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                shown = "" if name in SECRET_SETTINGS else f": {path}"
                raise ValueError(f"{ENV_PREFIX}{name.upper()}: no such file{shown}")
        return self


    def _check_schema_registry(self) -> None:
        if (self.schema_registry_username is None) != (self.schema_registry_password is None):
            raise ValueError(
                f"{ENV_PREFIX}SCHEMA_REGISTRY_USERNAME and {ENV_PREFIX}SCHEMA_REGISTRY_PASSWORD "
                "go together (HTTP basic authentication): set both or neither")
        if self.schema_id_framing != "none" and self.schema_registry_url is None:
            raise ValueError(
                f"{ENV_PREFIX}SCHEMA_ID_FRAMING={self.schema_id_framing} needs "
                f"{ENV_PREFIX}SCHEMA_REGISTRY_URL (the ids are the registry's)")

    def _check_gateway_auth(self) -> None:
        if self.gateway_auth != "jwt":
            if self.gateway_exposed and not self.gateway_allow_unauthenticated:
                raise ValueError(
                    f"{ENV_PREFIX}GATEWAY_EXPOSED with {ENV_PREFIX}GATEWAY_AUTH=none serves "
                    "every tenant's runs to whoever reaches it: set GATEWAY_AUTH=jwt, or "
                    f"{ENV_PREFIX}GATEWAY_ALLOW_UNAUTHENTICATED=true to mean it"
                )
            return
        key = self.gateway_jwt_key
        if key is not None and len(key.get_secret_value().encode()) < HS256_MIN_KEY_BYTES:
            # RFC 7518 section 3.2: an HMAC key at least as long as the hash's output.
            raise ValueError(
                f"{ENV_PREFIX}GATEWAY_JWT_KEY must be at least {HS256_MIN_KEY_BYTES} bytes "
                "(RFC 7518 section 3.2); a shorter HS256 key can be guessed offline from one token"
            )
        if not self.gateway_jwt_audience:
            raise ValueError(
                f"{ENV_PREFIX}GATEWAY_AUTH=jwt needs {ENV_PREFIX}GATEWAY_JWT_AUDIENCE: "
                "without it, a token its issuer minted for another service is accepted here "
                "(behind any Ingress, mesh or route, which the gateway cannot see)"
            )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # its sys.modules entry is None: importing it is blocked
        return False


def is_known_variable(name: str, ignored: str) -> bool:
    """Whether ``name`` (any case, as pydantic-settings reads them) is a setting, a
    :data:`NOT_SETTINGS` variable, or matches a pattern of ``ignored`` (comma-separated)."""
    upper = name.upper()
    if upper.removeprefix(ENV_PREFIX).lower() in Settings.model_fields:
        return True
    patterns = [*NOT_SETTINGS, *(p.strip().upper() for p in ignored.split(",") if p.strip())]
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in patterns)


def unknown_variables(environ: Mapping[str, str], ignored: str) -> list[str]:
    """A message per ``SYMFONIC_*`` variable of ``environ`` that is no setting, naming the
    closest setting (difflib); never its value."""
    settings = [name.upper() for name in Settings.model_fields]
    found = []
    for name in sorted(environ):
        if not name.upper().startswith(ENV_PREFIX) or is_known_variable(name, ignored):
            continue
        close = difflib.get_close_matches(name.upper().removeprefix(ENV_PREFIX), settings, n=1)
        guess = f" (did you mean {ENV_PREFIX}{close[0]}?)" if close else ""
        found.append(f"{name} is not a setting{guess}; a variable meant for something else "
                     f"can be named in {ENV_PREFIX}IGNORED_VARIABLES")
    return found


def load_settings(**overrides: object) -> Settings:
    """Read and validate the settings, or raise :class:`ConfigError` naming each bad variable
    and each ``SYMFONIC_*`` variable that is no setting."""
    settings: Settings | None = None
    problems: list[str] = []
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = _problems(exc)
    ignored = (settings.ignored_variables if settings is not None
               else os.environ.get(f"{ENV_PREFIX}IGNORED_VARIABLES", ""))
    # The unknown names first: a misspelling is often why a required setting is missing.
    problems = unknown_variables(os.environ, ignored) + problems
    if problems or settings is None:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    return settings


def _problems(exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors():
        location = [str(part) for part in error["loc"]]
        message = error["msg"]
        if not location:
            problems.append(message.removeprefix("Value error, "))
            continue
        variable = ENV_PREFIX + location[0].upper()
        shown = "<secret>" if location[0] in SECRET_SETTINGS else repr(error.get("input"))
        problems.append(f"{variable}={shown}: {message}")
    return problems
