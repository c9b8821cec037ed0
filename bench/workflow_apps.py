"""The workflow App a bench worker runs (SPEC §10's workflow rows).

A worker subprocess imports ``bench.workflow_apps:app``; ``BENCH_WORKFLOW_APP_ID`` names it,
so every run gets fresh topics and a fresh consumer group. The bench builds the same App
in-process with ``build(app_id)`` to talk to it.

Workflows:

- ``one-activity``: one sync activity (``n + 1``), then returns;
- ``ten-steps``: ten sync activities in a row, each adding one;
- ``slow-activity``: one sync activity that sleeps ``seconds`` in its thread, so a SIGKILL
  lands while instances are in flight.
"""

from __future__ import annotations

import os
import time

from tidings import App
from tidings.core.workflow import Attempt, Retry, WorkflowContext

PARTITIONS = 4
STEPS = 10


def build(app_id: str) -> App:
    """Return the workflow bench App named ``app_id``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=120)

    @app.workflow("one-activity")
    async def one_activity(ctx: WorkflowContext, n: int) -> int:
        return await ctx.activity("inc", Retry.times(3), lambda a: n + 1, type=int)

    @app.workflow("ten-steps")
    async def ten_steps(ctx: WorkflowContext, n: int) -> int:
        total = n
        for step in range(STEPS):
            total = await ctx.activity(f"step-{step}", Retry.times(3), lambda a, t=total: t + 1, type=int)
        return total

    def nap(attempt: Attempt, seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    @app.workflow("slow-activity")
    async def slow_activity(ctx: WorkflowContext, seconds: float) -> str:
        return await ctx.activity("nap", Retry.times(3), lambda a: nap(a, seconds), type=str)

    return app


app = build(os.environ.get("BENCH_WORKFLOW_APP_ID", "bench-workflows"))
