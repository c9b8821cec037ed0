"""Apps the integration tests run in worker processes.

A worker subprocess imports ``tests.integration.apps:app``; ``TEST_APP_ID`` names it, so
every test gets its own topics and consumer group. Tests build the same App in-process
with ``build(app_id)`` to talk to it.
"""

from __future__ import annotations

import os
from decimal import Decimal

from pydantic import BaseModel

from examples.bank import account
from tidings import App, Defer, Persist
from tidings.shell.kinds.projection.agent import ProjectedEvent
from tidings.shell.kinds.projection.views import View

PARTITIONS = 4


class Add(BaseModel):
    amount: int


class Bump(BaseModel):
    """Folded live only (deferred): gone after a restart."""

    amount: int


class Read(BaseModel):
    """Replies with the live total, stores nothing."""


class Added(BaseModel):
    amount: int


class Total(BaseModel):
    value: int


def tally_decide(command: Add | Bump | Read, state: int) -> Persist[Added] | Defer[object]:
    match command:
        case Add(amount=amount):
            return Persist(Added(amount=amount))
        case Bump(amount=amount):
            return Defer(Added(amount=amount))
        case Read():
            return Defer(Total(value=state))
    raise TypeError(command)


def tally_fold(event: Added | Total, state: int) -> int:
    return state + event.amount if isinstance(event, Added) else state


def project_balance(event: ProjectedEvent, view: View) -> None:
    """Keep each account's balance, and count applications to catch any applied twice."""
    if isinstance(event.value, account.Deposited) and event.value.amount == 13:
        raise ValueError("13 is unlucky")  # a handler bug: this event is dead-lettered
    entry = view.get(event.aggregate_id, {"balance": "0", "applied": 0, "version": 0})
    if event.version != entry["version"] + 1:
        entry.setdefault("gaps", []).append([entry["version"], event.version])
    balance = account.fold(event.value, account.AccountState(balance=Decimal(entry["balance"])))
    entry.update(balance=str(balance.balance), applied=entry["applied"] + 1, version=event.version)
    view.put(event.aggregate_id, entry)


def build(app_id: str) -> App:
    """Return the test App named ``app_id``: account and tally aggregates, a projection."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent)
    app.aggregate("tally", 0, tally_decide, tally_fold,
                  command=Add | Bump | Read, event=Added | Total)
    app.projection("balances", [accounts], project_balance)
    return app


app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
