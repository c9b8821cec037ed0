"""The projection agent: aggregate events -> a handler -> a read model, applied once.

Per source partition the view stores the next offset it will apply, in the same RocksDB
write batch as the view's writes. A batch is handled so:

1. the first time a partition shows up (after a start or a rebalance), records between
   the stored offset and the first delivered one are read straight from Kafka: the group's
   committed offset may be ahead of this worker's view if another worker held the
   partition meanwhile;
2. records below the stored offset are skipped (re-delivery after a crash);
3. each event is decoded and given to the handler; an undecodable event, or one the
   handler raises on, is dead-lettered and its writes are dropped;
4. the view's writes and the new offsets are committed in one batch.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...codec import avro
from ...codec.payloads import load_payload
from ...core.records import EventEnvelope
from ...errors import HandlerFailed, RecordError
from ..deadletters import dead_letter
from ..io import Incoming, Outgoing, PartitionReader, Publisher
from ..views import View, ViewStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProjectedEvent:
    """One stored aggregate event, as a projection handler sees it."""

    aggregate: str
    aggregate_id: str
    version: int
    value: Any
    envelope: EventEnvelope


Handler = Callable[[ProjectedEvent, View], None | Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ProjectionSource:
    """One events topic a projection reads, with the types to decode its payloads."""

    aggregate: str
    topic: str
    event_types: Mapping[str, type]


class ProjectionAgent:
    """Applies the events of its sources to one projection's view, each exactly once."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        *,
        sources: Sequence[ProjectionSource],
        store: ViewStore,
        reader: PartitionReader,
        publisher: Publisher,
        deadletter_topic: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self._handler = handler
        self._sources = {source.topic: source for source in sources}
        self._store = store
        self._reader = reader
        self._publisher = publisher
        self._deadletter_topic = deadletter_topic
        self._clock = clock
        self._next: dict[tuple[str, int], int] = {}  # partitions this worker is applying

    @property
    def topics(self) -> list[str]:
        return list(self._sources)

    def revoke(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Forget revoked partitions: the next time, start from the stored offset again."""
        for key in partitions:
            self._next.pop(key, None)

    async def process(self, batch: Sequence[Incoming]) -> None:
        """Apply one batch of event records (see the module docstring)."""
        letters: list[Outgoing] = []
        now_ms = int(self._clock() * 1000)
        for record in batch:
            key = (record.topic, record.partition)
            if key not in self._next:
                await self._catch_up(key, record.offset, letters, now_ms)
            if record.offset < self._next[key]:
                continue  # applied before a crash: the view already holds it
            await self._apply(record, letters, now_ms)
            self._next[key] = record.offset + 1
        if letters:
            await self._publisher.publish(letters)
        touched = {(r.topic, r.partition) for r in batch}
        self._store.commit({key: self._next[key] for key in touched})

    async def _catch_up(
        self, key: tuple[str, int], first: int, letters: list[Outgoing], now_ms: int
    ) -> None:
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
                    await self._apply(record, letters, now_ms)
                    self._next[key] = record.offset + 1
            self._next[key] = max(self._next[key], first)

    async def _apply(self, record: Incoming, letters: list[Outgoing], now_ms: int) -> None:
        view = self._store.view
        source = self._sources[record.topic]
        try:
            envelope = avro.decode_as(record.value or b"", EventEnvelope)
            value = load_payload(envelope.type, envelope.payload, source.event_types)
            event = ProjectedEvent(
                source.aggregate, envelope.aggregate_id, envelope.version, value, envelope
            )
            try:
                result = self._handler(event, view)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                raise HandlerFailed(
                    f"projection {self.name} failed on {envelope.aggregate_id}/"
                    f"{envelope.version}: {type(exc).__name__}: {exc}"
                ) from exc
        except RecordError as exc:
            view._discard()
            log.error("projection %s dead-letters %s/%d@%d: %s",
                      self.name, record.topic, record.partition, record.offset, exc)
            letters.append(dead_letter(record, exc, self._deadletter_topic, now_ms))
            return
        view._keep()
