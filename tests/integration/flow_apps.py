"""The App the WorkflowFlow integration tests run in a worker process.

A worker subprocess imports ``tests.integration.flow_apps:app``; ``TEST_APP_ID`` names it and
``TEST_CALLS_DIR`` is where the ``score`` activity writes one line when it begins and one when
it ends (``begin|end {idempotency key} {n} {time}``), so a test can count calls per instance
and how many ran at once across the process boundary.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tidings import App
from tidings.core.workflow import Attempt, Retry, WorkflowContext

PARTITIONS = 4
#: How long one ``score`` call takes: long enough that eight run side by side.
SCORE_SECONDS = 0.2


def faults(n: int) -> bool:
    """The elements whose activity fails for good, so their workflow ends Faulted."""
    return n % 10 == 7


def waits(n: int) -> bool:
    """The elements whose workflow waits for the signal ``go`` before scoring (or is cancelled)."""
    return n % 10 == 3


def build(app_id: str, calls_dir: Path) -> App:
    """Return the flow test App named ``app_id``, recording calls under ``calls_dir``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)

    def log(line: str) -> None:
        calls_dir.mkdir(parents=True, exist_ok=True)
        with open(calls_dir / "score.log", "a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())

    def score(attempt: Attempt, n: int) -> int:
        log(f"begin {attempt.idempotency_key} {n} {time.time():.6f}")
        try:
            time.sleep(SCORE_SECONDS)
            if faults(n):
                raise RuntimeError(f"element {n} cannot be scored")
            return n * n
        finally:
            log(f"end {attempt.idempotency_key} {n} {time.time():.6f}")

    @app.workflow("flow-score")
    async def flow_score(ctx: WorkflowContext, n: int) -> int:
        if waits(n):
            await ctx.wait_signal("go", type=int)
        return await ctx.activity("score", Retry.none, lambda a: score(a, n), type=int)

    return app


app = build(
    os.environ.get("TEST_APP_ID", "flows"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
)
