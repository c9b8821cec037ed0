"""The local three-node cluster: replicated topics, a SIGKILLed partition leader and a SIGKILLed
active controller survived by an idempotent acks=all producer, a node restarted on its data, and
``tidings broker start --nodes 3 | status | stop``.

The CLI and failed-start tests run first, before the session's ``kafka_cluster`` starts, so two
clusters never run at once on the 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message
from confluent_kafka.admin import ConfigResource, NewTopic

from tidings.broker import LocalCluster
from tidings.broker._process import is_alive, is_kafka, terminate
from tidings.errors import BrokerError
from tidings.testing.eventually import assert_eventually
from tests.kafka_clients import kafka
from tests.kafka_cluster import restore


def _tidings(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidings.cli.main", *args], cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "TIDINGS_BOOTSTRAP"},
        capture_output=True, text=True, timeout=600, check=False,
    )


@pytest.fixture
def cli_state(tmp_path: Path) -> Iterator[Path]:
    """Yield a state file for a CLI-started cluster; kill its nodes by PID if a test fails."""
    state_file = tmp_path / "state" / "broker.json"
    yield state_file
    if state_file.exists():
        for node in json.loads(state_file.read_text()).get("nodes", []):
            if is_kafka(int(node["pid"])):
                terminate(int(node["pid"]), timeout=10)


def test_cli_starts_reports_and_stops_a_three_node_cluster(cli_state: Path, tmp_path: Path) -> None:
    files = ("--state-file", str(cli_state))

    started = _tidings("broker", "start", "--nodes", "3", *files, cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    print(started.stdout, started.stderr, sep="\n")
    exports = [line for line in started.stdout.splitlines() if line.startswith("export ")]
    assert len(exports) == 1, started.stdout
    bootstrap = exports[0].removeprefix("export TIDINGS_BOOTSTRAP=")
    assert len(bootstrap.split(",")) == 3
    nodes = json.loads(cli_state.read_text())["nodes"]
    assert [n["node_id"] for n in nodes] == [1, 2, 3]
    assert all(is_kafka(n["pid"]) for n in nodes)
    assert sorted(f"127.0.0.1:{n['port']}" for n in nodes) == sorted(bootstrap.split(","))
    assert len(kafka(bootstrap).admin().list_topics(timeout=10).brokers) == 3

    running = _tidings("broker", "status", *files, cwd=tmp_path)
    assert running.returncode == 0, running.stdout
    assert f"running: a 3-node cluster at {bootstrap}" in running.stdout
    assert running.stdout.count(": running, pid") == 3

    terminate(nodes[1]["pid"], timeout=30)  # one node down: status says which
    degraded = _tidings("broker", "status", *files, cwd=tmp_path)
    assert degraded.returncode == 3, degraded.stdout
    assert "2 of 3 nodes" in degraded.stdout
    assert f"node 2: not running (has exited), pid {nodes[1]['pid']}" in degraded.stdout

    stopped = _tidings("broker", "stop", *files, cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert "Stopped the cluster" in stopped.stdout
    assert not any(is_alive(n["pid"]) for n in nodes)
    assert not cli_state.exists()
    after = _tidings("broker", "status", *files, cwd=tmp_path)
    assert (after.returncode, after.stdout.strip()) == (3, "not running")


def test_a_node_that_dies_during_start_fails_the_start_with_its_log_tail(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, heap="1k")  # too small a heap: every JVM exits at once
    with pytest.raises(BrokerError) as caught:
        cluster.start()
    message = str(caught.value)
    assert "Kafka node 1 exited" in message
    assert "console.log ---" in message and "heap" in message.lower()
    assert cluster.running_nodes() == []


def test_topics_get_three_replicas_and_min_insync_two_by_default(
    kafka_cluster: LocalCluster, app_id: str
) -> None:
    topic = f"{app_id}.defaults"
    admin = kafka(kafka_cluster.bootstrap).admin()
    admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(30)  # broker defaults
    kafka_cluster.wait_in_sync(topics=[topic], timeout=30)
    # Any broker may answer; one that has not applied the new topic yet knows no partitions.
    replicas = assert_eventually(lambda: [sorted(p.replicas) for p in admin.list_topics(
        topic, timeout=10).topics[topic].partitions.values()] or None, timeout=10)
    assert replicas == [[1, 2, 3]] * 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(30)
    assert config["min.insync.replicas"].value == "2"
    offsets = admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
    assert {len(p.replicas) for p in offsets.partitions.values()} == {3}
    assert sum(kafka_cluster.leader_counts(topic).values()) == 3


class _Producing:
    """An idempotent acks=all producer sending numbered records as fast as a test needs, noting
    when each was acknowledged, so the longest silence (the outage) can be measured."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.sent = 0
        self.acked: list[float] = []
        self.errors: list[KafkaError] = []
        self._producer = kafka(bootstrap).producer(**{
            "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        })
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Producing:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert self._producer.flush(120) == 0, "records left unacknowledged"

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        if error is None:
            self.acked.append(time.monotonic())
        else:
            self.errors.append(error)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._producer.produce(self.topic, key=str(self.sent % 12).encode(),
                                   value=str(self.sent).encode(), on_delivery=self._delivered)
            self.sent += 1
            self._producer.poll(0.01)

    def longest_gap(self, since: float) -> float:
        """Seconds of the longest silence between two acknowledgements after ``since``."""
        times = [since, *(t for t in self.acked if t >= since)]
        return max(b - a for a, b in zip(times, times[1:], strict=False))

    def wait_acked_after(self, moment: float, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while sum(1 for t in self.acked if t > moment) < count:
            assert time.monotonic() < deadline, f"no {count} acknowledgements {timeout} s after"
            time.sleep(0.1)


def _read_all(bootstrap: str, topic: str, group: str, expected: int) -> list[int]:
    consumer = kafka(bootstrap).consumer(**{"group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[int] = []
    by_partition: dict[int, list[int]] = {}
    deadline = time.monotonic() + 60
    try:
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            value = int(message.value() or b"")
            values.append(value)
            by_partition.setdefault(message.partition() or 0, []).append(value)
        # A little longer: a duplicate after the last expected record must show too.
        end = time.monotonic() + 2
        while time.monotonic() < end:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(int(message.value() or b""))
    finally:
        consumer.close()
    for partition, seen in by_partition.items():
        assert seen == sorted(seen), f"partition {partition} out of order"
    return values


def _survives(cluster: LocalCluster, app_id: str, name: str,
              failure: Callable[[], int]) -> tuple[int, float]:
    """Produce to a fresh RF-3 topic, run ``failure`` (it returns the node it took down), keep
    producing until 20 records were acknowledged after it, and read everything back once."""
    topic = f"{app_id}.{name}"
    admin = kafka(cluster.bootstrap).admin()
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=3)])[topic].result(30)
    cluster.wait_in_sync(topics=[topic], timeout=30)
    with _Producing(cluster.bootstrap, topic) as producing:
        producing.wait_acked_after(0.0, 200, timeout=30)
        began = time.monotonic()
        victim = failure()
        producing.wait_acked_after(time.monotonic(), 20, timeout=60)
        gap = producing.longest_gap(began)
    assert producing.errors == []
    values = _read_all(cluster.bootstrap, topic, f"{app_id}-{name}-reader", producing.sent)
    duplicates = [v for v, n in Counter(values).items() if n > 1]
    assert duplicates == [] and sorted(values) == list(range(producing.sent)), (
        f"{producing.sent} sent, {len(set(values))} read, duplicates {duplicates[:5]}")
    return victim, gap


def test_killing_the_busiest_leader_pauses_an_idempotent_producer_for_seconds_only(
    kafka_cluster: LocalCluster, app_id: str
) -> None:
    def kill_busiest() -> int:
        victim = kafka_cluster.busiest_leader(f"{app_id}.")
        kafka_cluster.kill(victim)
        return victim

    try:
        victim, gap = _survives(kafka_cluster, app_id, "leader-kill", kill_busiest)
        print(f"SIGKILL of the busiest leader (node {victim}): longest gap between two "
              f"acknowledgements {gap:.2f} s")
        assert gap < 20, f"the producer stalled {gap:.1f} s"
        assert kafka_cluster.leader_counts(f"{app_id}.")[victim] == 0
        began = time.monotonic()
        kafka_cluster.start_node(victim, timeout=120)
        in_sync = kafka_cluster.wait_in_sync(f"{app_id}.", timeout=60)
        print(f"node {victim} restarted and every ISR full again after "
              f"{time.monotonic() - began:.1f} s (wait_in_sync {in_sync:.1f} s)")
        metadata = kafka(kafka_cluster.bootstrap).admin().list_topics(f"{app_id}.leader-kill")
        for partition in metadata.topics[f"{app_id}.leader-kill"].partitions.values():
            assert sorted(partition.isrs) == [1, 2, 3]
    finally:
        restore(kafka_cluster)


def test_killing_the_active_controller_elects_another_and_the_cluster_keeps_serving(
    kafka_cluster: LocalCluster, app_id: str
) -> None:
    elected: dict[str, float] = {}

    def kill_controller() -> int:
        victim = kafka_cluster.active_controller()
        epoch = kafka_cluster.quorum().leader_epoch
        killed = time.monotonic()
        kafka_cluster.kill(victim)
        successor = kafka_cluster.active_controller(timeout=30)
        elected["s"] = time.monotonic() - killed
        assert successor != victim
        assert kafka_cluster.quorum().leader_epoch > epoch
        return victim

    try:
        victim, gap = _survives(kafka_cluster, app_id, "controller-kill", kill_controller)
        print(f"SIGKILL of the active controller (node {victim}, also a broker): new controller "
              f"after {elected['s']:.2f} s; longest producer gap {gap:.2f} s")
        assert gap < 20, f"the producer stalled {gap:.1f} s"
        # A topic can be created without the dead node: the new controller does the work.
        topic = f"{app_id}.after-controller-kill"
        admin = kafka(kafka_cluster.bootstrap).admin()
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=2)])[
            topic].result(30)
        kafka_cluster.wait_in_sync(topics=[topic], timeout=30)
        kafka_cluster.start_node(victim, timeout=120)
        assert kafka_cluster.quorum().voters[victim] >= 0
        kafka_cluster.wait_in_sync(f"{app_id}.", timeout=60)
    finally:
        restore(kafka_cluster)
