"""Kafka's versions and jars: resolved once per version with Maven (scripts/kafka/pom.xml) into
a cache outside git, checked against that version's list of jars before it is marked complete.

One jar cache per version: ``~/.cache/symfonic-stream/kafka-<version>/libs``.
``SYMFONIC_KAFKA_HOME`` names the cache of one version, and is never overwritten with another
version's jars.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from scripts.kafka import tools
from scripts.kafka.env import Env
from scripts.kafka.messages import Clock, die, log

POM = Path(__file__).resolve().parent / "pom.xml"
_VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
#: The Kafka modules every complete resolve holds (4.x adds two, below).
_MODULES = ("kafka_2.13", "kafka-server", "kafka-server-common", "kafka-clients",
            "kafka-metadata", "kafka-raft", "kafka-storage", "kafka-group-coordinator",
            "kafka-transaction-coordinator", "kafka-tools")


def valid(version: str) -> bool:
    return _VERSION.fullmatch(version) is not None


def major(version: str) -> int:
    return int(version.split(".")[0])


def at_least(version: str, want_major: int, want_minor: int) -> bool:
    found_major, found_minor = (int(part) for part in version.split(".")[:2])
    return (found_major, found_minor) >= (want_major, want_minor)


def maven_profile(version: str) -> str:
    """The pom's profile with that major version's logging binding."""
    return "kafka-4" if major(version) >= 4 else "kafka-3"


def required_jars(version: str) -> list[str]:
    names = [*_MODULES]
    if major(version) >= 4:
        names += ["kafka-coordinator-common", "kafka-share-coordinator"]
    return [f"{name}-{version}.jar" for name in names]


#: Each major version's logging: the jars it needs (a glob, and what to call it when missing)
#: and the other generation's slf4j binding, which must be absent (two bindings: slf4j picks
#: one at random). Kafka 4 logs through log4j2, 3.9 through log4j 1.x (reload4j).
_LOGGING = {
    4: ((("log4j-slf4j-impl-*.jar", "the log4j2 slf4j binding"),
         ("log4j-core-*.jar", "log4j-core")),
        ("slf4j-reload4j-*.jar", "slf4j-reload4j")),
    3: ((("slf4j-reload4j-*.jar", "the reload4j slf4j binding"), ("reload4j-*.jar", "reload4j")),
        ("log4j-slf4j-impl-*.jar", "log4j-slf4j-impl")),
}


def problems(version: str, libs: Path) -> list[str]:
    """Why ``libs`` is not a complete resolve of ``version`` (nothing: it is)."""
    found = [f"lacks {jar}" for jar in required_jars(version) if not (libs / jar).is_file()]
    needed, (other, other_name) = _LOGGING[4 if major(version) >= 4 else 3]
    found += [f"lacks {name}" for pattern, name in needed if not any(libs.glob(pattern))]
    if any(libs.glob(other)):
        found.append(f"has a second slf4j binding ({other_name})")
    return found


@dataclass(frozen=True)
class Kafka:
    """A resolved version: where its jars are."""

    version: str
    libs: Path

    @property
    def classpath(self) -> str:
        return f"{self.libs}/*"


def home_for(env: Env, version: str) -> Path:
    return env.kafka_home or env.cache_root / f"kafka-{version}"


def _marker(home: Path) -> str | None:
    try:
        return (home / ".complete").read_text().strip()
    except OSError:
        return None


def is_cached(env: Env, version: str) -> bool:
    home = home_for(env, version)
    return _marker(home) == version and not problems(version, home / "libs")


def cached_version(env: Env, versions: tuple[str, ...]) -> str | None:
    """The first candidate with a complete resolve."""
    return next((version for version in versions if is_cached(env, version)), None)


def offline_version(env: Env) -> str:
    """The version a command that launches nothing refers to: the first candidate already in
    the cache, else the first candidate (no Maven)."""
    return cached_version(env, env.versions) or env.versions[0]


def ensure(env: Env, versions: tuple[str, ...] | None = None) -> Kafka:
    """The first of ``versions`` (default: the candidates) that is cached or that Maven
    resolves now."""
    candidates = versions or env.versions
    found = cached_version(env, candidates)
    if found is not None:
        return Kafka(found, home_for(env, found) / "libs")
    tools.need_mvn()
    for version in candidates:
        home = home_for(env, version)
        home.mkdir(parents=True, exist_ok=True)
        # Two callers resolving at once would corrupt each other: serialise on the cache.
        with (home / ".resolve.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if is_cached(env, version) or _resolve(env, version, home):
                return Kafka(version, home / "libs")
        if len(candidates) > 1:
            log("trying the next candidate version ...")
    raise die(f"none of the Kafka versions '{' '.join(candidates)}' could be resolved with "
              f"Maven (see resolve.log under {home_for(env, 'x').parent})")


def _resolve(env: Env, version: str, home: Path) -> bool:
    """``mvn dependency:copy-dependencies`` into a fresh directory, checked, then moved into
    place; the marker is written last."""
    held = _marker(home)
    if held is not None and held != version:
        log(f"{home} holds a resolve of Kafka {held}, not {version}: not overwriting another "
            "version's jars (unset SYMFONIC_KAFKA_HOME, or point it at an empty directory)")
        return False
    partial = home / f"libs.partial.{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"resolving Apache Kafka {version} and its runtime dependencies with Maven into {home} "
        "(once) ...")
    clock = Clock()
    with (home / "resolve.log").open("w") as out:
        done = subprocess.run(
            ["mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(POM), "-P",
             maven_profile(version), f"-Dkafka.version={version}", *env.maven_args,
             "dependency:copy-dependencies", "-DincludeScope=runtime",
             f"-DoutputDirectory={partial}"],
            stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        log(f"Maven could not resolve Kafka {version}; the end of its output:")
        lines = (home / "resolve.log").read_text(errors="replace").splitlines()
        print("\n".join(lines[-15:]), file=sys.stderr)
        shutil.rmtree(partial, ignore_errors=True)
        return False
    wrong = problems(version, partial)
    if wrong:
        log(f"the resolve of Kafka {version} is not usable: {';'.join(wrong)}")
        shutil.rmtree(partial, ignore_errors=True)
        return False
    shutil.rmtree(home / "libs", ignore_errors=True)
    partial.rename(home / "libs")
    (home / ".complete").write_text(version + "\n")
    jars = sum(1 for _ in (home / "libs").rglob("*.jar"))
    log(f"Kafka {version} resolved in {clock.since()} s ({jars} jars)")
    return True

