"""Fixtures and helpers for tests that run saga workers (``tests.integration.saga_apps``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import App
from tidings.codec import avro
from tidings.core.records import CommandEnvelope, EventEnvelope
from tidings.core.saga_records import SagaJournalEntry
from tidings.testing.topics import read_topic

from .integration.saga_apps import build
from .workers import Workers, applied


@pytest.fixture
def saga_app(kafka_bootstrap: str, app_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """The saga test App named for this test, its topics applied; handles use the broker."""
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    yield from applied(kafka_bootstrap, build(app_id))


@pytest.fixture
def saga_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[Workers]:
    """Start saga worker processes; every one is killed at the end of the test."""
    started = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.saga_apps:app")
    yield started
    started.kill_all()


def commands_sent(bootstrap: str, app: App, aggregate: str, command_id: str) -> list[CommandEnvelope]:
    """Every copy of command ``command_id`` on ``aggregate``'s commands topic."""
    found = []
    for record in read_topic(bootstrap, f"{app.name}.aggregate.{aggregate}.commands"):
        command = avro.decode_as(record.value, CommandEnvelope)
        if command.command_id == command_id:
            found.append(command)
    return found


def stored_events(bootstrap: str, app: App, aggregate: str, correlation_id: str) -> list[EventEnvelope]:
    """The events ``aggregate`` stored under ``correlation_id``."""
    events = [avro.decode_as(r.value, EventEnvelope) for r in read_topic(bootstrap, f"{app.name}.aggregate.{aggregate}.events")]
    return [event for event in events if event.correlation_id == correlation_id]


def journal_topic(bootstrap: str, app: App, saga_id: str) -> list[SagaJournalEntry]:
    """The records of ``saga_id`` on the transfer saga's journal topic, in offset order."""
    records = [avro.decode_as(r.value, SagaJournalEntry) for r in read_topic(bootstrap, f"{app.name}.saga.transfer.journal")]
    return [record for record in records if record.saga_id == saga_id]
