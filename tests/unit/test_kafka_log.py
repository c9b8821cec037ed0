"""The throttle that makes a repeated Kafka connection error one line per broker per 30 s."""

from __future__ import annotations

import logging

import pytest

from tidings.errors import KafkaUnreachable
from tidings.shell.runtime.kafka_log import (
    ConnectionThrottle,
    _ProcessLog,
    broker_of,
    error_hook,
    hooks,
    reason_of,
)
from tidings.shell.runtime.reachability import wait_for_kafka

FAIL = ("127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused "
        "(after 0ms in state CONNECT)")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_first_failure_of_a_broker_is_reported_at_once() -> None:
    throttle = ConnectionThrottle(every_s=30)
    report = throttle.failed("b:9092", 0.0)
    assert report is not None and report.first and report.failures == 1


def test_repeated_failures_within_the_interval_say_nothing() -> None:
    throttle = ConnectionThrottle(every_s=30)
    throttle.failed("b:9092", 0.0)
    assert all(throttle.failed("b:9092", t / 20) is None for t in range(1, 29 * 20))


def test_a_failure_after_the_interval_is_a_reminder_counting_the_silent_ones() -> None:
    throttle = ConnectionThrottle(every_s=30)
    throttle.failed("b:9092", 0.0)
    for second in range(1, 30):
        assert throttle.failed("b:9092", float(second)) is None
    report = throttle.failed("b:9092", 30.0)
    assert report is not None and not report.first
    assert report.down_for == 30.0 and report.failures == 30
    assert throttle.failed("b:9092", 31.0) is None  # the next one is 30 s later again


def test_each_broker_has_its_own_interval() -> None:
    throttle = ConnectionThrottle(every_s=30)
    assert throttle.failed("a:9092", 0.0) is not None
    assert throttle.failed("b:9092", 1.0) is not None
    assert throttle.failed("a:9092", 2.0) is None
    assert throttle.down() == ["a:9092", "b:9092"]


def test_an_answer_after_an_outage_says_how_long_it_was_down_once() -> None:
    throttle = ConnectionThrottle(every_s=30)
    throttle.failed("b:9092", 10.0)
    assert throttle.answered("b:9092", 72.0) == 62.0
    assert throttle.answered("b:9092", 73.0) is None
    assert throttle.down() == []


def test_an_answer_from_a_broker_never_reported_down_says_nothing() -> None:
    assert ConnectionThrottle().answered("b:9092", 5.0) is None


def test_a_new_outage_after_an_answer_is_reported_at_once() -> None:
    throttle = ConnectionThrottle(every_s=30)
    throttle.failed("b:9092", 0.0)
    throttle.answered("b:9092", 5.0)
    report = throttle.failed("b:9092", 6.0)
    assert report is not None and report.first


@pytest.mark.parametrize(("text", "broker"), [
    (FAIL, "127.0.0.1:9092"),
    ("[thrd:127.0.0.1:9092/1]: 127.0.0.1:9092/1: Disconnected (after 769ms in state UP)", "127.0.0.1:9092"),
    ("GroupCoordinator: 127.0.0.1:9092: Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
     "127.0.0.1:9092"),
    ("[thrd:sasl_ssl://b-1.example.com:9096/2]: sasl_ssl://b-1.example.com:9096/2: Timed out 1 "
     "in-flight", "b-1.example.com:9096"),
    ("1/1 brokers are down", None),
])
def test_the_broker_a_librdkafka_message_is_about(text: str, broker: str | None) -> None:
    assert broker_of(text) == broker


def test_a_minute_of_failures_every_50_ms_is_two_lines_then_one_when_back(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    process = _ProcessLog(clock)
    caplog.set_level(logging.INFO, logger="tidings.kafka")
    for _ in range(60 * 20):
        process.failed("127.0.0.1:9092", "Connection refused")
        clock.now += 0.05
    process.answered("127.0.0.1:9092")
    process.answered("127.0.0.1:9092")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert "Kafka broker 127.0.0.1:9092 is unreachable (Connection refused)" in lines[0]
    assert "still unreachable after 30 s" in lines[1]
    assert "answers again (unreachable for 60 s)" in lines[2]


def test_the_reason_of_a_line_leaves_out_the_broker_and_the_timing() -> None:
    assert reason_of(FAIL) == "Connect to ipv4#127.0.0.1:9092 failed: Connection refused"
    assert reason_of("[thrd:b:9092/1]: b:9092/1: Timed out 1 in-flight") == "Timed out 1 in-flight"


def test_a_line_naming_no_broker_during_a_reported_outage_says_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    process = _ProcessLog(clock)
    caplog.set_level(logging.INFO, logger="tidings.kafka")
    process.failed("127.0.0.1:9092", "Connection refused")
    process.failed("(all brokers)", "GroupCoordinator: Timed out 0 in-flight")
    assert len(caplog.records) == 1


class FakeError:
    def __init__(self, code: int, name: str, text: str, fatal: bool = False) -> None:
        self._code, self._name, self._text, self._fatal = code, name, text, fatal

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._text

    def fatal(self) -> bool:
        return self._fatal


def test_a_repeated_error_that_is_no_connection_error_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tidings.kafka")
    for _ in range(50):
        error_hook(FakeError(-190, "_UNKNOWN_PARTITION_TEST", "Unknown partition"))
    assert [r.getMessage() for r in caplog.records] == ["Kafka: Unknown partition (librdkafka retries it)"]


def test_a_fatal_error_is_always_said(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tidings.kafka")
    for _ in range(2):
        error_hook(FakeError(-150, "_FATAL", "Static consumer fenced"))
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.ERROR]


def test_hooks_route_the_log_and_the_callbacks_of_every_role() -> None:
    for role in ("consumer", "producer", "admin"):
        config = hooks(role)
        assert callable(getattr(config["logger"], "log"))
        assert callable(config["error_cb"]) and callable(config["stats_cb"])


def test_waiting_for_kafka_tells_each_server_of_each_failed_attempt_then_that_it_answers() -> None:
    clock = FakeClock()
    attempts: list[float] = []
    failed: list[tuple[str, str]] = []
    answered: list[str] = []

    def probe(bootstrap: str, timeout_s: float) -> None:
        attempts.append(clock.now)
        if len(attempts) <= 3:
            raise KafkaUnreachable(bootstrap, timeout_s, "Connection refused")

    def sleep(seconds: float) -> None:
        clock.now += seconds

    waited = wait_for_kafka("a:9092,b:9092", probe_timeout_s=5, clock=clock, sleep=sleep, probe=probe,
                            failed=lambda server, detail: failed.append((server, detail)),
                            answered=answered.append)
    assert waited == 15.0
    assert attempts == [1000.0, 1005.0, 1010.0, 1015.0]  # a refused attempt is paced to the timeout
    assert failed == [("a:9092", "Connection refused"), ("b:9092", "Connection refused")] * 3
    assert answered == ["a:9092", "b:9092"]
