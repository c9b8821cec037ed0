"""Forged dispatcher records on the schedule commands topic, written by a raw producer as any
client allowed to create schedules could write them (ACLs cannot keep it off that topic).

- A fire that claims a future ``now`` is refused with the reason (dead-lettered) and runs
  nothing early; a create stamped in the future is anchored at the worker's instant.
- Start reports without the run's start token, with a guessed one, or for a due time no fire
  decided are refused with the reason and clear nothing: the run a SIGKILL left pending
  (decided, not started) is started by the next worker and runs once.
- Next to all of it the genuine schedules run every second on the same worker.

Each test runs twice (the ``broker`` fixture): on the shared plaintext broker, and on the
secured node over SASL_SSL with SCRAM (issue 18's must-show), where every client here, the
workers and the raw producer, connects with the admin's settings from the environment.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tidings import CatchUp, ScheduleRule
from tidings.broker import LocalBroker
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter, EventEnvelope
from tidings.core.schedule import format_due
from tidings.testing import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.schedule_apps import PARTITIONS
from tests.kafka_clients import kafka
from tests.secured_broker import delete_app_topics
from tests.schedules_kit import SECOND, Scheduled, assert_one_run_each, decided, run, scheduled_on

JSON = [("content-type", b"application/json")]
HOURLY = ScheduleRule.every(timedelta(hours=1))


@pytest.fixture(params=["plaintext", "sasl_ssl"])
def broker(request: pytest.FixtureRequest, app_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The bootstrap of the broker these tests forge records on: the shared plaintext one, or
    the secured node over SASL_SSL with SCRAM (its admin's settings in ``TIDINGS_KAFKA_CONFIG``,
    so the workers, the handles and the raw forger all connect as a managed cluster needs)."""
    if request.param == "plaintext":
        yield request.getfixturevalue("kafka_bootstrap")
        return
    secured: LocalBroker = request.getfixturevalue("secured_broker")
    settings = secured.client_settings("admin", "scram")
    monkeypatch.setenv("TIDINGS_KAFKA_CONFIG", str(settings.properties))
    yield settings.bootstrap
    delete_app_topics(secured, app_id)


@pytest.fixture
def forged(broker: str, app_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scheduled]:
    yield from scheduled_on(broker, app_id, tmp_path, monkeypatch)


def forge(scheduled: Scheduled, schedule_id: str, type_: str, payload: dict[str, Any]) -> str:
    """Write one schedule command as a raw producer would (JSON envelope); return its id."""
    command_id = uuid.uuid4().hex
    value = json.dumps({"command_id": command_id, "aggregate_id": schedule_id, "type": type_,
                        "payload": payload}).encode()
    producer = kafka(scheduled.bootstrap).producer()
    producer.produce(f"{scheduled.app.name}.aggregate.schedule.commands", value, schedule_id.encode(),
                     partition_for(schedule_id, PARTITIONS), headers=JSON)
    assert producer.flush(30) == 0
    return command_id


def letters(scheduled: Scheduled, key: str) -> list[str]:
    return [letter.reason for letter in (avro.decode_as(r.value, DeadLetter) for r in read_topic(
        scheduled.bootstrap, f"{scheduled.app.name}.deadletter")) if letter.key == key.encode()]


def events_of(scheduled: Scheduled, command_ids: set[str]) -> list[EventEnvelope]:
    events = (avro.decode_as(r.value, EventEnvelope) for r in read_topic(
        scheduled.bootstrap, f"{scheduled.app.name}.aggregate.schedule.events"))
    return [event for event in events if event.command_id in command_ids]


def test_a_fire_claiming_a_future_now_runs_nothing_early_and_is_refused_with_the_reason(
    forged: Scheduled,
) -> None:
    workers = forged.workers()
    try:
        worker = workers.start("w1")
        run(forged.schedules.create("tick", "remind", "tick", SECOND, CatchUp.ALL))
        run(forged.schedules.create("later", "remind", "later", HOURLY, CatchUp.ALL))
        before = run(forged.schedules.state("later"))
        due = before.next_due()
        assert due is not None and due > datetime.now(UTC) + timedelta(minutes=50)
        # The dispatcher's fire, claiming the hour has come; and a create stamped a day ahead.
        fire = forge(forged, "later", "schedule.fire", {"due": due.isoformat(), "now": due.isoformat()})
        ahead = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        forge(forged, "future", "schedule.create", {"workflow": "remind", "input": "f",
                                                    "rule": HOURLY.to_data(), "at": ahead})

        assert_eventually(lambda: letters(forged, "later"), timeout=60, message=worker.log_tail())
        (reason,) = letters(forged, "later")
        assert "ahead of this worker's clock" in reason and format_due(due) in reason, reason
        after = run(forged.schedules.state("later"))
        assert after.pending == () and after.handled_through == before.handled_through
        assert after.next_due() == due
        assert events_of(forged, {fire}) == [] and decided(forged, "later") == []
        assert [d for d in forged.dues("later")] == []
        # The future create is stored at the worker's instant: its first due time is an hour
        # from now, not a day and an hour.
        future = run(forged.schedules.state("future"))
        assert future.anchor is not None and future.anchor <= datetime.now(UTC) + timedelta(seconds=1)
        # The genuine schedule runs on, on the same worker.
        count = len(forged.dues("tick"))
        time.sleep(2.5)
        assert len(forged.dues("tick")) > count
        assert worker.running and "stopping the worker" not in worker.log_tail(400)
    finally:
        workers.kill_all()


def test_forged_start_reports_clear_nothing_and_the_pending_run_starts_after_a_sigkill(
    forged: Scheduled,
) -> None:
    workers = forged.workers(SCHEDULE_CRASH="before-start")
    try:
        worker = workers.start("w1")
        killed_pid = worker.pid
        run(forged.schedules.create("tick", "remind", "x", SECOND, CatchUp.ALL))
        # The worker dies after the runs were decided, before any start was sent: pending.
        assert_eventually(lambda: (forged.calls / "crashed-before-start").exists(), timeout=60,
                          message=workers.log_tail())
        assert_eventually(lambda: not worker.running, timeout=10)
        pending = [due for runs in decided(forged, "tick") for due in runs]
        assert pending and forged.dues("tick") == []
        dues = [d.isoformat() for d in pending]
        never = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        ids = {
            forge(forged, "tick", "schedule.report-start", {"dues": dues}),
            forge(forged, "tick", "schedule.report-start", {"dues": dues, "tokens": ["0" * 32]}),
            forge(forged, "tick", "schedule.report-start", {"dues": [never], "tokens": ["0" * 32]}),
        }
        workers.start("w2", data_dir=worker.data_dir)
        assert_eventually(lambda: len(letters(forged, "tick")) >= 3, timeout=90, message=workers.log_tail())
        reasons = letters(forged, "tick")
        assert sum("lacks its start token" in r for r in reasons) == 2, reasons
        assert sum("no fire decided" in r for r in reasons) == 1, reasons
        # Nothing the forgers sent was stored, and the runs they tried to clear ran.
        assert events_of(forged, ids) == []
        assert_eventually(lambda: set(pending) <= set(forged.dues("tick")), timeout=60,
                          message=workers.log_tail())
        crashed_at = datetime.now(UTC)
        assert_eventually(lambda: len([d for d in forged.dues("tick") if d > crashed_at]) >= 2, timeout=60)
        assert_one_run_each(forged, "tick", killed_pid)
    finally:
        workers.kill_all()
