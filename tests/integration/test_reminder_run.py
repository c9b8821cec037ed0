"""Ada's daily reminder (examples/reminder) run end to end by the dispatcher on the broker.

09:00 Oslo does not come during a test, so the schedule is created with a clock set 25 hours
back: to the schedule aggregate that is a schedule whose last due time, the most recent
09:00 in Oslo, was missed. Under ``CatchUp.LATEST`` the worker's dispatcher starts exactly
that run, ``ada-daily@{that instant in UTC}``, whose activity writes the reminder once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from examples.reminder.app import ADA_RULE
from tidings.core.schedule import next_due, run_id
from tidings.testing import assert_eventually
from tests.workers import ROOT, Workers

APP = "examples.reminder.app:app"

CREATE_BACKDATED = textwrap.dedent("""
    import asyncio, dataclasses, sys
    from datetime import datetime
    from examples.reminder import app as example

    at = datetime.fromisoformat(sys.argv[1])
    backdated = dataclasses.replace(example.schedules, clock=lambda: at)
    try:
        asyncio.run(backdated.create(example.ADA_SCHEDULE, example.reminder, example.ADA_TEXT,
                                     example.ADA_RULE))
    finally:
        example.app.client().close()
""")


def test_the_dispatcher_runs_adas_missed_reminder_once(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> None:
    log = tmp_path / "reminders.log"
    env = {**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap, "REMINDER_APP": app_id, "REMINDER_LOG": str(log)}
    subprocess.run([sys.executable, "-m", "tidings.cli.main", "topics", "apply", APP], env=env, cwd=ROOT,
                   check=True, capture_output=True, timeout=60)
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec=APP,
                      env={"REMINDER_APP": app_id, "REMINDER_LOG": str(log)})
    try:
        workers.start("w1")
        created = datetime.now(UTC) - timedelta(hours=25)
        subprocess.run([sys.executable, "-c", CREATE_BACKDATED, created.isoformat()], env=env, cwd=ROOT,
                       check=True, capture_output=True, timeout=120)
        # The most recent 09:00 in Oslo before now (08:00 UTC in winter, 07:00 in summer).
        missed, due = None, next_due(ADA_RULE, created, anchor=created)
        while due is not None and due <= datetime.now(UTC):
            missed, due = due, next_due(ADA_RULE, due, anchor=created)
        assert missed is not None
        assert_eventually(lambda: log.exists() and log.read_text().strip(), timeout=60, message=workers.log_tail())
        time.sleep(2)  # a second run, if any, would be written by now
        lines = log.read_text().splitlines()
        assert len(lines) == 1, lines
        key, text = lines[0].split(" ", 1)
        assert run_id("ada-daily", missed) in key, (key, missed)
        assert text == "09:00 Europe/Oslo: Drink water"
    finally:
        workers.kill_all()
