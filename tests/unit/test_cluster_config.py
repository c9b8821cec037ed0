"""The local cluster before any JVM runs: per-node config, ports, plan and state files, the
DescribeQuorum bytes, the metadata questions, and the CLI's refusals."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import ClusterMetadata, PartitionMetadata, TopicMetadata

from tidings.broker import LocalCluster, render_cluster_properties, render_server_properties
from tidings.broker._cluster_config import ClusterPlan, NodePorts, node_layout
from tidings.broker._cluster_metadata import count_leaders, select_partitions, short_partitions
from tidings.broker._cluster_nodes import free_node_ports
from tidings.broker._cluster_state import (
    ClusterState,
    NodeState,
    is_cluster_state,
    read_cluster_state,
    write_cluster_state,
)
from tidings.broker._quorum import decode_response, encode_request
from tidings.broker._state import BrokerState, read_state, write_state
from tidings.cli.main import main
from tidings.errors import BrokerError

PORTS = {1: NodePorts(9101, 9201), 2: NodePorts(9102, 9202), 3: NodePorts(9103, 9203)}


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def _node(node: int) -> dict[str, str]:
    return _props(render_cluster_properties(node_id=node, ports=PORTS,
                                            log_dirs=Path(f"/data/node-{node}/kraft-logs")))


def test_every_node_names_the_same_three_voters_and_its_own_ports() -> None:
    for node in (1, 2, 3):
        props = _node(node)
        assert props["node.id"] == str(node)
        assert props["process.roles"] == "broker,controller"
        assert props["controller.quorum.voters"] == (
            "1@127.0.0.1:9201,2@127.0.0.1:9202,3@127.0.0.1:9203")
        assert props["listeners"] == (
            f"PLAINTEXT://127.0.0.1:910{node},CONTROLLER://127.0.0.1:920{node}")
        assert props["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:910{node}"
        assert props["log.dirs"] == f"/data/node-{node}/kraft-logs"


def test_replication_defaults_let_the_cluster_lose_one_node() -> None:
    props = _node(2)
    assert {k: props[k] for k in (
        "default.replication.factor", "min.insync.replicas", "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
        "unclean.leader.election.enable",
    )} == {
        "default.replication.factor": "3", "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2", "unclean.leader.election.enable": "false",
    }
    # A killed node is fenced after 6 s without a heartbeat (Kafka's default: 9 s).
    assert (props["broker.session.timeout.ms"], props["broker.heartbeat.interval.ms"]) == (
        "6000", "1000")


def test_topic_creation_behaves_as_on_the_single_node() -> None:
    single = _props(render_server_properties(port=1, controller_port=2, log_dirs=Path("/x")))
    cluster = _node(1)
    for key in ("auto.create.topics.enable", "num.partitions", "offsets.topic.num.partitions",
                "group.initial.rebalance.delay.ms"):
        assert cluster[key] == single[key], key


def test_a_node_outside_the_plan_or_a_two_node_cluster_is_refused() -> None:
    with pytest.raises(ValueError, match="node 4"):
        render_cluster_properties(node_id=4, ports=PORTS, log_dirs=Path("/x"))
    with pytest.raises(ValueError, match="at least 3"):
        render_cluster_properties(node_id=1, ports={1: PORTS[1], 2: PORTS[2]}, log_dirs=Path("/x"))
    with pytest.raises(ValueError, match="at least 3"):
        LocalCluster(Path("/tmp/unused"), nodes=2)


def test_every_node_gets_two_ports_of_its_own() -> None:
    ports = free_node_ports([1, 2, 3])
    assert sorted(ports) == [1, 2, 3]
    every = [p for n in ports.values() for p in (n.client, n.controller)]
    assert len(set(every)) == 6 and all(p > 0 for p in every)


def test_the_plan_keeps_the_cluster_id_and_ports(tmp_path: Path) -> None:
    path = tmp_path / "cluster.json"
    plan = ClusterPlan("AbCdEfGhIjKlMnOpQrStUv", PORTS)
    path.write_text(plan.to_json())
    assert ClusterPlan.read(path) == plan
    assert ClusterPlan.read(tmp_path / "absent.json") is None
    path.write_text('{"nodes": 3}')
    with pytest.raises(BrokerError, match="not a tidings cluster plan"):
        ClusterPlan.read(path)


def test_a_cluster_not_started_has_no_address_and_no_node_4(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    assert cluster.node_ids == (1, 2, 3)
    assert cluster.pid(1) is None
    with pytest.raises(BrokerError, match="call start"):
        _ = cluster.bootstrap
    with pytest.raises(BrokerError, match="node 4 is not one"):
        cluster.pid(4)
    with pytest.raises(BrokerError, match="not running"):
        cluster.kill(1)
    assert node_layout(tmp_path, 2).data_dir == tmp_path / "node-2"


def _cluster_state(pid: int) -> ClusterState:
    return ClusterState(
        cluster_id="AbCdEfGhIjKlMnOpQrStUv", bootstrap="127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103",
        data_dir="/data", nodes=tuple(NodeState(n, pid, p.client, p.controller, f"/data/node-{n}")
                                      for n, p in PORTS.items()),
    )


def test_the_state_file_records_every_node_and_says_it_is_a_cluster(tmp_path: Path) -> None:
    cluster_file, single_file = tmp_path / "cluster.json", tmp_path / "single.json"
    write_cluster_state(cluster_file, _cluster_state(4242))
    write_state(single_file, BrokerState(pid=1, bootstrap="127.0.0.1:1", data_dir="/d"))
    assert read_cluster_state(cluster_file) == _cluster_state(4242)
    assert read_cluster_state(cluster_file).node(3).controller_port == 9203  # type: ignore[union-attr]
    assert (is_cluster_state(cluster_file), is_cluster_state(single_file),
            is_cluster_state(tmp_path / "none.json")) == (True, False, False)
    with pytest.raises(BrokerError):
        read_state(cluster_file)
    with pytest.raises(BrokerError):
        read_cluster_state(single_file)


def test_describe_quorum_request_is_api_55_version_0_for_the_metadata_partition() -> None:
    frame = encode_request(7)
    (length,) = struct.unpack(">i", frame[:4])
    assert length == len(frame) - 4
    assert struct.unpack(">hhi", frame[4:12]) == (55, 0, 7)
    assert b"__cluster_metadata" in frame


def _response(correlation: int, *, error: int = 0, leader: int = 2, epoch: int = 5) -> bytes:
    topic = b"__cluster_metadata"
    voters = b"".join(struct.pack(">iq", node, 100 + node) + b"\x00" for node in (1, 2, 3))
    return (struct.pack(">i", correlation) + b"\x00" + struct.pack(">h", 0)
            + b"\x02" + bytes([len(topic) + 1]) + topic
            + b"\x02" + struct.pack(">ihiiq", 0, error, leader, epoch, 103)
            + b"\x04" + voters + b"\x01" + b"\x00" + b"\x00" + b"\x00")


def test_describe_quorum_answer_gives_leader_epoch_and_voters() -> None:
    state = decode_response(_response(7), 7)
    assert (state.leader_id, state.leader_epoch, state.high_watermark) == (2, 5, 103)
    assert state.voters == {1: 101, 2: 102, 3: 103}


def test_describe_quorum_errors_and_foreign_answers_are_refused() -> None:
    with pytest.raises(BrokerError, match="error code 6"):
        decode_response(_response(7, error=6), 7)
    with pytest.raises(BrokerError, match="does not match"):
        decode_response(_response(8), 7)
    with pytest.raises(BrokerError, match="truncated"):
        decode_response(_response(7)[:20], 7)


def _metadata() -> ClusterMetadata:
    metadata = ClusterMetadata()

    def topic(name: str, *parts: tuple[int, list[int], list[int]]) -> None:
        meta = TopicMetadata()
        meta.topic = name
        for number, (leader, replicas, isrs) in enumerate(parts):
            partition = PartitionMetadata()
            partition.id, partition.leader, partition.replicas, partition.isrs = (
                number, leader, replicas, isrs)
            meta.partitions[number] = partition
        metadata.topics[name] = meta

    topic("app.events", (1, [1, 2, 3], [1, 2, 3]), (1, [1, 3, 2], [1, 3]), (2, [2, 3, 1], [2, 3, 1]))
    topic("app.journal", (-1, [3, 1, 2], [3]))
    topic("other.events", (3, [3, 1, 2], [3, 1, 2]))
    topic("__consumer_offsets", (3, [3, 1, 2], [3, 1, 2]))
    return metadata


def test_leader_counts_cover_every_node_and_only_the_chosen_topics() -> None:
    metadata = _metadata()
    assert count_leaders(select_partitions(metadata, "app."), (1, 2, 3)) == {1: 2, 2: 1, 3: 0}
    assert count_leaders(select_partitions(metadata), (1, 2, 3)) == {1: 2, 2: 1, 3: 1}
    assert count_leaders(select_partitions(metadata, "__"), (1, 2, 3)) == {1: 0, 2: 0, 3: 1}
    assert count_leaders(select_partitions(metadata, topics=["other.events"]), (1, 2, 3)) == {
        1: 0, 2: 0, 3: 1}


def test_short_partitions_name_each_partition_without_its_full_isr_and_absent_topics() -> None:
    chosen = select_partitions(_metadata(), "app.")
    assert short_partitions(chosen) == [
        "app.events[1] leader=1 isr=[1, 3] of [1, 2, 3]",
        "app.journal[0] leader=-1 isr=[3] of [1, 2, 3]",
    ]
    assert short_partitions(chosen, holds=lambda p: p.leader == 2) == []
    assert short_partitions(select_partitions(_metadata(), topics=["gone"]), ["gone"]) == [
        "gone (absent)"]
    assert short_partitions({"new": []}, ["new"]) == ["new (no partitions yet)"]


def _tidings(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def test_cli_refuses_a_two_node_cluster_and_a_port_for_a_cluster(tmp_path: Path) -> None:
    state = ("--state-file", str(tmp_path / "broker.json"))
    assert main(["broker", "start", "--nodes", "2", *state]) == 1
    assert main(["broker", "start", "--nodes", "3", "--port", "9092", *state]) == 1
    assert not (tmp_path / "broker.json").exists()


def test_cli_status_of_a_cluster_whose_nodes_exited_lists_each_and_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exited = subprocess.Popen(["true"])
    exited.wait()  # reaped: its PID runs nothing now
    write_cluster_state(tmp_path / "broker.json", _cluster_state(exited.pid))
    code = main(["broker", "status", "--state-file", str(tmp_path / "broker.json")])
    out = capsys.readouterr().out
    assert code == 3
    assert "0 of 3 nodes" in out
    assert out.count("not running (has exited)") == 3
    assert "export" not in out


def test_cli_start_help_says_what_nodes_does(tmp_path: Path) -> None:
    done = _tidings("broker", "start", "--help", cwd=tmp_path)
    assert done.returncode == 0
    assert "--nodes" in done.stdout and "cluster" in done.stdout
