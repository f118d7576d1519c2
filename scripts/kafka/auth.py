"""The authorizer broker: a separate single node on its own ports whose every client request is
authorized (``StandardAuthorizer``, ``allow.everyone.if.no.acl.found=false``: nothing is
allowed without an ACL). It proves the ACL plan of ``symfonic-stream acls`` on a real
authorizer (tests/integration/test_acls_live.py, ``make test-acls``; docs/security.md).

Its clients sign in with SCRAM-SHA-512 on SASL_PLAINTEXT: the super user ``admin`` (it creates
the ACLs) and one user per principal of the plan: each consumer and reader the declarations
name (``User:symfonic-<name>``, their default principals) and a reviewer of each tenant of
:data:`REVIEWER_TENANTS`. The users come from the declarations themselves, read by the
project's venv (``.venv``: the ACL suite runs there, and nothing else uses this broker), not
from a list here; ``SYMFONIC_KAFKA_AUTH_USERS`` names others instead. Its controller listener
is mutual TLS; an anonymous PLAINTEXT listener serves only the readiness probe.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from scripts.kafka import certs, jars, node, probe, properties, tools
from scripts.kafka.env import AUTH_ADMIN, USER_NAME, Env
from scripts.kafka.files import private, read, read_or_none, write_private
from scripts.kafka.messages import Clock, die, log, say
from scripts.kafka.single import extra_config_note

#: The tenants the authorizer broker has a reviewer of (``User:reviewer-<tenant>``): the ACL
#: suite's own tenant and another one's.
REVIEWER_TENANTS = ("acme", "globex")
VENV_PYTHON = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
#: Run by the venv's Python: the principals of the ACL plan (every consumer and reader of the
#: declarations, under the default topic prefix) and of the reviewers of argv's tenants.
_PRINCIPALS = """
import sys
from symfonic_stream.app.acls import default_principal, plan_names, reviewer_principal
from symfonic_stream.config import Settings
settings = Settings()
names = [default_principal(settings, name) for name in plan_names()]
names += [reviewer_principal(tenant) for tenant in sys.argv[1:]]
print(" ".join(name.partition(":")[2] for name in names))
"""


def declared_users() -> tuple[str, ...]:
    """The users of the consumers' and readers' declarations and of the reviewers."""
    if not os.access(VENV_PYTHON, os.X_OK):
        raise die(f"the authorizer broker's users come from the consumers' declarations, read "
                  f"with the project's venv, and {VENV_PYTHON} is missing (make venv), or set "
                  "SYMFONIC_KAFKA_AUTH_USERS")
    # Settings' defaults (the topic prefix of the default principals), whatever the caller set.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SYMFONIC_")}
    done = subprocess.run([str(VENV_PYTHON), "-c", _PRINCIPALS, *REVIEWER_TENANTS],
                          capture_output=True, text=True, env=clean, check=False)
    if done.returncode != 0:
        raise die(f"reading the consumers' declarations failed: {done.stderr.strip()}")
    return tuple(done.stdout.split())


def users(env: Env) -> list[str]:
    """Every user: the super user, then the others."""
    return [AUTH_ADMIN, *(env.auth_users if env.auth_users is not None else declared_users())]


def dir_of(env: Env, version: str) -> Path:
    return env.state_root / f"auth-{env.auth_port}-{version}"


def _dirs_on_port(env: Env) -> list[Path]:
    return sorted(p for p in env.state_root.glob(f"auth-{env.auth_port}-*") if p.is_dir())


def running_dir(env: Env) -> Path:
    """The authorizer broker this script runs on the port (any version), else the requested
    one's."""
    requested = dir_of(env, jars.offline_version(env))
    if node.pid_of(requested) is not None:
        return requested
    return next((d for d in _dirs_on_port(env) if node.pid_of(d) is not None), requested)


def _password_file(directory: Path, user: str) -> Path:
    return directory / "secure" / "users" / f"{user}.password"


def _ensure_passwords(directory: Path, who: list[str]) -> None:
    """One random password per user, made once, mode 600."""
    users_dir = certs.secure_dir(directory) / "users"
    users_dir.mkdir(exist_ok=True)
    users_dir.chmod(0o700)
    for user in who:
        path = _password_file(directory, user)
        if not read_or_none(path):
            certs.new_password(path)
        path.chmod(0o600)


def _marker(directory: Path, who: list[str]) -> str:
    return certs.marker(directory, [(user, _password_file(directory, user)) for user in who])


def _formatted_users(directory: Path) -> list[str]:
    """The users the storage was formatted with (its marker), in their order."""
    text = read_or_none(directory / "secure" / "users.formatted") or ""
    return [line.split()[0] for line in text.splitlines()[1:] if line.strip()]


def _broker_principal(directory: Path) -> str:
    """The principal Kafka derives from the broker's certificate: Kafka's default principal
    builder names a TLS client by its certificate's subject in RFC 2253 form
    (X500Principal.getName()), which openssl prints the same way."""
    subject = tools.openssl("x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in",
                            str(directory / "secure" / "broker.pem")).strip()
    return f"User:{subject.removeprefix('subject=')}"


def _listeners_section(env: Env, directory: Path) -> properties.ListenersSection:
    """The Listeners part of its server.properties, with its TLS stores, SASL settings and
    the authorizer."""
    secure = directory / "secure"
    password = read(secure / "store.password")
    admin_password = read(_password_file(directory, AUTH_ADMIN))
    principal = _broker_principal(directory)
    jaas = f'{properties.SCRAM_LOGIN} username="{AUTH_ADMIN}" password="{admin_password}";'

    def section(listeners: str, advertised: str) -> str:
        return f"""
############################# Listeners (the authorizer broker: not the quickstart's)

# SASL_PLAINTEXT with SCRAM-SHA-512 on {env.auth_port}: the clients' listener; the users were
# created when the storage was formatted (kafka-storage format --add-scram), their
# passwords are in {secure}/users/. PLAINTEXT on {env.auth_probe_port} is only for
# scripts/kafka.sh's readiness probe: its clients are User:ANONYMOUS, which no ACL names
# and is no super user, so it gets nothing an ACL guards (ApiVersions, and Metadata listing
# the brokers but no topic, need none).
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
# The broker's requests to itself (transaction markers: WriteTxnMarkers needs ClusterAction)
# go over the SCRAM listener as the super user {AUTH_ADMIN}. Over PLAINTEXT they would come
# from User:ANONYMOUS, which would then have to be a super user: anyone on the probe port.
inter.broker.listener.name=SASL_PLAINTEXT
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
# The controller listener is mutual TLS: the broker reaches its controller (registration,
# heartbeats, forwarded CreateTopics and CreateAcls, all ClusterAction) with its own
# certificate, whose subject is in super.users. Not SCRAM: a KRaft controller listener cannot
# use it (the credentials live in the metadata the controller serves). Not PLAINTEXT: its
# principal User:ANONYMOUS would have to be a super user.
listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
listener.name.controller.ssl.client.auth=required
{properties.tls_stores(secure, password)}\
sasl.enabled.mechanisms=SCRAM-SHA-512
# The server side ignores username/password; the broker's own client (inter-broker) uses them.
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={jaas}

############################# Authorization (the point of this broker)

# KRaft's authorizer: ACLs live in the metadata log, created through the admin API
# (symfonic-stream acls --apply, kafka-acls.sh).
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
# The code default, written out: a resource no ACL names is refused, not open to everyone.
allow.everyone.if.no.acl.found=false
# {AUTH_ADMIN} creates the ACLs (and carries inter-broker traffic); the broker's certificate
# principal is the controller listener's client (above). Nobody else bypasses the ACLs.
super.users=User:{AUTH_ADMIN};{principal}
"""

    return section


def _write_env_files(env: Env, directory: Path, who: list[str]) -> None:
    """One env file per user, and a kafka-acls.sh ``--command-config`` for the super user."""
    users_dir = directory / "secure" / "users"
    for user in who:
        write_private(users_dir / f"{user}.env", (
            f"SYMFONIC_BOOTSTRAP_SERVERS={env.host}:{env.auth_port}\n"
            "SYMFONIC_SECURITY_PROTOCOL=SASL_PLAINTEXT\n"
            "SYMFONIC_SASL_MECHANISM=SCRAM-SHA-512\n"
            f"SYMFONIC_SASL_USERNAME={user}\n"
            f"SYMFONIC_SASL_PASSWORD={read(_password_file(directory, user))}\n"))
    with private():
        (users_dir / f"{AUTH_ADMIN}.properties").write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
            f"sasl.jaas.config={properties.SCRAM_LOGIN} username=\"{AUTH_ADMIN}\" "
            f'password="{read(_password_file(directory, AUTH_ADMIN))}";\n')


def _reuse(env: Env, requested: Path) -> bool:
    """Says so and True when an authorizer broker of this script runs on the port."""
    for directory in [requested, *_dirs_on_port(env)]:
        pid = node.pid_of(directory)
        if pid is None:
            continue
        if not node.wait_ready(env, directory, f"{env.host}:{env.auth_probe_port}"):
            raise die(f"the authorizer broker {pid} ({directory}) is alive but does not serve")
        say(f"kafka.sh: the authorizer broker (Kafka {node.version_of(directory)}, pid {pid}) "
            f"already runs on {env.host}:{env.auth_port}; reusing it (its storage and ACLs as "
            "they are)")
        return True
    return False


def start(env: Env, fresh: bool) -> None:
    """As the single broker's start, with the SCRAM users made at format time."""
    node.lock_state(env)
    clock = Clock()
    if _reuse(env, dir_of(env, jars.offline_version(env))):
        return
    probed = probe.ask(f"{env.host}:{env.auth_probe_port}", probe.Expect())
    probed.report(quiet=True)
    if probed.status != 1:
        raise die(f"{env.host}:{env.auth_probe_port} is taken by something this script did not "
                  "start (set SYMFONIC_KAFKA_AUTH_PORT)")
    who = users(env)
    tools.java()
    tools.keytool()
    kafka = jars.ensure(env)
    directory = dir_of(env, kafka.version)
    directory.mkdir(parents=True, exist_ok=True)
    if fresh and (directory / "data").is_dir():
        shutil.rmtree(directory / "data")
        (directory / "secure" / "users.formatted").unlink(missing_ok=True)
        log(f"--fresh: deleted the old storage (topics and ACLs) in {directory}/data")
    certs.ensure_certs(env, directory)
    _ensure_passwords(directory, who)
    properties.write(env, kafka.version, directory, "auth", 1, env.auth_probe_port,
                     env.auth_controller_port, _listeners_section(env, directory))
    if not (directory / "data" / "meta.properties").is_file():
        extra = [option for user in who for option in (
            "--add-scram",
            f"SCRAM-SHA-512=[name={user},password={read(_password_file(directory, user))}]")]
        if jars.major(kafka.version) >= 4:
            extra.append("--standalone")
        node.format_storage(kafka, directory, node.new_cluster_id(), *extra)
        write_private(directory / "secure" / "users.formatted", _marker(directory, who) + "\n")
    elif read_or_none(directory / "secure" / "users.formatted") != _marker(directory, who):
        raise die(f"the storage in {directory}/data was formatted with other users or passwords "
                  "(SYMFONIC_KAFKA_AUTH_USERS or the consumers' declarations changed?): "
                  "scripts/kafka.sh auth-start --fresh")
    pid = node.launch_until_ready(env, kafka, directory, env.heap_opts,
                                  f"{env.host}:{env.auth_probe_port}", "the authorizer broker")
    _write_env_files(env, directory, who)
    say(f"kafka.sh: the authorizer broker (Kafka {kafka.version}, pid {pid}) started in "
        f"{clock.since()} s: SASL_PLAINTEXT/SCRAM-SHA-512 {env.host}:{env.auth_port}, users "
        f"{AUTH_ADMIN} (super user) {' '.join(who[1:])}; state {directory}")
    extra_config_note(env)


def stop(env: Env) -> None:
    node.lock_state(env)
    node.stop(env, running_dir(env), env.auth_port, "authorizer broker")


def status(env: Env) -> int:
    directory = running_dir(env)
    pid = node.pid_of(directory)
    if pid is not None:
        answer = probe.ask(f"{env.host}:{env.auth_probe_port}", probe.Expect())
        answer.report(quiet=True)
        if answer.status == 0:
            say(f"running: pid {pid}, SASL_PLAINTEXT {env.host}:{env.auth_port}, Kafka "
                f"{node.version_of(directory)}, state {directory}")
            return 0
    say(f"not running (no authorizer broker of this script serves on "
        f"{env.host}:{env.auth_port})")
    return 1


def user_env(env: Env, user: str) -> int:
    """Prints the path of ``user``'s env file on the running authorizer broker."""
    directory = running_dir(env)
    known = " ".join(_formatted_users(directory)) or "none yet (scripts/kafka.sh auth-start)"
    if not user:
        raise die(f"auth-env: expected a user: {known}")
    if node.pid_of(directory) is None:
        log(f"no authorizer broker started by this script runs on port {env.auth_port} "
            "(scripts/kafka.sh auth-start)")
        return 1
    env_file = directory / "secure" / "users" / f"{user}.env"
    if not USER_NAME.fullmatch(user) or not env_file.is_file():
        log(f"the authorizer broker has no user '{user}' (users: {known})")
        return 1
    say(env_file)
    return 0
