"""An app with schedules, for the schedule handle tests. A worker subprocess imports
``tests.integration.schedule_apps:app`` with ``TEST_APP_ID`` set."""

from __future__ import annotations

import os

from tidings import App
from tidings.shell.schedules import ScheduleHandle


def build(app_id: str) -> tuple[App, ScheduleHandle]:
    app = App(app_id, partitions=2)
    # Named, not a handle: the handle's calls only store schedules; no run is started here.
    schedules = app.schedules(["remind"])
    return app, schedules


app, schedules = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else (None, None)
