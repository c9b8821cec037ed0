"""The App of the stop-grace tests (tests/integration/test_stop_grace.py), run in worker processes.

``TEST_APP_ID`` names it and ``TEST_CALLS_DIR`` is where its activities record what they
did (``Calls``: one line per event, fsynced), so a test counts attempts across a SIGTERM
and a restart. The first attempt of each activity outlasts any grace the tests give; the
attempt after the restart is quick, so the restarted worker finishes the workflow at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path

from tidings import App
from tidings.core.workflow import Attempt, Retry, WorkflowContext
from tests.integration.workflow_apps import Calls

#: How long the first attempt of an activity takes: longer than the tests' grace.
SLOW_S = 15.0


def build(app_id: str, calls_dir: Path) -> App:
    """Return the grace test App named ``app_id``, recording under ``calls_dir``."""
    app = App(app_id, partitions=2, command_timeout=60)
    calls = Calls(calls_dir)

    def blocking(attempt: Attempt, order: str) -> str:
        """Sync: sleeps in its thread and ignores its cancellation, as a blocking client does."""
        first = not calls.lines("blocking")
        calls.record("blocking", attempt, "begin")
        time.sleep(SLOW_S if first else 0.1)
        calls.record("blocking", attempt, "end")
        return f"blocked {order}"

    async def waiting(attempt: Attempt) -> str:
        """Async: awaits; notes what it saw when it was cancelled."""
        first = not calls.lines("waiting")
        calls.record("waiting", attempt, "begin")
        try:
            await asyncio.sleep(SLOW_S if first else 0.1)
        except asyncio.CancelledError:
            calls.record("waiting", attempt, f"cancelled flag={attempt.cancellation.cancelled}")
            raise
        calls.record("waiting", attempt, "end")
        return "waited"

    def quick(attempt: Attempt) -> int:
        calls.record("quick", attempt)
        return 1

    @app.workflow("blocks")
    async def blocks(ctx: WorkflowContext, order: str) -> list[object]:
        first = await ctx.activity("quick", Retry.times(3), quick)
        return [first, await ctx.activity("blocking", Retry.times(3), lambda a: blocking(a, order))]

    @app.workflow("times")
    async def times(ctx: WorkflowContext, order: str) -> list[object]:
        """As ``blocks``, its attempt under a timeout: it runs in the agent's thread pool."""
        first = await ctx.activity("quick", Retry.times(3), quick)
        limited = Retry.times(3).replace(attempt_timeout=timedelta(seconds=60))
        return [first, await ctx.activity("blocking", limited, lambda a: blocking(a, order))]

    @app.workflow("waits")
    async def waits(ctx: WorkflowContext, order: str) -> list[object]:
        first = await ctx.activity("quick", Retry.times(3), quick)
        return [first, await ctx.activity("waiting", Retry.times(3), waiting)]

    return app


app = build(
    os.environ.get("TEST_APP_ID", "grace"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
)
