"""An App whose worker can be made deaf while its broker answers (tests/chaos/test_worker_liveness.py).

``Freeze`` blocks the worker's event loop in ``decide`` (a handler stuck in a blocking call):
its intake takes nothing more while commands keep arriving. ``TEST_APP_ID`` names the App.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel

from tidings import App, Persist

PARTITIONS = 2


class Tick(BaseModel):
    pass


class Freeze(BaseModel):
    pass


class Ticked(BaseModel):
    pass


def decide(command: Tick | Freeze, state: int) -> Persist[Ticked]:
    if isinstance(command, Freeze):
        time.sleep(3600)  # blocks the loop: the worker is alive and takes nothing
    return Persist(Ticked())


def fold(event: Ticked, state: int) -> int:
    return state + 1


def build(app_id: str) -> App:
    app = App(app_id, partitions=PARTITIONS, command_timeout=10)
    app.aggregate("clock", 0, decide, fold, command=Tick | Freeze, event=Ticked)
    return app


app = build(os.environ.get("TEST_APP_ID", "deaf"))
