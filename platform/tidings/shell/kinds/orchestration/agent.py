"""The orchestration agents: source events -> inbox (router) -> journal, actions, outcomes.

Two agents per hosted orchestration (design: docs/orchestrations-hosted.md):

The router (``orchestration_router``, a ``runtime.journaled.EventRouter``) consumes the source aggregates' events topics. For each stored
event it asks ``key_of`` for the instance key and produces an ``OrchestrationEvent`` to the
inbox partition ``murmur2(key) % partitions``. It keeps no state: a re-delivered event is
routed again, and the instance drops the copy by its source position.

``OrchestrationAgent`` consumes the inbox, one batch at a time (no pipelining, so RocksDB
always holds everything decided before a batch starts):

1. before the first batch of a partition, ``catch_up`` reads what this worker's RocksDB
   may not have seen: the tails of the actions and outcomes partitions (what was written
   before a crash) and of the journal partition (events journaled before a crash), whose
   events it applies, producing any action or outcome the tails do not hold;
2. each inbox record is decoded, dropped if its instance journaled that source position
   already or finished, stepped with the pure core (``tidings.core.orchestration``) and
   journaled at ``{instance}/{sequence}``; the new actions go to the actions topic at
   ``{instance}/{position}`` and a finished instance's outcome to the outcomes topic;
3. journal, actions and outcomes are produced together and awaited; then the instance
   states, journaled events and topic offsets are written in one RocksDB batch; then the
   inbox offsets are acked (by the pipeline).

A crash after 3's produce and before its RocksDB write leaves records in Kafka the store
does not know: step 1 finds them in the tails, so no action is written twice or missed.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rocksdict import Options, Rdict, WriteBatch

from ....codec import avro
from ....codec.payloads import load_payload, payload_of
from ....coordination import Coordination
from ....core.orchestration import (
    Advanced,
    InstanceState,
    OrchestrationFailed,
    advance,
    replay,
    skip,
)
from ....core.orchestration_records import (
    Action,
    OrchestrationActions,
    OrchestrationEvent,
    OrchestrationOutcome,
)
from ....core.limits import check_event, check_id
from ....core.partitioning import partition_for
from ....core.records import EventEnvelope
from ....errors import HandlerFailed, KeyOfFailed, LimitError, RecordError, SchemaError
from ...runtime.hosting import Input, Runtime, TopicPartition
from ...runtime.io import Delivered, Incoming, Outgoing, PartitionReader
from ...runtime.journaled import Backstop, EventRouter, EventSource, Journaled
from ...runtime.pipeline import Finish
from ...runtime.rocks import prefixed

log = logging.getLogger(__name__)

Factory = Callable[[str], Coordination[Any, Any]]


@dataclass(frozen=True, slots=True)
class SourceEvent:
    """One stored aggregate event, as ``key_of`` sees it (the orchestration gets ``value``)."""

    aggregate: str
    aggregate_id: str
    version: int
    value: Any
    envelope: EventEnvelope


KeyOf = Callable[[SourceEvent], "str | None"]


@dataclass(frozen=True, slots=True)
class OrchestrationTopics:
    """The topics of one hosted orchestration."""

    inbox: str
    journal: str
    actions: str
    outcomes: str
    deadletter: str


def orchestration_router(
    name: str,
    key_of: KeyOf,
    *,
    sources: Sequence[EventSource],
    topics: OrchestrationTopics,
    runtime: Runtime,
) -> EventRouter:
    """The router of orchestration ``name``: each stored source event to the inbox
    partition of its instance (``key_of``), as an ``OrchestrationEvent``."""
    by_topic = {source.topic: source for source in sources}

    def route(record: Incoming) -> Outgoing | None:
        source = by_topic[record.topic]
        envelope = check_event(avro.decode_as(record.value or b"", EventEnvelope))
        if envelope.deferred:
            return None  # never stored, so never part of an instance's history
        value = load_payload(envelope.type, envelope.payload, source.event_types)
        event = SourceEvent(source.aggregate, envelope.aggregate_id, envelope.version, value, envelope)
        try:
            key = key_of(event)
        except Exception as exc:
            raise KeyOfFailed(f"key_of of orchestration {name} raised: "
                              f"{type(exc).__name__}: {exc}") from exc
        if key is None:
            return None
        if not isinstance(key, str) or not key:
            raise KeyOfFailed(f"key_of of orchestration {name} returned {key!r:.100}, "
                              "not a non-empty str or None")
        try:
            check_id(key, "instance key")
        except LimitError as exc:
            raise KeyOfFailed(f"key_of of orchestration {name}: {exc}") from exc
        routed = OrchestrationEvent(
            orchestration=name,
            instance=key,
            sequence=0,
            source_topic=record.topic,
            source_partition=record.partition,
            source_offset=record.offset,
            aggregate=source.aggregate,
            event=envelope,
        )
        partition = partition_for(key, runtime.partitions)
        return Outgoing(topics.inbox, key.encode(), avro.encode(routed), partition)

    return EventRouter(runtime, "orchestration", name, sources=by_topic, route=route)


class OrchestrationStore:
    """RocksDB state of one hosted orchestration on one worker (rocksdict).

    The journal topic is the source of truth; this store caches it. Instance states,
    journaled events of running instances and per-partition topic offsets are written in
    one batch, so the store is always a consistent prefix of the journal.

    Keys:
        ``s/{instance}``                 instance state (JSON)
        ``e/{instance}\\0{sequence}``     journal record of a running instance (8-byte seq)
        ``o/{role}/{partition}``         next offset accounted for: role j(ournal),
                                         a(ctions) or o(utcomes)
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = Rdict(str(path), Options(raw_mode=True))

    def load(self, instance: str) -> InstanceState | None:
        """Return the stored state of ``instance``, or None if the store never saw it."""
        raw = self._db.get(b"s/" + instance.encode())
        return None if raw is None else _state_from_json(instance, raw)

    def events(self, instance: str) -> list[bytes]:
        """Return the journal records of a running ``instance``, oldest first."""
        return [value for _, value in prefixed(self._db, _events_prefix(instance))]

    def offset(self, role: str, partition: int) -> int | None:
        """Return the next offset of ``role``'s topic accounted for in ``partition``."""
        raw = self._db.get(f"o/{role}/{partition}".encode())
        return None if raw is None else int(raw)

    def write(
        self,
        states: Iterable[InstanceState],
        events: Iterable[tuple[str, int, bytes]],
        offsets: Mapping[tuple[str, int], int],
    ) -> None:
        """Write states, journal records and offsets atomically.

        A finished instance's journal records are dropped: it will never be replayed.
        """
        batch = WriteBatch(raw_mode=True)
        finished = set()
        for state in states:
            batch.put(b"s/" + state.instance.encode(), _state_json(state))
            if state.finished:
                finished.add(state.instance)
        for instance, sequence, value in events:
            if instance not in finished:
                batch.put(_events_prefix(instance) + sequence.to_bytes(8, "big"), value)
        for instance in finished:
            prefix = _events_prefix(instance)
            batch.delete_range(prefix, prefix[:-1] + b"\x01")
        for (role, partition), offset in offsets.items():
            batch.put(f"o/{role}/{partition}".encode(), b"%d" % offset)
        self._db.write(batch)

    def close(self) -> None:
        """Flush and close the database."""
        self._db.close()


@dataclass(slots=True)
class _Live:
    state: InstanceState
    orchestration: Coordination[Any, Any] | None


@dataclass(slots=True)
class _Work:
    """What one batch (or one catch-up) decided, waiting for the broker's acks."""

    records: list[Outgoing] = field(default_factory=list)  # journal, actions, outcomes
    letters: list[Outgoing] = field(default_factory=list)
    states: dict[str, InstanceState] = field(default_factory=dict)
    events: list[tuple[str, int, bytes]] = field(default_factory=list)


class OrchestrationAgent:
    """Runs one orchestration's instances over the inbox partitions assigned to this worker."""

    def __init__(
        self,
        name: str,
        factory: Factory,
        *,
        sources: Sequence[EventSource],
        topics: OrchestrationTopics,
        store: OrchestrationStore,
        runtime: Runtime,
        reader: PartitionReader | None = None,
        offsets_reader: PartitionReader | None = None,
        cache_size: int = 10_000,
    ) -> None:
        self.name = name
        self._factory = factory
        self._sources = {source.topic: source for source in sources}
        self.topics = topics
        self._partitions = runtime.partitions
        self._store = store
        self._reader = reader or runtime.reader()
        # librdkafka answers an offsets query slowly (~0.4 s) right after a read's
        # unassign; a second client that only asks for offsets keeps a catch-up fast.
        self._offsets_reader = offsets_reader or (self._reader if reader is not None else runtime.reader())
        self._publisher = runtime.publisher
        self._clock = runtime.clock
        self._cache_size = cache_size
        # Its catch-up reads the actions and outcomes tails as well as the journal's.
        self.journaled = Journaled(runtime, "orchestration", name, journal=None, catch_up=self.catch_up,
                                   instances=self._instances)
        self.owner = self.journaled.owner
        self._backstop = Backstop(runtime, f"orchestration {name}", wrap=HandlerFailed,
                                  prefix=f"orchestration {name} failed: ")
        self._live: dict[int, OrderedDict[str, _Live]] = {}
        # (instance, position) of action records and instances with an outcome that the
        # catch-up found beyond the store's offsets: written before a crash, not re-written.
        self._written_actions: dict[int, set[tuple[str, int]]] = {}
        self._written_outcomes: dict[int, set[str]] = {}
        self._roles = {topics.journal: "j", topics.actions: "a", topics.outcomes: "o"}

    def close(self) -> None:
        """Close the store (the worker is stopping)."""
        self._store.close()

    def _instances(self) -> dict[str, int]:
        """``tidings_instances``, on scrape (another thread: only copies and lengths)."""
        return {"cached": sum(len(live) for live in list(self._live.values()))}

    @property
    def inputs(self) -> Sequence[Input]:
        # One batch in flight: the next batch's catch-up and decisions read RocksDB,
        # which must hold the previous batch first.
        return [Input(f"orchestration-{self.name}", (self.topics.inbox,), self.start,
                      partitions=self._partitions, max_in_flight=1)]

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Nothing to do at once: a partition is caught up before its first record."""

    def revoke(self, assigned: Collection[TopicPartition]) -> None:
        """Forget what is cached for revoked inbox partitions: another worker may change them now."""
        partitions = [p for topic, p in assigned if topic == self.topics.inbox]
        self.owner.revoke(partitions)
        for partition in partitions:
            self._live.pop(partition, None)
            self._written_actions.pop(partition, None)
            self._written_outcomes.pop(partition, None)

    async def start(self, batch: Sequence[Incoming]) -> Finish:
        """Decide ``batch`` and start producing; return what completes it (see module doc)."""
        await self.owner.ensure_ready({record.partition for record in batch})
        now_ms = int(self._clock() * 1000)
        work = _Work()
        self._backstop.each(batch, lambda record: self._handle(record, work, now_ms), work.letters)
        delivery = self._publisher.send(work.records)

        async def finish() -> None:
            delivered = await delivery
            if work.letters:
                await self._publisher.publish(work.letters)
            self._store.write(work.states.values(), work.events, self._offsets(delivered))
            self._trim()

        return finish

    def _handle(self, record: Incoming, work: _Work, now_ms: int) -> None:
        routed = avro.decode_as(record.value or b"", OrchestrationEvent)
        check_id(routed.instance, "instance key")  # any producer can write to the inbox
        check_event(routed.event)
        if routed.orchestration != self.name:
            raise SchemaError(f"a record of orchestration {routed.orchestration!r} on the inbox "
                              f"of {self.name!r}")
        forward = self.owner.forward(record, routed.instance)
        if forward is not None:
            work.letters.append(forward)  # another partitioner: decided where the instance lives
            return
        live = self._instance(record.partition, routed.instance)
        position = (routed.source_topic, routed.source_partition, routed.source_offset)
        if live.state.finished or live.state.seen(*position):
            return  # re-routed after a crash, or after the end: journaled or ignored already
        assert live.orchestration is not None
        value = self._value(routed)
        advanced = advance(live.state, live.orchestration, value, source=position, encode=payload_of)
        sequence = advanced.state.sequence
        entry = avro.encode(replace(routed, sequence=sequence))
        key = f"{routed.instance}/{sequence}".encode()
        work.records.append(Outgoing(self.topics.journal, key, entry, record.partition))
        work.events.append((routed.instance, sequence, entry))
        self._effects(record.partition, advanced, work, now_ms)

    async def catch_up(self, partition: int) -> None:
        """Apply what Kafka holds beyond this worker's store for ``partition`` (module doc)."""
        self._live.pop(partition, None)
        offsets: dict[tuple[str, int], int] = {}
        ranges = {
            topic: await self._range(topic, partition)
            for topic in (self.topics.actions, self.topics.outcomes, self.topics.journal)
        }
        actions: set[tuple[str, int]] = set()
        outcomes: set[str] = set()
        async for record in self._tail(self.topics.actions, partition, ranges, offsets):
            written = _decoded(record, OrchestrationActions)
            if written is not None and written.orchestration == self.name:
                actions.add((written.instance, written.position))
        async for record in self._tail(self.topics.outcomes, partition, ranges, offsets):
            finished = _decoded(record, OrchestrationOutcome)
            if finished is not None and finished.orchestration == self.name:
                outcomes.add(finished.instance)
        self._written_actions[partition] = actions
        self._written_outcomes[partition] = outcomes
        work = _Work()
        now_ms = int(self._clock() * 1000)
        replayed = 0
        async for record in self._tail(self.topics.journal, partition, ranges, offsets):
            entry = _decoded(record, OrchestrationEvent)
            if entry is None or entry.orchestration != self.name:
                continue
            try:
                live = self._instance(partition, entry.instance)
            except RecordError as exc:
                log.error("orchestration %s cannot rebuild %s: %s", self.name, entry.instance, exc)
                continue
            if entry.sequence <= live.state.sequence:
                continue  # the store has it
            replayed += 1
            self._restore(partition, live, entry, record.value or b"", work, now_ms)
        log.info("orchestration %s partition %d caught up: %d actions records and %d outcomes "
                 "beyond the store, %d journaled events replayed, %d records written late",
                 self.name, partition, len(actions), len(outcomes), replayed, len(work.records))
        delivered = await self._publisher.publish(work.records)
        for key, end in self._offsets(delivered).items():
            offsets[key] = max(offsets.get(key, 0), end)
        self._store.write(work.states.values(), work.events, offsets)
        self._trim()

    async def _range(self, topic: str, partition: int) -> tuple[int, int]:
        """Return the offsets of ``topic``/``partition`` beyond the store: [start, high)."""
        low, high = await self._offsets_reader.watermarks(topic, partition)
        return max(self._store.offset(self._roles[topic], partition) or 0, low), high

    async def _tail(
        self,
        topic: str,
        partition: int,
        ranges: Mapping[str, tuple[int, int]],
        offsets: dict[tuple[str, int], int],
    ) -> AsyncIterator[Incoming]:
        start, high = ranges[topic]
        offsets[(self._roles[topic], partition)] = high
        if start >= high:
            return
        async for chunk in self._reader.read(topic, partition, start, high):
            for record in chunk:
                yield record

    def _restore(
        self,
        partition: int,
        live: _Live,
        entry: OrchestrationEvent,
        raw: bytes,
        work: _Work,
        now_ms: int,
    ) -> None:
        position = (entry.source_topic, entry.source_partition, entry.source_offset)
        if live.state.finished or live.orchestration is None:
            return
        work.events.append((entry.instance, entry.sequence, raw))
        if entry.sequence != live.state.sequence + 1:
            log.warning("orchestration %s instance %s: journal jumps from %d to %d",
                        self.name, entry.instance, live.state.sequence, entry.sequence)
        try:
            advanced = advance(
                live.state, live.orchestration, self._value(entry), source=position,
                encode=payload_of,
            )
        except RecordError as exc:
            # It was accepted once; the code or the types changed since. Keep the journal's
            # positions, skip the event, and say so.
            log.error("orchestration %s cannot re-apply %s/%d: %s",
                      self.name, entry.instance, entry.sequence, exc)
            state = skip(live.state, sequence=entry.sequence, source=position)
            self._keep(partition, _Live(state, live.orchestration), work)
            return
        self._effects(partition, advanced, work, now_ms)

    def _effects(self, partition: int, advanced: Advanced, work: _Work, now_ms: int) -> None:
        """Write the new actions and the outcome unless a catch-up found them written."""
        state = advanced.state
        instance, position = state.instance, state.sequence
        written = self._written_actions.get(partition, set())
        if advanced.actions and (instance, position) not in written:
            record = OrchestrationActions(self.name, instance, position, advanced.actions, now_ms)
            key = f"{instance}/{position}".encode()
            work.records.append(Outgoing(self.topics.actions, key, avro.encode(record), partition))
        if advanced.outcome is not None and instance not in self._written_outcomes.get(partition, set()):
            outcome = OrchestrationOutcome(
                self.name, instance, position, now_ms, advanced.outcome.type, advanced.outcome.payload
            )
            work.records.append(
                Outgoing(self.topics.outcomes, instance.encode(), avro.encode(outcome), partition)
            )
        self._keep(partition, _Live(state, advanced.orchestration), work)

    def _keep(self, partition: int, live: _Live, work: _Work) -> None:
        cache = self._live.setdefault(partition, OrderedDict())
        cache[live.state.instance] = live
        cache.move_to_end(live.state.instance)
        work.states[live.state.instance] = live.state

    def _instance(self, partition: int, instance: str) -> _Live:
        cache = self._live.setdefault(partition, OrderedDict())
        found = cache.get(instance)
        if found is not None:
            cache.move_to_end(instance)
            return found
        state = self._store.load(instance) or InstanceState(instance)
        orchestration = None
        if not state.finished:
            orchestration = replay(self._new(instance), self._journaled(instance))
        found = _Live(state, orchestration)
        cache[instance] = found
        return found

    def _new(self, instance: str) -> Coordination[Any, Any]:
        try:
            orchestration = self._factory(instance)
        except Exception as exc:
            raise OrchestrationFailed(
                f"factory of orchestration {self.name} raised for {instance!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not callable(orchestration):
            raise OrchestrationFailed(
                f"factory of orchestration {self.name} returned {orchestration!r}, "
                "not an orchestration"
            )
        return orchestration

    def _journaled(self, instance: str) -> Iterable[Any]:
        for raw in self._store.events(instance):
            yield self._value(avro.decode_as(raw, OrchestrationEvent))

    def _value(self, routed: OrchestrationEvent) -> Any:
        source = self._sources.get(routed.source_topic)
        if source is None:
            raise SchemaError(f"{routed.source_topic!r} is not a source of {self.name}")
        return load_payload(routed.event.type, routed.event.payload, source.event_types)

    def _offsets(self, delivered: Sequence[Delivered]) -> dict[tuple[str, int], int]:
        ends: dict[tuple[str, int], int] = {}
        for position in delivered:
            role = self._roles.get(position.topic)
            # An offset Kafka did not report (Delivered) moves nothing: the end stays behind.
            if role is not None and position.offset is not None:
                key = (role, position.partition)
                ends[key] = max(ends.get(key, 0), position.offset + 1)
        return ends

    def _trim(self) -> None:
        # Only between batches: an instance changed in a batch stays cached until stored.
        for cache in self._live.values():
            while len(cache) > self._cache_size:
                cache.popitem(last=False)


def _decoded(record: Incoming, record_type: type[Any]) -> Any:
    try:
        return avro.decode_as(record.value or b"", record_type)
    except RecordError as exc:
        log.error("skipping unreadable record %s/%d@%d: %s",
                  record.topic, record.partition, record.offset, exc)
        return None


def _events_prefix(instance: str) -> bytes:
    return b"e/" + instance.encode() + b"\x00"


def _state_json(state: InstanceState) -> bytes:
    return json.dumps(
        {
            "sequence": state.sequence,
            "sources": dict(state.sources),
            # latin-1 maps every byte to one code point, so any payload round-trips.
            "pending": [[a.type, a.payload.decode("latin-1")] for a in state.pending],
            "finished": state.finished,
        }
    ).encode()


def _state_from_json(instance: str, raw: bytes) -> InstanceState:
    fields = json.loads(raw)
    return InstanceState(
        instance,
        fields["sequence"],
        MappingProxyType(fields["sources"]),
        tuple(Action(t, p.encode("latin-1")) for t, p in fields["pending"]),
        fields["finished"],
    )
