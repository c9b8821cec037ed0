"""A local three-node Apache Kafka cluster (KRaft) on 127.0.0.1, whose nodes a test can kill.

Layout: every node is one JVM running broker *and* controller (``process.roles=broker,
controller``), and the three form a three-voter controller quorum. So killing the active
controller also kills a broker: the test of that failure loses a controller and a broker at once,
which is the harder case of the two (the quorum elects a new leader while the partitions that
node led fail over). Why not separate controller processes: six JVMs instead of three on a
2-core machine would make every start and every test slower and less steady, and a cluster of
dedicated controllers is not needed to show what tidings must survive (a node lost, the metadata
leader lost, a rolling restart). What this layout cannot show is a controller lost while every
broker stays up; that case is easier for a client (no partition moves) and is left out.

Each node has its own data directory ``<data_dir>/node-N`` (config, logs, Kafka log dir), and its
ports are chosen once and kept in ``<data_dir>/cluster.json`` with the cluster id, so a restarted
node (``start_node``, or ``start`` of a stopped cluster) comes back on its data, at its address.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, PartitionMetadata

from tidings.broker._cluster_config import (
    ClusterPlan,
    cluster_bootstrap,
    node_layout,
    render_cluster_properties,
)
from tidings.broker._cluster_metadata import count_leaders, select_partitions, short_partitions
from tidings.broker._cluster_nodes import accepts, format_nodes, free_node_ports, launch_node
from tidings.broker._cluster_state import (
    ClusterState,
    NodeState,
    read_cluster_state,
    write_cluster_state,
)
from tidings.broker._config import new_cluster_id, render_log4j2_yaml
from tidings.broker._process import is_alive, is_kafka, log_tail, terminate
from tidings.broker._provisioning import Progress, provision_kafka
from tidings.broker._quorum import QuorumState, describe_quorum
from tidings.broker._state import remove_state
from tidings.broker._tools import require_tool
from tidings.errors import BrokerError
from tidings.shell.runtime.connection import KafkaConnection

_OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class NodeStatus:
    """One node as ``status()`` found it.

    Attributes:
        node: What the state records for the node.
        running: Whether the recorded PID is a live Kafka JVM.
    """

    node: NodeState
    running: bool


class LocalCluster:
    """Provision, start, stop, kill and inspect a local multi-node Kafka cluster.

    Without ``state_file`` the cluster is tracked in this object only (the pytest fixture);
    with it, every node's ``{pid, ports, data_dir}`` is persisted so another process (the next
    CLI call) can find and stop it.

    Example::

        cluster = LocalCluster(Path("/tmp/kafka-cluster"))
        bootstrap = cluster.start()      # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        try:
            victim = cluster.busiest_leader("orders.")
            cluster.kill(victim)         # SIGKILL
            ...
            cluster.start_node(victim)   # back on its data, in every ISR again
        finally:
            cluster.stop()
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        nodes: int = 3,
        state_file: Path | None = None,
        home: Path | None = None,
        heap: str = "640m",
        startup_timeout: float = 180.0,
        on_progress: Progress = lambda _line: None,
    ) -> None:
        """Describe a cluster; nothing happens until :meth:`start`.

        Args:
            data_dir: Where the nodes keep their config, logs and Kafka log dirs.
            nodes: How many nodes (each a broker and a quorum voter); at least 3.
            state_file: Where to persist the running nodes' PIDs and ports, if anywhere.
            home: The jar cache (defaults to ``$TIDINGS_HOME`` or ``~/.cache/tidings``).
            heap: Each node's maximum JVM heap (``-Xmx``).
            startup_timeout: Seconds to wait for the cluster (or a restarted node) to be usable.
            on_progress: Called with human-readable progress lines.

        Raises:
            ValueError: ``nodes`` is below 3.
        """
        if nodes < 3:
            raise ValueError(f"a local cluster has at least 3 nodes, not {nodes}")
        self._data_dir = data_dir.resolve()
        self._node_ids = tuple(range(1, nodes + 1))
        self._state_file = state_file
        self._home = home
        self._heap = heap
        self._startup_timeout = startup_timeout
        self._on_progress = on_progress
        self._state: ClusterState | None = None
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._admin_client: AdminClient | None = None
        self._node_admins: dict[int, AdminClient] = {}
        self._lock = threading.Lock()

    # -- what it is ----------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory."""
        return self._data_dir

    @property
    def node_ids(self) -> tuple[int, ...]:
        """Every node's id, ascending (1, 2, 3)."""
        return self._node_ids

    @property
    def bootstrap(self) -> str:
        """Every node's client address, ``127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``.

        Raises:
            BrokerError: The cluster was never started (it has no ports yet).
        """
        return cluster_bootstrap(self._plan_or_fail().ports)

    @property
    def bootstrap_controllers(self) -> str:
        """Every node's controller address (for ``kafka-metadata-quorum --bootstrap-controller``)."""
        ports = self._plan_or_fail().ports
        return ",".join(f"127.0.0.1:{ports[n].controller}" for n in sorted(ports))

    @property
    def connection(self) -> KafkaConnection:
        """A connection to every node, PLAINTEXT, with none of the environment's properties."""
        return KafkaConnection(self.bootstrap)

    def node_bootstrap(self, node_id: int) -> str:
        """The client address of one node, ``127.0.0.1:P``."""
        return f"127.0.0.1:{self._plan_or_fail().ports[self._known(node_id)].client}"

    def node_dir(self, node_id: int) -> Path:
        """The data directory of one node (its ``server.log`` and ``console.log`` are there)."""
        return node_layout(self._data_dir, self._known(node_id)).data_dir

    # -- the whole cluster ---------------------------------------------------------------------

    def start(self) -> str:
        """Start every node that is not running and wait until the cluster is usable.

        Usable: every node is a registered broker, and ``__consumer_offsets`` exists with every
        partition on all its replicas. The first start provisions the jars, picks the ports and
        formats every node's log dir with one new cluster id; later starts reuse them.
        Idempotent: with every node running, it only checks the cluster is usable.

        Returns:
            The bootstrap address of every node, comma-separated.

        Raises:
            BrokerError: ``java``/``mvn`` are missing, provisioning or formatting failed, or a
                node died or the cluster was not usable within ``startup_timeout`` (the message
                has the log tail of the node at fault).
        """
        began = time.monotonic()
        deadline = began + self._startup_timeout
        java = require_tool("java")
        libs = provision_kafka(self._home, on_progress=self._on_progress)
        plan = self._plan(java, libs)
        missing = [n for n in self._node_ids if self.pid(n) is None]
        if missing:
            self._on_progress(
                f"Starting {len(missing)} of {len(self._node_ids)} Kafka nodes "
                f"(data in {self._data_dir}); on 2 cores this takes a minute"
            )
        launched: dict[int, subprocess.Popen[bytes]] = {}
        try:
            for node in missing:
                launched[node] = self._launch(java, libs, node)
                self._record(node, launched[node].pid)
            for node in missing:
                self._await_port(node, plan.ports[node].client, deadline)
                self._await_answers(node, deadline)
                self._on_progress(f"node {node} answers on 127.0.0.1:{plan.ports[node].client} "
                                  f"({time.monotonic() - began:.1f} s)")
            self._await_usable(deadline)
        except BaseException:
            # Never leave half a cluster behind, even on Ctrl-C.
            for proc in launched.values():
                terminate(proc.pid, timeout=5.0, reap=proc.poll)
            raise
        self._on_progress(f"Cluster of {len(self._node_ids)} nodes usable at {self.bootstrap} "
                          f"({time.monotonic() - began:.1f} s)")
        return self.bootstrap

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop every recorded node by PID, all at once: SIGTERM, then SIGKILL after ``timeout``.

        The data directory is kept, so a later :meth:`start` brings the same cluster back.

        Returns:
            True if any node was running.
        """
        recorded = self._recorded()
        running = [n for n in (recorded.nodes if recorded else ()) if is_kafka(n.pid)]
        threads = [threading.Thread(target=self._terminate, args=(n.node_id, n.pid, timeout))
                   for n in running]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._close_admin()
        self._procs.clear()
        self._state = None
        if self._state_file is not None:
            remove_state(self._state_file)
        return bool(running)

    def status(self) -> list[NodeStatus]:
        """Every recorded node and whether it runs; empty when nothing is recorded."""
        recorded = self._recorded()
        return [NodeStatus(n, is_kafka(n.pid)) for n in (recorded.nodes if recorded else ())]

    # -- one node ------------------------------------------------------------------------------

    def pid(self, node_id: int) -> int | None:
        """The PID of node ``node_id`` if it runs, else None."""
        self._known(node_id)
        recorded = self._recorded()
        if recorded is None:
            return None
        try:
            pid = recorded.node(node_id).pid
        except KeyError:
            return None
        proc = self._procs.get(node_id)
        if proc is not None and proc.pid == pid:
            # Our own child: its exit status is the truth (and polling reaps it). /proc was
            # seen to say "not Kafka" for a node restarting under load (test_cluster_failures).
            return pid if proc.poll() is None else None
        if proc is not None:
            proc.poll()  # reap a child that died, so it does not linger as a zombie
        return pid if is_kafka(pid) else None

    def running_nodes(self) -> list[int]:
        """The ids of the nodes that run."""
        return [n for n in self._node_ids if self.pid(n) is not None]

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (no controlled shutdown) and return once it is gone.

        Raises:
            BrokerError: The node is not running.
        """
        pid = self._running_pid(node_id)
        os.kill(pid, signal.SIGKILL)
        proc = self._procs.get(node_id)
        while is_alive(pid):
            if proc is not None:
                proc.poll()
            time.sleep(0.02)
        if proc is not None and proc.pid == pid:
            proc.wait()  # gone for the kernel too, not only its main thread
        self._on_progress(f"node {node_id} (pid {pid}) killed")

    def stop_node(self, node_id: int, *, timeout: float = 30.0) -> bool:
        """Stop node ``node_id`` cleanly: SIGTERM (Kafka's controlled shutdown hands its
        leaderships over first), SIGKILL only after ``timeout``.

        Returns:
            True if it ended on SIGTERM, False if it had to be killed.

        Raises:
            BrokerError: The node is not running.
        """
        pid = self._running_pid(node_id)
        return self._terminate(node_id, pid, timeout)

    def start_node(self, node_id: int, *, timeout: float | None = None) -> None:
        """Restart node ``node_id`` on its data and wait until it has rejoined.

        Rejoined: it is a registered broker again, it is back in the ISR of every partition it
        holds a replica of, and its copy of the metadata log has caught up with the quorum's
        committed end. A node already running is only waited for.

        Args:
            node_id: The node.
            timeout: Seconds to wait (default: ``startup_timeout``).

        Raises:
            BrokerError: The node died or did not rejoin in time (with its log tail).
        """
        self._known(node_id)
        deadline = time.monotonic() + (self._startup_timeout if timeout is None else timeout)
        began = time.monotonic()
        if self.pid(node_id) is None:
            java = require_tool("java")
            libs = provision_kafka(self._home, on_progress=self._on_progress)
            plan = self._plan(java, libs)
            proc = self._launch(java, libs, node_id)
            self._record(node_id, proc.pid)
            self._on_progress(f"node {node_id} restarting (pid {proc.pid})")
            self._await_port(node_id, plan.ports[node_id].client, deadline)
        self._await_rejoined(node_id, deadline)
        self._on_progress(f"node {node_id} rejoined ({time.monotonic() - began:.1f} s)")

    # -- what the cluster looks like -----------------------------------------------------------

    def quorum(self, *, timeout: float = 10.0) -> QuorumState:
        """The metadata quorum as a live node sees it (DescribeQuorum on its controller port).

        Raises:
            BrokerError: No running node answered within ``timeout``.
        """
        ports = self._plan_or_fail().ports
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            for node in self.running_nodes():
                try:
                    return describe_quorum(ports[node].controller, timeout=2.0)
                except (OSError, BrokerError) as exc:
                    last = exc
            if time.monotonic() > deadline:
                raise BrokerError(f"no controller answered DescribeQuorum within {timeout:.0f} s: "
                                  f"{last}")
            time.sleep(0.2)

    def active_controller(self, *, timeout: float = 30.0) -> int:
        """The node id of the active KRaft controller (the metadata quorum's leader).

        Asked with DescribeQuorum of a running node's controller listener; a leader that is not
        running (just killed, before the others noticed) is not an answer, so this waits for
        the election that follows.

        Raises:
            BrokerError: No running node was the leader within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            state = self.quorum(timeout=max(0.5, deadline - time.monotonic()))
            if state.leader_id in self._node_ids and self.pid(state.leader_id) is not None:
                return state.leader_id
            if time.monotonic() > deadline:
                raise BrokerError(f"no running node led the KRaft quorum within {timeout:.0f} s "
                                  f"(last seen leader {state.leader_id}, epoch "
                                  f"{state.leader_epoch})")
            time.sleep(0.1)

    def leader_counts(self, prefix: str = "", *, topics: Collection[str] | None = None,
                      timeout: float = 10.0) -> dict[int, int]:
        """How many partitions of the chosen topics each node leads (every node, 0 included).

        Each running broker is asked, until they all agree: a broker applies the metadata log
        a moment after the controller wrote it, and one that lags would count a new topic's
        partitions (or a move of leadership) as not there yet.

        Args:
            prefix: Count the topics whose names start with it (internal ``__`` topics only
                when it starts with ``__``).
            topics: Count exactly these topics instead.
            timeout: Seconds to wait for the brokers to agree.

        Raises:
            BrokerError: No broker answered, or they still disagreed after ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            counts = [count_leaders(select_partitions(view, prefix, topics), self._node_ids)
                      for view in self._views(timeout=min(5.0, timeout)).values()]
            if counts and all(c == counts[0] for c in counts):
                return counts[0]
            if time.monotonic() > deadline:
                raise BrokerError(f"the brokers did not agree on the leaders within "
                                  f"{timeout:.0f} s: {counts}")
            time.sleep(0.2)

    def busiest_leader(self, prefix: str = "", *, topics: Collection[str] | None = None) -> int:
        """The node that leads the most partitions of the chosen topics (lowest id on a tie).

        Raises:
            BrokerError: None of the chosen topics exists, or no broker answered.
        """
        counts = self.leader_counts(prefix, topics=topics)
        if not any(counts.values()):
            raise BrokerError(f"no led partition among the topics {topics or prefix + '*'}")
        return max(self._node_ids, key=lambda node: (counts[node], -node))

    def wait_in_sync(self, prefix: str = "", *, topics: Collection[str] | None = None,
                     timeout: float = 60.0) -> float:
        """Wait until every partition of the chosen topics has a leader and its full ISR, as
        every running broker sees it.

        Args:
            prefix: As in :meth:`leader_counts`.
            topics: As in :meth:`leader_counts`.
            timeout: Seconds to wait.

        Returns:
            The seconds it took.

        Raises:
            BrokerError: A partition was still short of replicas after ``timeout`` (named).
        """
        began = time.monotonic()
        deadline = began + timeout
        while True:
            short = self._short_partitions(prefix, topics, lambda _p: True)
            if not short:
                return time.monotonic() - began
            if time.monotonic() > deadline:
                raise BrokerError(f"not in sync after {timeout:.0f} s: {', '.join(short[:5])}"
                                  f"{' ...' if len(short) > 5 else ''}")
            time.sleep(0.25)

    # -- internals -----------------------------------------------------------------------------

    def _known(self, node_id: int) -> int:
        if node_id not in self._node_ids:
            raise BrokerError(f"node {node_id} is not one of this cluster's {list(self._node_ids)}")
        return node_id

    def _recorded(self) -> ClusterState | None:
        if self._state_file is not None:
            return read_cluster_state(self._state_file)
        return self._state

    def _running_pid(self, node_id: int) -> int:
        pid = self.pid(node_id)
        if pid is None:
            raise BrokerError(f"node {node_id} is not running; start it with start_node({node_id})")
        return pid

    def _plan_or_fail(self) -> ClusterPlan:
        plan = ClusterPlan.read(self._data_dir / "cluster.json")
        if plan is None:
            raise BrokerError(f"no cluster in {self._data_dir} yet; call start() first")
        return plan

    def _plan(self, java: str, libs: Path) -> ClusterPlan:
        """The cluster's id and ports, made (and every node formatted) on the first start."""
        path = self._data_dir / "cluster.json"
        plan = ClusterPlan.read(path)
        if plan is not None and sorted(plan.ports) != list(self._node_ids):
            raise BrokerError(f"{self._data_dir} holds a cluster of {len(plan.ports)} nodes, not "
                              f"{len(self._node_ids)}; use another data dir")
        if plan is None:
            plan = ClusterPlan(new_cluster_id(), free_node_ports(self._node_ids))
        for node in self._node_ids:
            self._write_config(plan, node)
        unformatted = [n for n in self._node_ids
                       if not node_layout(self._data_dir, n).formatted.exists()]
        if unformatted:
            self._on_progress(f"Formatting KRaft storage of nodes {unformatted} "
                              f"(cluster id {plan.cluster_id})")
            format_nodes(java, libs, plan.cluster_id,
                         {n: node_layout(self._data_dir, n) for n in unformatted})
        # Written last: a data dir with a plan always has every node formatted with its id.
        path.write_text(plan.to_json())
        return plan

    def _write_config(self, plan: ClusterPlan, node: int) -> None:
        layout = node_layout(self._data_dir, node)
        layout.log_dirs.mkdir(parents=True, exist_ok=True)
        layout.properties.write_text(
            render_cluster_properties(node_id=node, ports=plan.ports, log_dirs=layout.log_dirs)
        )
        layout.log4j2.write_text(render_log4j2_yaml(layout.server_log))

    def _launch(self, java: str, libs: Path, node: int) -> subprocess.Popen[bytes]:
        proc = launch_node(java, libs, node_layout(self._data_dir, node), self._heap)
        self._procs[node] = proc
        return proc

    def _record(self, node: int, pid: int) -> None:
        with self._lock:
            plan = self._plan_or_fail()
            recorded = self._recorded()
            nodes = {n.node_id: n for n in (recorded.nodes if recorded else ())}
            ports = plan.ports[node]
            nodes[node] = NodeState(node_id=node, pid=pid, port=ports.client,
                                    controller_port=ports.controller,
                                    data_dir=str(node_layout(self._data_dir, node).data_dir))
            state = ClusterState(cluster_id=plan.cluster_id, bootstrap=cluster_bootstrap(plan.ports),
                                 data_dir=str(self._data_dir),
                                 nodes=tuple(nodes[n] for n in sorted(nodes)))
            self._state = state
            if self._state_file is not None:
                write_cluster_state(self._state_file, state)

    def _terminate(self, node: int, pid: int, timeout: float) -> bool:
        proc = self._procs.get(node)
        reap: Callable[[], object] = proc.poll if proc is not None and proc.pid == pid else _nothing
        clean = terminate(pid, timeout=timeout, reap=reap)
        if proc is not None and proc.pid == pid:
            # /proc says a JVM is gone once its main thread has exited, while its shutdown
            # still runs in other threads: a node started again then raced its predecessor
            # (seen in a rolling restart). Our own child is waited for until it has exited.
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                clean = False
        self._on_progress(f"node {node} (pid {pid}) stopped{'' if clean else ' by SIGKILL'}")
        return clean

    def _check_alive(self, node: int, deadline: float, waiting_for: str) -> None:
        if self.pid(node) is None:
            proc = self._procs.get(node)
            code = proc.returncode if proc is not None else None
            raise BrokerError(f"Kafka node {node} exited with code {code} while {waiting_for}.\n"
                              f"{self._logs(node)}")
        if time.monotonic() > deadline:
            raise BrokerError(f"Kafka node {node} was not ready within the timeout while "
                              f"{waiting_for}.\n{self._logs(node)}")

    def _await_port(self, node: int, port: int, deadline: float) -> None:
        # Poll the TCP port first: librdkafka backs off up to 10 s after refused connections.
        while not accepts(port):
            self._check_alive(node, deadline, f"waiting for its port {port}")
            time.sleep(0.1)

    def _await_usable(self, deadline: float) -> None:
        for node in self._node_ids:
            self._check_alive(node, deadline, "waiting for the cluster")
        self._await_brokers(set(self._node_ids), deadline)
        self._on_progress(f"all {len(self._node_ids)} brokers registered; "
                          f"creating {_OFFSETS_TOPIC} (replication 3)")
        while _OFFSETS_TOPIC not in self._metadata(timeout=2.0).topics:
            for node in self._node_ids:
                self._check_alive(node, deadline, f"waiting for {_OFFSETS_TOPIC}")
            self._probe_coordinator()
            time.sleep(0.25)
        self._await_in_sync(None, deadline, f"{_OFFSETS_TOPIC} in sync", prefix=_OFFSETS_TOPIC)

    def _probe_coordinator(self) -> None:
        """Have a group coordinator looked up, which makes the brokers create the offsets topic.

        By a consumer's group (its coordinator query starts when it is made), not by an admin
        request: a coordinator admin request (DescribeConsumerGroups, as this probe was) that
        times out before its coordinator lookup ends leaves the lookup pending in librdkafka
        2.16.0, and when the lookup goes on (on a broker state change of that client) it frees
        the request's ``enq_once`` and uses it again: the whole process aborts with
        ``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed``
        (confluentinc/librdkafka#4605). Reproduced on a long-lived client and on a fresh one,
        and by this start with the old probe's 2 s cut to 0.1 s (it took 0.6 s on an idle
        machine); see docs/cluster-local.md.
        """
        consumer = KafkaConnection(self.bootstrap).consumer(
            **{"group.id": "tidings-cluster-probe", "log_level": 0})
        try:
            consumer.poll(1.0)  # serves the client while its group looks for the coordinator
        finally:
            consumer.close()

    def _await_brokers(self, wanted: set[int], deadline: float) -> None:
        while True:
            try:
                registered = set(self._metadata(timeout=2.0).brokers)
            except BrokerError:
                registered = set()
            if wanted <= registered:
                return
            for node in sorted(wanted - registered):
                self._check_alive(node, deadline, "waiting for it to register as a broker")
            time.sleep(0.25)

    def _await_in_sync(self, node: int | None, deadline: float, waiting_for: str,
                       prefix: str = "") -> None:
        def holds(partition: PartitionMetadata) -> bool:
            return node is None or node in partition.replicas

        while True:
            short = self._short_partitions(prefix, None, holds, include_internal=True)
            if not short:
                return
            for check in ([node] if node is not None else self._node_ids):
                self._check_alive(check, deadline, f"waiting for {waiting_for} "
                                                   f"(short: {', '.join(short[:3])})")
            time.sleep(0.25)

    def _await_answers(self, node: int, deadline: float) -> None:
        # A broker takes requests only once it has caught up with the metadata log and the
        # controller unfenced it; asking the node itself is what tells a restart that finished
        # from the registration a node SIGKILLed a moment ago still has.
        admin = KafkaConnection(self.node_bootstrap(node)).admin(log_level=0)
        while True:
            self._check_alive(node, deadline, "waiting for it to answer metadata requests")
            try:
                if node in admin.list_topics(timeout=2.0).brokers:
                    return
            except KafkaException:
                pass
            time.sleep(0.25)

    def _await_rejoined(self, node: int, deadline: float) -> None:
        self._await_answers(node, deadline)
        self._await_brokers({node}, deadline)
        self._await_in_sync(node, deadline, "its replicas to be back in sync")
        # Its metadata log must reach what the quorum had committed when it came back.
        target = self.quorum().high_watermark
        while True:
            state = self.quorum()
            if state.voters.get(node, -1) >= target:
                return
            self._check_alive(node, deadline, f"its metadata log to catch up to {target}")
            time.sleep(0.25)

    def _short_partitions(self, prefix: str, topics: Collection[str] | None,
                          holds: Callable[[PartitionMetadata], bool], *,
                          include_internal: bool = False) -> list[str]:
        views = self._views(timeout=5.0)
        if not views:
            return ["(no running broker answered a metadata request)"]
        short: list[str] = []
        for node, view in sorted(views.items()):
            chosen = select_partitions(view, prefix, topics, include_internal=include_internal)
            short += [f"{line} (as node {node} sees it)"
                      for line in short_partitions(chosen, topics, holds)]
        return short

    def _views(self, *, timeout: float) -> dict[int, ClusterMetadata]:
        """The metadata every running node answers with itself (a node that does not answer
        yet, e.g. one restarting, is left out: clients are not served by it either)."""
        views: dict[int, ClusterMetadata] = {}
        for node in self.running_nodes():
            admin = self._node_admins.get(node)
            if admin is None:
                admin = KafkaConnection(self.node_bootstrap(node)).admin(log_level=0)
                self._node_admins[node] = admin
            try:
                views[node] = admin.list_topics(timeout=timeout)
            except KafkaException:
                continue
        return views

    def _metadata(self, *, timeout: float) -> ClusterMetadata:
        try:
            return self._admin().list_topics(timeout=timeout)
        except KafkaException as exc:
            raise BrokerError(f"no broker of {self.bootstrap} answered: {exc}") from exc

    def _admin(self) -> AdminClient:
        if self._admin_client is None:
            # The local cluster speaks PLAINTEXT and nothing else: none of the environment's
            # Kafka properties (TIDINGS_KAFKA_*, which may be another cluster's) apply.
            self._admin_client = KafkaConnection(self.bootstrap).admin(log_level=0)
        return self._admin_client

    def _close_admin(self) -> None:
        self._admin_client = None
        self._node_admins.clear()

    def _logs(self, node: int) -> str:
        layout = node_layout(self._data_dir, node)
        return (
            f"--- {layout.server_log} ---\n{log_tail(layout.server_log)}\n"
            f"--- {layout.console_log} ---\n{log_tail(layout.console_log)}"
        )


def stop_recorded(state_file: Path, *, timeout: float = 30.0) -> ClusterState | None:
    """Stop every node the cluster state file records (another process started them).

    Returns:
        What was recorded, or None when nothing was.
    """
    recorded = read_cluster_state(state_file)
    if recorded is None:
        return None
    nodes = max(3, len(recorded.nodes))
    LocalCluster(Path(recorded.data_dir), nodes=nodes, state_file=state_file).stop(timeout=timeout)
    return recorded


def _nothing() -> None:
    return None


