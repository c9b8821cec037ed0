"""No record stops the schedules: hostile records from a plain Kafka producer on the schedule
aggregate's commands topic and on its journal, as any service (or kcat) could write them.

Each bad command is dead-lettered with a reason naming the problem; a schedule a raw producer
created that can never start a run (a workflow the app does not declare, an id too long for
its run ids) has each run dead-lettered with the reason and goes on; garbage on the journal is
skipped by the dispatcher; and a schedule created with a JSON envelope next to all of it runs
every second, on the same worker, which never stops.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any


from tidings import CatchUp
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter
from tidings.testing import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.schedule_apps import PARTITIONS
from tests.schedules_kit import SECOND, Scheduled, run, scheduled
from tests.kafka_clients import kafka

__all__ = ["scheduled"]  # the fixture, imported for pytest

JSON = [("content-type", b"application/json")]
EVERY_SECOND = {"kind": "every", "interval_us": 1_000_000}


def command(schedule_id: str, type_: str, payload: Any) -> bytes:
    return json.dumps({"command_id": uuid.uuid4().hex, "aggregate_id": schedule_id, "type": type_,
                       "payload": payload}).encode()


def create(workflow: str = "remind", rule: Any = None, **extra: Any) -> dict[str, Any]:
    return {"workflow": workflow, "input": "x", "rule": rule or EVERY_SECOND, "catch_up": "latest",
            "at": datetime.now(UTC).isoformat(), **extra}


def test_hostile_schedule_records_are_dead_lettered_and_the_schedules_go_on(scheduled: Scheduled) -> None:
    app = scheduled.app.name
    commands, journal = f"{app}.aggregate.schedule.commands", f"{app}.aggregate.schedule.events"
    workers = scheduled.workers()
    try:
        worker = workers.start("w1")
        run(scheduled.schedules.create("before", "remind", "before", SECOND, CatchUp.ALL))
        producer = kafka(scheduled.bootstrap).producer()
        long_id = "L" * 240  # a valid aggregate id, too long for its run ids (255 bytes)
        bad: list[tuple[str, bytes, list[tuple[str, bytes]], str]] = [
            ("g1", b"\x00\xffnot a record", [], "single-object"),
            ("zone", command("zone", "schedule.create", create(
                rule={"kind": "daily", "time": "09:00", "zone": "Mars/Olympus"})), JSON, "Mars/Olympus"),
            ("fast", command("fast", "schedule.create", create(rule={"kind": "every", "interval_us": 0})),
             JSON, "interval"),
            ("days", command("days", "schedule.create", create(
                rule={"kind": "weekly", "days": [], "time": "09:00", "zone": "Europe/Oslo"})), JSON, "day"),
            ("when", command("when", "schedule.fire", {"due": "soon", "now": "now"}), JSON, "due"),
            ("rep", command("rep", "schedule.report-start", {"dues": "x"}), JSON, "dues"),
            ("what", command("what", "schedule.explode", {}), JSON, "schedule.explode"),
        ]
        for key, value, headers, _ in bad:
            producer.produce(commands, value, key.encode(), partition_for(key, PARTITIONS), headers=headers)
        # Valid for the aggregate, but no run can ever start: dead-lettered run by run.
        producer.produce(commands, command("nowhere", "schedule.create", create(workflow="nowhere")),
                         b"nowhere", partition_for("nowhere", PARTITIONS), headers=JSON)
        producer.produce(commands, command(long_id, "schedule.create", create()), long_id.encode(),
                         partition_for(long_id, PARTITIONS), headers=JSON)
        # Garbage on the journal: the dispatcher (and the aggregate's recovery) skip it.
        for partition in range(PARTITIONS):
            producer.produce(journal, b"\xc3\x01garbage", b"junk/1", partition)
        # And a schedule created as kcat would: a JSON envelope, no Python client involved.
        producer.produce(commands, command("json", "schedule.create", create(input="from json")),
                         b"json", partition_for("json", PARTITIONS), headers=JSON)
        producer.flush(30)

        assert_eventually(lambda: len(scheduled.dues("json")) >= 3, timeout=60, message=worker.log_tail())
        letters = lambda: [avro.decode_as(r.value, DeadLetter) for r in read_topic(  # noqa: E731
            scheduled.bootstrap, f"{app}.deadletter")]
        assert_eventually(lambda: sum("cannot start" in d.reason for d in letters()) >= 4, timeout=60,
                          message=worker.log_tail())
        found = letters()
        for key, _, _, phrase in bad:
            reasons = [d.reason for d in found if d.key == key.encode()]
            assert reasons and phrase.lower() in reasons[0].lower(), (key, phrase, reasons)
        nowhere = [d.reason for d in found if "cannot start" in d.reason and "'nowhere'" in d.reason]
        too_long = [d.reason for d in found if "cannot start" in d.reason and long_id[:40] in d.reason]
        assert nowhere and too_long, [d.reason for d in found]
        # The schedule created before all this still runs every second, and the worker never stopped.
        before = len(scheduled.dues("before"))
        time.sleep(2.5)
        assert len(scheduled.dues("before")) > before
        assert worker.running and "stopping the worker" not in worker.log_tail(400)
    finally:
        workers.kill_all()
