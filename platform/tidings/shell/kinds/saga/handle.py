"""``app.saga(...)``: declare a saga hosted on Kafka, and its handle.

Declaring does no I/O: ``declare_saga`` validates the definition (``core.saga``), registers
the handle with ``app.host(handle)`` and returns it. The worker calls ``handle.open(runtime)``
to run the saga (``tidings.shell.kinds.saga.agent``); a program reads a saga's state with
``await handle.status(saga_id)``, straight from the journal topic. See docs/sagas.md::

    transfers = app.saga(
        "transfer", subscribe=[accounts], start_on=lambda e: isinstance(e.value, TransferSent),
        initial=Transfer(), handle=handle, on_enter=on_enter,
    )
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....codec import avro
from ....core.limits import check_id
from ....core.partitioning import partition_for
from ....core.saga import SagaDefinition, SagaEvent
from ....core.saga_records import SagaJournalEntry
from ....errors import BrokerError, DefinitionError, RecordError
from .agent import SagaAgent, SagaAgents, SagaRouter, SagaStore, SagaTopics
from ...runtime.connection import KafkaConnection
from ...runtime.hosting import Runtime
from ...runtime.kafka import KafkaPartitionReader
from ...runtime.topics import TopicSpec, deadletter_topic, spec_for, topic_name

if TYPE_CHECKING:
    from ..aggregate.handle import AggregateHandle
    from ...app import App


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

    def __init__(self, app: App, definition: SagaDefinition, subscribe: tuple[AggregateHandle[Any, Any, Any], ...]) -> None:
        self.app = app
        self.definition = definition
        self.name = definition.name
        self.subscribe = subscribe
        self.topics = SagaTopics(
            inbox=topic_name(app.name, "saga", self.name, "inbox"),
            journal=topic_name(app.name, "saga", self.name, "journal"),
            replies=topic_name(app.name, "saga", self.name, "replies"),
            deadletter=deadletter_topic(app.name),
        )

    def subscribes_to(self, aggregate_name: str) -> bool:
        """Whether this saga reads the stored events of aggregate ``aggregate_name``."""
        return any(source.name == aggregate_name for source in self.subscribe)

    def starts_on(self, event: SagaEvent) -> bool:
        """Whether ``event`` (of a subscribed aggregate) would start a saga: ``start_on``."""
        return bool(event.aggregate and self.subscribes_to(event.aggregate) and self.definition.start_on(event))

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
        reader = KafkaPartitionReader(self.app.connection_for(bootstrap))
        try:
            partition = partition_for(saga_id, self.app.partitions)
            low, high = await reader.watermarks(self.topics.journal, partition)
            prefix = f"{saga_id}/".encode("utf-8", "surrogatepass")
            by_seq: dict[int, SagaJournalEntry] = {}
            if high > low:
                async for chunk in reader.read(self.topics.journal, partition, low, high):
                    for record in chunk:
                        key = record.key or b""
                        if not key.startswith(prefix) or not key[len(prefix):].isdigit():
                            continue
                        try:
                            entry = avro.decode_as(record.value or b"", SagaJournalEntry)
                        except RecordError:
                            continue
                        if entry.saga_id == saga_id and entry.saga == self.name and entry.seq == int(key[len(prefix):]):
                            by_seq.setdefault(entry.seq, entry)
            return [by_seq[seq] for seq in sorted(by_seq)]
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
        partitions = self.app.partitions
        return [
            spec_for("inbox", self.topics.inbox, partitions=partitions),
            spec_for("journal", self.topics.journal, partitions=partitions),
            spec_for("replies", self.topics.replies, partitions=partitions),
            spec_for("deadletter", self.topics.deadletter, partitions=partitions),
        ]

    def open(self, runtime: Runtime) -> SagaAgents:
        """Open the store and return the router and the saga agent."""
        store = SagaStore(runtime.store_path(self.kind, self.name))
        sources = {source.topics.events: source.name for source in self.subscribe}
        router = SagaRouter(self.name, sources, self.topics, runtime)
        aggregates = {aggregate.name: aggregate for aggregate in self.app.aggregates}
        agent = SagaAgent(self.definition, app=self.app, topics=self.topics, store=store, runtime=runtime,
                          aggregates=aggregates)
        return SagaAgents(router, agent)


def declare_saga(
    app: App,
    name: str,
    *,
    subscribe: Iterable[Any],
    start_on: Callable[[SagaEvent], bool],
    initial: Any,
    handle: Callable[[Any, Any], Any],
    on_enter: Callable[[Any, bool], Any],
    state: Any = None,
) -> SagaHandle:
    """Declare a saga over the stored events of ``subscribe`` (see ``App.saga``).

    Raises:
        DefinitionError: listing every problem with the declaration.
    """
    from ..aggregate.handle import AggregateHandle

    reasons: list[str] = []
    sources = list(subscribe)
    if not sources:
        reasons.append("subscribe must name at least one aggregate handle")
    for source in sources:
        if not isinstance(source, AggregateHandle) or source.app is not app:
            reasons.append(f"{source!r:.100} is not an aggregate handle of this app")
    try:
        definition = SagaDefinition(name, start_on=start_on, initial=initial, handle=handle, on_enter=on_enter,
                                    state=state)
    except DefinitionError as exc:
        reasons.extend(exc.reasons)
    if reasons:
        raise DefinitionError(f"saga {name!r}", reasons)
    saga = SagaHandle(app, definition, tuple(sources))
    app.host(saga)
    return saga


def saga_named(app: App, name: str) -> SagaHandle:
    """Return the handle of the saga ``name`` declared in ``app``.

    Raises:
        LookupError: ``app`` declares no such saga (the message lists the known ones).
    """
    sagas = [hosted for hosted in app.hosted if isinstance(hosted, SagaHandle)]
    for saga in sagas:
        if saga.name == name:
            return saga
    known = ", ".join(sorted(s.name for s in sagas)) or "none"
    raise LookupError(f"app {app.name!r} has no saga {name!r}; known: {known}")
