"""The App of the health tests (tests/integration/test_health.py): one workflow, nothing else.

One workflow's journal is what a restarted worker catches up before ``/readyz`` says ready;
a small App keeps its other recoveries (and the test) short. A worker subprocess imports
``tests.integration.health_apps:app``; ``TEST_APP_ID`` names it.
"""

from __future__ import annotations

import os

from tidings import App
from tidings.core.workflow import WorkflowContext

PARTITIONS = 4


def build(app_id: str) -> App:
    """Return the health test App named ``app_id``: workflow ``echo``."""
    app = App(app_id, partitions=PARTITIONS)

    @app.workflow("echo")
    async def echo(ctx: WorkflowContext, value: int) -> int:
        return value

    return app


app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
