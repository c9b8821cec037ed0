"""A Kafka broker for a whole test session, and what a test leaves on it removed.

``session_broker`` picks the broker as tidings' own tests do: ``TIDINGS_BOOTSTRAP`` when it
is set (a broker you run; it is never stopped here), else testcontainers' Kafka when a
Docker engine answers (the container is removed at the end), else a local Apache Kafka
(``tidings.broker.LocalBroker``) started on 127.0.0.1 in a directory of the session's and
stopped by its PID when the session ends. Each process that enters it gets a broker of its
own (pytest-xdist's workers each start one, on free ports, in their own directories), so it
is safe at session scope with or without xdist.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

#: Where the session's broker came from.
BrokerSource = Literal["environment", "container", "local"]


@dataclass(frozen=True, slots=True)
class SessionBroker:
    """The broker a test session talks to.

    Attributes:
        bootstrap: Its bootstrap address.
        source: ``environment`` (``TIDINGS_BOOTSTRAP``), ``container`` (testcontainers) or
            ``local`` (a ``LocalBroker`` this session started).
        pid: The local broker's JVM, which the session stops; None for the others.
    """

    bootstrap: str
    source: BrokerSource
    pid: int | None = None


def docker_answers(timeout: float = 2.0) -> bool:
    """Whether a Docker engine answers a ping within ``timeout`` seconds (never raises).

    No engine is the common case on a developer's machine: this answers within a second or
    two instead of waiting for testcontainers' own retries.
    """
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        return False


@contextmanager
def kafka_container() -> Iterator[str]:
    """Run testcontainers' Kafka (KRaft) and yield its bootstrap address; removed at the end."""
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers < 4.10 keeps it at the old path
        from testcontainers.kafka import KafkaContainer  # type: ignore[no-redef]
    with KafkaContainer().with_kraft() as kafka:
        yield kafka.get_bootstrap_server()


@contextmanager
def session_broker(
    data_dir: Path,
    *,
    on_progress: Callable[[str], None] = lambda _line: None,
    environ: Mapping[str, str] = os.environ,
    docker: Callable[[], bool] = docker_answers,
) -> Iterator[SessionBroker]:
    """Yield the session's broker (see the module docstring), stopping what it started.

    Args:
        data_dir: Where a local broker keeps its data (a fresh directory of the session's).
        on_progress: Told what a local broker does (the first run downloads Kafka's jars).
        environ: Where ``TIDINGS_BOOTSTRAP`` is read.
        docker: Whether a Docker engine answers.

    Raises:
        tidings.errors.BrokerError: No ``TIDINGS_BOOTSTRAP``, no Docker engine, and the local
            broker could not start (``java`` 17+ and ``mvn`` are needed; the message says why).
    """
    configured = environ.get("TIDINGS_BOOTSTRAP")
    if configured:
        yield SessionBroker(configured, "environment")
        return
    if docker():
        with kafka_container() as bootstrap:
            yield SessionBroker(bootstrap, "container")
        return
    from tidings.broker import LocalBroker

    broker = LocalBroker(data_dir, on_progress=on_progress)
    bootstrap = broker.start()

    def stop() -> None:
        broker.stop()

    # The fixture's teardown stops it; this covers an interpreter that exits without one.
    atexit.register(stop)
    try:
        yield SessionBroker(bootstrap, "local", broker.status().pid)
    finally:
        atexit.unregister(stop)
        stop()


def delete_topics(bootstrap: str, prefix: str, *, timeout: float = 30.0) -> list[str]:
    """Delete every topic whose name starts with ``prefix``; return their names.

    Best effort: a broker that does not answer leaves them (and fails the next test that
    needs it instead of this one). ``prefix`` must name one app's topics (``"{app}."``).
    """
    if not prefix.endswith("."):
        raise ValueError(f"the prefix must end with '.' so it names one app's topics, not {prefix!r}")
    from tidings.shell.runtime.connection import KafkaConnection

    admin = KafkaConnection.of(bootstrap).admin()
    try:
        names = [name for name in admin.list_topics(timeout=10).topics if name.startswith(prefix)]
        if names:
            for future in admin.delete_topics(names, operation_timeout=timeout).values():
                future.result(timeout=timeout)
        return names
    except Exception:  # noqa: BLE001 - cleanup must not fail a test that passed
        return []
