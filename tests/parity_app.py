"""The parity scenario's App: the bank (accounts, the transfer saga, the balances projection),
an ``onboarding`` orchestration over the accounts and a ``payout`` workflow that sends to the accounts, waits for a signal, runs an activity and
sleeps, so one run crosses every kind the in-memory runtime plays (tests/unit/test_app_runtime.py,
tests/integration/test_app_runtime_parity.py).

``build(name)`` is the pytest plugin's factory (``tidings_app_spec``). ``$PARITY_WINDOW``
(seconds, read at import: the worker's) is how long ``payout`` waits for "approve".
"""

from __future__ import annotations

import os
from datetime import timedelta
from decimal import Decimal

from pydantic import BaseModel, ConfigDict

from examples.bank import account, transfer
from examples.bank.app import project_balance
from tidings import App, Attempt, Retry, WorkflowContext
from tidings.coordination import event, orchestrate, orchestration

#: How long ``payout`` waits for its "approve" signal.
WINDOW = timedelta(seconds=float(os.environ.get("PARITY_WINDOW", "4")))
#: The nap between the transfer and the answer (a durable timer).
NAP = timedelta(seconds=1)


class Payout(BaseModel):
    """What ``payout`` is given: the account to open and fund, and where to send money."""

    model_config = ConfigDict(frozen=True)

    account: str
    target: str
    amount: Decimal


class Paid(BaseModel):
    """What ``payout`` returns."""

    model_config = ConfigDict(frozen=True)

    fee: int
    approved: bool
    reply: str
    guid: str


def fee(attempt: Attempt, order: Payout) -> int:
    """The fee service (a stand-in that a test may replace by name)."""
    return 2 * len(order.account)


class Welcome(BaseModel):
    """What ``onboarding`` asks for once an account is open, until it is funded."""

    account: str


class Funded(BaseModel):
    """``onboarding``'s outcome."""

    account: str


def account_of(source: object) -> str | None:
    """``onboarding``'s key: one instance per account."""
    return str(getattr(source, "aggregate_id"))


def stored(kind: type) -> object:
    return event(lambda value: True if isinstance(value, kind) else None)


@orchestration
def onboarding(account_id: str):  # noqa: ANN201 - an orchestration
    """Opened -> ask for a Welcome until Deposited -> Funded."""
    yield orchestrate(stored(account.Opened))
    yield orchestrate(stored(account.Deposited), actions=[Welcome(account=account_id)])
    return Funded(account=account_id)


def build(name: str = "parity") -> App:
    """The bank plus ``payout`` on an App named ``name``."""
    app = App(name)
    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent)
    transfer.declare(app, accounts)
    app.projection("balances", [accounts], project_balance)
    app.orchestration("onboarding", [accounts], account_of, onboarding)

    async def payout(ctx: WorkflowContext, order: Payout) -> Paid:
        cost = await ctx.activity("fee", Retry.times(3), lambda attempt: fee(attempt, order))
        await ctx.send(accounts, order.account, account.Open(owner=order.account))
        await ctx.send(accounts, order.account, account.Deposit(amount=Decimal(100)))
        approved = await ctx.wait_signal_for("approve", WINDOW, type=bool)
        reply = "skipped"
        if approved:
            event = await ctx.send(accounts, order.account, account.SendTransfer(
                transfer_id=f"t-{order.account}", target=order.target, amount=order.amount))
            reply = type(event).__name__
        await ctx.sleep(NAP)
        guid = await ctx.new_guid()
        return Paid(fee=cost, approved=bool(approved), reply=reply, guid=str(guid))

    app.workflow("payout")(payout)
    return app
