"""The App a schedule bench worker runs: schedules of one workflow, ``tick``.

A worker subprocess imports ``bench.schedule_apps:app``; ``BENCH_SCHEDULE_APP_ID`` names it.
Each run's one activity appends ``{run id} {seconds since its due time}`` to
``{BENCH_SCHEDULE_LAG}`` (the moment the run's first step began, as the bench's lag).
"""

from __future__ import annotations

import os
import time
from typing import Any

from tidings import App, Attempt, Retry, ScheduledRun, WorkflowContext
from tidings.core.schedule import run_id
from tidings.shell.kinds.schedule.handle import ScheduleHandle

PARTITIONS = 8


def build(app_id: str, lag_path: str | None = None) -> tuple[App, ScheduleHandle]:
    app = App(app_id, partitions=PARTITIONS, command_timeout=300)

    def began(attempt: Attempt, run: ScheduledRun[Any]) -> float:
        lag = time.time() - run.due.timestamp()
        if lag_path:
            with open(lag_path, "a", encoding="utf-8") as out:
                out.write(f"{run_id(run.schedule, run.due)} {lag:.6f}\n")
        return lag

    @app.workflow("tick")
    async def tick(ctx: WorkflowContext, run: ScheduledRun[Any]) -> float:
        return await ctx.activity("began", Retry.none, lambda attempt: began(attempt, run), type=float)

    return app, app.schedules([tick])


if "BENCH_SCHEDULE_APP_ID" in os.environ:
    app, schedules = build(os.environ["BENCH_SCHEDULE_APP_ID"], os.environ.get("BENCH_SCHEDULE_LAG"))
    if os.environ.get("BENCH_PROFILE"):
        from .apps import _profile

        _profile(os.environ["BENCH_PROFILE"])
else:
    app, schedules = None, None  # type: ignore[assignment]
