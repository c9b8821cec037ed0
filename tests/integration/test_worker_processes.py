"""``tidings worker --processes N`` on a real broker: N group members with derived instance ids
and data dirs serving one App; one child dying takes the set down with status 70, the
supervisor dying takes the children with it, SIGTERM stops them all; bad arguments are usage
errors that start nothing."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from tidings import App
from tidings.cli.worker_processes import Child, command, plan
from tidings.shell.runtime.connection import KafkaConnection
from tidings.testing.eventually import assert_eventually
from tidings.testing.processes import WorkerProcess
from tests.integration.apps import Add
from tests.integration.test_worker_process import alive
from tests.workers import ROOT, test_app  # noqa: F401

STARTED = re.compile(r"process (\d+) \(pid (\d+)\) started: instance id (\S+), data dir (\S+)")


def members(bootstrap: str, group: str) -> dict[str, set[int]]:
    """group.instance.id -> partitions of the tally commands topic held."""
    admin = KafkaConnection.of(bootstrap).admin()
    (future,) = admin.describe_consumer_groups([group], request_timeout=10).values()
    try:
        description = future.result()
    except KafkaException:  # a coordinator not there yet, or moving: callers poll
        return {}
    return {m.group_instance_id: {tp.partition for tp in m.assignment.topic_partitions
                                  if tp.topic == f"{group}.aggregate.tally.commands"}
            for m in description.members}


def logged_children(supervisor: WorkerProcess) -> list[tuple[int, str, Path]]:
    """(pid, instance id, data dir) of each child the supervisor's log says it started."""
    return [(int(pid), iid, Path(d)) for _, pid, iid, d in sorted(STARTED.findall(supervisor.log_tail(400)))]


def children(supervisor: WorkerProcess, count: int) -> list[tuple[int, str, Path]]:
    """The children, once all ``count`` started."""
    def started() -> list[tuple[int, str, Path]]:
        found = logged_children(supervisor)
        assert len(found) == count, supervisor.log_tail()
        return found

    return assert_eventually(started, timeout=30)


@pytest.fixture
def supervisor(kafka_bootstrap: str, test_app: App, tmp_path: Path) -> Iterator[WorkerProcess]:
    process = WorkerProcess("tests.integration.apps:app", bootstrap=kafka_bootstrap,
                            data_dir=tmp_path / "data", log_path=tmp_path / "supervisor.log",
                            env={"TEST_APP_ID": test_app.name, "TIDINGS_INSTANCE_ID": "box"},
                            cwd=ROOT, args=("--processes", "2", "--stop-grace", "5"))
    yield process
    pids = [pid for pid, _, _ in logged_children(process)]
    process.kill()
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_two_processes_are_two_members_that_serve_the_app(
    kafka_bootstrap: str, test_app: App, supervisor: WorkerProcess, tmp_path: Path
) -> None:
    supervisor.start()
    kids = children(supervisor, 2)
    assert [iid for _, iid, _ in kids] == ["box-0", "box-1"]
    assert [d for _, _, d in kids] == [tmp_path / "data" / "process-0", tmp_path / "data" / "process-1"]

    def split() -> dict[str, set[int]]:
        held = members(kafka_bootstrap, test_app.name)
        assert set(held) == {"box-0", "box-1"} and all(held.values()), held
        return held

    held = assert_eventually(split, timeout=60, interval=0.5)
    assert set().union(*held.values()) == {0, 1, 2, 3}

    async def add_everywhere() -> list[int]:
        client = test_app.client(kafka_bootstrap)
        replies = await asyncio.gather(*(client.send("tally", f"t-{n}", Add(amount=n)) for n in range(16)))
        return [r.amount for r in replies]

    assert asyncio.run(add_everywhere()) == list(range(16))
    # Each child keeps its own RocksDB state.
    assert all((d / "stores").is_dir() for _, _, d in kids)

    os.kill(supervisor.pid or 0, signal.SIGTERM)
    assert supervisor.wait(30) == 0, supervisor.log_tail()
    assert not any(alive(pid) for pid, _, _ in kids)


def test_a_child_that_dies_stops_the_set_with_status_70(
    kafka_bootstrap: str, test_app: App, supervisor: WorkerProcess
) -> None:
    supervisor.start()
    (first, _, _), (second, _, _) = children(supervisor, 2)
    assert_eventually(lambda: len(members(kafka_bootstrap, test_app.name)) == 2, timeout=60, interval=0.5)

    os.kill(second, signal.SIGKILL)

    assert supervisor.wait(30) == 70, supervisor.log_tail()
    assert "process 1" in supervisor.log_tail() and "exiting 70" in supervisor.log_tail()
    assert not alive(first)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_children_die_with_a_sigkilled_supervisor(supervisor: WorkerProcess) -> None:
    supervisor.start()
    kids = children(supervisor, 2)

    os.kill(supervisor.pid or 0, signal.SIGKILL)  # the supervisor alone, not its group

    assert_eventually(lambda: not any(alive(pid) for pid, _, _ in kids), timeout=10,
                      message="a child outlived its supervisor")


@pytest.mark.parametrize("args, env, message", [
    (["--processes", "0"], {}, "not a number of processes: '0' (1..64)"),
    (["--processes", "-3"], {}, "not a number of processes: '-3'"),
    (["--processes", "two"], {}, "not a number of processes: 'two'"),
    (["--processes", "65"], {}, "(1..64)"),
    (["--processes", "1e3"], {}, "not a number of processes"),
    ([], {"TIDINGS_WORKER_PROCESSES": "many"}, "not a number of processes: 'many'"),
    (["--processes", "2", "--metrics-port", "65535"], {}, "choose a port at most 65534"),
])
def test_bad_process_counts_are_usage_errors_that_start_nothing(
    test_app: App, tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tidings.cli.main", "worker", "tests.integration.apps:app",
         "--data-dir", str(tmp_path / "data"), *args],
        env={**os.environ, "TEST_APP_ID": test_app.name, **env}, cwd=ROOT,
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "started" not in done.stderr and not (tmp_path / "data").exists()


def test_plan_derives_ids_dirs_and_ports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TIDINGS_INSTANCE_ID", raising=False)
    assert plan(2, instance_id=None, data_dir=tmp_path, metrics_port=None, hostname=lambda: "host") == [
        Child(0, "host-0", tmp_path / "process-0", None), Child(1, "host-1", tmp_path / "process-1", None)]
    monkeypatch.setenv("TIDINGS_INSTANCE_ID", "pod-3")
    assert [c.instance_id for c in plan(3, instance_id=None, data_dir=tmp_path, metrics_port=9000)] == [
        "pod-3-0", "pod-3-1", "pod-3-2"]
    assert [c.metrics_port for c in plan(3, instance_id="x", data_dir=tmp_path, metrics_port=9000)] == [
        9000, 9001, 9002]
    line = command(["worker", "m:app", "--processes", "2", "--instance-id", "x"],
                   Child(1, "x-1", tmp_path / "process-1", 9001))
    # The child's values come last, where argparse keeps them.
    assert line[-8:] == ["--processes", "1", "--instance-id", "x-1", "--data-dir",
                         str(tmp_path / "process-1"), "--metrics-port", "9001"]
