"""The App of the stop-grace test (tests/integration/test_stop_grace.py), run in worker processes.

``TEST_APP_ID`` names it and ``TEST_CALLS_DIR`` is where its activities record what they
did (``Calls``: one line per event, fsynced), so the test counts attempts across a SIGTERM
and a restart. The first attempt of each activity outlasts any grace the test gives; the
attempt after the restart is quick, so the restarted worker finishes the workflow at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path

from tidings import App
from tidings.core.workflow import Attempt, Backoff, Retry, WorkflowContext
from tests.integration.workflow_apps import Calls

#: How long the first attempt of an activity takes: longer than the test's grace.
SLOW_S = 15.0
#: The three ways an attempt runs: a sync call on ThreadedAttempts' threads, a sync call
#: under a timeout on the agent's pool, an async call as a task on the loop.
ACTIVITIES = ("blocking", "timed", "waiting")


def build(app_id: str, calls_dir: Path) -> App:
    """Return the grace test App named ``app_id``, recording under ``calls_dir``."""
    app = App(app_id, partitions=2, command_timeout=60)
    calls = Calls(calls_dir)

    def blocking(attempt: Attempt, activity: str) -> str:
        """Sync: sleeps in its thread and ignores its cancellation, as a blocking client does."""
        first = not calls.lines(activity)
        calls.record(activity, attempt, "begin")
        time.sleep(SLOW_S if first else 0.1)
        calls.record(activity, attempt, "end")
        return activity

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
        return "waiting"

    def quick(attempt: Attempt) -> int:
        calls.record("quick", attempt)
        return 1

    def flaky(attempt: Attempt) -> str:
        calls.record("flaky", attempt)
        if attempt.number == 1:
            raise RuntimeError("the first attempt fails")
        return "flaky"

    @app.workflow("retrying")
    async def retrying(ctx: WorkflowContext, _: None) -> str:
        """Its first attempt fails; the second waits a minute's backoff."""
        policy = Retry.times(3).replace(backoff=Backoff(initial=timedelta(seconds=60)))
        return await ctx.activity("flaky", policy, flaky)

    @app.workflow("slow")
    async def slow(ctx: WorkflowContext, _: None) -> list[object]:
        """A quick step, then the three slow ones at once."""
        first = await ctx.activity("quick", Retry.times(3), quick)
        timed = Retry.times(3).replace(attempt_timeout=timedelta(seconds=60))
        return [first, *await ctx.all([
            ctx.activity("blocking", Retry.times(3), lambda a: blocking(a, "blocking")),
            ctx.activity("timed", timed, lambda a: blocking(a, "timed")),
            ctx.activity("waiting", Retry.times(3), waiting),
        ])]

    return app


app = build(
    os.environ.get("TEST_APP_ID", "grace"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
)
