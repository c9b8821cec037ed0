"""``tidings schedule`` on the real broker, as an operator types it: create, show, pause, list,
resume, change and delete Ada's schedule in examples/reminder against a worker, then list it
from the journal with the worker gone.

Each command is a ``tidings`` process of its own. The example's App is named by
``$REMINDER_APP``, so this test's topics and consumer group are its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tidings import ScheduleRule
from tidings.core.schedule import format_due, next_due
from tests.workers import ROOT, Workers

APP = "examples.reminder.app:app"


@pytest.fixture
def cli(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[tuple[Workers, dict[str, str]]]:
    env = {**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap, "REMINDER_APP": app_id}
    subprocess.run([sys.executable, "-m", "tidings.cli.main", "topics", "apply", APP], env=env, cwd=ROOT,
                   check=True, capture_output=True, timeout=60)
    workers = Workers(kafka_bootstrap, app_id, tmp_path, app_spec=APP, env={"REMINDER_APP": app_id})
    yield workers, env
    workers.kill_all()


def tidings(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidings.cli.main", "schedule", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def ok(env: dict[str, str], *args: str) -> str:
    done = tidings(env, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def refused(env: dict[str, str], *args: str, code: int = 1) -> str:
    done = tidings(env, *args)
    assert done.returncode == code, (args, done.stdout, done.stderr)
    assert done.stdout == ""
    return done.stderr


def test_an_operator_runs_a_schedule_through_its_life(cli: tuple[Workers, dict[str, str]]) -> None:
    workers, env = cli
    worker = workers.start("w1")
    daily = ["--input", '"Drink water"', "--daily", "09:00", "--zone", "Europe/Oslo"]

    created = json.loads(ok(env, "create", APP, "ada-daily", "reminder", *daily))
    # The first due time after the creation, the instant the command carried.
    anchor = datetime.fromisoformat(json.loads(ok(env, "show", APP, "ada-daily", "--json"))["anchor"])
    expected_due = next_due(ScheduleRule.daily("09:00", "Europe/Oslo"), anchor, anchor=anchor)
    assert expected_due is not None
    assert created == {"created": "ada-daily", "workflow": "reminder", "rule": "every day at 09:00 in Europe/Oslo",
                       "catch_up": "latest", "next_due": format_due(expected_due)}
    # The same create again stores nothing and succeeds; other content is refused, with the way out.
    assert json.loads(ok(env, "create", APP, "ada-daily", "reminder", *daily))["created"] == "ada-daily"
    conflict = refused(
        env, "create", APP, "ada-daily", "reminder", "--input", '"Eat"', "--daily", "09:00", "--zone", "Europe/Oslo")
    assert "exists with other content" in conflict
    assert "`tidings schedule change examples.reminder.app:app ada-daily ...` changes it" in conflict
    assert "'backup' is not one app.schedules([...]) lists: ['reminder']" in refused(
        env, "create", APP, "nightly", "backup", "--every", "1h")
    assert "--weekly needs --at" in refused(env, "create", APP, "x", "reminder", "--weekly", "mon", "--zone", "UTC")

    shown = ok(env, "show", APP, "ada-daily")
    assert "status     active" in shown and 'input      "Drink water"' in shown
    assert "rule       every day at 09:00 in Europe/Oslo   (--daily 09:00 --zone Europe/Oslo)" in shown
    assert f"next due   {format_due(expected_due)}   " in shown and "Europe/Oslo (UTC+0" in shown
    assert f"run id ada-daily@{format_due(expected_due)}" in shown

    assert json.loads(ok(env, "pause", APP, "ada-daily")) == {"paused": "ada-daily"}
    assert "is paused already" in refused(env, "pause", APP, "ada-daily")
    assert "next due   none while paused" in ok(env, "show", APP, "ada-daily")
    listed = ok(env, "list", APP).splitlines()
    assert listed[0].split()[:2] == ["ID", "STATUS"]
    assert listed[1].split()[:3] == ["ada-daily", "paused", "reminder"]

    assert json.loads(ok(env, "resume", APP, "ada-daily")) == {"resumed": "ada-daily"}
    assert "is not paused (it is active)" in refused(env, "resume", APP, "ada-daily")
    (line,) = ok(env, "list", APP, "--json").splitlines()
    assert json.loads(line)["status"] == "active" and len(json.loads(line)["pauses"]) == 1

    changed = json.loads(ok(env, "change", APP, "ada-daily", "reminder", "--input", '"Drink tea"',
                            "--weekly", "mon-fri", "--at", "08:30", "--zone", "Europe/Oslo", "--catch-up", "all"))
    assert changed["changed"] == "ada-daily" and changed["catch_up"] == "all"
    state = json.loads(ok(env, "show", APP, "ada-daily", "--json"))
    assert state["input"] == "Drink tea" and state["catch_up"] == "all"
    assert state["rule"] == {"kind": "weekly", "at": "08:30:00", "zone": "Europe/Oslo",
                             "days": ["monday", "tuesday", "wednesday", "thursday", "friday"]}
    assert state["rule_text"] == "every Monday to Friday at 08:30 in Europe/Oslo"

    assert json.loads(ok(env, "delete", APP, "ada-daily")) == {"deleted": "ada-daily"}
    assert "was deleted; a deleted schedule cannot be deleted" in refused(env, "delete", APP, "ada-daily")
    assert "a deleted id cannot be created again" in refused(env, "create", APP, "ada-daily", "reminder", *daily)
    assert "does not exist or was deleted" in refused(env, "change", APP, "ada-daily", "reminder", *daily)
    assert "status     deleted" in ok(env, "show", APP, "ada-daily")
    assert "does not exist" in refused(env, "pause", APP, "nobody")
    assert "no such schedule" in tidings(env, "show", APP, "nobody").stdout

    # The journal needs no worker: list reads it with the worker gone, and a command times out.
    worker.kill()
    assert ok(env, "list", APP).splitlines() == ["no schedules", "(1 deleted schedule(s) not shown; --all lists them)"]
    assert ok(env, "list", APP, "--all").splitlines()[1].split()[:2] == ["ada-daily", "deleted"]
    assert "no worker answered; is `tidings worker examples.reminder.app:app` running?" in refused(
        env, "show", APP, "ada-daily", "--timeout", "3", code=2)
