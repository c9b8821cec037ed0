"""The bank, with its transfer saga, as the bank invariant test runs it in worker processes.

A worker subprocess imports ``tests.bank_workers:app``; ``TEST_APP_ID`` names the App, so
each test has its own topics and consumer group. The test builds the same App in-process
with ``build(app_id)`` to talk to it.

``BANK_MUTATE_SAGA_IDS=1`` is the mutation the invariant test must catch: every call of
``tidings.core.saga.saga_command_id`` returns a fresh uuid, so a saga's resend (after a
restart) no longer repeats its command id and the account cannot recognise it. The patch
lives here, in the test's worker entry module, never in production code.
"""

from __future__ import annotations

import os
import uuid

import tidings.core.saga as saga_core
from examples.bank import account, transfer
from tidings import App

PARTITIONS = 4


def build(app_id: str) -> App:
    """The bank App named ``app_id``: the account aggregate and the transfer saga."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=30)
    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent)
    transfer.declare(app, accounts)
    return app


def _fresh_command_id(name: str, saga_id: str, seq: int, index: int) -> str:
    return uuid.uuid4().hex


if os.environ.get("BANK_MUTATE_SAGA_IDS") == "1":
    saga_core.saga_command_id = _fresh_command_id

app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
