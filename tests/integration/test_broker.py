"""The session broker carries records, and ``tidings broker start|status|stop`` manage one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message
from confluent_kafka.admin import NewTopic

from tidings.broker._process import is_alive, is_kafka, terminate
from tidings.testing.eventually import assert_eventually
from tests.kafka_clients import kafka


def test_record_produced_to_a_new_topic_is_consumed_back(kafka_bootstrap: str, app_id: str) -> None:
    topic = f"{app_id}.roundtrip"
    admin = kafka(kafka_bootstrap).admin()
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)

    producer = kafka(kafka_bootstrap).producer()
    producer.produce(topic, key=b"order-1", value=b'{"placed": true}')
    assert producer.flush(30) == 0

    consumer = kafka(kafka_bootstrap).consumer(
        **{
            "group.id": app_id,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    try:
        message = assert_eventually(
            lambda: _poll_value(consumer), timeout=30, message=f"a record on {topic}"
        )
    finally:
        consumer.close()
    assert message is not None
    assert (message.key(), message.value()) == (b"order-1", b'{"placed": true}')


def _poll_value(consumer: Consumer) -> Message | None:
    message = consumer.poll(0.5)
    if message is None:
        return None
    assert message.error() is None, message.error()
    return message


@pytest.fixture
def cli_paths(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """Yield (state file, data dir) for a CLI-started broker; kill it by PID if a test fails."""
    state_file = tmp_path / "state" / "broker.json"
    yield state_file, tmp_path / "data"
    if state_file.exists():
        pid = int(json.loads(state_file.read_text())["pid"])
        if is_kafka(pid):
            terminate(pid, timeout=10)


def _tidings(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidings.cli.main", *args],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if k != "TIDINGS_BOOTSTRAP"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_cli_starts_reports_and_stops_a_broker(
    cli_paths: tuple[Path, Path], tmp_path: Path
) -> None:
    state_file, data_dir = cli_paths
    files = ("--state-file", str(state_file))

    started = _tidings("broker", "start", *files, "--data-dir", str(data_dir), cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    exports = [line for line in started.stdout.splitlines() if line.startswith("export ")]
    assert len(exports) == 1, started.stdout
    bootstrap = exports[0].removeprefix("export TIDINGS_BOOTSTRAP=")
    pid = json.loads(state_file.read_text())["pid"]
    assert is_kafka(pid)
    metadata = kafka(bootstrap).admin().list_topics(timeout=10)
    assert len(metadata.brokers) == 1

    running = _tidings("broker", "status", *files, cwd=tmp_path)
    assert running.returncode == 0
    assert f"running at {bootstrap}" in running.stdout

    stopped = _tidings("broker", "stop", *files, cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert not is_alive(pid)
    assert not state_file.exists()

    after = _tidings("broker", "status", *files, cwd=tmp_path)
    assert (after.returncode, after.stdout.strip()) == (3, "not running")
