"""SagaAlreadyStarted on the real broker: the aggregate refuses before it stores anything.

A command whose event would start a saga that this aggregate instance already started for
the command's correlation id, or whose two events would start one saga, is answered
``rejected`` (``SagaAlreadyStarted`` at the caller) and stores nothing: the events topic
is read back to prove it. The refusal survives a worker restart on its own RocksDB and a
worker that rebuilds the instance from the journal alone (a partition taken over).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.codec import avro
from tidings.core.records import EventEnvelope
from tidings.errors import SagaAlreadyStarted
from tidings.testing.topics import read_topic
from tests.integration.saga_start_apps import Note, Start, StartDeferred, StartTwice, build
from tests.workers import Workers, applied


@pytest.fixture
def saga_app(kafka_bootstrap: str, app_id: str) -> Iterator[App]:
    yield from applied(kafka_bootstrap, build(app_id))


@pytest.fixture
def ledger_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(kafka_bootstrap, app_id, tmp_path,
                      app_spec="tests.integration.saga_start_apps:app")
    yield started
    started.kill_all()


def stored(bootstrap: str, app: App) -> list[EventEnvelope]:
    return [avro.decode_as(r.value, EventEnvelope)
            for r in read_topic(bootstrap, f"{app.name}.aggregate.ledger.events")]


def send(app: App, bootstrap: str, aggregate_id: str, command: object, correlation_id: str) -> object:
    async def go() -> object:
        return await app.client(bootstrap).send("ledger", aggregate_id, command, 60,
                                                correlation_id=correlation_id)
    return asyncio.run(go())


def test_a_reused_correlation_id_is_refused_and_stores_nothing_even_after_restarts(
    kafka_bootstrap: str, saga_app: App, ledger_workers: Workers, tmp_path: Path
) -> None:
    worker = ledger_workers.start("w1")
    send(saga_app, kafka_bootstrap, "a", Start(), "t-1")
    send(saga_app, kafka_bootstrap, "a", Note(), "t-1")  # starts nothing: no refusal either
    before = stored(kafka_bootstrap, saga_app)
    assert [(e.aggregate_id, e.correlation_id, e.type) for e in before] == [
        ("a", "t-1", "Started"), ("a", "t-1", "Noted"),
    ]

    with pytest.raises(SagaAlreadyStarted, match=r"^SagaAlreadyStarted: .*'transfer'.*'t-1'"):
        send(saga_app, kafka_bootstrap, "a", Start(), "t-1")
    # Nothing stored: the events topic holds what it held.
    assert stored(kafka_bootstrap, saga_app) == before

    # The rule is per (saga, correlation id, instance): another id or instance starts.
    send(saga_app, kafka_bootstrap, "a", Start(), "t-2")
    send(saga_app, kafka_bootstrap, "b", Start(), "t-1")
    # A deferred event starts no saga, so it is never refused for one.
    send(saga_app, kafka_bootstrap, "a", StartDeferred(), "t-1")
    after_starts = stored(kafka_bootstrap, saga_app)
    assert len(after_starts) == 4

    # A restart on the same RocksDB: the started pairs were stored with the events.
    worker.kill()
    worker = ledger_workers.start("w1-again", data_dir=worker.data_dir)
    for aggregate_id, correlation_id in (("a", "t-1"), ("a", "t-2"), ("b", "t-1")):
        with pytest.raises(SagaAlreadyStarted):
            send(saga_app, kafka_bootstrap, aggregate_id, Start(), correlation_id)

    # A worker with no RocksDB (as one taking the partitions over): rebuilt from the journal.
    worker.kill()
    ledger_workers.start("w2", data_dir=tmp_path / "fresh")
    for aggregate_id, correlation_id in (("a", "t-1"), ("a", "t-2"), ("b", "t-1")):
        with pytest.raises(SagaAlreadyStarted):
            send(saga_app, kafka_bootstrap, aggregate_id, Start(), correlation_id)
    send(saga_app, kafka_bootstrap, "b", Start(), "t-3")
    final = stored(kafka_bootstrap, saga_app)
    assert final[:4] == after_starts
    assert [(e.aggregate_id, e.correlation_id, e.version) for e in final[4:]] == [("b", "t-3", 2)]


def test_a_command_whose_two_events_would_start_one_saga_is_refused(
    kafka_bootstrap: str, saga_app: App, ledger_workers: Workers
) -> None:
    ledger_workers.start()
    with pytest.raises(SagaAlreadyStarted, match="two events"):
        send(saga_app, kafka_bootstrap, "c", StartTwice(), "t-9")
    # Nothing of it was stored, and the pair was not remembered: one start still works.
    assert stored(kafka_bootstrap, saga_app) == []
    send(saga_app, kafka_bootstrap, "c", Start(), "t-9")
    assert [(e.aggregate_id, e.version) for e in stored(kafka_bootstrap, saga_app)] == [("c", 1)]
