"""docs/schedules.md stays true: its nightly-backup and weekly-invoice modules declare, run and
create what the page says, and the reminder block declares the example's workflow.

Each ```python block that starts with ``# nightly-backup`` or ``# weekly-invoice`` is run as a
module of its own; its workflow runs in the in-memory runtime with the ``ScheduledRun`` a
schedule gives it, and ``create_schedules`` sends its commands to a stand-in aggregate.
"""

from __future__ import annotations

import asyncio
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from tidings import CatchUp, ScheduledRun, ScheduleRule, Weekday
from tidings.core.schedule import next_due, run_id
from tidings.core.schedule.aggregate import CreateSchedule
from tidings.testing.workflows import WorkflowTestRuntime

PAGE = Path(__file__).resolve().parents[2] / "docs" / "schedules.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```", re.DOTALL)


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def block(first_line: str) -> str:
    (code,) = [m["code"] for m in BLOCK.finditer(PAGE.read_text()) if m["code"].startswith(first_line)]
    return code


@pytest.fixture
def load() -> Iterator[Any]:
    loaded: list[str] = []

    def run(first_line: str) -> types.ModuleType:
        # A registered module: pydantic resolves the annotations of its models through it.
        module = types.ModuleType(f"docs_schedules_{len(loaded)}")
        sys.modules[module.__name__] = module
        loaded.append(module.__name__)
        exec(compile(block(first_line), str(PAGE), "exec"), module.__dict__)  # noqa: S102
        return module

    yield run
    for name in loaded:
        del sys.modules[name]


def created(module: types.ModuleType, *args: Any) -> list[tuple[str, CreateSchedule]]:
    """Run the module's ``create_schedules`` against a stand-in aggregate; return what it sent."""
    sent: list[tuple[str, CreateSchedule]] = []

    class Aggregate:
        async def send(self, schedule_id: str, command: CreateSchedule) -> Any:
            sent.append((schedule_id, command))
            return object()  # stored

    module.schedules = replace(module.schedules, aggregate=Aggregate())
    asyncio.run(module.create_schedules(*args))
    return sent


def test_the_reminder_block_declares_the_examples_workflow(load: Any) -> None:
    module = load("from datetime import time")
    assert module.schedules.workflows == ("reminder",)
    assert module.reminder.definition.input_type == ScheduledRun[str]


def test_the_nightly_backup_runs_and_is_created_daily_at_0230_oslo_catch_up_latest(load: Any) -> None:
    module = load("# nightly-backup")
    ((schedule_id, command),) = created(module)
    assert schedule_id == "backup-orders" and command.workflow == "nightly-backup"
    assert command.input == {"database": "orders", "bucket": "s3://acme-backups"}
    assert command.catch_up is CatchUp.LATEST
    rule = ScheduleRule.from_data(command.rule)
    assert rule == ScheduleRule.daily("02:30", "Europe/Oslo")
    # What the page says of the two clock changes of 2026.
    assert next_due(rule, z("2026-03-28T12:00:00Z"), anchor=z("2026-01-01T00:00:00Z")) == z("2026-03-29T01:00:00Z")
    assert next_due(rule, z("2026-10-24T12:00:00Z"), anchor=z("2026-01-01T00:00:00Z")) == z("2026-10-25T00:30:00Z")
    assert next_due(rule, z("2026-10-25T00:30:00Z"), anchor=z("2026-01-01T00:00:00Z")) == z("2026-10-26T01:30:00Z")

    runtime = WorkflowTestRuntime()
    handle = runtime.register(module.nightly_backup.definition)
    due = z("2026-03-29T01:00:00Z")
    handle.start(run_id("backup-orders", due), ScheduledRun("backup-orders", due, command.input))
    runtime.run_until_idle()
    assert handle.value(run_id("backup-orders", due)) == "s3://acme-backups/orders-2026-03-29.dump"


def test_the_weekly_invoice_invoices_the_week_its_due_time_ends(load: Any) -> None:
    module = load("# weekly-invoice")
    sent = created(module, ["acme", "globex"])
    assert [schedule_id for schedule_id, _ in sent] == ["invoice-acme", "invoice-globex"]
    for _, command in sent:
        assert command.catch_up is CatchUp.ALL
        assert ScheduleRule.from_data(command.rule) == ScheduleRule.weekly([Weekday.MONDAY], "06:00", "Europe/Oslo")

    runtime = WorkflowTestRuntime()
    handle = runtime.register(module.weekly_invoice.definition)
    # Two missed Mondays caught up at once: each run invoices its own week.
    dues = [z("2026-11-16T05:00:00Z"), z("2026-11-23T05:00:00Z")]
    for due in dues:
        handle.start(run_id("invoice-acme", due), ScheduledRun("invoice-acme", due, sent[0][1].input))
    runtime.run_until_idle()
    first, second = (handle.value(run_id("invoice-acme", due)) for due in dues)
    assert (first.number, first.first_day, first.last_day) == ("acme-2026-W46", date(2026, 11, 9), date(2026, 11, 15))
    assert (second.number, second.first_day) == ("acme-2026-W47", date(2026, 11, 16))
    assert first.amount_minor == 70_000 and first.currency == "NOK"
    assert run_id("invoice-acme", dues[0]) == "invoice-acme@2026-11-16T05:00:00.0000000Z"  # as the page says
    assert dues[0].astimezone(UTC).hour == 5
