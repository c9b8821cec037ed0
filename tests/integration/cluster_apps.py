"""The workflow App of the cluster failure tests (tests/chaos/test_cluster_failures.py).

``errand`` takes every kind of step a workflow has: an activity, a timer, a signal it waits
for and a child it waits on (``piece``, one activity). Each activity call is recorded with
``Calls`` (``TEST_CALLS_DIR``), so a test can compare how often an activity body ran with
what the journals say. A worker subprocess imports ``tests.integration.cluster_apps:app``;
``TEST_APP_ID`` names it.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from tidings import App
from tidings.core.workflow import Attempt, Retry, WorkflowContext

from .workflow_apps import Calls

PARTITIONS = 6


def build(app_id: str, calls_dir: Path) -> App:
    """Return the cluster-test workflow App named ``app_id``, recording calls under ``calls_dir``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    calls = Calls(calls_dir)

    def tally(attempt: Attempt, order: str) -> int:
        calls.record("tally", attempt, order)
        return len(order)

    def part(attempt: Attempt, order: str) -> int:
        calls.record("part", attempt, order)
        return 1

    @app.workflow("piece")
    async def piece(ctx: WorkflowContext, order: str) -> int:
        return int(await ctx.activity("part", Retry.times(5), lambda a: part(a, order), type=int))

    @app.workflow("errand")
    async def errand(ctx: WorkflowContext, order: str) -> int:
        counted = await ctx.activity("tally", Retry.times(5), lambda a: tally(a, order), type=int)
        await ctx.sleep(timedelta(seconds=1))
        extra = await ctx.wait_signal("go", type=int)
        child = await ctx.child(piece, f"{order}-piece")
        return int(counted) + int(extra) + int(child)

    return app


app = build(os.environ.get("TEST_APP_ID", "cluster"), Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")))
