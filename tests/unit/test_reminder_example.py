"""Ada's daily reminder (examples/reminder/app.py) declares what its docstring says: no broker.

The run through a worker and the dispatcher is tested with the dispatcher.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, time
from pathlib import Path
from typing import Any

import pytest

from examples.reminder import app as example
from tidings import Attempt, CatchUp, ScheduledRun, ScheduleRule
from tidings.core.schedule import next_due, run_id
from tidings.core.schedule.aggregate import SCHEDULE_AGGREGATE, CreateSchedule
from tidings.shell.kinds.workflow.handle import workflow_named


def test_the_app_declares_the_reminder_workflow_and_the_schedules_that_start_it() -> None:
    handle = workflow_named(example.app, "reminder")
    assert handle is example.reminder
    assert handle.definition.input_type == ScheduledRun[str]
    assert example.schedules.workflows == ("reminder",)
    assert SCHEDULE_AGGREGATE in {h.name for h in example.app.aggregates}


def test_ada_daily_is_daily_at_nine_oslo_time() -> None:
    assert example.ADA_SCHEDULE == "ada-daily"
    assert example.ADA_RULE == ScheduleRule.daily(time(9, 0), "Europe/Oslo")
    # The seed's run id for 2026-11-15 (winter: 08:00 UTC).
    due = next_due(example.ADA_RULE, datetime(2026, 11, 15, tzinfo=UTC), anchor=datetime(2026, 1, 1, tzinfo=UTC))
    assert due is not None and run_id(example.ADA_SCHEDULE, due) == "ada-daily@2026-11-15T08:00:00.0000000Z"


def test_create_schedules_creates_ada_daily_with_catch_up_latest(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, Any]] = []

    class Aggregate:
        """Stands in for the schedule aggregate's handle: records what the handle sends."""

        async def send(self, schedule_id: str, command: Any) -> Any:
            sent.append((schedule_id, command))
            return object()  # stored: create asks nothing more

    monkeypatch.setattr(example, "schedules", replace(example.schedules, aggregate=Aggregate()))
    asyncio.run(example.create_schedules())
    ((schedule_id, command),) = sent
    assert schedule_id == "ada-daily" and isinstance(command, CreateSchedule)
    assert command.workflow == "reminder" and command.input == "Drink water"
    assert command.rule == example.ADA_RULE.to_data() and command.catch_up is CatchUp.LATEST


def test_the_activity_writes_one_line_per_run_whatever_the_attempts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "reminders.txt"
    monkeypatch.setenv("REMINDER_LOG", str(log))
    run = ScheduledRun("ada-daily", datetime(2026, 7, 1, 7, 0, tzinfo=UTC), "Drink water")
    key = "reminder/ada-daily@2026-07-01T07:00:00.0000000Z/1"
    first = example.send_reminder(Attempt(idempotency_key=key, number=1), run)
    again = example.send_reminder(Attempt(idempotency_key=key, number=2), run)
    assert first == again == "09:00 Europe/Oslo: Drink water"  # summer: 07:00 UTC
    assert log.read_text().splitlines() == [f"{key} 09:00 Europe/Oslo: Drink water"]
