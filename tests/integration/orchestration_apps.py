"""The App the orchestration tests run in worker processes (``TEST_APP_ID`` names it).

A ``ledger`` aggregate stores ``Happened(order, step)`` events under any aggregate id; the
``fulfil`` orchestration is keyed by ``order``, so one instance's events come from several
ledger instances and several source partitions (the repartition hop is exercised):

    placed -> Charge; paid -> Pack and Label; packed and labelled (any order) -> Ship;
    shipped -> outcome Shipped(order).

Special steps: ``explode`` makes ``key_of`` raise, ``boom`` makes the orchestration raise
(both dead-lettered); ``noise`` is for the order but changes nothing.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from tidings import App, Persist
from tidings.coordination import both, event, orchestrate, orchestration

PARTITIONS = 4


class Happen(BaseModel):
    order: str
    step: str


class Happened(BaseModel):
    order: str
    step: str


class Charge(BaseModel):
    order: str


class Pack(BaseModel):
    order: str


class Label(BaseModel):
    order: str


class Ship(BaseModel):
    order: str


class Shipped(BaseModel):
    order: str


def ledger_decide(command: Happen, state: int) -> Persist[Happened]:
    return Persist(Happened(order=command.order, step=command.step))


def ledger_fold(event_: Happened, state: int) -> int:
    return state + 1


def order_of(source: object) -> str | None:
    value = source.value  # type: ignore[attr-defined]
    if value.step == "explode":
        raise ValueError("no key for this one")
    return value.order or None


def happened(step: str):  # noqa: ANN201 - a coordination
    def choose(value: Happened) -> bool | None:
        if value.step == "boom":
            raise RuntimeError("the orchestration cannot take this")
        return True if value.step == step else None

    return event(choose)


@orchestration
def fulfil(order: str):  # noqa: ANN201 - an orchestration
    yield orchestrate(happened("placed"))
    yield orchestrate(happened("paid"), actions=[Charge(order=order)])
    yield both(
        orchestrate(happened("packed"), actions=[Pack(order=order)]),
        orchestrate(happened("labelled"), actions=[Label(order=order)]),
    )
    yield orchestrate(happened("shipped"), actions=[Ship(order=order)])
    return Shipped(order=order)


#: The ledger step each action asks for (what a test's executor stores in reply).
REPLIES = {"Charge": "paid", "Pack": "packed", "Label": "labelled", "Ship": "shipped"}


def build(app_id: str) -> App:
    """Return the orchestration test App named ``app_id``."""
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    ledger = app.aggregate("ledger", 0, ledger_decide, ledger_fold, command=Happen, event=Happened)
    app.orchestration("fulfil", [ledger], order_of, fulfil)
    return app


app = build(os.environ.get("TEST_APP_ID", "orchestrations"))
