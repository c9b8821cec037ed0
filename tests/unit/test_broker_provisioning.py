"""Pom, Maven progress parsing, broker config and state files: everything before a JVM runs."""

from __future__ import annotations

import os
import string
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tidings.broker import (
    BrokerState,
    LocalBroker,
    cache_home,
    kafka_libs_dir,
    render_log4j2_yaml,
    render_server_properties,
)
from tidings.broker._config import new_cluster_id, previous_ports
from tidings.broker._process import is_alive, is_kafka, log_tail
from tidings.broker._provisioning import kafka_artifacts, parse_downloaded_jar, render_pom
from tidings.broker._state import read_state, write_state
from tidings.broker._tools import require_tool
from tidings.errors import BrokerError

_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _dependencies(pom: str) -> dict[str, ET.Element]:
    root = ET.fromstring(pom)
    return {
        f"{d.findtext('m:groupId', namespaces=_NS)}:{d.findtext('m:artifactId', namespaces=_NS)}": d
        for d in root.iterfind("m:dependencies/m:dependency", _NS)
    }


def test_pom_declares_kafka_and_the_slf4j2_log4j_binding() -> None:
    deps = _dependencies(render_pom(kafka_artifacts("4.1.1")))

    versions = {name: d.findtext("m:version", namespaces=_NS) for name, d in deps.items()}
    assert versions == {
        "org.apache.kafka:kafka_2.13": "4.1.1",
        "org.slf4j:slf4j-api": "2.0.17",
        "org.apache.logging.log4j:log4j-slf4j2-impl": "2.24.3",
        "org.apache.logging.log4j:log4j-core": "2.24.3",
    }


def test_pom_keeps_kafkas_old_slf4j_api_off_the_classpath() -> None:
    kafka = _dependencies(render_pom(kafka_artifacts()))["org.apache.kafka:kafka_2.13"]

    excluded = [
        (e.findtext("m:groupId", namespaces=_NS), e.findtext("m:artifactId", namespaces=_NS))
        for e in kafka.iterfind("m:exclusions/m:exclusion", _NS)
    ]
    assert excluded == [("org.slf4j", "slf4j-api")]


def test_pom_is_pom_packaged_so_maven_builds_nothing() -> None:
    root = ET.fromstring(render_pom(kafka_artifacts()))

    assert root.findtext("m:packaging", namespaces=_NS) == "pom"


@pytest.mark.parametrize(
    ("line", "jar"),
    [
        (
            "[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/org/apache/"
            "kafka/kafka-clients/4.1.1/kafka-clients-4.1.1.jar (12 MB at 5.1 MB/s)",
            "kafka-clients-4.1.1.jar",
        ),
        (
            "Downloaded from mirror: https://m.example/x/zstd-jni-1.5.6-10.jar (7 MB at 1 MB/s)",
            "zstd-jni-1.5.6-10.jar",
        ),
        (
            "[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/org/apache/"
            "kafka/kafka-clients/4.1.1/kafka-clients-4.1.1.pom (1.9 kB at 40 kB/s)",
            None,
        ),
        (
            "[INFO] Downloading from central: https://repo.maven.apache.org/maven2/org/apache/"
            "kafka/kafka-clients/4.1.1/kafka-clients-4.1.1.jar",
            None,
        ),
        ("[INFO] BUILD SUCCESS", None),
        ("", None),
    ],
)
def test_only_finished_jar_downloads_count_as_progress(line: str, jar: str | None) -> None:
    assert parse_downloaded_jar(line) == jar


def test_cache_lives_under_tidings_home_when_set(tmp_path: Path) -> None:
    assert cache_home({"TIDINGS_HOME": str(tmp_path)}) == tmp_path
    assert kafka_libs_dir(tmp_path, version="4.1.1") == tmp_path / "kafka" / "4.1.1" / "libs"


def test_cache_defaults_to_the_user_cache_directory() -> None:
    assert cache_home({}) == Path.home() / ".cache" / "tidings"


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return dict(pairs)


def test_server_properties_describe_a_single_node_kraft_broker_on_loopback() -> None:
    props = _properties(
        render_server_properties(port=9092, controller_port=9093, log_dirs=Path("/d/logs"))
    )

    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["log.dirs"] == "/d/logs"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "true"


def test_a_restart_finds_the_ports_of_the_previous_run(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text(
        render_server_properties(port=40001, controller_port=40002, log_dirs=tmp_path)
    )

    assert previous_ports(properties) == (40001, 40002)
    assert previous_ports(tmp_path / "missing.properties") is None


def test_log4j_config_writes_warnings_to_the_given_file() -> None:
    text = render_log4j2_yaml(Path('/data/with "quotes"/server.log'))

    assert 'fileName: "/data/with \\"quotes\\"/server.log"' in text
    assert "level: WARN" in text


def test_cluster_ids_look_like_kafka_uuids() -> None:
    ids = {new_cluster_id() for _ in range(200)}

    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    alphabet = set(string.ascii_letters + string.digits + "-_")
    assert all(set(i) <= alphabet for i in ids)


def test_state_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "broker.json"
    state = BrokerState(pid=123, bootstrap="127.0.0.1:9092", data_dir="/d")

    write_state(path, state)

    assert read_state(path) == state
    assert read_state(tmp_path / "missing.json") is None


def test_a_corrupt_state_file_is_reported_not_guessed(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    path.write_text("{not json")

    with pytest.raises(BrokerError, match="not a tidings broker state file"):
        read_state(path)


def test_status_without_a_state_file_says_not_running(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path / "data", state_file=tmp_path / "broker.json")

    assert broker.status().running is False
    assert broker.stop() is False


def test_a_recorded_pid_that_is_not_kafka_counts_as_not_running(tmp_path: Path) -> None:
    state_file = tmp_path / "broker.json"
    # Our own PID is alive but is no Kafka JVM, as after PID reuse: never signal it.
    write_state(state_file, BrokerState(pid=os.getpid(), bootstrap="127.0.0.1:1", data_dir="/d"))
    broker = LocalBroker(tmp_path / "data", state_file=state_file)

    assert is_alive(os.getpid()) and not is_kafka(os.getpid())
    assert broker.status().running is False
    assert broker.stop() is False
    assert not state_file.exists()


def test_a_missing_program_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")

    with pytest.raises(BrokerError, match="openjdk-17-jre-headless"):
        require_tool("java")
    with pytest.raises(BrokerError, match="apt-get install -y maven"):
        require_tool("mvn")


def test_log_tail_keeps_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {n}\n" for n in range(100)))

    assert log_tail(log, lines=2) == "line 98\nline 99"
    assert "does not exist" in log_tail(tmp_path / "nope.log")


def test_a_process_whose_main_thread_ended_is_alive_until_its_last_thread_ends() -> None:
    # A JVM's main thread returns while its shutdown hooks still run on other threads:
    # /proc then shows the group leader as a zombie, and the ports and data directory are
    # still held. A node started again on that directory must wait for the last thread.
    code = ("import ctypes, threading, time; threading.Thread(target=time.sleep, args=(1.5,)).start(); "
            "ctypes.CDLL(None).pthread_exit(None)")
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the main thread never ended"
            time.sleep(0.02)
        assert is_alive(child.pid)  # the leader is a zombie, its other thread runs
        assert child.wait(timeout=10) == 0
        assert not is_alive(child.pid)
    finally:
        child.kill()
        child.wait()
