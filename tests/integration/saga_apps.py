"""The saga test App the saga tests run in worker processes (``tests.integration.saga_apps:app``).

Two aggregates and one saga, the bank transfer's shape without the bank:

- ``wallet``: ``Pay`` stores ``Paid`` (which starts a ``transfer`` saga), ``Refund`` stores
  ``Refunded``.
- ``vault``: ``Take`` stores ``Taken``, or answers ``Refused`` deferred (never stored, so it
  reaches the saga only in the reply) for a vault whose id starts with ``closed``, or is
  ignored for one whose id starts with ``deaf`` (no event: the saga's expectation runs out).
  The saga puts the vault's kind in the command (``Take.mode``): decide does not see the id. ``Hold``
  stores ``Held``; ``Release`` stores ``Released`` (the test sends it, under the saga's id).

The ``transfer`` saga: ``taking`` sends ``Take`` with an expectation (``deaf-long`` vaults:
12 s, resend every 0.5 s; others 1.3 s, resend every 0.3 s) -> ``Taken`` goes on to
``holding`` for ``hold-*`` vaults (sends ``Hold`` and waits for ``Released``) or ends
``done``; ``Refused`` or ``ExpectationExhausted`` -> ``refunding`` (sends ``Refund``) ->
``Refunded`` -> ends ``refunded``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from tidings import (
    App,
    Defer,
    Expect,
    ExpectationExhausted,
    Ignore,
    Persist,
    SagaEvent,
    Send,
    Stay,
    Stop,
)

PARTITIONS = 4


class Pay(BaseModel):
    transfer: str
    target: str
    amount: int


class Refund(BaseModel):
    transfer: str
    amount: int


class Paid(BaseModel):
    transfer: str
    target: str
    amount: int


class Refunded(BaseModel):
    transfer: str
    amount: int


class Take(BaseModel):
    transfer: str
    amount: int
    mode: str = "open"  # the vault's kind, from its id: decide does not see the id


class Hold(BaseModel):
    transfer: str


class Release(BaseModel):
    transfer: str


class Taken(BaseModel):
    transfer: str
    amount: int


class Refused(BaseModel):
    transfer: str
    reason: str


class Held(BaseModel):
    transfer: str


class Released(BaseModel):
    transfer: str


def wallet_decide(command: Pay | Refund, state: int) -> Persist[Any]:
    if isinstance(command, Pay):
        return Persist(Paid(transfer=command.transfer, target=command.target, amount=command.amount))
    return Persist(Refunded(transfer=command.transfer, amount=command.amount))


def wallet_fold(event: Paid | Refunded, state: int) -> int:
    return state - event.amount if isinstance(event, Paid) else state + event.amount


def vault_decide(command: Take | Hold | Release, state: int) -> Any:
    if isinstance(command, Take):
        if command.mode == "deaf":
            return Ignore()
        if command.mode == "closed":
            return Defer(Refused(transfer=command.transfer, reason="closed"))
        return Persist(Taken(transfer=command.transfer, amount=command.amount))
    if isinstance(command, Hold):
        return Persist(Held(transfer=command.transfer))
    return Persist(Released(transfer=command.transfer))


def vault_fold(event: Taken | Refused | Held | Released, state: int) -> int:
    return state + event.amount if isinstance(event, Taken) else state


class Transfer(BaseModel):
    phase: str = "new"
    transfer: str = ""
    source: str = ""
    target: str = ""
    amount: int = 0
    timed_out: bool = False


def start_on(event: SagaEvent) -> bool:
    return isinstance(event.value, Paid)


def handle(event: SagaEvent | ExpectationExhausted, state: Transfer) -> Transfer | None:
    if isinstance(event, ExpectationExhausted):
        if state.phase == "taking":
            return state.model_copy(update={"phase": "refunding", "timed_out": True})
        return None
    value = event.value
    match state.phase, value:
        case "new", Paid():
            return Transfer(phase="taking", transfer=value.transfer, source=event.aggregate_id,
                            target=value.target, amount=value.amount)
        case "taking", Taken():
            return state.model_copy(update={"phase": "holding" if state.target.startswith("hold") else "done"})
        case "taking", Refused():
            return state.model_copy(update={"phase": "refunding"})
        case "holding", Released():
            return state.model_copy(update={"phase": "done"})
        case "refunding", Refunded():
            return state.model_copy(update={"phase": "refunded"})
    return None


def on_enter(state: Transfer, recovering: bool) -> tuple[Any, list[Send]]:
    if state.phase == "taking":
        if state.target.startswith("deaf-long"):
            expect = Expect(within=timedelta(seconds=12), resend_every=timedelta(seconds=0.5))
        else:
            expect = Expect(within=timedelta(seconds=1.3), resend_every=timedelta(seconds=0.3))
        mode = next((m for m in ("closed", "deaf") if state.target.startswith(m)), "open")
        take = Take(transfer=state.transfer, amount=state.amount, mode=mode)
        return Stay(), [Send(_handles["vault"], state.target, take, expect=expect)]
    if state.phase == "holding":
        return Stay(), [Send(_handles["vault"], state.target, Hold(transfer=state.transfer))]
    if state.phase == "refunding":
        return Stay(), [Send(_handles["wallet"], state.source, Refund(transfer=state.transfer, amount=state.amount))]
    if state.phase in ("done", "refunded"):
        return Stop(), []
    return Stay(), []


# The handles on_enter sends to, set by build (one App per process).
_handles: dict[str, Any] = {}


def build(app_id: str) -> App:
    """Return the saga test App named ``app_id``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    wallets = app.aggregate("wallet", 0, wallet_decide, wallet_fold, command=Pay | Refund, event=Paid | Refunded)
    vaults = app.aggregate("vault", 0, vault_decide, vault_fold,
                           command=Take | Hold | Release, event=Taken | Refused | Held | Released)
    _handles.update(wallet=wallets, vault=vaults)
    app.saga("transfer", subscribe=[wallets, vaults], start_on=start_on, initial=Transfer(),
             handle=handle, on_enter=on_enter)
    return app


app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
