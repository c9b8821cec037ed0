"""The App a bench worker runs: the bank example's account aggregate, 8 partitions.

A worker subprocess imports ``bench.apps:app``; ``BENCH_APP_ID`` names it, so every run
gets fresh topics and a fresh consumer group. The bench builds the same App in-process
with ``build(app_id)`` to talk to it.

With ``BENCH_PROFILE=PATH`` set, the worker's main thread (where Faust's event loop and
the agents run) is profiled with cProfile and the stats are written to PATH when the
worker exits (SIGTERM stops it cleanly, so ``atexit`` runs).
"""

from __future__ import annotations

import atexit
import os

from examples.bank import account
from tidings import App

PARTITIONS = 8


def build(app_id: str) -> App:
    """Return the bench App named ``app_id``: one ``account`` aggregate."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=120)
    app.aggregate("account", account.initial, account.decide, account.fold,
                  command=account.AccountCommand, event=account.AccountEvent)
    return app


def _profile(path: str) -> None:
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    atexit.register(lambda: (profiler.disable(), profiler.dump_stats(path)))


app = build(os.environ["BENCH_APP_ID"]) if "BENCH_APP_ID" in os.environ else None
if app is not None and os.environ.get("BENCH_BATCH_WINDOW"):
    from tidings.shell import worker as _worker

    _worker.BATCH_WINDOW = float(os.environ["BENCH_BATCH_WINDOW"])
if app is not None and os.environ.get("BENCH_PROFILE"):
    _profile(os.environ["BENCH_PROFILE"])
