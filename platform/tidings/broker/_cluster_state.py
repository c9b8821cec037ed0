"""The state file of a local cluster: every node's PID, ports and data dir, for the next CLI call.

It shares its default path (``.tidings/broker.json``) with the single broker's, so ``tidings
broker stop`` and ``status`` find whichever was started; a ``"nodes"`` key tells them apart.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from tidings.errors import BrokerError


@dataclass(frozen=True)
class NodeState:
    """One node of a started cluster.

    Attributes:
        node_id: The node's id (its ``node.id``).
        pid: The node's JVM process id (also its process group id).
        port: Its PLAINTEXT (client) port on 127.0.0.1.
        controller_port: Its KRaft controller port on 127.0.0.1.
        data_dir: Its data directory (config, logs, Kafka log dir).
    """

    node_id: int
    pid: int
    port: int
    controller_port: int
    data_dir: str


@dataclass(frozen=True)
class ClusterState:
    """What a started local cluster leaves behind.

    Attributes:
        cluster_id: The KRaft cluster id.
        bootstrap: Every node's ``host:port``, comma-separated.
        data_dir: The cluster's data directory (one ``node-N`` directory per node).
        nodes: Every node, by ascending id.
    """

    cluster_id: str
    bootstrap: str
    data_dir: str
    nodes: tuple[NodeState, ...]

    def node(self, node_id: int) -> NodeState:
        """The node with ``node_id``.

        Raises:
            KeyError: No such node.
        """
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)


def is_cluster_state(path: Path) -> bool:
    """Return whether ``path`` holds a cluster's state (rather than a single broker's or none)."""
    try:
        raw = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return False
    return isinstance(raw, dict) and "nodes" in raw


def read_cluster_state(path: Path) -> ClusterState | None:
    """Read a cluster state file; None when it does not exist.

    Raises:
        BrokerError: The file exists but is not a cluster's state file.
    """
    try:
        raw = json.loads(path.read_text())
        nodes = tuple(
            NodeState(
                node_id=int(n["node_id"]), pid=int(n["pid"]), port=int(n["port"]),
                controller_port=int(n["controller_port"]), data_dir=str(n["data_dir"]),
            )
            for n in raw["nodes"]
        )
        return ClusterState(
            cluster_id=str(raw["cluster_id"]), bootstrap=str(raw["bootstrap"]),
            data_dir=str(raw["data_dir"]), nodes=nodes,
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise BrokerError(f"{path} is not a tidings cluster state file; remove it") from exc


def write_cluster_state(path: Path, state: ClusterState) -> None:
    """Write the state file atomically (a reader never sees half a file); makes its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(json.dumps(asdict(state), indent=2) + "\n")
    scratch.replace(path)
