"""Render the files a single-node KRaft broker reads: server.properties and log4j2.yaml."""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class BrokerLayout:
    """Where one local broker keeps its files, all under ``data_dir``.

    Attributes:
        data_dir: The root directory of this broker.
    """

    data_dir: Path

    @property
    def log_dirs(self) -> Path:
        """The Kafka log directory (topic partitions and the KRaft metadata log)."""
        return self.data_dir / "kraft-logs"

    @property
    def properties(self) -> Path:
        """The rendered server.properties."""
        return self.data_dir / "server.properties"

    @property
    def log4j2(self) -> Path:
        """The rendered log4j2.yaml."""
        return self.data_dir / "log4j2.yaml"

    @property
    def server_log(self) -> Path:
        """The broker's log4j log (WARN and above)."""
        return self.data_dir / "server.log"

    @property
    def console_log(self) -> Path:
        """The JVM's stdout and stderr (crashes before log4j is up land here)."""
        return self.data_dir / "console.log"

    @property
    def formatted(self) -> Path:
        """Written by ``kafka-storage format``; its presence means the log dir is formatted."""
        return self.log_dirs / "meta.properties"


def render_server_properties(
    *, port: int, controller_port: int, log_dirs: Path, extra: Mapping[str, str] | None = None
) -> str:
    """Render the server.properties of a combined broker+controller on 127.0.0.1.

    Args:
        port: The PLAINTEXT (client) port.
        controller_port: The KRaft controller port.
        log_dirs: The Kafka log directory.
        extra: Settings added or replaced (a secured node's listeners, ``_security.py``).

    Returns:
        The properties text.
    """
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dirs),
        # One node: every internal topic must be satisfiable with a single replica.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # Fewer __consumer_offsets partitions: the first consumer group starts much faster.
        "offsets.topic.num.partitions": "8",
        "num.partitions": "1",
        "auto.create.topics.enable": "true",
        # Tests join groups constantly; the default 3 s initial delay would dominate them.
        "group.initial.rebalance.delay.ms": "0",
        # Compacted journals are read back in tests; let the cleaner look often.
        "log.cleaner.backoff.ms": "1000",
    }
    settings.update(extra or {})
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def render_log4j2_yaml(log_file: Path) -> str:
    """Render a log4j2 configuration that writes WARN and above to ``log_file``.

    Args:
        log_file: The file to append to.

    Returns:
        The YAML text (log4j2 parses it with the jackson-dataformat-yaml on Kafka's classpath).
    """
    # A JSON string is a valid YAML double-quoted scalar, so any path is quoted safely.
    return f"""Configuration:
  status: warn
  # Kafka stops itself on SIGTERM; log4j's own hook would race it and warn on every stop.
  shutdownHook: disable
  Appenders:
    File:
      name: FILE
      fileName: {json.dumps(str(log_file))}
      append: true
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: FILE
"""


def new_cluster_id() -> str:
    """Return a fresh KRaft cluster id, as ``kafka-storage random-uuid`` would.

    Kafka's ``Uuid.toString`` is the URL-safe base64 of 16 bytes without padding; ids starting
    with ``-`` are rejected by its command line parser, so those are redrawn. Doing this in
    Python saves one JVM start.

    Returns:
        A 22-character cluster id.
    """
    while True:
        text = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if not text.startswith("-"):
            return text


_LISTENERS = re.compile(
    r"^listeners=PLAINTEXT://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)$", re.M
)


def previous_ports(properties: Path) -> tuple[int, int] | None:
    """Return the (client, controller) ports a server.properties rendered here names, if any.

    Args:
        properties: A server.properties written by :func:`render_server_properties`.

    Returns:
        The two ports, or None when the file is missing or not ours.
    """
    try:
        match = _LISTENERS.search(properties.read_text())
    except FileNotFoundError:
        return None
    return (int(match.group(1)), int(match.group(2))) if match else None
