"""``tidings broker start --nodes 3`` and the ``stop``/``status`` of a local cluster.

Called by ``tidings.cli.broker``; a cluster and a single broker share the state file path, and
the file's ``"nodes"`` key says which one it records.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tidings.broker import KAFKA_VERSION, LocalCluster
from tidings.broker._cluster import stop_recorded
from tidings.broker._cluster_state import is_cluster_state, read_cluster_state
from tidings.broker._process import is_kafka
from tidings.broker._state import read_state
from tidings.errors import BrokerError

CLUSTER_HEAP = "640m"


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def start_cluster(args: argparse.Namespace, state_file: Path) -> int:
    """Start (or find running) the cluster of ``args.nodes`` nodes; print its export line."""
    if args.nodes < 3:
        raise BrokerError(f"--nodes {args.nodes}: use 1 (one broker) or 3 or more (a cluster "
                          "that can lose a node)")
    if args.port:
        raise BrokerError("--port is for a single broker; a cluster picks a free port per node "
                          "and keeps it across restarts")
    if not is_cluster_state(state_file):
        single = read_state(state_file) if state_file.exists() else None
        if single is not None and is_kafka(single.pid):
            raise BrokerError(f"a single broker (pid {single.pid}) is recorded in {state_file} "
                              "and running; stop it first with `tidings broker stop`")
    data_dir = args.data_dir or state_file.parent / "cluster"
    cluster = LocalCluster(data_dir, nodes=args.nodes, state_file=state_file,
                           heap=args.heap or CLUSTER_HEAP, startup_timeout=args.timeout,
                           on_progress=_progress)
    already = bool(cluster.status()) and all(s.running for s in cluster.status())
    bootstrap = cluster.start()
    pids = ", ".join(f"node {s.node.node_id} pid {s.node.pid}" for s in cluster.status())
    verb = "was already running" if already else "is running"
    # Shell syntax on stdout (comments, then an export) so `eval "$(...)"` works.
    print(f"# Apache Kafka {KAFKA_VERSION}: a {args.nodes}-node cluster {verb} at {bootstrap} "
          f"({pids}; data in {cluster.data_dir}); stop it with `tidings broker stop`.")
    print(f"export TIDINGS_BOOTSTRAP={bootstrap}")
    return 0


def refuse_single_over_cluster(state_file: Path) -> None:
    """Refuse to start a single broker where a running cluster is recorded.

    Raises:
        BrokerError: A node of the recorded cluster runs.
    """
    recorded = read_cluster_state(state_file) if is_cluster_state(state_file) else None
    if recorded is not None and any(is_kafka(n.pid) for n in recorded.nodes):
        raise BrokerError(f"a cluster is recorded in {state_file} and running; stop it first "
                          "with `tidings broker stop`, or start it with --nodes "
                          f"{len(recorded.nodes)}")


def stop_cluster(state_file: Path, timeout: float) -> int:
    """Stop every node of the cluster recorded in ``state_file`` by its PID."""
    recorded = read_cluster_state(state_file)
    running = [n for n in (recorded.nodes if recorded else ()) if is_kafka(n.pid)]
    stop_recorded(state_file, timeout=timeout)
    if not running or recorded is None:
        print("No cluster node was running.")
    else:
        pids = ", ".join(f"node {n.node_id} pid {n.pid}" for n in running)
        print(f"Stopped the cluster at {recorded.bootstrap} ({pids}).")
    return 0


def status_cluster(state_file: Path) -> int:
    """Say which nodes of the recorded cluster run; exit 0 when all do, 3 otherwise."""
    recorded = read_cluster_state(state_file)
    if recorded is None:
        print("not running")
        return 3
    running = [is_kafka(n.pid) for n in recorded.nodes]
    if all(running):
        print(f"running: a {len(recorded.nodes)}-node cluster at {recorded.bootstrap} "
              f"(data in {recorded.data_dir})")
    else:
        print(f"not running: {running.count(True)} of {len(recorded.nodes)} nodes of the cluster "
              f"at {recorded.bootstrap} run")
    for node, alive in zip(recorded.nodes, running, strict=True):
        state = "running" if alive else "not running (has exited)"
        print(f"  node {node.node_id}: {state}, pid {node.pid}, 127.0.0.1:{node.port} "
              f"(controller {node.controller_port}), data in {node.data_dir}")
    if all(running):
        print(f"export TIDINGS_BOOTSTRAP={recorded.bootstrap}")
        return 0
    return 3
