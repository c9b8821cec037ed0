"""An app whose aggregate starts a saga, for the SagaAlreadyStarted tests.

The saga runtime is not needed to prove the aggregate's side of the rule: a starter
registered with ``app.register_saga_starter`` (what ``app.saga`` does for each aggregate it
subscribes to) is all the aggregate asks. A worker subprocess imports
``tests.integration.saga_start_apps:app`` with ``TEST_APP_ID`` set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from tidings import App, Defer, Persist, PersistAll
from tidings.core.aggregate import Decision
from tidings.core.records import EventEnvelope

PARTITIONS = 4


class Start(BaseModel):
    """Store one ``Started``: it starts saga ``transfer``."""


class StartTwice(BaseModel):
    """Store two ``Started`` events in one command."""


class StartDeferred(BaseModel):
    """Publish a ``Started`` without storing it: it starts nothing."""


class Note(BaseModel):
    """Store a ``Noted``, which starts no saga."""


class Started(BaseModel):
    n: int


class Noted(BaseModel):
    n: int


def decide(command: Start | StartTwice | StartDeferred | Note, state: int) -> Decision:
    match command:
        case Start():
            return Persist(Started(n=state + 1))
        case StartTwice():
            return PersistAll([Started(n=state + 1), Started(n=state + 2)])
        case StartDeferred():
            return Defer(Started(n=state + 1))
        case Note():
            return Persist(Noted(n=state + 1))
    raise TypeError(command)


def fold(event: Started | Noted, state: int) -> int:
    return event.n


@dataclass(frozen=True)
class TransferStarter:
    """The aggregate's view of a saga named ``transfer`` that starts on ``Started``."""

    name: str = "transfer"

    def starts(self, event: EventEnvelope, value: Any) -> bool:
        return isinstance(value, Started)


def build(app_id: str) -> App:
    app = App(app_id, partitions=PARTITIONS, command_timeout=60)
    app.aggregate("ledger", 0, decide, fold, command=Start | StartTwice | StartDeferred | Note,
                  event=Started | Noted)
    app.register_saga_starter("ledger", TransferStarter())
    return app


app = build(os.environ["TEST_APP_ID"]) if "TEST_APP_ID" in os.environ else None
