"""app.schedules' handle on the real broker: every call is a command to the schedule
aggregate, stored in its journal; a repeated create stores nothing, a conflicting or
deleted one is refused, and the state survives a worker restart (rebuilt from the journal)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tidings import App, CatchUp, ScheduleRule
from tidings.codec import avro
from tidings.core.records import EventEnvelope
from tidings.shell.kinds.schedule.handle import ScheduleHandle
from tidings.shell.runtime.topics import apply_topics
from tidings.testing.topics import read_topic
from tests.integration.schedule_apps import build
from tests.workers import Workers
from tests.kafka_clients import kafka

EVERY = ScheduleRule.every(timedelta(seconds=5))


@pytest.fixture
def scheduled(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[tuple[App, ScheduleHandle, Workers]]:
    app, schedules = build(app_id)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec="tests.integration.schedule_apps:app")
    yield app, schedules, workers
    workers.kill_all()
    for client in list(app._clients.values()):
        client.close()


def journal(bootstrap: str, app: App) -> list[tuple[str, int, str]]:
    return [(e.aggregate_id, e.version, e.type)
            for e in (avro.decode_as(r.value, EventEnvelope)
                      for r in read_topic(bootstrap, f"{app.name}.aggregate.schedule.events"))]


def test_the_handle_stores_schedules_in_the_aggregates_journal(
    kafka_bootstrap: str, scheduled: tuple[App, ScheduleHandle, Workers], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app, schedules, workers = scheduled
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    worker = workers.start("w1")

    async def first() -> None:
        await schedules.create_latest("ada-daily", "remind", "Drink water",
                                      ScheduleRule.daily("09:00", "Europe/Oslo"))
        # Same content: stores nothing and returns, so a program may create at every start.
        await schedules.create("ada-daily", "remind", "Drink water",
                               ScheduleRule.daily("09:00", "Europe/Oslo"), CatchUp.LATEST)
        with pytest.raises(ValueError, match="exists with other content"):
            await schedules.create_latest("ada-daily", "remind", "Eat", ScheduleRule.daily("09:00", "Europe/Oslo"))
        with pytest.raises(ValueError, match="not one app.schedules"):
            await schedules.create_latest("x", "backup", None, EVERY)
        await schedules.create("tick", "remind", {"n": 1}, EVERY, CatchUp.ALL)
        assert await schedules.pause("tick") is True
        assert await schedules.pause("tick") is False
        state = await schedules.state("tick")
        assert state.status == "paused" and state.catch_up is CatchUp.ALL and state.input == {"n": 1}
        assert await schedules.resume("tick") is True
        await schedules.change("tick", "remind", {"n": 2}, EVERY)
        assert await schedules.delete("tick") is True
        with pytest.raises(ValueError, match="deleted"):
            await schedules.create("tick", "remind", {"n": 2}, EVERY)
        with pytest.raises(ValueError, match="does not exist or was deleted"):
            await schedules.change("tick", "remind", {"n": 3}, EVERY)
        assert (await schedules.state("nobody")).status == "absent"

    asyncio.run(first())
    # The dispatcher may fire "tick" while the test runs: only the handle's own events count here.
    runs = ("schedule.runs-decided", "schedule.run-started")
    assert [(i, t) for i, _, t in sorted(journal(kafka_bootstrap, app)) if t not in runs] == [
        ("ada-daily", "schedule.created"),
        ("tick", "schedule.created"),
        ("tick", "schedule.paused"),
        ("tick", "schedule.resumed"),
        ("tick", "schedule.changed"),
        ("tick", "schedule.deleted"),
    ]

    # A worker with an empty data dir rebuilds every schedule from the journal alone.
    worker.kill()
    workers.start("w2")

    async def after_restart() -> None:
        state = await schedules.state("ada-daily")
        assert state.status == "active" and state.input == "Drink water"
        assert state.next_due() is not None
        assert (await schedules.state("tick")).status == "deleted"
        with pytest.raises(ValueError, match="deleted"):
            await schedules.create("tick", "remind", {"n": 2}, EVERY)

    asyncio.run(after_restart())
