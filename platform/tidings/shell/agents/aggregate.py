"""The aggregate agent: commands topic -> decide/fold -> events topic, RocksDB, replies.

One ``process`` call handles one batch of command records from the commands topic:

1. decode each record; an undecodable one, or one with an unknown type or an invalid
   payload, becomes a dead letter (and, if it named ``reply_to``, a ``rejected`` reply);
2. before the first command of a partition is decided, bring that partition's instances
   up to date with the events topic (``catch_up``): after a rebalance another worker may
   have written events this worker's RocksDB has not seen;
3. decide every command in order with the pure core (``tidings.core.aggregate``);
4. produce the new events and wait until the broker has them all; only then produce the
   replies (without waiting: a lost reply is re-sent when the caller retries) and the
   dead letters (waiting: they must not be lost), so no reply ever acknowledges an event
   that could be lost;
5. write instances, replies and the applied events offset in one RocksDB batch.

The caller acks the batch's offsets only after ``process`` returns, so a crash at any
point re-delivers commands whose effects are either stored (the command id is then known
from the journal and gets its first verdict again) or not (it is decided afresh).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...codec import avro
from ...codec.payloads import load_payload, payload_of
from ...core.aggregate import (
    AggregateDefinition,
    AggregateInstance,
    handle,
    reply_for_stored,
    restore,
)
from ...core.partitioning import partition_for
from ...core.records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from ...errors import RecordError, SchemaError
from ..deadletters import dead_letter
from ..io import Delivered, Incoming, Outgoing, PartitionReader, Publisher
from ..state import AggregateStore

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Decided:
    """What deciding one batch produced, waiting for the events' acks."""

    events: list[Outgoing] = field(default_factory=list)
    after: list[Outgoing] = field(default_factory=list)  # dead letters, forwards: awaited
    notices: list[Outgoing] = field(default_factory=list)  # replies: sent, not awaited
    dirty: dict[str, AggregateInstance[Any]] = field(default_factory=dict)
    replies: dict[tuple[str, str], bytes] = field(default_factory=dict)
    forget: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AggregateTopics:
    """The topics of one aggregate definition."""

    commands: str
    events: str
    deadletter: str


class AggregateAgent:
    """Runs one aggregate definition over the command partitions assigned to this worker."""

    def __init__(
        self,
        definition: AggregateDefinition[Any, Any, Any],
        *,
        topics: AggregateTopics,
        partitions: int,
        store: AggregateStore[Any],
        publisher: Publisher,
        reader: PartitionReader,
        decode_command: Callable[[Incoming], CommandEnvelope],
        clock: Callable[[], float] = time.time,
        cache_size: int = 100_000,
    ) -> None:
        self.definition = definition
        self.topics = topics
        self._partitions = partitions
        self._store = store
        self._publisher = publisher
        self._reader = reader
        self._decode_command = decode_command
        self._clock = clock
        self._cache_size = cache_size
        # Live instances per partition; a partition's entries go when it is revoked.
        self._cache: dict[int, OrderedDict[str, AggregateInstance[Any]]] = {}
        self._ready: set[int] = set()
        self._journal_end: dict[int, int] = {}  # next offset of each journal partition
        self._unwritten: dict[tuple[str, str], bytes] = {}  # replies not in RocksDB yet

    def revoke(self, partitions: Iterable[int]) -> None:
        """Forget what is cached for ``partitions``: another worker may change them now."""
        for partition in partitions:
            self._ready.discard(partition)
            self._cache.pop(partition, None)
            self._journal_end.pop(partition, None)

    async def process(self, batch: Sequence[Incoming]) -> None:
        """Handle one batch of command records (see the module docstring)."""
        finish = await self.start(batch)
        await finish()

    async def start(self, batch: Sequence[Incoming]) -> Callable[[], Awaitable[None]]:
        """Decide ``batch`` and start producing its events; return what completes it.

        The returned coroutine function waits for the events' acks, then sends replies
        and dead letters and writes RocksDB. The next batch may be started before it runs
        (decisions see this batch's effects in memory); completions must run in order.
        """
        decided = await self._decide(batch)
        delivery = self._publisher.send(decided.events)

        async def finish() -> None:
            delivered = await delivery
            offsets = self._journal_offsets(delivered)
            if decided.notices:
                # Not awaited: a lost reply makes the caller retry with the same command
                # id, which gets this verdict again; waiting would only slow the pipeline.
                self._publisher.publish_later(decided.notices)
            if decided.after:
                await self._publisher.publish(decided.after)
            self._store.write(decided.dirty.values(), decided.replies, decided.forget, offsets)
            for key in decided.replies:
                self._unwritten.pop(key, None)

        return finish

    async def _decide(self, batch: Sequence[Incoming]) -> _Decided:
        now_ms = int(self._clock() * 1000)
        for partition in sorted({record.partition for record in batch} - self._ready):
            await self.catch_up(partition)
        decided = _Decided()
        for record in batch:
            try:
                command = self._decode_command(record)
            except RecordError as exc:
                decided.after.append(dead_letter(record, exc, self.topics.deadletter, now_ms))
                continue
            home = partition_for(command.aggregate_id, self._partitions)
            if home != record.partition:
                # A producer with another partitioner: send it where its instance lives.
                decided.after.append(self._forward(record, home))
                continue
            try:
                value = load_payload(command.type, command.payload, self.definition.command_types)
            except SchemaError as exc:
                decided.after.append(dead_letter(record, exc, self.topics.deadletter, now_ms))
                if command.reply_to:
                    decided.notices.append(self._rejection(command, str(exc), now_ms))
                continue
            key = (command.aggregate_id, command.command_id)
            instance = self._instance(record.partition, command.aggregate_id)
            handled = handle(
                self.definition, instance, command, value, now_ms=now_ms, encode=payload_of
            )
            if handled.duplicate:
                first = self._unwritten.get(key) or self._store.reply(*key)
                if first is not None and command.reply_to:
                    decided.notices.append(Outgoing(command.reply_to, key[1].encode(), first))
                continue
            self._cache_put(record.partition, handled.instance)
            decided.dirty[command.aggregate_id] = handled.instance
            for event in handled.stored:
                decided.events.append(self._event_record(record.partition, event))
            assert handled.reply is not None
            encoded_reply = avro.encode(handled.reply)
            decided.replies[key] = encoded_reply
            # Until RocksDB has it, a repeat of this command finds its reply here.
            self._unwritten[key] = encoded_reply
            decided.forget.extend((command.aggregate_id, gone) for gone in handled.forget)
            if command.reply_to:
                decided.notices.append(Outgoing(command.reply_to, key[1].encode(), encoded_reply))
        return decided

    async def catch_up(self, partition: int) -> None:
        """Fold every event of ``partition`` this worker's store has not applied yet."""
        low, high = await self._reader.watermarks(self.topics.events, partition)
        start = max(self._store.offset(partition) or 0, low)
        self._cache.pop(partition, None)
        if start < high:
            log.info(
                "restoring %s partition %d from the journal: offsets %d..%d",
                self.definition.name, partition, start, high,
            )
            async for chunk in self._reader.read(self.topics.events, partition, start, high):
                self._restore_chunk(partition, chunk)
        self._store.write((), {}, (), {partition: high})
        self._journal_end[partition] = high
        self._ready.add(partition)

    def instance(self, aggregate_id: str) -> AggregateInstance[Any]:
        """Return the current record of ``aggregate_id`` (cached, stored or new)."""
        return self._instance(partition_for(aggregate_id, self._partitions), aggregate_id)

    def _restore_chunk(self, partition: int, chunk: Sequence[Incoming]) -> None:
        dirty: dict[str, AggregateInstance[Any]] = {}
        replies: dict[tuple[str, str], bytes] = {}
        group: list[EventEnvelope] = []

        def close_group() -> None:
            if group:
                reply = reply_for_stored(group)
                replies[(reply.aggregate_id, reply.command_id)] = avro.encode(reply)
                group.clear()

        for record in chunk:
            try:
                event = avro.decode_as(record.value or b"", EventEnvelope)
                value = load_payload(event.type, event.payload, self.definition.event_types)
            except RecordError as exc:
                # Not ours to fix: the journal keeps it, the fold skips it, a human is told.
                log.error("skipping unreadable journal record %s/%d@%d: %s",
                          record.topic, record.partition, record.offset, exc)
                continue
            instance = dirty.get(event.aggregate_id) or self._instance(partition, event.aggregate_id)
            restored = restore(self.definition, instance, event, value)
            if restored is None:
                continue
            if group and (group[-1].command_id, group[-1].aggregate_id) != (
                event.command_id, event.aggregate_id
            ):
                close_group()
            group.append(event)
            dirty[event.aggregate_id] = restored
            self._cache_put(partition, restored)
        close_group()
        end = chunk[-1].offset + 1 if chunk else None
        self._store.write(dirty.values(), replies, (), {} if end is None else {partition: end})

    def _journal_offsets(self, delivered: Sequence[Delivered]) -> dict[int, int]:
        """Return the new journal end per partition, checking nobody else wrote there."""
        counts: dict[int, int] = {}
        ends: dict[int, int] = {}
        for position in delivered:
            counts[position.partition] = counts.get(position.partition, 0) + 1
            ends[position.partition] = max(ends.get(position.partition, 0), position.offset + 1)
        for partition, end in list(ends.items()):
            expected = self._journal_end.get(partition)
            if expected is not None and end - counts[partition] != expected:
                # Someone else wrote to this partition of the journal (a zombie worker):
                # re-read it before deciding anything more there.
                log.warning("journal partition %d moved under us; re-reading it", partition)
                self._ready.discard(partition)
                self._journal_end.pop(partition, None)
                del ends[partition]
            else:
                self._journal_end[partition] = end
        return ends

    def _instance(self, partition: int, aggregate_id: str) -> AggregateInstance[Any]:
        cache = self._cache.get(partition)
        if cache is not None:
            found = cache.get(aggregate_id)
            if found is not None:
                cache.move_to_end(aggregate_id)
                return found
        found = self._store.load(aggregate_id)
        if found is None:
            found = AggregateInstance.new(aggregate_id, self.definition.initial)
        self._cache_put(partition, found)
        return found

    def _cache_put(self, partition: int, instance: AggregateInstance[Any]) -> None:
        cache = self._cache.setdefault(partition, OrderedDict())
        cache[instance.aggregate_id] = instance
        cache.move_to_end(instance.aggregate_id)
        if len(cache) > self._cache_size:
            cache.popitem(last=False)

    def _event_record(self, partition: int, event: EventEnvelope) -> Outgoing:
        key = f"{event.aggregate_id}/{event.version}".encode()
        return Outgoing(self.topics.events, key, avro.encode(event), partition)

    def _forward(self, record: Incoming, home: int) -> Outgoing:
        headers = tuple(record.headers.items())
        return Outgoing(self.topics.commands, record.key, record.value, home, headers)

    def _rejection(self, command: CommandEnvelope, reason: str, now_ms: int) -> Outgoing:
        reply = ReplyEnvelope(
            command_id=command.command_id,
            correlation_id=command.correlation_id,
            aggregate_id=command.aggregate_id,
            status="rejected",
            version=0,
            timestamp_ms=now_ms,
            reason=reason,
        )
        assert command.reply_to is not None
        return Outgoing(command.reply_to, command.command_id.encode(), avro.encode(reply))
