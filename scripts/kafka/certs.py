"""The secure listeners' material, in ``<state dir>/secure/`` (mode 700; keys and passwords
600): a CA, the broker's certificate (subjectAltName 127.0.0.1, localhost and
SYMFONIC_KAFKA_HOST) in a PKCS12 keystore, the CA in a PKCS12 truststore, a client certificate
and key (PEM, as Python's ``ssl.SSLContext.load_cert_chain`` takes them) for the mutual-TLS
listener; the single broker's SCRAM user, and the env files a client of each listener loads.

Made once per state directory; made again when a file is missing, the host changed, or the
broker's certificate expires within 30 days. ``reset`` deletes them with the rest of the state.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from scripts.kafka import node, tools
from scripts.kafka.env import Env
from scripts.kafka.files import private, read, read_or_none, write_private
from scripts.kafka.jars import Kafka
from scripts.kafka.messages import die, log

_BROKER_EXTENSIONS = """basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName={san}
"""
_CLIENT_EXTENSIONS = """basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth
"""
_MADE = ("broker.keystore.p12", "truststore.p12", "client.pem", "client.key", "ca.pem")


def new_password(path: Path) -> None:
    """A random password (24 bytes, hex) into ``path``, mode 600."""
    write_private(path, secrets.token_hex(24) + "\n")


def secure_dir(directory: Path) -> Path:
    secure = directory / "secure"
    secure.mkdir(parents=True, exist_ok=True)
    secure.chmod(0o700)
    return secure


def _current(env: Env, secure: Path) -> bool:
    if read_or_none(secure / ".certs-complete") != env.host:
        return False
    try:
        valid = subprocess.run(["openssl", "x509", "-checkend", "2592000", "-noout", "-in",
                                str(secure / "broker.pem")], capture_output=True, check=False)
    except OSError:  # no openssl: ensure_certs says so
        return False
    return (valid.returncode == 0 and all((secure / name).is_file() for name in _MADE)
            and bool(read_or_none(secure / "store.password")))


def _subject_alt_names(host: str) -> str:
    names = "IP:127.0.0.1,DNS:localhost"
    if host not in ("127.0.0.1", "localhost"):
        is_ip = all(c.isdigit() or c == "." for c in host) or ":" in host
        names += f",IP:{host}" if is_ip else f",DNS:{host}"
    return names


def _make(env: Env, work: Path, keytool: str) -> None:
    """The CA, the two certificates and the stores, into ``work`` (``openssl`` in it)."""
    cwd = str(work)
    new_password(work / "store.password")
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    tools.openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "3650",
                  "-subj", f"/CN=symfonic-stream dev CA {stamp}", "-keyout", "ca.key",
                  "-out", "ca.pem", "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=cwd)

    def sign(name: str, subject: str, extensions: str) -> None:
        tools.openssl("req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", subject,
                      "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=cwd)
        (work / f"{name}.ext").write_text(extensions)
        serial = "0x" + tools.openssl("rand", "-hex", "16").strip()
        tools.openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                      "-set_serial", serial, "-days", "825", "-sha256", "-extfile",
                      f"{name}.ext", "-out", f"{name}.pem", cwd=cwd)
        (work / f"{name}.csr").unlink()
        (work / f"{name}.ext").unlink()

    sign("broker", "/CN=localhost/O=symfonic-stream dev broker",
         _BROKER_EXTENSIONS.format(san=_subject_alt_names(env.host)))
    sign("client", "/CN=symfonic-client/O=symfonic-stream dev client", _CLIENT_EXTENSIONS)
    tools.openssl("pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key",
                  "-certfile", "ca.pem", "-name", "broker", "-out", "broker.keystore.p12",
                  "-passout", "file:store.password", cwd=cwd)
    imported = subprocess.run(
        [keytool, "-importcert", "-noprompt", "-alias", "symfonic-dev-ca", "-file", "ca.pem",
         "-keystore", "truststore.p12", "-storetype", "PKCS12", "-storepass:file",
         "store.password"], cwd=cwd, capture_output=True, text=True, check=False)
    if imported.returncode != 0:
        print(imported.stdout + imported.stderr, file=sys.stderr, end="")
        raise subprocess.CalledProcessError(imported.returncode, keytool)


def ensure_certs(env: Env, directory: Path) -> None:
    """The CA, certificates and stores of ``directory``'s node, made when not current."""
    secure = directory / "secure"
    if _current(env, secure):
        return
    keytool = tools.keytool()
    log(f"making the secure listeners' CA and certificates in {secure} ...")
    secure_dir(directory)
    work = secure / f".tmp.{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700)
    try:
        with private():
            _make(env, work, keytool)
    except (OSError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise die(f"making the certificates in {secure} failed") from exc
    for made in work.iterdir():
        made.replace(secure / made.name)
    work.rmdir()
    # The SCRAM marker names the password the storage holds; certificates do not touch it.
    (secure / ".certs-complete").write_text(env.host + "\n")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def marker(directory: Path, users: list[tuple[str, Path]]) -> str:
    """What the storage holds: its cluster id, and each user with its password's hash, as
    written when it was formatted (``scram.formatted``, ``users.formatted``)."""
    lines = [node.storage_cluster_id(directory),
             *(f"{user} {_digest(password)}" for user, password in users)]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the SCRAM user


def ensure_scram_password(directory: Path) -> Path:
    """The single broker's SCRAM user's password, made once, mode 600."""
    path = secure_dir(directory) / "scram.password"
    if not read_or_none(path):
        new_password(path)
    path.chmod(0o600)
    return path


def scram_marker(env: Env, directory: Path) -> str:
    cluster_id = node.storage_cluster_id(directory)
    return f"{cluster_id} {env.scram_user} {_digest(directory / 'secure' / 'scram.password')}"


def scram_ok(env: Env, directory: Path) -> bool:
    """Whether the storage is known to hold the SCRAM user with the current password."""
    return read_or_none(directory / "secure" / "scram.formatted") == scram_marker(env, directory)


def mark_scram(env: Env, directory: Path) -> None:
    write_private(directory / "secure" / "scram.formatted", scram_marker(env, directory) + "\n")


def scram_format_option(env: Env, directory: Path) -> str:
    """``kafka-storage format``'s option that creates the SCRAM user."""
    password = read(directory / "secure" / "scram.password")
    return f"SCRAM-SHA-512=[name={env.scram_user},password={password}]"


def upsert_scram_user(env: Env, kafka: Kafka, directory: Path) -> bool:
    """A storage formatted without the SCRAM user (or with another password) gets it through
    the running broker, as an administrator would add one: kafka-configs --alter
    --add-config 'SCRAM-SHA-512=[...]' (AlterUserScramCredentials, supported in KRaft)."""
    tools_jar = kafka.libs / f"kafka-tools-{kafka.version}.jar"
    # Kafka 4.4 moved ConfigCommand to the tools module.
    with zipfile.ZipFile(tools_jar) as jar:
        moved = "org/apache/kafka/tools/ConfigCommand.class" in jar.namelist()
    command = "org.apache.kafka.tools.ConfigCommand" if moved else "kafka.admin.ConfigCommand"
    log(f"the storage in {directory}/data has no SCRAM user {env.scram_user} with the current "
        "password: adding it")
    password = read(directory / "secure" / "scram.password")
    done = node.run_tool(kafka, directory, command, "--bootstrap-server",
                         f"{env.host}:{env.port}", "--alter", "--entity-type", "users",
                         "--entity-name", env.scram_user, "--add-config",
                         f"SCRAM-SHA-512=[password={password}]")
    if done.returncode != 0:
        print(node.mask_passwords((done.stdout + done.stderr).rstrip("\n")), file=sys.stderr)
        return False
    mark_scram(env, directory)
    return True


def write_env_files(env: Env, directory: Path) -> None:
    """One ``NAME=value`` file per secure listener, mode 600 (none for SASL_SSL while the
    storage lacks the SCRAM user)."""
    secure = directory / "secure"
    if scram_ok(env, directory):
        write_private(secure / "sasl_ssl.env", (
            f"SYMFONIC_BOOTSTRAP_SERVERS={env.host}:{env.sasl_ssl_port}\n"
            "SYMFONIC_SECURITY_PROTOCOL=SASL_SSL\n"
            "SYMFONIC_SASL_MECHANISM=SCRAM-SHA-512\n"
            f"SYMFONIC_SASL_USERNAME={env.scram_user}\n"
            f"SYMFONIC_SASL_PASSWORD={read(secure / 'scram.password')}\n"
            f"SYMFONIC_SSL_CAFILE={secure}/ca.pem\n"))
    write_private(secure / "mtls.env", (
        f"SYMFONIC_BOOTSTRAP_SERVERS={env.host}:{env.mtls_port}\n"
        "SYMFONIC_SECURITY_PROTOCOL=SSL\n"
        f"SYMFONIC_SSL_CAFILE={secure}/ca.pem\n"
        f"SYMFONIC_SSL_CERTFILE={secure}/client.pem\n"
        f"SYMFONIC_SSL_KEYFILE={secure}/client.key\n"))
