"""The App ``test_list_kinds.py`` runs: a workflow whose activity fails until told to succeed.

``TEST_APP_ID`` names it. ``retrier`` calls ``flaky`` with a retry every second for an hour;
``flaky`` raises until the file ``TEST_CALLS_DIR/succeed`` exists, then returns its attempt
number, so a test can kill the worker mid-retry and read the attempts journaled before.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from tidings import App
from tidings.core.workflow import Attempt, Backoff, RetryPolicy, WorkflowContext

EVERY_SECOND = RetryPolicy(attempts=None, deadline=timedelta(hours=1),
                           backoff=Backoff(initial=timedelta(seconds=1), factor=1.0, maximum=timedelta(seconds=1)))


def build(app_id: str, calls_dir: Path) -> App:
    """Return the App named ``app_id``; ``flaky`` succeeds once ``calls_dir/succeed`` exists."""
    app = App(app_id, partitions=2)

    def flaky(attempt: Attempt) -> int:
        if not (calls_dir / "succeed").exists():
            raise ConnectionError(f"the service is down (attempt {attempt.number})")
        return attempt.number

    @app.workflow("retrier")
    async def retrier(ctx: WorkflowContext, _: None) -> int:
        return await ctx.activity("flaky", EVERY_SECOND, flaky, type=int)

    return app


app = build(os.environ.get("TEST_APP_ID", "lists"), Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")))
