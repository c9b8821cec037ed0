"""The bank app: the Account aggregate declared on a tidings App.

Run a worker with ``tidings worker examples.bank.app:app``.
"""

from __future__ import annotations

from tidings import App

from . import account

app = App("bank")

accounts = app.aggregate(
    "account",
    account.initial,
    account.decide,
    account.fold,
    command=account.AccountCommand,
    event=account.AccountEvent,
)
