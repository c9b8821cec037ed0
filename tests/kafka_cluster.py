"""The ``kafka_cluster`` fixture: one local three-node cluster for the session, started only
when a test asks for it (tests/conftest.py registers it).

Its tests kill and restart nodes; each must leave every node running and in sync when it ends
(``restore``), so the next test finds a whole cluster. The cluster is stopped by PID at the end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tidings.broker import LocalCluster


@pytest.fixture(scope="session")
def kafka_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """Yield a started ``LocalCluster`` of three nodes (replication 3, min.insync.replicas 2)."""
    cluster = LocalCluster(tmp_path_factory.mktemp("kafka-cluster"), heap="640m",
                           on_progress=progress_writer(request.config))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop(timeout=20)


def restore(cluster: LocalCluster, *, timeout: float = 120.0) -> None:
    """Start every node that is down and wait until all partitions are back in full ISR."""
    cluster.start()
    for node in cluster.node_ids:
        cluster.start_node(node, timeout=timeout)
    cluster.wait_in_sync(timeout=timeout)


def progress_writer(config: pytest.Config) -> Callable[[str], None]:
    """A line writer that shows through pytest's output capture, stamped with the elapsed time
    (a 2-core machine takes a while to start three JVMs; progress must not look like a hang)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    began = time.monotonic()

    def write(line: str) -> None:
        if reporter is None:
            return
        text = f"[tidings cluster {time.monotonic() - began:6.1f} s] {line}"
        if capture is None:
            reporter.write_line(text)
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(text)

    return write
