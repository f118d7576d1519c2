"""The programs the broker needs besides Python: Java 17+, Maven (once per Kafka version),
openssl and keytool (the secure listeners' certificates). Each is found when a command needs
it, or refused with what to install."""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache

from scripts.kafka.messages import die


def _java_home_tool(name: str) -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", name), os.X_OK):
        return os.path.join(home, "bin", name)
    return None


@cache
def java() -> str:
    """The ``java`` to run Kafka with (``JAVA_HOME``'s, else the one on PATH), 17 or newer."""
    found = _java_home_tool("java") or shutil.which("java")
    if found is None:
        raise die("Java 17 or newer is required to run the Kafka broker, and no 'java' was found "
                  "(install a JDK/JRE 17+, e.g. the Debian package openjdk-17-jre-headless, or "
                  "set JAVA_HOME)")
    shown = subprocess.run([found, "-XshowSettings:properties", "-version"],
                           capture_output=True, text=True, check=False)
    spec = ""
    for line in (shown.stderr + shown.stdout).splitlines():
        if "java.specification.version" in line and "= " in line:
            spec = line.split("= ", 1)[1]
            break
    major = spec.removeprefix("1.").split(".")[0]
    if not major.isdigit() or int(major) < 17:
        raise die(f"Java 17 or newer is required to run Kafka, but {found} is Java "
                  f"'{spec or 'unknown'}' (set JAVA_HOME to a JDK 17+)")
    return found


def need_mvn() -> None:
    if shutil.which("mvn") is None:
        raise die("Maven ('mvn') is required to fetch the Kafka broker jars once (install the "
                  "Debian package maven, or set SYMFONIC_KAFKA_HOME to a directory that already "
                  "holds a complete resolve of that version)")


@cache
def keytool() -> str:
    """``keytool`` (JAVA_HOME's, else PATH's), after checking for openssl too."""
    if shutil.which("openssl") is None:
        raise die("openssl is required to make the secure listeners' certificates")
    found = _java_home_tool("keytool") or shutil.which("keytool")
    if found is None:
        raise die("keytool (part of the JDK) is required for the broker's truststore")
    return found


def openssl(*args: str, cwd: str | None = None) -> str:
    """``openssl args``' output; a failure raises CalledProcessError."""
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True,
                          cwd=cwd).stdout
