"""An app with schedules for the schedule tests. A worker subprocess imports
``tests.integration.schedule_apps:app`` with ``TEST_APP_ID`` set.

Its workflow ``remind`` runs one activity that appends ``{run id} {attempt} {worker pid}
{input as JSON}`` to ``{TEST_CALLS_DIR}/remind.log``, so a test counts the runs of each due
time. ``SCHEDULE_CRASH`` (``before-start`` or ``before-report``) makes the worker SIGKILL
itself once, at that point of the dispatcher's decide -> start -> report, the first time a
run is there (a marker file in the calls directory keeps the restarted worker alive).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tidings import App, Attempt, Retry, ScheduledRun, WorkflowContext
from tidings.core.schedule import run_id
from tidings.shell.kinds.schedule.dispatcher import ScheduleDispatcher
from tidings.shell.kinds.schedule.handle import ScheduleHandle

PARTITIONS = 4


def build(app_id: str, calls_dir: Path | None = None) -> tuple[App, ScheduleHandle]:
    app = App(app_id, partitions=PARTITIONS)

    def remind(attempt: Attempt, run: ScheduledRun[Any]) -> str:
        if calls_dir is not None:
            calls_dir.mkdir(parents=True, exist_ok=True)
            with open(calls_dir / "remind.log", "a", encoding="utf-8") as log:
                log.write(f"{run_id(run.schedule, run.due)} {attempt.number} {os.getpid()} "
                          f"{json.dumps(run.input)}\n")
                log.flush()
                os.fsync(log.fileno())
        return f"reminded {run.input}"

    @app.workflow("remind")
    async def reminder(ctx: WorkflowContext, run: ScheduledRun[Any]) -> str:
        return await ctx.activity("remind", Retry.none, lambda attempt: remind(attempt, run), type=str)

    return app, app.schedules([reminder])


def _crash_once(point: str, calls_dir: Path) -> bool:
    marker = calls_dir / f"crashed-{point}"
    if os.environ.get("SCHEDULE_CRASH") != point or marker.exists():
        return False
    calls_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text("1")
    return True


def _install_crashes(calls_dir: Path) -> None:
    start_runs = ScheduleDispatcher._start_runs
    report = ScheduleDispatcher._report

    async def crash_before_start(self: ScheduleDispatcher, schedules: Iterable[Any]) -> None:
        schedules = list(schedules)
        if any(s.state.pending for s in schedules) and _crash_once("before-start", calls_dir):
            os.kill(os.getpid(), signal.SIGKILL)  # RunsDecided is stored; no start was sent
        await start_runs(self, schedules)

    async def crash_before_report(self: ScheduleDispatcher, reports: list[Any]) -> None:
        if _crash_once("before-report", calls_dir):
            os.kill(os.getpid(), signal.SIGKILL)  # the starts are stored; the report was not sent
        await report(self, reports)

    ScheduleDispatcher._start_runs = crash_before_start  # type: ignore[method-assign]
    ScheduleDispatcher._report = crash_before_report  # type: ignore[method-assign]


if "TEST_APP_ID" in os.environ:
    _calls = Path(os.environ["TEST_CALLS_DIR"]) if "TEST_CALLS_DIR" in os.environ else None
    app, schedules = build(os.environ["TEST_APP_ID"], _calls)
    if _calls is not None and os.environ.get("SCHEDULE_CRASH"):
        _install_crashes(_calls)
else:
    app, schedules = None, None  # type: ignore[assignment]
