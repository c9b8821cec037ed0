"""A worker applying its topics while a broker of the cluster dies: passing errors are asked
again, what Kafka keeps refusing ends the worker with status 70 (never exit 1, never a wait
forever)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidings.errors import BrokerError
from tidings.shell.runtime import worker as worker_module
from tidings.shell.runtime.worker import Worker


class _Stopped(Exception):
    pass


def _failure(code: int) -> BrokerError:
    try:
        raise KafkaException(KafkaError(code, "from the broker"))
    except KafkaException as exc:
        error = BrokerError(f"applying topics on 127.0.0.1:1 failed: {exc}")
        error.__cause__ = exc
        return error


def _worker(monkeypatch: pytest.MonkeyPatch, outcomes: list[BrokerError | None],
            clock: list[float]) -> tuple[Any, list[str]]:
    stops: list[str] = []

    def apply(*_: Any, **__: Any) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    def stop(what: str, error: BaseException | None = None) -> None:
        stops.append(f"{what}: {error}")
        raise _Stopped

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr(worker_module, "wait_for_kafka", lambda connection: 0.0)
    monkeypatch.setattr(worker_module, "probe_kafka", lambda connection, timeout: None)
    monkeypatch.setattr(worker_module, "apply_topics", apply)
    monkeypatch.setattr(worker_module, "stop_worker", stop)
    monkeypatch.setattr(worker_module.time, "sleep", sleep)
    monkeypatch.setattr(worker_module.time, "monotonic", lambda: clock[0])
    fake = SimpleNamespace(readiness=SimpleNamespace(phase=lambda text: None), bootstrap="127.0.0.1:1",
                           connection=object(), app=SimpleNamespace(topic_specs=lambda: []))
    return fake, stops


def test_a_broker_handle_destroyed_while_applying_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes: list[BrokerError | None] = [_failure(KafkaError._DESTROY_BROKER),
                                          _failure(KafkaError.REQUEST_TIMED_OUT), None]
    fake, stops = _worker(monkeypatch, outcomes, [0.0])
    Worker._apply_when_kafka_answers(fake, True)
    assert outcomes == [] and stops == []


def test_a_refusal_ends_the_worker_with_70_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes: list[BrokerError | None] = [_failure(KafkaError.TOPIC_AUTHORIZATION_FAILED), None]
    fake, stops = _worker(monkeypatch, outcomes, [0.0])
    with pytest.raises(_Stopped):
        Worker._apply_when_kafka_answers(fake, True)
    assert len(stops) == 1 and "applying the App's topics" in stops[0] and outcomes == [None]


def test_passing_errors_that_never_pass_end_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes: list[BrokerError | None] = [_failure(KafkaError._DESTROY_BROKER)] * 200
    fake, stops = _worker(monkeypatch, outcomes, [0.0])
    with pytest.raises(_Stopped):
        Worker._apply_when_kafka_answers(fake, True)
    tries = 200 - len(outcomes)
    assert len(stops) == 1
    # Asked again for APPLY_RETRY_S (one try each APPLY_PAUSE_S), then stopped.
    assert tries == int(worker_module.APPLY_RETRY_S / worker_module.APPLY_PAUSE_S) + 2
