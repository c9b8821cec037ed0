"""The projection agent: aggregate events -> a handler -> a read model, applied once.

Per source partition the view stores the next offset it will apply, in the same RocksDB
write batch as the view's writes. A batch is handled so:

1. the first time a partition shows up (after a start or a rebalance), records between
   the stored offset and the first delivered one are read straight from Kafka: the group's
   committed offset may be ahead of this worker's view if another worker held the
   partition meanwhile;
2. records below the stored offset are skipped (re-delivery after a crash);
3. each event is decoded and given to the handler; an undecodable event, or one the
   handler raises on, is dead-lettered and its writes are dropped; the workflow signals
   the handler sends (``await event.signal(...)``, ``shell/kinds/projection/signals.py``) are
   answered before it returns, so before step 4;
4. the view's writes and the new offsets are committed in one batch.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ....codec import avro
from ....codec.payloads import load_payload
from ....core.limits import check_event
from ....core.records import EventEnvelope
from ....errors import HandlerFailed
from ...runtime.hosting import Input, Runtime, TopicPartition
from ...runtime.io import Incoming, Outgoing
from ...runtime.journaled import Backstop, EventSource
from ...runtime.pipeline import Finish
from .signals import EventSignals, ProjectionSignals
from .views import View, ViewStore

if TYPE_CHECKING:
    from ..workflow.handle import WorkflowHandle

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProjectedEvent:
    """One stored aggregate event, as a projection handler sees it."""

    aggregate: str
    aggregate_id: str
    version: int
    value: Any
    envelope: EventEnvelope
    _signals: EventSignals | None = field(default=None, repr=False, compare=False)

    def signal(
        self, workflow: WorkflowHandle, instance_id: str, name: str, payload: Any = None, *,
        timeout: float | None = None,
    ) -> Coroutine[Any, Any, None]:
        """Signal ``name`` with ``payload`` to a workflow instance; await it in the handler.

        The signal's id is derived from this event (``shell/kinds/projection/signals.py``), so
        handling the event again stores no second signal. Await every call before the
        handler returns (an ``async def`` handler): one that is not fails the event.

        Raises:
            WorkflowEnded: The instance has ended (catch it: the projection goes on).
            WorkflowNotFound: No instance was ever started with this id.
            SchemaError: The payload cannot be stored, or the workflow refused it.
            LimitError: ``instance_id`` or ``name`` breaks the id limits, or the payload
                is too large.
            ReplyTimeout: No answer within ``timeout`` s (default ``App(command_timeout)``).
        """
        if self._signals is None:
            raise RuntimeError("only an event a projection agent hands to its handler can signal")
        return self._signals.signal(workflow, instance_id, name, payload, timeout)


Handler = Callable[[ProjectedEvent, View], None | Awaitable[None]]


#: One events topic a projection reads, with the types to decode its payloads (the
#: orchestration router reads the same: the runtime's ``EventSource``).
ProjectionSource = EventSource


class ProjectionAgent:
    """Applies the events of its sources to one projection's view, each exactly once."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        *,
        sources: Sequence[ProjectionSource],
        store: ViewStore,
        runtime: Runtime,
        signals: ProjectionSignals | None = None,
    ) -> None:
        self.name = name
        self._signals = signals
        self._handler = handler
        self._sources = {source.topic: source for source in sources}
        self._store = store
        self._runtime = runtime
        self._backstop = Backstop(runtime, f"projection {name}")
        self._reader = runtime.reader()
        self._publisher = runtime.publisher
        self._next: dict[tuple[str, int], int] = {}  # partitions this worker is applying

    @property
    def topics(self) -> list[str]:
        return list(self._sources)

    # -- the hosting seam ----------------------------------------------------------------

    @property
    def inputs(self) -> Sequence[Input]:
        return [Input(f"projection-{self.name}", tuple(self._sources), self._start)]

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Nothing to do at once: a source partition is caught up at its first record."""

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        """Forget revoked partitions: the next time, start from the stored offset again."""
        for key in partitions:
            self._next.pop(key, None)

    def close(self) -> None:
        if self._signals is not None:
            self._signals.close()
        self._store.close()

    async def _start(self, batch: list[Incoming]) -> Finish:
        await self.process(batch)
        return _nothing

    async def process(self, batch: Sequence[Incoming]) -> None:
        """Apply one batch of event records (see the module docstring)."""
        letters: list[Outgoing] = []
        for record in batch:
            key = (record.topic, record.partition)
            if key not in self._next:
                await self._catch_up(key, record.offset, letters)
            if record.offset < self._next[key]:
                continue  # applied before a crash: the view already holds it
            await self._apply(record, letters)
            self._next[key] = record.offset + 1
        if letters:
            await self._publisher.publish(letters)
        touched = {(r.topic, r.partition) for r in batch}
        self._store.commit({key: self._next[key] for key in touched})

    async def _catch_up(self, key: tuple[str, int], first: int, letters: list[Outgoing]) -> None:
        topic, partition = key
        stored = self._store.offset(topic, partition)
        low, _ = await self._reader.watermarks(topic, partition)
        start = max(stored if stored is not None else low, low)
        self._next[key] = start
        if start < first:
            log.info("projection %s: reading %s/%d offsets %d..%d it has not applied",
                     self.name, topic, partition, start, first)
            async for chunk in self._reader.read(topic, partition, start, first):
                for record in chunk:
                    await self._apply(record, letters)
                    self._next[key] = record.offset + 1
            self._next[key] = max(self._next[key], first)

    async def _apply(self, record: Incoming, letters: list[Outgoing]) -> None:
        view = self._store.view
        source = self._sources[record.topic]
        try:
            envelope = check_event(avro.decode_as(record.value or b"", EventEnvelope))
            if envelope.version <= self._store.version(source.aggregate, envelope.aggregate_id):
                # A second copy of an applied event (a zombie's write, another producer's):
                # the instance's history has it once, so the view does too.
                log.info("projection %s skips %s/%d@%d: %s version %d is applied already",
                         self.name, record.topic, record.partition, record.offset,
                         envelope.aggregate_id[:100], envelope.version)
                return
            value = load_payload(envelope.type, envelope.payload, source.event_types)
            signals = None if self._signals is None else self._signals.for_event(
                source.aggregate, envelope.aggregate_id, envelope.version
            )
            event = ProjectedEvent(
                source.aggregate, envelope.aggregate_id, envelope.version, value, envelope, signals
            )
            try:
                result = self._handler(event, view)
                if inspect.isawaitable(result):
                    await result
                if signals is not None:
                    signals.check_awaited()  # before the commit: no signal is left behind it
            except Exception as exc:
                raise HandlerFailed(
                    f"projection {self.name} failed on {envelope.aggregate_id}/"
                    f"{envelope.version}: {type(exc).__name__}: {exc}"
                ) from exc
        except Exception as exc:  # noqa: BLE001 - whatever the record holds, the next one goes on
            view._discard()
            letters.append(self._backstop.letter(record, exc))
            return
        view._keep()
        self._store.applied(source.aggregate, envelope.aggregate_id, envelope.version)


async def _nothing() -> None:
    return None
