"""Resolve the Apache Kafka jars from Maven Central into a local cache, once.

The broker runs straight from the Maven artifacts (no tarball, no Docker): a generated pom.xml
lists ``kafka_2.13`` plus a log4j2 SLF4J binding, and ``mvn dependency:copy-dependencies`` copies
the runtime closure into ``<cache>/kafka/<version>/libs``. A marker file written after a
successful copy makes later calls free.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape

from tidings.broker._tools import require_tool
from tidings.errors import BrokerError

KAFKA_VERSION = "4.1.1"
# Pinned so the build does not depend on whatever plugin version Maven 3.x defaults to.
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_MARKER = ".provisioned"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Artifact:
    """One Maven dependency of the generated pom.

    Attributes:
        group: The groupId.
        name: The artifactId.
        version: The version.
        exclusions: ``(groupId, artifactId)`` pairs kept out of this artifact's closure.
    """

    group: str
    name: str
    version: str
    exclusions: tuple[tuple[str, str], ...] = field(default=())


def kafka_artifacts(version: str = KAFKA_VERSION) -> tuple[Artifact, ...]:
    """Return the dependencies that make a runnable Kafka server classpath.

    Kafka drags slf4j-api 1.7.36, which cannot see the SLF4J 2 log4j binding and would silence
    every log line; it is excluded and slf4j-api 2.0.17 declared directly.

    Args:
        version: The Apache Kafka version.

    Returns:
        The artifacts, in pom order.
    """
    return (
        Artifact("org.apache.kafka", "kafka_2.13", version, (("org.slf4j", "slf4j-api"),)),
        Artifact("org.slf4j", "slf4j-api", "2.0.17"),
        Artifact("org.apache.logging.log4j", "log4j-slf4j2-impl", "2.24.3"),
        Artifact("org.apache.logging.log4j", "log4j-core", "2.24.3"),
    )


def render_pom(artifacts: tuple[Artifact, ...], *, version: str = KAFKA_VERSION) -> str:
    """Render a ``pom``-packaged project whose runtime dependencies are ``artifacts``.

    Args:
        artifacts: The dependencies to declare.
        version: The project version (only used to name the project).

    Returns:
        The pom.xml text.
    """
    deps = "\n".join(_render_dependency(artifact) for artifact in artifacts)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.tidings</groupId>
  <artifactId>tidings-local-kafka</artifactId>
  <version>{escape(version)}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def _render_dependency(artifact: Artifact) -> str:
    exclusions = "".join(
        f"<exclusion><groupId>{escape(group)}</groupId>"
        f"<artifactId>{escape(name)}</artifactId></exclusion>"
        for group, name in artifact.exclusions
    )
    inner = f"<exclusions>{exclusions}</exclusions>" if exclusions else ""
    return (
        f"    <dependency><groupId>{escape(artifact.group)}</groupId>"
        f"<artifactId>{escape(artifact.name)}</artifactId>"
        f"<version>{escape(artifact.version)}</version>{inner}</dependency>"
    )


_DOWNLOADED = re.compile(r"Downloaded from \S+: (?P<url>\S+)")


def parse_downloaded_jar(line: str) -> str | None:
    """Return the jar file name of a Maven ``Downloaded from`` line, or None for any other line.

    Args:
        line: One line of ``mvn -B`` output.

    Returns:
        The file name, e.g. ``kafka-clients-4.1.1.jar``, or None (poms, checksums, other lines).
    """
    match = _DOWNLOADED.search(line)
    if match is None:
        return None
    name = match.group("url").rsplit("/", 1)[-1]
    return name if name.endswith(".jar") else None


def cache_home(environ: Mapping[str, str] | None = None) -> Path:
    """Return the tidings cache directory: ``$TIDINGS_HOME`` or ``~/.cache/tidings``.

    Args:
        environ: The environment to read (defaults to ``os.environ``).

    Returns:
        The directory (it may not exist yet).
    """
    env = os.environ if environ is None else environ
    home = env.get("TIDINGS_HOME")
    return Path(home).expanduser() if home else Path.home() / ".cache" / "tidings"


def kafka_libs_dir(home: Path | None = None, *, version: str = KAFKA_VERSION) -> Path:
    """Return where the jars of Kafka ``version`` live (or will live) under ``home``."""
    return (home or cache_home()) / "kafka" / version / "libs"


def provision_kafka(
    home: Path | None = None,
    *,
    version: str = KAFKA_VERSION,
    on_progress: Progress = lambda _line: None,
) -> Path:
    """Make sure the jars of Kafka ``version`` are cached; download them with Maven if not.

    Safe to call from several processes at once: a file lock serialises them and the second
    finds the marker.

    Args:
        home: The cache directory (defaults to :func:`cache_home`).
        version: The Apache Kafka version.
        on_progress: Called with a human-readable line per downloaded jar and at the end.

    Returns:
        The directory holding the jars (use ``<dir>/*`` as the Java classpath).

    Raises:
        BrokerError: ``mvn`` is missing or the resolution failed (the message has Maven's tail).
    """
    libs = kafka_libs_dir(home, version=version)
    marker = libs.parent / _MARKER
    if marker.exists():
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(libs.parent / ".lock"):
        if marker.exists():
            return libs
        mvn = require_tool("mvn")
        on_progress(f"Resolving Apache Kafka {version} from Maven Central into {libs}")
        # Copy into a scratch directory and rename, so a killed download never looks complete.
        scratch = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
        try:
            _copy_dependencies(mvn, scratch, kafka_artifacts(version), version, on_progress)
            _check_classpath(scratch)
            shutil.rmtree(libs, ignore_errors=True)
            scratch.rename(libs)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        marker.write_text(f"{version}\n")
        on_progress(f"Apache Kafka {version}: {len(list(libs.glob('*.jar')))} jars in {libs}")
    return libs


def _copy_dependencies(
    mvn: str,
    output: Path,
    artifacts: tuple[Artifact, ...],
    version: str,
    on_progress: Progress,
) -> None:
    pom = output / "pom.xml"
    pom.write_text(render_pom(artifacts, version=version))
    command = [
        mvn,
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        f"{_DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={output}",
    ]
    tail: list[str] = []
    count = 0
    with subprocess.Popen(
        command,
        cwd=output,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = [*tail[-39:], line.rstrip()]
            jar = parse_downloaded_jar(line)
            if jar is not None:
                count += 1
                on_progress(f"[{count}] {jar}")
    pom.unlink()
    if proc.returncode != 0:
        log = "\n".join(tail)
        raise BrokerError(
            f"Maven could not resolve Apache Kafka {version} (exit {proc.returncode}):\n{log}"
        )


def _check_classpath(libs: Path) -> None:
    # A second slf4j-api on the classpath makes SLF4J pick one at random; refuse it early.
    stale = sorted(p.name for p in libs.glob("slf4j-api-1.*.jar"))
    if stale or not any(libs.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"unexpected Kafka classpath in {libs}: stale={stale}")


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
