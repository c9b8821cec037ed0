"""The workflow App a bench worker runs (SPEC §10's workflow rows).

A worker subprocess imports ``bench.workflow_apps:app``; ``BENCH_WORKFLOW_APP_ID`` names it,
so every run gets fresh topics and a fresh consumer group. The bench builds the same App
in-process with ``build(app_id)`` to talk to it.

Workflows:

- ``one-activity``: one sync activity (``n + 1``), then returns;
- ``ten-steps``: ten sync activities in a row, each adding one;
- ``slow-activity``: one sync activity that sleeps ``seconds`` in its thread, so a SIGKILL
  lands while instances are in flight;
- ``one-send``: one ``ctx.send`` of ``Add`` to the ``counter`` aggregate (hosted by the same
  worker), ``counter-{n % 100}``, then returns the reply's amount.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from tidings import App, Persist
from tidings.core.workflow import Attempt, Retry, WorkflowContext

PARTITIONS = 4
STEPS = 10
COUNTERS = 100


class Add(BaseModel):
    amount: int


class Added(BaseModel):
    amount: int


def _decide(command: Add, total: int) -> Persist[Added]:
    return Persist(Added(amount=command.amount))


def _fold(event: Added, total: int) -> int:
    return total + event.amount


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

    counters = app.aggregate("counter", 0, _decide, _fold, command=Add, event=Added)

    @app.workflow("one-send")
    async def one_send(ctx: WorkflowContext, n: int) -> int:
        reply = await ctx.send(counters, f"counter-{n % COUNTERS}", Add(amount=1))
        return int(reply.amount)

    return app


app = build(os.environ.get("BENCH_WORKFLOW_APP_ID", "bench-workflows"))
