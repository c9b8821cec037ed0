"""The worker's deafness detector (shell/runtime/liveness.py), its statistics reader, the fatal-error
test the consumers share (shell/runtime/kafka.py) and the ``--stall-timeout`` option: no broker."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import pytest
from confluent_kafka import KafkaError

from tidings.cli import worker as worker_cli
from tidings.shell.runtime.kafka import fatal_error, is_fatal, is_transient
from tidings.shell.runtime.liveness import Liveness, LivenessWatch, read_statistics


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def detector(report_after_s: float = 10.0) -> tuple[Liveness, FakeClock]:
    clock = FakeClock()
    return Liveness(clock=clock, report_after_s=report_after_s), clock


def test_work_waiting_with_no_progress_while_brokers_answer_is_a_stall_from_when_it_began() -> None:
    liveness, clock = detector()
    liveness.observe(waiting=5, brokers_up=True)
    assert liveness.health().healthy
    clock.now += 9.9
    assert liveness.health().healthy  # a batch in flight, not yet a stall
    clock.now += 20
    health = liveness.health()
    assert not health.healthy
    assert health.stalled_since == 1000.0
    assert health.stalled_for == pytest.approx(29.9)
    assert health.waiting == 5


def test_progress_restarts_the_clock() -> None:
    liveness, clock = detector()
    liveness.observe(waiting=5, brokers_up=True)
    liveness.health()
    clock.now += 30
    liveness.progressed()
    clock.now += 5
    assert liveness.health().healthy
    clock.now += 10
    assert liveness.health().stalled_for == pytest.approx(15)


def test_a_broker_outage_is_not_deafness_and_the_clock_starts_again_when_they_answer() -> None:
    liveness, clock = detector()
    liveness.observe(waiting=5, brokers_up=False)
    liveness.health()
    clock.now += 600
    assert liveness.health().healthy
    liveness.observe(waiting=5, brokers_up=True)
    assert liveness.health().healthy
    clock.now += 11
    assert liveness.health().stalled_for == pytest.approx(11)


def test_nothing_waiting_is_healthy_however_long_nothing_arrives() -> None:
    liveness, clock = detector()
    liveness.observe(waiting=0, brokers_up=True)
    liveness.health()
    clock.now += 3600
    assert liveness.health(held=0).healthy


def test_records_the_intake_holds_are_work_waiting_too() -> None:
    liveness, clock = detector()
    liveness.observe(waiting=0, brokers_up=True)
    liveness.health(held=3)
    clock.now += 11
    health = liveness.health(held=3)
    assert not health.healthy and health.held == 3


def test_the_watch_reports_the_stall_and_exits_70_past_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    liveness, clock = detector()
    reported: list[float] = []
    exits: list[str] = []

    def stop(what: str, error: BaseException | None = None) -> None:
        exits.append(what)

    monkeypatch.setattr("tidings.shell.runtime.liveness.stop_worker", stop)
    watch = LivenessWatch(liveness, held=lambda: 0, report=reported.append, timeout_s=120)
    liveness.observe(waiting=7, brokers_up=True)
    watch.check()
    clock.now += 119
    assert not watch.check().healthy and exits == []
    clock.now += 1
    watch.check()
    assert len(exits) == 1 and "deaf: no progress for 120 s with 7 records waiting" in exits[0]
    assert reported[0] == 0.0 and reported[-1] == pytest.approx(120)


def test_the_watch_without_a_timeout_only_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    liveness, clock = detector()
    monkeypatch.setattr("tidings.shell.runtime.liveness.stop_worker", lambda *a: pytest.fail("exited"))
    reported: list[float] = []
    watch = LivenessWatch(liveness, held=lambda: 1, report=reported.append, timeout_s=0)
    watch.check()
    clock.now += 10_000
    watch.check()
    assert reported[-1] == pytest.approx(10_000)


def stats(partitions: dict[str, dict[str, Any]], brokers: dict[str, dict[str, Any]]) -> str:
    return json.dumps({"topics": {"t": {"partitions": partitions}}, "brokers": brokers})


UP = {"127.0.0.1:9092/1": {"state": "UP", "nodeid": 1},
      "127.0.0.1:9092/bootstrap": {"state": "DOWN", "nodeid": -1}}


def test_statistics_count_fetched_and_unfetched_records_of_assigned_partitions_only() -> None:
    read = read_statistics(stats({
        "0": {"desired": True, "fetch_state": "active", "fetchq_cnt": 3, "next_offset": 10,
              "ls_offset": 12, "consumer_lag": 5},
        "1": {"desired": False, "fetchq_cnt": 50, "next_offset": 0, "ls_offset": 90},
        "2": {"desired": True, "fetch_state": "none", "fetchq_cnt": 0, "next_offset": -1001,
              "committed_offset": 4, "ls_offset": 6},
        "-1": {"desired": True, "fetchq_cnt": 9},
    }, UP))
    assert read is not None
    assert read.waiting == 3 + 2 + 2
    assert read.lags == [("t", 0, 5)]
    assert read.brokers_up


def test_a_commit_marker_after_the_last_record_is_not_work_waiting() -> None:
    # Exactly once: the committed offset stops before the transaction's marker, the fetch
    # position does not.
    read = read_statistics(stats({"0": {"desired": True, "fetchq_cnt": 0, "next_offset": 11,
                                        "committed_offset": 10, "ls_offset": 11}}, UP))
    assert read is not None and read.waiting == 0


def test_a_consumer_out_of_its_group_has_work_waiting_one_in_steady_state_none() -> None:
    def group(join_state: str) -> str:
        return json.dumps({"topics": {}, "brokers": UP, "cgrp": {"state": "up", "join_state": join_state}})

    rejoining, steady = read_statistics(group("wait-join")), read_statistics(group("steady"))
    assert rejoining is not None and rejoining.waiting == 1
    assert steady is not None and steady.waiting == 0


def test_a_reader_that_only_assigns_is_never_out_of_its_group() -> None:
    # librdkafka reports an assign-only consumer's group "init" for ever: read as waiting,
    # every idle outcome watcher and reply reader was renewed each 10 s (issue 20's p99).
    idle = json.dumps({"topics": {"t": {"partitions": {"0": {
        "desired": True, "fetch_state": "active", "fetchq_cnt": 0, "next_offset": 1,
        "ls_offset": 1, "committed_offset": -1001}}}},
        "brokers": UP, "cgrp": {"state": "up", "join_state": "init"}})
    assigned, subscribed = read_statistics(idle, subscribed=False), read_statistics(idle)
    assert assigned is not None and assigned.waiting == 0
    assert subscribed is not None and subscribed.waiting == 1


def test_only_a_known_broker_that_is_up_counts_as_answering() -> None:
    down = {"127.0.0.1:9092/1": {"state": "TRY_CONNECT", "nodeid": 1},
            "GroupCoordinator": {"state": "UP", "nodeid": -1}}
    read = read_statistics(stats({}, down))
    assert read is not None and not read.brokers_up


@pytest.mark.parametrize("garbage", ["", "not json", "[]", '{"topics": {"t": {"partitions": {"x": {}}}}}'])
def test_unreadable_statistics_are_ignored(garbage: str) -> None:
    assert read_statistics(garbage) is None


def test_a_fenced_static_member_is_fatal_although_its_message_error_says_not() -> None:
    # confluent-kafka builds a consumed message's error with fatal=0, code _FATAL.
    fenced = KafkaError(KafkaError._FATAL, "Fatal error: Broker: Static consumer fenced by other "
                        "consumer with same group.instance.id: OffsetCommit failed")
    assert not fenced.fatal()
    assert is_fatal(fenced) and not is_transient(fenced)
    message = str(fatal_error(fenced, "consuming the inputs"))
    assert "\n" not in message and "--instance-id" in message
    assert is_fatal(KafkaError(KafkaError.FENCED_INSTANCE_ID, "x", fatal=True))


@pytest.mark.parametrize("code", [KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT,
                                  KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_COORDINATOR,
                                  KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                  KafkaError.NOT_LEADER_FOR_PARTITION,
                                  # a cluster's node killed: issue 18's cluster failure tests
                                  KafkaError._DESTROY_BROKER,
                                  KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND])
def test_a_broker_restarts_errors_are_transient(code: int) -> None:
    error = KafkaError(code, "x")
    assert is_transient(error) and not is_fatal(error)


def parse_worker(argv: list[str], monkeypatch: pytest.MonkeyPatch, env: str | None = None) -> argparse.Namespace:
    if env is None:
        monkeypatch.delenv("TIDINGS_STALL_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("TIDINGS_STALL_TIMEOUT", env)
    parser = argparse.ArgumentParser()
    worker_cli.register(parser.add_subparsers())
    return parser.parse_args(["worker", "m:app", *argv])


def test_the_stall_timeout_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_worker([], monkeypatch).stall_timeout is None
    assert parse_worker(["--stall-timeout", "300"], monkeypatch).stall_timeout == 300
    assert parse_worker([], monkeypatch, env="0").stall_timeout == 0
    assert parse_worker(["--stall-timeout", "30"], monkeypatch, env="90").stall_timeout == 30


@pytest.mark.parametrize("bad", ["-1", "0.5", "nan", "inf", "1e9", "two minutes", "0x10", " "])
def test_a_garbage_stall_timeout_is_a_one_line_usage_error(bad: str) -> None:
    for argv, env in ((["--stall-timeout", bad], {}), ([], {"TIDINGS_STALL_TIMEOUT": bad})):
        done = subprocess.run([sys.executable, "-m", "tidings.cli.main", "worker", "m:app", *argv],
                              capture_output=True, text=True, env={**_env(), **env}, timeout=60)
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert "stall" in last and "Traceback" not in done.stderr


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "TIDINGS_STALL_TIMEOUT"}
