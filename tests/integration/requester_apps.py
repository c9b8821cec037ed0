"""An App with an aggregate and workflows, so one ``Client`` can drive both kinds.

The workflow test App (``workflow_apps.build``) plus the ``tally`` aggregate of
``apps.build``; a worker subprocess imports ``tests.integration.requester_apps:app``, named
by ``TEST_APP_ID``, its activities recording calls under ``TEST_CALLS_DIR``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tidings import App

from .apps import Add, Added, Bump, Read, Total, tally_decide, tally_fold
from .workflow_apps import build as build_workflows


def build(app_id: str, calls_dir: Path) -> App:
    """Return the workflow test App named ``app_id`` with the ``tally`` aggregate added."""
    app = build_workflows(app_id, calls_dir)
    app.aggregate("tally", 0, tally_decide, tally_fold, command=Add | Bump | Read, event=Added | Total)
    return app


app = build(
    os.environ.get("TEST_APP_ID", "requester"),
    Path(os.environ.get("TEST_CALLS_DIR", ".tidings/test-calls")),
)
