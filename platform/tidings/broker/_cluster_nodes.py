"""Run the JVMs of a local cluster's nodes: format their log dirs, launch one, probe its port."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from pathlib import Path

from tidings.broker._cluster_config import NodePorts
from tidings.broker._config import BrokerLayout
from tidings.broker._local import _JVM_FLAGS
from tidings.errors import BrokerError


def java_command(java: str, libs: Path, layout: BrokerLayout, main: str, *args: str) -> list[str]:
    """The command line of a Kafka main class run with a node's log4j2 config."""
    return [java, f"-Dlog4j2.configurationFile={layout.log4j2}", "-cp", f"{libs}/*", main, *args]


def format_nodes(java: str, libs: Path, cluster_id: str, layouts: Mapping[int, BrokerLayout]) -> None:
    """Format every given node's log dir with ``cluster_id``, one JVM per node, all at once
    (formatting is mostly JVM start-up).

    Raises:
        BrokerError: A node's formatting failed (with its output).
    """
    running = {
        node: subprocess.Popen(
            java_command(java, libs, layout, "kafka.tools.StorageTool", "format", "--cluster-id",
                         cluster_id, "--config", str(layout.properties), "--ignore-formatted"),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for node, layout in layouts.items()
    }
    failures = []
    for node, proc in running.items():
        output, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"node {node} (exit {proc.returncode}):\n{output}")
    if failures:
        raise BrokerError("formatting the cluster's log dirs failed: " + "\n".join(failures))


def launch_node(java: str, libs: Path, layout: BrokerLayout, heap: str) -> subprocess.Popen[bytes]:
    """Start a node's Kafka JVM in the background, its output in the node's console.log."""
    command = java_command(java, libs, layout, "kafka.Kafka", str(layout.properties))
    command[1:1] = [f"-Xmx{heap}", *_JVM_FLAGS]
    with ExitStack() as stack:
        # Truncated per start, so a failure's tail is never an older run's output.
        console = stack.enter_context(layout.console_log.open("wb"))
        # A session of its own: Ctrl-C in the starting shell must not reach the node, and
        # the node outlives the `tidings broker start` process.
        return subprocess.Popen(
            command, cwd=layout.data_dir, stdin=subprocess.DEVNULL, stdout=console,
            stderr=subprocess.STDOUT, start_new_session=True,
        )


def free_node_ports(nodes: Iterable[int]) -> dict[int, NodePorts]:
    """Two free ports on 127.0.0.1 per node, all different."""
    nodes = list(nodes)
    # Hold every probe socket until all ports are known, so no two can collide.
    with ExitStack() as stack:
        found: list[int] = []
        for _ in range(2 * len(nodes)):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            found.append(sock.getsockname()[1])
    return {node: NodePorts(found[2 * i], found[2 * i + 1]) for i, node in enumerate(nodes)}


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
