"""``app.saga(...)``: declare a saga hosted on Kafka, and its handle.

Declaring does no I/O: ``declare_saga`` validates the definition (``core.saga``) and
returns the handle; ``App.saga`` registers it with ``app.host(handle)``. The worker calls
``handle.open(runtime)`` to run the saga (``tidings.shell.kinds.saga.agent``); a program
reads a saga's state with ``await handle.status(saga_id)``, straight from the journal topic. See docs/sagas.md::

    transfers = app.saga(
        "transfer", subscribe=[accounts], start_on=lambda e: isinstance(e.value, TransferSent),
        initial=Transfer(), handle=handle, on_enter=on_enter,
    )
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ....codec import avro
from ....core.limits import check_id
from ....core.partitioning import partition_for
from ....core.saga import SagaDefinition, SagaEvent
from ....core.saga_records import SagaJournalEntry
from ....errors import BrokerError, DefinitionError, RecordError
from ..aggregate.handle import AggregateHandle
from .agent import SagaAgent, SagaStore, SagaTopics, saga_router
from .starters import SubscribedSaga
from ...runtime.connection import KafkaConnection
from ...runtime.context import KindContext
from ...runtime.hosting import Runtime, hosted_named
from ...runtime.io import Incoming
from ...runtime.journaled import Agents, first_per_seq
from ...runtime.kafka import KafkaPartitionReader
from ...runtime.topics import TopicSpec, deadletter_topic, spec_for, topic_name


@dataclass(frozen=True, slots=True)
class SagaStatus:
    """Where a saga stands, as its journal says.

    Attributes:
        saga_id: The saga.
        seq: The seq of its last journal record.
        state: Its current state (its last state once ended), read with the state type.
        ended: Whether it has ended (``Stop()``, or a fault: then ``reason`` says why).
        transition: How it got there (``start``, ``handle``, ``expectation``, ``goto``,
            ``stop`` or ``fault``).
        entered_at_ms: When it entered the state.
        reason: Why it faulted, if it did.
    """

    saga_id: str
    seq: int
    state: Any
    ended: bool
    transition: str
    entered_at_ms: int
    reason: str | None = None


class SagaHandle:
    """What ``app.saga`` returns: the definition, its topics, and the saga's status."""

    def __init__(self, context: KindContext, definition: SagaDefinition,
                 subscribe: tuple[AggregateHandle[Any, Any, Any], ...]) -> None:
        self.context = context
        self.definition = definition
        self.name = definition.name
        self.subscribe = subscribe
        self.topics = SagaTopics(
            inbox=topic_name(context.name, "saga", self.name, "inbox"),
            journal=topic_name(context.name, "saga", self.name, "journal"),
            replies=topic_name(context.name, "saga", self.name, "replies"),
            deadletter=deadletter_topic(context.name),
        )

    def subscribes_to(self, aggregate_name: str) -> bool:
        """Whether this saga reads the stored events of aggregate ``aggregate_name``."""
        return any(source.name == aggregate_name for source in self.subscribe)

    def starts_on(self, event: SagaEvent) -> bool:
        """Whether ``event`` (of a subscribed aggregate) would start a saga: ``start_on``."""
        return bool(event.aggregate and self.subscribes_to(event.aggregate) and self.definition.start_on(event))

    def starter_for(self, aggregate_name: str) -> SubscribedSaga | None:
        """This saga as aggregate ``aggregate_name`` asks it (``App.sagas_of``); None if unsubscribed."""
        return SubscribedSaga(self, aggregate_name) if self.subscribes_to(aggregate_name) else None

    # -- reading ---------------------------------------------------------------------------

    async def journal(
        self, saga_id: str, *, bootstrap: str | KafkaConnection | None = None, timeout: float = 30.0,
    ) -> list[SagaJournalEntry]:
        """Return the saga's journal as the journal topic holds it now, in seq order.

        Reads the saga's partition from the start (no worker needed); a second record at a
        seq (a zombie's) is dropped, the first in offset order kept, as a worker does.

        Raises:
            LimitError: ``saga_id`` breaks the id limits.
            BrokerError: The topic is missing or Kafka did not answer.
        """
        check_id(saga_id, "saga_id")
        try:
            return await asyncio.wait_for(self._journal(saga_id, bootstrap), timeout)
        except TimeoutError:
            raise BrokerError(f"reading {self.topics.journal}: no answer from Kafka within {timeout} s") from None

    async def _journal(self, saga_id: str, bootstrap: str | KafkaConnection | None) -> list[SagaJournalEntry]:
        reader = KafkaPartitionReader(self.context.connection_for(bootstrap), group_prefix=f"{self.context.name}.")
        try:
            partition = partition_for(saga_id, self.context.partitions)
            low, high = await reader.watermarks(self.topics.journal, partition)
            chunks = [chunk async for chunk in reader.read(self.topics.journal, partition, low, high)] if high > low else []

            def decode(record: Incoming, seq: int) -> SagaJournalEntry | None:
                try:
                    entry = avro.decode_as(record.value or b"", SagaJournalEntry)
                except RecordError:
                    return None
                return entry if (entry.saga_id, entry.saga, entry.seq) == (saga_id, self.name, seq) else None

            return first_per_seq(chunks, saga_id, decode)
        finally:
            reader.close()

    async def status(
        self, saga_id: str, *, bootstrap: str | KafkaConnection | None = None, timeout: float = 30.0,
    ) -> SagaStatus | None:
        """Return where saga ``saga_id`` stands (its last journal record), or None if never started.

        Raises:
            LimitError: ``saga_id`` breaks the id limits.
            BrokerError: The topic is missing or Kafka did not answer.
        """
        records = await self.journal(saga_id, bootstrap=bootstrap, timeout=timeout)
        if not records:
            return None
        last = records[-1]
        entered = next((r for r in reversed(records) if not r.ended), last)
        state = self.definition.load_state(last.state) if last.state is not None else None
        return SagaStatus(saga_id, last.seq, state, last.ended, last.transition, entered.entered_at_ms, last.reason)

    # -- the hosting protocol (the worker side) ---------------------------------------------

    @property
    def kind(self) -> str:
        return "saga"

    def topic_specs(self) -> list[TopicSpec]:
        """The inbox, journal and replies topics, co-partitioned (and the dead letters)."""
        partitions = self.context.partitions
        return [
            spec_for("inbox", self.topics.inbox, partitions=partitions),
            spec_for("journal", self.topics.journal, partitions=partitions),
            spec_for("replies", self.topics.replies, partitions=partitions),
            spec_for("deadletter", self.topics.deadletter, partitions=partitions),
        ]

    def open(self, runtime: Runtime) -> Agents:
        """Open the store and return the router and the saga agent."""
        store = SagaStore(runtime.store_path(self.kind, self.name))
        sources = {source.topics.events: source.name for source in self.subscribe}
        router = saga_router(self.name, sources, self.topics, runtime)
        aggregates = {aggregate.name: aggregate for aggregate in self.context.declared("aggregate")
                      if isinstance(aggregate, AggregateHandle)}
        agent = SagaAgent(self.definition, app=self.context, topics=self.topics, store=store, runtime=runtime,
                          aggregates=aggregates)
        return Agents((router, agent))


def declare_saga(
    context: KindContext,
    name: str,
    *,
    subscribe: Iterable[Any],
    start_on: Callable[[SagaEvent], bool],
    initial: Any,
    handle: Callable[[Any, Any], Any],
    on_enter: Callable[[Any, bool], Any],
    state: Any = None,
) -> SagaHandle:
    """Validate a saga of ``context`` over the stored events of ``subscribe``; return its handle.

    See ``App.saga``, which registers the handle.

    Raises:
        DefinitionError: listing every problem with the declaration.
    """
    reasons: list[str] = []
    sources = list(subscribe)
    if not sources:
        reasons.append("subscribe must name at least one aggregate handle")
    for source in sources:
        if not isinstance(source, AggregateHandle) or source.context is not context:
            reasons.append(f"{source!r:.100} is not an aggregate handle of this app")
    try:
        definition = SagaDefinition(name, start_on=start_on, initial=initial, handle=handle, on_enter=on_enter,
                                    state=state)
    except DefinitionError as exc:
        reasons.extend(exc.reasons)
    if reasons:
        raise DefinitionError(f"saga {name!r}", reasons)
    return SagaHandle(context, definition, tuple(sources))


def saga_named(context: KindContext, name: str) -> SagaHandle:
    """Return the handle of the saga ``name`` declared in ``context`` (an App).

    Raises:
        LookupError: ``context`` declares no such saga (the message lists the known ones).
    """
    saga = hosted_named(context.declared("saga"), "saga", name, app=context.name)
    assert isinstance(saga, SagaHandle)
    return saga
