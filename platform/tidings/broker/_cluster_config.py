"""Render the server.properties of one node of a local three-node KRaft cluster.

Every node is a combined broker+controller (see ``_cluster.py`` for why) and a voter of one
static controller quorum; ports are chosen once, recorded in ``cluster.json`` and reused on every
restart, because every node names every voter's controller port in ``controller.quorum.voters``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tidings.broker._config import BrokerLayout
from tidings.errors import BrokerError

# Replication defaults of a production-like cluster that may lose one node: three copies, and a
# write acknowledged by acks=all is on at least two of them.
REPLICATION_FACTOR = 3
MIN_INSYNC_REPLICAS = 2

# How fast a SIGKILLed node is noticed. The controller fences a broker (moves the leadership of
# its partitions away and drops it from every ISR) when no heartbeat came for the session
# timeout; Kafka's defaults are 9 s / 2 s. 6 s / 1 s halves the outage a hard kill causes while
# six missed heartbeats still absorb the GC pauses and CPU stalls of a shared 2-core machine.
# The KRaft quorum keeps Kafka's defaults (a follower starts an election 2 s after it last heard
# from the leader; elections time out after 1 s), which already are fast.
BROKER_SESSION_TIMEOUT_MS = 6000
BROKER_HEARTBEAT_INTERVAL_MS = 1000
# A restarted node gets its preferred leaderships back within 30 s (Kafka's default: 300 s), so
# the next failure test finds the leaders spread over the nodes again.
LEADER_IMBALANCE_CHECK_S = 30


@dataclass(frozen=True)
class NodePorts:
    """The two ports of one node on 127.0.0.1.

    Attributes:
        client: The PLAINTEXT listener clients and the other brokers use.
        controller: The KRaft CONTROLLER listener (quorum traffic, DescribeQuorum).
    """

    client: int
    controller: int


def node_layout(data_dir: Path, node_id: int) -> BrokerLayout:
    """Return where node ``node_id`` of the cluster rooted at ``data_dir`` keeps its files."""
    return BrokerLayout(data_dir / f"node-{node_id}")


def quorum_voters(ports: Mapping[int, NodePorts]) -> str:
    """Return ``controller.quorum.voters``: ``1@127.0.0.1:C1,2@127.0.0.1:C2,...``."""
    return ",".join(f"{node}@127.0.0.1:{ports[node].controller}" for node in sorted(ports))


def cluster_bootstrap(ports: Mapping[int, NodePorts]) -> str:
    """Return the clients' bootstrap list of every node: ``127.0.0.1:P1,127.0.0.1:P2,...``."""
    return ",".join(f"127.0.0.1:{ports[node].client}" for node in sorted(ports))


def render_cluster_properties(
    *, node_id: int, ports: Mapping[int, NodePorts], log_dirs: Path
) -> str:
    """Render the server.properties of node ``node_id``, a broker+controller on 127.0.0.1.

    Args:
        node_id: This node's id (a key of ``ports``).
        ports: Every node's ports, by node id (all of them are quorum voters).
        log_dirs: This node's Kafka log directory.

    Returns:
        The properties text.

    Raises:
        ValueError: ``node_id`` is not one of ``ports``, or there are fewer than three nodes.
    """
    if node_id not in ports:
        raise ValueError(f"node {node_id} is not one of the cluster's nodes {sorted(ports)}")
    if len(ports) < REPLICATION_FACTOR:
        raise ValueError(f"a cluster needs at least {REPLICATION_FACTOR} nodes, not {len(ports)}")
    own = ports[node_id]
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": quorum_voters(ports),
        "listeners": f"PLAINTEXT://127.0.0.1:{own.client},CONTROLLER://127.0.0.1:{own.controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{own.client}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dirs),
        "default.replication.factor": str(REPLICATION_FACTOR),
        "min.insync.replicas": str(MIN_INSYNC_REPLICAS),
        "offsets.topic.replication.factor": str(REPLICATION_FACTOR),
        "transaction.state.log.replication.factor": str(REPLICATION_FACTOR),
        "transaction.state.log.min.isr": str(MIN_INSYNC_REPLICAS),
        "share.coordinator.state.topic.replication.factor": str(REPLICATION_FACTOR),
        "share.coordinator.state.topic.min.isr": str(MIN_INSYNC_REPLICAS),
        # A lost write is worse than an unavailable partition (Kafka's default, said out loud).
        "unclean.leader.election.enable": "false",
        "broker.session.timeout.ms": str(BROKER_SESSION_TIMEOUT_MS),
        "broker.heartbeat.interval.ms": str(BROKER_HEARTBEAT_INTERVAL_MS),
        "leader.imbalance.check.interval.seconds": str(LEADER_IMBALANCE_CHECK_S),
        # As the single node (_config.render_server_properties): same behaviour for the apps.
        "offsets.topic.num.partitions": "8",
        "num.partitions": "1",
        "auto.create.topics.enable": "true",
        "group.initial.rebalance.delay.ms": "0",
        "log.cleaner.backoff.ms": "1000",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


@dataclass(frozen=True)
class ClusterPlan:
    """What a cluster's data directory fixes for good: its id and every node's ports.

    Written to ``<data_dir>/cluster.json`` when the cluster is first made, read on every later
    start, so a restarted node keeps its address and the quorum keeps its voters.

    Attributes:
        cluster_id: The KRaft cluster id every node's log dir was formatted with.
        ports: Every node's ports, by node id.
    """

    cluster_id: str
    ports: Mapping[int, NodePorts]

    def to_json(self) -> str:
        """The plan as JSON text."""
        nodes = {str(n): {"client": p.client, "controller": p.controller}
                 for n, p in sorted(self.ports.items())}
        return json.dumps({"cluster_id": self.cluster_id, "nodes": nodes}, indent=2) + "\n"

    @classmethod
    def read(cls, path: Path) -> ClusterPlan | None:
        """Read a plan; None when ``path`` does not exist.

        Raises:
            BrokerError: The file is not a plan written here.
        """
        try:
            raw = json.loads(path.read_text())
            ports = {int(n): NodePorts(int(p["client"]), int(p["controller"]))
                     for n, p in raw["nodes"].items()}
            return cls(str(raw["cluster_id"]), ports)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BrokerError(f"{path} is not a tidings cluster plan; remove its directory") from exc
