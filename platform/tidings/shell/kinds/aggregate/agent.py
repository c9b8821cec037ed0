"""The aggregate agent: commands topic -> decide/fold -> events topic, RocksDB, replies.

One ``process`` call handles one batch of command records from the commands topic:

1. before the first command of a partition is decided, bring that partition's instances
   up to date with the events topic (the ``PartitionOwner``'s catch-up): after a
   rebalance another worker may have written events this worker's RocksDB has not seen;
2. decode each record; an undecodable one, one with an unknown type, an invalid payload
   or a ``reply_to`` that is not a topic a reply may go to, and one on which ``decide`` or
   ``fold`` raises or whose events are too large to store, becomes a dead letter (and, if
   it named a usable ``reply_to``, a ``rejected`` reply); a command on the wrong
   partition is forwarded to its home partition;
3. decide every command in order with the pure core (``tidings.core.aggregate``), which
   also refuses a command whose events would start a saga this instance already started
   for its correlation id (``tidings.core.saga_starts``; the started pairs live in RocksDB
   and are rebuilt from the journal by running the same starters over stored events);
4. produce the new events, and each first verdict that stored no event (rejected,
   ignored, deferred, a conflict) to the verdicts topic, and wait until the broker has them
   all; only then produce the replies (without waiting: a lost reply is re-sent when the
   caller retries) and the dead letters (waiting: they must not be lost), so no reply ever
   acknowledges an event or a verdict that could be lost;
5. write instances, first verdicts, started sagas and the applied events and verdicts
   offsets in one RocksDB batch.

A command id that got a verdict is answered with that verdict again, without deciding,
for the definition's ``command_retention`` (7 days by default) however many commands came
in between: the store keeps first verdicts by time (``kinds/aggregate/store.py``), and a store rebuilt
from Kafka finds them again in the events (a verdict that stored events) and the verdicts
topic (one that stored none), whose retention is the same.

The caller acks the batch's offsets only after ``process`` returns, so a crash at any
point re-delivers commands whose effects are either stored (the command id is then known
from the journal and gets its first verdict again) or not (it is decided afresh).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ....codec import avro
from ....codec.answers import JSON_HEADERS, encode_answer, reply_as_json
from ....codec.content import content_type, decode_record
from ....codec.json import CONTENT_TYPE
from ....codec.payloads import load_payload, payload_of
from ....core.aggregate import (
    AggregateDefinition,
    AggregateInstance,
    Handled,
    handle,
    reply_for_stored,
    restore,
)
from ....core.records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from ....core.saga_starts import SagaStarter, started_by
from ....errors import HandlerFailed, RecordError, SchemaError
from ...runtime.hosting import Input, Runtime, TopicPartition
from ...runtime.io import Delivered, Incoming, Outgoing
from ...runtime.journaled import Backstop, Journaled
from ...runtime.tracing import CONSUMER, Tracing, carrier_of, headers_of
from .store import AggregateStore

log = logging.getLogger(__name__)

R = TypeVar("R", EventEnvelope, ReplyEnvelope)

Admit = Callable[[CommandEnvelope, Any, int], Any]
"""``admit(envelope, command, now_ms) -> command``: what a kind makes of a command before
``decide`` sees it, judged by the worker's clock (the schedule aggregate's: it stamps the
fire with the worker's instant and its start token); a ``RecordError`` it raises
dead-letters the command. None for an application's aggregate."""

#: Largest event record the agent produces; a command whose events are larger is refused
#: (the broker's default ``max.message.bytes`` is 1 MiB, and the reply carries them too).
MAX_EVENT_BYTES = 900_000


@dataclass(slots=True)
class _Decided:
    """What deciding one batch produced, waiting for the events' acks."""

    events: list[Outgoing] = field(default_factory=list)
    after: list[Outgoing] = field(default_factory=list)  # dead letters, forwards: awaited
    notices: list[Outgoing] = field(default_factory=list)  # replies: sent, not awaited
    dirty: dict[str, AggregateInstance[Any]] = field(default_factory=dict)
    verdicts: dict[tuple[str, str], tuple[bytes, int]] = field(default_factory=dict)
    sagas: list[tuple[str, str, str]] = field(default_factory=list)  # (id, saga, correlation)
    replied: list[int | None] = field(default_factory=list)  # Kafka timestamps of the commands answered


@dataclass(frozen=True, slots=True)
class AggregateTopics:
    """The topics of one aggregate definition."""

    commands: str
    events: str
    deadletter: str
    verdicts: str


class AggregateAgent:
    """Runs one aggregate definition over the command partitions assigned to this worker."""

    def __init__(
        self,
        definition: AggregateDefinition[Any, Any, Any],
        *,
        topics: AggregateTopics,
        store: AggregateStore[Any],
        runtime: Runtime,
        cache_size: int = 100_000,
        starters: Sequence[SagaStarter] = (),
        admit: Admit | None = None,
    ) -> None:
        self.definition = definition
        self._admit = admit
        self._starters = tuple(starters)
        self.topics = topics
        self._store = store
        self._runtime = runtime
        self._publisher = runtime.publisher
        self._clock = runtime.clock
        self._cache_size = cache_size
        self._metrics = runtime.metrics
        self._retention_ms = definition.command_retention_ms
        self._expired_at = 0.0  # when expired verdicts were last removed (clock seconds)
        self.journaled = Journaled(
            runtime, "aggregate", definition.name, journal=topics.events, instances=self._instances,
            applied=store.offset, restore=self._restore_chunk, caught_up=self._caught_up,
            # Another writer: what is cached may miss its events; re-read before deciding.
            on_foreign=self._forget,
        )
        self.owner = self.journaled.owner
        assert self.journaled.reader is not None
        self._reader = self.journaled.reader
        self._backstop = Backstop(runtime, f"aggregate {definition.name}")
        # Live instances per partition; a partition's entries go when it is revoked.
        self._cache: dict[int, OrderedDict[str, AggregateInstance[Any]]] = {}
        self._unwritten: dict[tuple[str, str], bytes] = {}  # replies not in RocksDB yet
        self._unwritten_sagas: set[tuple[str, str, str]] = set()  # starts not in RocksDB yet

    # -- the hosting seam ----------------------------------------------------------------

    @property
    def inputs(self) -> Sequence[Input]:
        return [Input(f"aggregate-{self.definition.name}", (self.topics.commands,), self.start,
                      partitions=self.owner.partitions)]

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Nothing to do at once: a partition is caught up before its first command."""

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        """Forget what is cached for revoked partitions: another worker may change them now."""
        mine = [p for topic, p in partitions if topic == self.topics.commands]
        self.owner.revoke(mine)
        for partition in mine:
            self._cache.pop(partition, None)

    def close(self) -> None:
        self._store.close()

    def _forget(self, partition: int) -> None:
        self._cache.pop(partition, None)

    def _instances(self) -> dict[str, int]:
        """``tidings_instances``, on scrape (another thread: only copies and lengths)."""
        return {"cached": sum(len(cache) for cache in list(self._cache.values()))}

    # -- deciding --------------------------------------------------------------------------

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
            offsets = self.owner.settle(delivered)
            verdict_offsets = self._verdict_ends(delivered)
            if decided.notices:
                # Not awaited: a lost reply makes the caller retry with the same command
                # id, which gets this verdict again; waiting would only slow the pipeline.
                self._publisher.publish_later(decided.notices)
                self._metrics.replied(self.definition.name, decided.replied)
            if decided.after:
                await self._publisher.publish(decided.after)
            self._store.write(decided.dirty.values(), decided.verdicts, offsets, decided.sagas,
                              verdict_offsets)
            for key in decided.verdicts:
                self._unwritten.pop(key, None)
            self._unwritten_sagas.difference_update(decided.sagas)
            self._expire()

        return finish

    def _verdict_ends(self, delivered: Sequence[Delivered]) -> dict[int, int]:
        """The verdicts topic's next offset per ready partition, after this batch's writes.

        Records someone else wrote before ours are skipped (never read into the store):
        only this worker writes the partitions it owns.
        """
        ends: dict[int, int] = {}
        for position in delivered:
            # An offset Kafka did not report (Delivered) moves nothing: the end stays behind.
            if position.topic == self.topics.verdicts and self.owner.is_ready(position.partition) \
                    and position.offset is not None:
                ends[position.partition] = max(ends.get(position.partition, 0), position.offset + 1)
        return ends

    def _expire(self) -> None:
        """Forget first verdicts older than ``command_retention``, at most once a minute."""
        now = self._clock()
        if now - self._expired_at < 60:
            return
        self._expired_at = now
        forgotten = self._store.expire(int(now * 1000) - self._retention_ms)
        if forgotten:
            log.info("aggregate %s forgot %d first verdicts older than %s", self.definition.name,
                     forgotten, self.definition.command_retention)

    async def _decide(self, batch: Sequence[Incoming]) -> _Decided:
        now_ms = int(self._clock() * 1000)
        await self.owner.ensure_ready({record.partition for record in batch})
        tracing = self._runtime.tracing
        if tracing is not None and len(batch) > 1:
            # The batch is decided at once: its span links to the trace of each record. (A
            # batch of one has none: the record's decide span is in its trace already.)
            with tracing.span(f"decide batch {self.definition.name}", None, kind=CONSUMER,
                              links=(carrier_of(None, record.headers) for record in batch),
                              attributes={"tidings.aggregate": self.definition.name,
                                          "messaging.batch.message_count": len(batch)}):
                return self._decide_all(batch, now_ms, tracing)
        return self._decide_all(batch, now_ms, tracing)

    def _decide_all(self, batch: Sequence[Incoming], now_ms: int, tracing: Tracing | None) -> _Decided:
        decided = _Decided()
        for record in batch:
            answered = len(decided.notices)
            try:
                self._decide_one(record, decided, now_ms, tracing)
            except RecordError as exc:  # only a record's fault: user code raising is a HandlerFailed
                decided.after.append(self._backstop.letter(record, exc))
            if len(decided.notices) > answered:
                decided.replied.append(record.timestamp_ms)
        return decided

    def _decide_one(self, record: Incoming, decided: _Decided, now_ms: int, tracing: Tracing | None = None) -> None:
        """Decide one record; a ``RecordError`` from here dead-letters it (nothing changed)."""
        command = decode_record(
            record.value, CommandEnvelope, headers=record.headers, timestamp_ms=record.timestamp_ms
        )
        forward = self.owner.forward(record, command.aggregate_id)
        if forward is not None:
            decided.after.append(forward)
            return
        if tracing is None:
            self._decide_command(record, command, decided, now_ms, None)
            return
        # A span per command, under the trace its sender started; its events carry the
        # span's context, so what they cause (a saga's step) goes on in that trace.
        with tracing.span(f"decide {self.definition.name}", carrier_of(command.metadata, record.headers),
                          kind=CONSUMER,
                          attributes={"tidings.aggregate": self.definition.name,
                                      "tidings.aggregate_id": command.aggregate_id,
                                      "tidings.command_id": command.command_id,
                                      "tidings.command_type": command.type,
                                      "tidings.correlation_id": command.correlation_id}) as span:
            verdict = self._decide_command(record, command, decided, now_ms, tracing.carrier(span))
            if verdict is not None:
                span.set_attribute("tidings.verdict", verdict.status)
                span.set_attribute("tidings.version", verdict.version)
                if verdict.status == "rejected" and verdict.reason:
                    tracing.fail(span, verdict.reason)

    def _decide_command(
        self, record: Incoming, command: CommandEnvelope, decided: _Decided, now_ms: int,
        carrier: dict[str, str] | None,
    ) -> ReplyEnvelope | None:
        """Decide one command at home; return its verdict (None: a repeat, answered again)."""
        reply_to = self._runtime.reply_topic(command.reply_to)
        as_json = content_type(record.headers) == CONTENT_TYPE  # a JSON command is answered in JSON
        key = (command.aggregate_id, command.command_id)
        partition = record.partition
        try:
            value = load_payload(command.type, command.payload, self.definition.command_types)
            if self._admit is not None:
                value = self._admit(command, value, now_ms)
            handled = self._handle(self._instance(partition, command.aggregate_id), command, value, now_ms)
            if carrier and handled.reply is not None:
                handled = _traced(handled, carrier)
            events = [self._event_record(partition, event, carrier) for event in handled.stored]
            encoded_reply = None if handled.reply is None else avro.encode(handled.reply)
            if encoded_reply is not None and not handled.stored:
                # No event tells a rebuilt store this verdict: journal the verdict itself.
                events.append(self._verdict_record(partition, command, encoded_reply))
        except RecordError as exc:
            # The command named where to answer: say why it was refused (it is dead-lettered too).
            if reply_to:
                decided.notices.append(self._rejection(command, reply_to, str(exc), now_ms, as_json))
            raise
        if handled.duplicate:
            first = self._unwritten.get(key) or self._store.reply(*key)
            if first is not None and reply_to:
                # Stored as Avro whatever the first request was: the repeat gets its own form.
                value = reply_as_json(first) if as_json else first
                decided.notices.append(_answer(reply_to, command, value, as_json))
            return None
        self._cache_put(partition, handled.instance)
        decided.dirty[command.aggregate_id] = handled.instance
        decided.events.extend(events)
        assert handled.reply is not None and encoded_reply is not None
        decided.verdicts[key] = (encoded_reply, now_ms)
        # Until RocksDB has it, a repeat of this command finds its reply here.
        self._unwritten[key] = encoded_reply
        for saga, correlation_id in handled.sagas:
            # Until RocksDB has it, the next command (this batch or a pipelined one) sees it here.
            start = (command.aggregate_id, saga, correlation_id)
            decided.sagas.append(start)
            self._unwritten_sagas.add(start)
        if reply_to:
            value = encode_answer(handled.reply, as_json=True) if as_json else encoded_reply
            decided.notices.append(_answer(reply_to, command, value, as_json))
        return handled.reply

    def _handle(
        self, instance: AggregateInstance[Any], command: CommandEnvelope, value: Any, now_ms: int
    ) -> Handled[Any]:
        """Run ``decide``, ``fold`` and ``start_on`` (user code) on one command.

        What they raise is the record's: it becomes a ``HandlerFailed`` (dead-lettered).
        """
        aggregate_id = instance.aggregate_id

        def started(saga: str, correlation_id: str) -> bool:
            return (aggregate_id, saga, correlation_id) in self._unwritten_sagas or (
                self._store.saga_started(aggregate_id, saga, correlation_id)
            )

        def seen(command_id: str) -> bool:
            return (aggregate_id, command_id) in self._unwritten or (
                self._store.reply(aggregate_id, command_id) is not None
            )

        try:
            return handle(self.definition, instance, command, value, now_ms=now_ms,
                          encode=payload_of, starters=self._starters, started=started, seen=seen)
        except RecordError:
            raise
        except Exception as exc:
            raise HandlerFailed(
                f"aggregate {self.definition.name} failed on command {command.type} for "
                f"{command.aggregate_id!r}: {type(exc).__name__}: {exc}"
            ) from exc

    # -- recovery --------------------------------------------------------------------------

    async def _caught_up(self, partition: int, end: int) -> None:
        """The events are applied up to ``end``: read the verdicts the store lacks, then
        note both offsets."""
        topic = self.topics.verdicts
        low, high = await self._reader.watermarks(topic, partition)
        start = max(self._store.verdicts_offset(partition) or 0, low)
        if start < high:
            log.info("restoring aggregate %s partition %d from the verdicts: offsets %d..%d",
                     self.definition.name, partition, start, high)
            async for chunk in self._reader.read(topic, partition, start, high):
                self._store.write((), self._restored_verdicts(partition, chunk), {})
        self._store.write((), {}, {partition: end}, verdict_offsets={partition: high})

    def _restored_verdicts(self, partition: int, chunk: list[Incoming]) -> dict[tuple[str, str], tuple[bytes, int]]:
        """The first verdicts of a chunk of the verdicts topic still inside the retention."""
        cutoff = int(self._clock() * 1000) - self._retention_ms
        verdicts: dict[tuple[str, str], tuple[bytes, int]] = {}
        for record in chunk:
            try:
                reply = self._at_home(record, ReplyEnvelope, "a verdict")
            except Exception as exc:  # noqa: BLE001 - any producer can write here
                log.error("skipping verdict record %s/%d@%d: %s: %s", record.topic,
                          record.partition, record.offset, type(exc).__name__, exc)
                continue
            if reply.timestamp_ms >= cutoff:
                verdicts.setdefault((reply.aggregate_id, reply.command_id),
                                    (record.value or b"", reply.timestamp_ms))
        return verdicts

    def _at_home(self, record: Incoming, envelope: type[R], what: str) -> R:
        """Decode a record read back from Kafka; refuse it off its aggregate's home partition.

        Any producer can write there; an instance's history is only what its home partition
        holds, so a record elsewhere never changes what the store knows of it.
        """
        decoded = avro.decode_as(record.value or b"", envelope)
        aggregate_id: str = decoded.aggregate_id  # type: ignore[attr-defined]
        if self.owner.home(aggregate_id) != record.partition:
            raise SchemaError(f"{what} of {aggregate_id[:100]!r} on partition {record.partition}, "
                              "which is not its home partition")
        return decoded

    def _restore_chunk(self, partition: int, chunk: list[Incoming]) -> None:
        dirty: dict[str, AggregateInstance[Any]] = {}
        verdicts: dict[tuple[str, str], tuple[bytes, int]] = {}
        sagas: list[tuple[str, str, str]] = []
        group: list[EventEnvelope] = []
        cutoff = int(self._clock() * 1000) - self._retention_ms

        def close_group() -> None:
            if group:
                reply = reply_for_stored(group)
                if reply.timestamp_ms >= cutoff:  # older ones would only be expired again
                    verdicts[(reply.aggregate_id, reply.command_id)] = (avro.encode(reply),
                                                                        reply.timestamp_ms)
                group.clear()

        for record in chunk:
            try:
                event = self._at_home(record, EventEnvelope, "an event")
                value = load_payload(event.type, event.payload, self.definition.event_types)
                instance = dirty.get(event.aggregate_id) or self._instance(partition, event.aggregate_id)
                restored = restore(self.definition, instance, event, value)
            except Exception as exc:  # noqa: BLE001 - a bad record or fold raising on it
                # Not ours to fix: the journal keeps it, the fold skips it, a human is told.
                log.error("skipping journal record %s/%d@%d: %s: %s", record.topic,
                          record.partition, record.offset, type(exc).__name__, exc)
                continue
            if restored is None:
                continue
            if group and (group[-1].command_id, group[-1].aggregate_id) != (
                event.command_id, event.aggregate_id
            ):
                close_group()
            group.append(event)
            dirty[event.aggregate_id] = restored
            self._cache_put(partition, restored)
            sagas.extend(self._restored_starts(event, value))
        close_group()
        end = chunk[-1].offset + 1 if chunk else None
        self._store.write(dirty.values(), verdicts, {} if end is None else {partition: end}, sagas)

    def _restored_starts(self, event: EventEnvelope, value: Any) -> list[tuple[str, str, str]]:
        """The sagas a stored event started, so a refusal still holds after a restart."""
        if not self._starters:
            return []
        try:
            pairs = started_by(self._starters, event, value)
        except Exception as exc:  # noqa: BLE001 - start_on (user code) raising on a stored event
            # The event is stored and folded regardless; only its saga start is unknown here.
            log.error("aggregate %s: a saga's start_on raised on stored event %s of %r (version "
                      "%d): %s: %s", self.definition.name, event.type, event.aggregate_id[:100],
                      event.version, type(exc).__name__, exc)
            return []
        return [(event.aggregate_id, saga, correlation_id) for saga, correlation_id in pairs]

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

    def _event_record(self, partition: int, event: EventEnvelope, carrier: dict[str, str] | None = None) -> Outgoing:
        key = f"{event.aggregate_id}/{event.version}".encode()
        value = avro.encode(event)
        if len(value) + len(key) > MAX_EVENT_BYTES:
            raise SchemaError(
                f"event {event.type} of {event.aggregate_id!r} is {len(value)} bytes; events "
                f"larger than {MAX_EVENT_BYTES} bytes cannot be stored"
            )
        return Outgoing(self.topics.events, key, value, partition, headers_of(carrier) if carrier else ())

    def _verdict_record(self, partition: int, command: CommandEnvelope, reply: bytes) -> Outgoing:
        key = f"{command.aggregate_id}/{command.command_id}".encode()
        if len(reply) + len(key) > MAX_EVENT_BYTES:
            raise SchemaError(
                f"the verdict on command {command.type} of {command.aggregate_id!r} is {len(reply)} "
                f"bytes; verdicts larger than {MAX_EVENT_BYTES} bytes cannot be stored"
            )
        return Outgoing(self.topics.verdicts, key, reply, partition)

    def _rejection(
        self, command: CommandEnvelope, reply_to: str, reason: str, now_ms: int, as_json: bool
    ) -> Outgoing:
        reply = ReplyEnvelope(
            command_id=command.command_id,
            correlation_id=command.correlation_id,
            aggregate_id=command.aggregate_id,
            status="rejected",
            version=0,
            timestamp_ms=now_ms,
            reason=reason,
        )
        return _answer(reply_to, command, encode_answer(reply, as_json=as_json), as_json)


def _answer(reply_to: str, command: CommandEnvelope, value: bytes, as_json: bool) -> Outgoing:
    """The reply record to ``command``, with the JSON header when it is JSON."""
    return Outgoing(reply_to, command.reply_record_key.encode(), value, None, JSON_HEADERS if as_json else ())


def _traced(handled: Handled[Any], carrier: dict[str, str]) -> Handled[Any]:
    """``handled`` with the decide span's context in its events' metadata (stored and in the reply)."""
    def mark(event: EventEnvelope) -> EventEnvelope:
        return replace(event, metadata={**event.metadata, **carrier})

    reply = handled.reply
    assert reply is not None
    return replace(handled, stored=tuple(mark(e) for e in handled.stored),
                   reply=replace(reply, events=tuple(mark(e) for e in reply.events)))
