"""The App of the command de-duplication tests (``tests.integration.dedup_apps:app``).

The bank's account aggregate, and one saga that keeps resending a command long after the
account stored it: ``nudge`` starts on an account opened by an owner named ``nudge...``,
sends ``Deposit(777)`` to the account ``busy`` and expects an event that never comes (its
``handle`` takes none), so its expectation resends the same command id every second for
ten minutes. Every resend after the first must be answered from the first verdict: a
second ``Deposited(777)`` in the journal is the double credit the test looks for.
"""

from __future__ import annotations

import os
from datetime import timedelta
from decimal import Decimal
from typing import Any

from examples.bank import account
from tidings import App, Expect, SagaEvent, Send, Stay

PARTITIONS = 4
#: The account the saga nudges, and the amount that marks its deposit.
BUSY = "busy"
NUDGE_AMOUNT = Decimal(777)
RESEND_EVERY = timedelta(seconds=1)


def build(app_id: str) -> App:
    """The account aggregate and the ``nudge`` saga, named ``app_id``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=30)
    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent)

    def start_on(event: SagaEvent) -> bool:
        return isinstance(event.value, account.Opened) and event.value.owner.startswith("nudge")

    def handle(event: Any, state: str) -> str | None:
        if state == "idle" and isinstance(event, SagaEvent) and isinstance(event.value, account.Opened):
            return "nudging"
        return None  # nothing moves it on: the expectation keeps resending

    def on_enter(state: str, recovering: bool) -> tuple[Stay, list[Send]]:
        if state != "nudging":
            return Stay(), []
        expect = Expect(within=timedelta(minutes=10), resend_every=RESEND_EVERY)
        return Stay(), [Send(accounts, BUSY, account.Deposit(amount=NUDGE_AMOUNT), expect=expect)]

    app.saga("nudge", subscribe=[accounts], start_on=start_on, initial="idle", handle=handle,
             on_enter=on_enter, state=str)
    return app


app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
