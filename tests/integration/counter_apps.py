"""The App of the hosting-seam tests: one counter kind (``tests/counter_kind.py``), nothing else.

A worker subprocess imports ``tests.integration.counter_apps:app``; ``TEST_APP_ID`` names
it, so every test gets its own topics and consumer group. Tests build the same App
in-process with ``build(app_id)`` to find its topics.
"""

from __future__ import annotations

import os

from tidings import App
from tests.counter_kind import CounterKind

PARTITIONS = 4


def build(app_id: str) -> App:
    """Return the counter test App named ``app_id``: one counter, ``clicks``."""
    app = App(app_id, partitions=PARTITIONS)
    app.host(CounterKind(app, "clicks"))
    return app


app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
