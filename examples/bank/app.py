"""The bank app: the Account aggregate, the transfer saga and a balances projection.

Run a worker with ``tidings worker examples.bank.app:app``.
"""

from __future__ import annotations

from decimal import Decimal

from tidings import App, ProjectedEvent, View

from . import account, transfer

app = App("bank")

accounts = app.aggregate(
    "account",
    account.initial,
    account.decide,
    account.fold,
    command=account.AccountCommand,
    event=account.AccountEvent,
)

# TransferSent starts it: it credits the target, or refunds the source (transfer.py).
transfers = transfer.declare(app, accounts)


def project_balance(event: ProjectedEvent, view: View) -> None:
    """Keep a read model of each account: owner, balance and how many events it has seen."""
    entry = view.get(event.aggregate_id, {"owner": None, "balance": "0", "events": 0})
    state = account.AccountState(owner=entry["owner"], balance=Decimal(entry["balance"]))
    state = account.fold(event.value, state)
    view.put(
        event.aggregate_id,
        {"owner": state.owner, "balance": str(state.balance), "events": entry["events"] + 1},
    )


balances = app.projection("balances", [accounts], project_balance)
