"""A declared saga as its subscribed aggregate sees it: a ``SagaStarter`` (core/saga_starts.py).

The aggregate asks each starter whether an event it is about to store starts the saga, to
refuse a second start for one correlation id before anything is stored. This adapts a
``SagaHandle`` to that question: the event, as the saga runtime will see it (a
``SagaEvent`` of the named aggregate), goes to the saga's ``start_on``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ....core.records import EventEnvelope
from ....core.saga import SagaEvent


class StartsOn(Protocol):
    """A saga as a starter needs it (``SagaHandle`` is one): its name and ``start_on``."""

    @property
    def name(self) -> str: ...

    def starts_on(self, event: SagaEvent) -> bool: ...


@dataclass(frozen=True, slots=True)
class SubscribedSaga:
    """Saga ``saga`` as a starter for the stored events of aggregate ``aggregate``."""

    saga: StartsOn
    aggregate: str

    @property
    def name(self) -> str:
        return self.saga.name

    def starts(self, event: EventEnvelope, value: Any) -> bool:
        return self.saga.starts_on(SagaEvent(
            self.aggregate, event.aggregate_id, event.event_id, event.command_id,
            event.correlation_id, event.version, event.type, value, event.deferred,
        ))
