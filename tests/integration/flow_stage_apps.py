"""The App the topic-to-topic flow tests run: ``flow_apps``' workflow plus ``app.workflow_flow``.

``TEST_APP_ID`` names it; the stage reads ``{app}.numbers`` (made by the test, as any
producer's topic would be), starts ``flow-score`` with id ``score-{n}`` per element and
writes outcomes to ``{app}.scored``. ``TEST_FLOW_TIMEOUT`` is the stage's timeout (s).
"""

from __future__ import annotations

import os
from pathlib import Path

from tidings import App

from .flow_apps import build as build_workflows

PARALLELISM = 4


def source_topic(app_id: str) -> str:
    return f"{app_id}.numbers"


def sink_topic(app_id: str) -> str:
    return f"{app_id}.scored"


def build(app_id: str, calls_dir: Path, timeout: float = 60.0) -> App:
    """Return the flow-stage test App named ``app_id``."""
    app = build_workflows(app_id, calls_dir)
    app.workflow_flow("numbers", source_topic(app_id), "flow-score", lambda n: f"score-{n}",
                      sink_topic(app_id), PARALLELISM, timeout)
    return app


app = build(
    os.environ.get("TEST_APP_ID", "flow-stages"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
    float(os.environ.get("TEST_FLOW_TIMEOUT", "60")),
)
