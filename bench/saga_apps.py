"""The App a saga bench worker runs: the bank's account aggregate and its transfer saga.

A worker subprocess imports ``bench.saga_apps:app``; ``BENCH_SAGA_APP_ID`` names it, so
every run gets fresh topics and a fresh consumer group. The bench builds the same App
in-process with ``build(app_id)`` to talk to it. ``BENCH_PROFILE=PATH`` profiles the
worker as in ``bench.apps``.
"""

from __future__ import annotations

import os

from examples.bank import account, transfer
from tidings import App

PARTITIONS = 8


def build(app_id: str) -> App:
    """Return the saga bench App named ``app_id``: accounts and the transfer saga."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=120)
    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent)
    transfer.declare(app, accounts)
    return app


app = build(os.environ["BENCH_SAGA_APP_ID"]) if "BENCH_SAGA_APP_ID" in os.environ else None
if app is not None and os.environ.get("BENCH_PROFILE"):
    from .apps import _profile

    _profile(os.environ["BENCH_PROFILE"])
