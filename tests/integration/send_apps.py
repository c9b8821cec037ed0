"""Two Apps for the workflow-send tests: a bank (an aggregate) and the workflows that send to it.

They are separate Apps run by separate worker processes, so the aggregate's partitions are
owned by another process (another consumer group) than the workflow's: a send crosses
workers. ``TEST_APP_ID`` names the workflow App; the bank App is ``{TEST_APP_ID}bank``.
"""

from __future__ import annotations

import os
from datetime import timedelta

from pydantic import BaseModel

from tidings import App, Ignore, Persist, Retry, WorkflowContext
from tidings.shell.kinds.aggregate.handle import AggregateHandle

PARTITIONS = 4


class Withdraw(BaseModel):
    amount: int


class Reserve(BaseModel):
    id: str


class Confirm(BaseModel):
    id: str


class Withdrawn(BaseModel):
    amount: int


class Reserved(BaseModel):
    id: str


class Confirmed(BaseModel):
    id: str


def decide(command: Withdraw | Reserve | Confirm, balance: int) -> Persist[object] | Ignore:
    match command:
        case Withdraw(amount=amount):
            # Not enough money: the account ignores the command (stores nothing).
            return Persist(Withdrawn(amount=amount)) if amount <= balance else Ignore()
        case Reserve(id=reservation):
            return Persist(Reserved(id=reservation))
        case Confirm(id=reservation):
            return Persist(Confirmed(id=reservation))
    raise TypeError(command)


def fold(event: Withdrawn | Reserved | Confirmed, balance: int) -> int:
    return balance - event.amount if isinstance(event, Withdrawn) else balance


def is_confirmed(event: object) -> bool:
    return isinstance(event, Confirmed)


def bank_app(app_id: str) -> tuple[App, AggregateHandle[object, object, int]]:
    """The bank App (``{app_id}bank``) and its account aggregate (every account starts at 100)."""
    bank = App(f"{app_id}bank", partitions=PARTITIONS)
    accounts: AggregateHandle[object, object, int] = bank.aggregate(
        "account", 100, decide, fold, command=Withdraw | Reserve | Confirm, event=Withdrawn | Reserved | Confirmed)
    return bank, accounts


def build(app_id: str) -> tuple[App, App]:
    """Return (the workflow App ``app_id``, the bank App)."""
    bank, accounts = bank_app(app_id)
    app = App(app_id, partitions=PARTITIONS, command_timeout=3.0)

    @app.workflow("pay")
    async def pay(ctx: WorkflowContext, account: str) -> str:
        reply = await ctx.send(accounts, account, Withdraw(amount=30))
        return f"took {reply.amount}"

    @app.workflow("reserve")
    async def reserve_and_wait(ctx: WorkflowContext, reservation: str) -> str:
        # One send, and five minutes to wait for the confirmation.
        patient = Retry.command.replace(attempt_timeout=timedelta(minutes=5))
        event = await ctx.send_with_filter(patient, is_confirmed, accounts, reservation, Reserve(id=reservation))
        return f"{type(event).__name__} {event.id}"

    return app, bank


if "TEST_APP_ID" in os.environ:
    app, bank = build(os.environ["TEST_APP_ID"])
