"""The saga agents: subscribed events -> inbox (router); inbox + replies -> journal, commands.

Two agents per saga (design: docs/sagas.md):

The router (``saga_router``, a ``runtime.journaled.EventRouter``) consumes the subscribed aggregates' events topics and forwards every stored
event to ``{app}.saga.{name}.inbox``, keyed by its correlation id (the saga id) on
partition ``murmur2(correlation id)``. It keeps no state; its offsets are committed once
the forwarded copies are acknowledged, and a re-delivered event is forwarded again (the
saga drops the copy by event id).

``SagaAgent`` consumes the inbox and ``{app}.saga.{name}.replies`` (co-partitioned), one
batch at a time, under one lock shared with its timers:

1. a partition is caught up from the journal before its first record (``PartitionOwner``):
   records this worker's RocksDB lacks are stored, the commands of those that are not a
   running saga's current state are sent again (their sending may never have been
   acknowledged), and every saga that has not ended runs ``on_enter(state,
   recovering=True)``: its commands go out again with the same ids and its expectations
   are armed from the stored entry time;
2. each routed event and each ``accepted`` reply's events (deferred ones too) go to the
   pure core (``tidings.core.saga.feed``): a new saga when ``start_on`` accepts an event
   of a correlation id without one, else ``handle``;
3. a round of decisions is a commit: its journal records are produced at once; a single
   committer awaits their acks, then produces the commands and awaits those, then dead
   letters, then writes RocksDB (journal records, running index, offsets), then arms the
   timers. So no command precedes the journal record that names it, and a crash between
   the two leaves a journal tail that step 1 sends again.

Whatever a record or user code raises (``start_on``, ``handle``, ``on_enter``) dead-letters
that record; the saga stays where it was and the agent goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocksdict import Options, Rdict, WriteBatch

from ....codec import avro
from ....codec.payloads import load_payload, payload_of
from ....core import saga as core
from ....core.limits import MAX_VALUE_BYTES, check_event, check_id, check_payload_size
from ....core.partitioning import partition_for
from ....core.records import EventEnvelope, ReplyEnvelope
from ....core.saga import SagaDefinition, SagaEvent, SagaState, SagaStep, TimerFired
from ....core.saga_records import SagaJournalEntry, SagaRouted
from ....errors import HandlerFailed, RecordError, SchemaError
from ...runtime.hosting import Input, Runtime, TopicPartition
from ...runtime.io import Incoming, Outgoing
from ...runtime.journaled import Backstop, CommitQueue, EventRouter, Journaled, OwnInputs, Pending
from ...runtime.pipeline import Finish
from ...runtime.tracing import CONSUMER, Carrier, carrier_of, headers_of
from ...runtime.rocks import prefixed

if TYPE_CHECKING:
    from ..aggregate.handle import AggregateHandle

log = logging.getLogger(__name__)

#: Ended sagas whose final state memory keeps after it is stored. Each of an aggregate's
#: answers reaches a saga twice (in the reply, and routed from the events topic), and the
#: second copy mostly comes after the saga ended: it is dropped without a RocksDB read.
ENDED_IN_MEMORY = 8192


@dataclass(frozen=True, slots=True)
class SagaTopics:
    """The topics of one saga definition."""

    inbox: str
    journal: str
    replies: str
    deadletter: str


class SagaStore:
    """RocksDB state of one saga definition on one worker (rocksdict).

    The journal topic is the source of truth; this store caches it. Written after the
    journal records and the commands they name are acknowledged, in one batch.

    Keys (``{id}`` is the saga id, length-prefixed so no id is a prefix of another's keys):
        ``j/{id}{seq:8 bytes}``  a journal record of a running saga (Avro)
        ``e/{id}``              the last record of an ended saga (Avro)
        ``r/{partition}/{id}``  the saga is running: recover it on assignment
        ``o/{partition}``       next journal offset applied
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = Rdict(str(path), Options(raw_mode=True))

    def records(self, saga_id: str) -> list[SagaJournalEntry]:
        """Return the stored records of a running saga, or its ended record, in seq order."""
        ended = self._db.get(b"e/" + _id_key(saga_id))
        if ended is not None:
            return [avro.decode_as(ended, SagaJournalEntry)]
        return [avro.decode_as(value, SagaJournalEntry) for _, value in prefixed(self._db, b"j/" + _id_key(saga_id))]

    def has(self, saga_id: str, seq: int) -> bool:
        """Whether record ``seq`` of ``saga_id`` is stored (or the saga ended)."""
        if self._db.get(b"e/" + _id_key(saga_id)) is not None:
            return True
        return self._db.get(b"j/" + _id_key(saga_id) + seq.to_bytes(8, "big")) is not None

    def running(self, partition: int) -> list[str]:
        """Return the ids of the sagas of ``partition`` that have not ended."""
        return [key.decode("utf-8", "surrogatepass") for key, _ in prefixed(self._db, b"r/%d/" % partition)]

    def journal_offset(self, partition: int) -> int | None:
        """Return the next journal offset applied for ``partition``, or None if never."""
        raw = self._db.get(b"o/%d" % partition)
        return None if raw is None else int(raw)

    def write(self, records: Iterable[tuple[int, SagaJournalEntry, bytes]], offsets: Mapping[int, int]) -> None:
        """Store journal records (``(partition, record, encoded)``) and offsets atomically.

        An ended saga keeps only its last record: it is never replayed.
        """
        batch = WriteBatch(raw_mode=True)
        for partition, record, value in records:
            key = _id_key(record.saga_id)
            running = b"r/%d/" % partition + record.saga_id.encode("utf-8", "surrogatepass")
            if record.ended:
                # Point deletes, not delete_range: every range tombstone in the memtable is
                # re-fragmented by the first read after each write, so with one per ended
                # saga a read cost grew with the ends since the last flush (0.3 ms after
                # 10,000 transfers, 1.7 ms after 10,000 ends in isolation). The records of
                # a saga are seqs 1..seq; deleting each also drops those put earlier in
                # this batch.
                for seq in range(1, record.seq + 1):
                    batch.delete(b"j/" + key + seq.to_bytes(8, "big"))
                batch.put(b"e/" + key, value)
                batch.delete(running)
            else:
                batch.put(b"j/" + key + record.seq.to_bytes(8, "big"), value)
                batch.put(running, b"")
        for partition, offset in offsets.items():
            batch.put(b"o/%d" % partition, b"%d" % offset)
        self._db.write(batch)

    def close(self) -> None:
        """Flush and close the database."""
        self._db.close()


def _id_key(saga_id: str) -> bytes:
    raw = saga_id.encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(2, "big") + raw


@dataclass(slots=True)
class _Commit:
    """What one round of decisions produced, waiting for the journal's acks."""

    journal: list[Outgoing] = field(default_factory=list)
    commands: list[Outgoing] = field(default_factory=list)
    dead: list[Outgoing] = field(default_factory=list)  # dead letters, forwards
    write: list[tuple[int, SagaJournalEntry, bytes]] = field(default_factory=list)
    timers: list[core.ArmTimer] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)


def saga_router(name: str, sources: Mapping[str, str], topics: SagaTopics, runtime: Runtime) -> EventRouter:
    """The router of saga ``name``: every stored event of ``sources`` (events topic ->
    aggregate name) to the inbox partition of its saga (its correlation id)."""
    aggregates = dict(sources)
    partitions = runtime.partitions
    traced = runtime.tracing is not None

    def route(record: Incoming) -> Outgoing | None:
        event = check_event(avro.decode_as(record.value or b"", EventEnvelope))
        if event.deferred:
            return None  # never stored: it starts no saga, and reaches a running one in its reply
        saga_id = event.correlation_id
        value = avro.encode(SagaRouted(name, aggregates[record.topic], event))
        # The event's trace context in the routed copy's headers too: the saga's batch span links to it.
        headers = headers_of(carrier_of(event.metadata)) if traced else ()
        return Outgoing(topics.inbox, saga_id.encode("utf-8", "surrogatepass"), value,
                        partition_for(saga_id, partitions), headers)

    return EventRouter(runtime, "saga", name, sources=aggregates, route=route)


class SagaAgent:
    """Runs one saga definition's sagas over the inbox and replies partitions assigned here."""

    def __init__(
        self,
        definition: SagaDefinition,
        *,
        app: Any,
        topics: SagaTopics,
        store: SagaStore,
        runtime: Runtime,
        aggregates: Mapping[str, AggregateHandle[Any, Any, Any]],
    ) -> None:
        self.definition = definition
        self.name = definition.name
        self.topics = topics
        self._app = app
        self._store = store
        self._runtime = runtime
        self._publisher = runtime.publisher
        self._partitions = runtime.partitions
        self._aggregates = dict(aggregates)
        self.journaled = Journaled(
            runtime, "saga", definition.name, journal=topics.journal, instances=self._instances,
            drop=self._drop, applied=store.journal_offset, forget=self._forget,
            restore=self._restore_chunk, caught_up=self._caught_up,
        )
        self.owner = self.journaled.owner
        self._lock = self.journaled.lock
        self._backstop = Backstop(runtime, f"saga {definition.name}",
                                  prefix="the saga agent failed on this record: ")
        self._commits = CommitQueue(runtime, f"saga {definition.name}", durable=self._durable,
                                    completed=self._completed)
        self._sagas: dict[str, SagaState] = {}  # running sagas, and ended ones until stored
        # The most recently stored ends, oldest first. An end is final whoever owns the
        # partition later, so an entry is never wrong; it is dropped with its partition only
        # to bound what a worker keeps of partitions it no longer owns.
        self._ended: dict[str, SagaState] = {}
        self._dirty: Counter[str] = Counter()  # sagas in a commit not yet stored
        self._timers: dict[str, dict[tuple[int, int, str], asyncio.TimerHandle]] = {}
        self._tails: dict[int, list[SagaJournalEntry]] = {}  # journal records the store lacked
        self._inputs: OwnInputs[tuple[str, TimerFired]] = OwnInputs(self._lock, self._timers_fired)

    # -- the hosting seam ----------------------------------------------------------------

    @property
    def inputs(self) -> Sequence[Input]:
        # One batch in flight: the next batch's decisions read what this one stored.
        return [Input(f"saga-{self.name}", (self.topics.inbox, self.topics.replies), self.start,
                      partitions=self._partitions, max_in_flight=1)]

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Recover assigned partitions at once: running sagas have commands and timers to resume."""
        self._ensure_tasks()
        await self.journaled.ready_now(partitions, self.topics.inbox)

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        """Forget revoked partitions: another worker owns their sagas now."""
        self._drop({p for topic, p in partitions if topic == self.topics.inbox})

    def _instances(self) -> dict[str, int]:
        """``tidings_instances``, on scrape (another thread: only a copy, then counts)."""
        return {"running": sum(not saga.ended for saga in list(self._sagas.values()))}

    def close(self) -> None:
        """Cancel tasks and timers and close the store (the worker is stopping)."""
        self.journaled.close()
        self._drop(set(range(self._partitions)))
        self._store.close()

    async def start(self, batch: Sequence[Incoming]) -> Finish:
        """Decide a batch of inbox and reply records; return what waits for its commit."""
        self._ensure_tasks()
        async with self._lock:
            await self.owner.ensure_ready({record.partition for record in batch})
            commit = _Commit()
            now_ms = self._now_ms()

            def decide(record: Incoming) -> None:
                if record.topic == self.topics.inbox:
                    self._routed(record, commit, now_ms)
                else:
                    self._reply(record, commit, now_ms)

            tracing = self._runtime.tracing
            if tracing is None or len(batch) == 1:
                self._backstop.each(batch, decide, commit.dead)
            else:
                # The batch is decided at once: its span links to the trace of each record
                # (a batch of one has none: the transition's span is in its trace already).
                with tracing.span(f"saga batch {self.name}", None, kind=CONSUMER,
                                  links=(carrier_of(None, record.headers) for record in batch),
                                  attributes={"tidings.saga": self.name,
                                              "messaging.batch.message_count": len(batch)}):
                    self._backstop.each(batch, decide, commit.dead)
            done = self._submit(commit)

        async def finish() -> None:
            await done

        return finish

    # -- deciding ------------------------------------------------------------------------

    def _routed(self, record: Incoming, commit: _Commit, now_ms: int) -> None:
        routed = avro.decode_as(record.value or b"", SagaRouted)
        if routed.saga != self.name:
            raise SchemaError(f"a record of saga {routed.saga[:100]!r} on the inbox of saga {self.name!r}")
        event = check_event(routed.event)
        if event.deferred:
            raise SchemaError("a deferred event on a saga inbox: only stored events are routed")
        forward = self.owner.forward(record, event.correlation_id)
        if forward is not None:
            commit.dead.append(forward)  # another partitioner: decided where the saga lives
            return
        self._feed(record.partition, event.correlation_id, self._event(routed.aggregate, event), commit, now_ms,
                   event.metadata)

    def _reply(self, record: Incoming, commit: _Commit, now_ms: int) -> None:
        reply = avro.decode_as(record.value or b"", ReplyEnvelope)
        saga_id = check_id(reply.correlation_id, "correlation_id")
        check_id(reply.command_id, "command_id")
        forward = self.owner.forward(record, saga_id)
        if forward is not None:
            commit.dead.append(forward)
            return
        saga = self._saga(saga_id)
        if saga is None:
            raise SchemaError(f"a reply to command {reply.command_id[:100]!r} for {saga_id[:100]!r}, "
                              f"which is no saga {self.name}")
        if saga.ended:
            return  # a late answer to a resend: the saga went on without it
        aggregate = saga.commands.get(reply.command_id)
        if aggregate is None:
            raise SchemaError(f"a reply to command {reply.command_id[:100]!r}, which saga {self.name} "
                              f"{saga_id[:100]!r} did not send")
        if reply.status != "accepted":
            level = logging.WARNING if reply.status in ("rejected", "conflict") else logging.DEBUG
            log.log(level, "saga %s %r: command %s to %s %r was %s%s", self.name, saga_id, reply.command_id,
                    aggregate, reply.aggregate_id, reply.status, f": {reply.reason}" if reply.reason else "")
            return
        for event in reply.events:
            check_event(event)
            if (event.correlation_id, event.command_id) != (saga_id, reply.command_id):
                raise SchemaError(f"an event of command {event.command_id[:100]!r} in the reply to "
                                  f"{reply.command_id[:100]!r}")
        for event in reply.events:
            self._feed(record.partition, saga_id, self._event(aggregate, event), commit, now_ms, event.metadata)

    def _event(self, aggregate_name: str, event: EventEnvelope) -> SagaEvent:
        aggregate = self._aggregates.get(aggregate_name)
        if aggregate is None:
            raise SchemaError(f"an event of {aggregate_name[:100]!r}, which is no aggregate of this app")
        value = load_payload(event.type, event.payload, aggregate.definition.event_types)
        return SagaEvent(aggregate_name, event.aggregate_id, event.event_id, event.command_id,
                         event.correlation_id, event.version, event.type, value, event.deferred)

    def _feed(self, partition: int, saga_id: str, event: SagaEvent, commit: _Commit, now_ms: int,
              metadata: Mapping[str, str] | None = None) -> None:
        tracing = self._runtime.tracing
        began = 0 if tracing is None else time.time_ns()
        step = core.feed(self.definition, self._saga(saga_id), saga_id, event, now_ms=now_ms,
                         encode=self._encode, replies_topic=self.topics.replies)
        if tracing is None or not step.records:
            self._apply(partition, saga_id, step, commit)
            return
        # A transition: its span goes on in the trace of the event that caused it (the
        # aggregate's decide), and the commands it sends carry it on. A repeat of an event
        # changes nothing and gets no span.
        ended = step.saga is None or step.saga.ended
        span = tracing.start(
            f"saga {self.name}", carrier_of(metadata), kind=CONSUMER, start_ns=began,
            attributes={"tidings.saga": self.name, "tidings.saga_id": saga_id, "tidings.aggregate": event.aggregate,
                        "tidings.aggregate_id": event.aggregate_id, "tidings.event_type": event.type,
                        "tidings.event_id": event.event_id, "tidings.saga.seq": step.records[-1].seq,
                        "tidings.saga.transitions": ",".join(r.transition for r in step.records),
                        "tidings.saga.commands": len(step.commands), "tidings.saga.ended": ended},
        )
        try:
            self._apply(partition, saga_id, step, commit, tracing.carrier(span))
        except BaseException as exc:
            tracing.end(span, exc)
            raise
        tracing.end(span)

    def _apply(self, partition: int, saga_id: str, step: SagaStep, commit: _Commit,
               carrier: Carrier | None = None) -> None:
        """Add ``step``'s records, commands and timers to ``commit``; then remember the saga.

        Everything that can fail is done before anything changes: a failure leaves the
        saga where it was.
        """
        journal: list[Outgoing] = []
        written: list[tuple[int, SagaJournalEntry, bytes]] = []
        for record in step.records:
            value = avro.encode(record)
            if len(value) > MAX_VALUE_BYTES:
                raise HandlerFailed(f"saga {self.name} {saga_id[:100]!r}: its journal record at seq "
                                    f"{record.seq} is {len(value)} bytes, more than {MAX_VALUE_BYTES}")
            key = f"{saga_id}/{record.seq}".encode("utf-8", "surrogatepass")
            journal.append(Outgoing(self.topics.journal, key, value, partition))
            written.append((partition, record, value))
        commands = [self._command(command, carrier) for command in step.commands]
        commit.journal.extend(journal)
        commit.write.extend(written)
        commit.commands.extend(commands)
        commit.timers.extend(step.timers)
        if step.saga is not None:
            self._sagas[saga_id] = step.saga
            if saga_id not in commit.touched:
                commit.touched.add(saga_id)
                self._dirty[saga_id] += 1

    def _command(self, command: core.SagaCommand, carrier: Carrier | None = None) -> Outgoing:
        envelope = command.envelope
        topic = command.aggregate.topics.commands
        partition = partition_for(envelope.aggregate_id, self._partitions)
        headers: tuple[tuple[str, bytes], ...] = ()
        if carrier:
            envelope = replace(envelope, metadata={**envelope.metadata, **carrier})
            headers = headers_of(carrier)
        return Outgoing(topic, envelope.aggregate_id.encode("utf-8", "surrogatepass"), avro.encode(envelope),
                        partition, headers)

    def _encode(self, aggregate: Any, command: Any) -> tuple[str, bytes]:
        """Encode a command of ``on_enter``; the aggregate must be one of this app's."""
        handle = self._aggregates.get(str(getattr(aggregate, "name", "")))
        if handle is None or handle is not aggregate:
            raise TypeError(f"{aggregate!r:.100} is not an aggregate handle of this app")
        aggregate = handle
        type_name, payload = payload_of(command)
        if type_name not in aggregate.definition.command_types:
            known = ", ".join(sorted(aggregate.definition.command_types))
            raise TypeError(f"{type_name!r} is not a command of aggregate {aggregate.name} (known: {known})")
        check_payload_size(payload, f"the {type_name} command")
        return type_name, payload

    def _saga(self, saga_id: str) -> SagaState | None:
        found = self._sagas.get(saga_id) or self._ended.get(saga_id)
        if found is not None:
            return found
        records = self._store.records(saga_id)
        if not records:
            return None
        restored = core.restore(self.definition, records)
        if restored is not None:
            if restored.ended:
                self._remember_end(restored)
            else:
                self._sagas[saga_id] = restored
        return restored

    def _remember_end(self, saga: SagaState) -> None:
        self._ended[saga.saga_id] = saga
        if len(self._ended) > ENDED_IN_MEMORY:
            del self._ended[next(iter(self._ended))]

    # -- timers --------------------------------------------------------------------------

    def _arm(self, timer: core.ArmTimer) -> None:
        saga = self._sagas.get(timer.saga_id)
        if saga is None or saga.ended or saga.seq != timer.seq:
            return  # moved on before its commit was stored
        armed = self._timers.setdefault(timer.saga_id, {})
        for key in [k for k in armed if k[0] != timer.seq]:
            armed.pop(key).cancel()  # the state it was for is over
        key = (timer.seq, timer.index, timer.kind)
        previous = armed.pop(key, None)
        if previous is not None:
            previous.cancel()
        delay = max(0.0, (timer.due_ms - self._now_ms()) / 1000)
        fired = TimerFired(timer.seq, timer.index, timer.kind, timer.due_ms)
        armed[key] = asyncio.get_running_loop().call_later(delay, self._fire, timer.saga_id, key, fired)

    def _fire(self, saga_id: str, key: tuple[int, int, str], fired: TimerFired) -> None:
        armed = self._timers.get(saga_id)
        if armed is None or armed.pop(key, None) is None:
            return  # cancelled meanwhile
        if not armed:
            del self._timers[saga_id]
        self._inputs.put((saga_id, fired))

    def _timers_fired(self, items: list[tuple[str, TimerFired]]) -> None:
        """Decide a batch of due timers as one commit (``OwnInputs``, under the lock)."""
        commit = _Commit()
        now_ms = self._now_ms()
        for saga_id, fired in items:
            partition = self.owner.home(saga_id)
            saga = self._sagas.get(saga_id)
            if saga is None or not self.owner.is_ready(partition):
                continue  # revoked meanwhile: the new owner re-arms it
            try:
                step = core.fire(self.definition, saga, fired, now_ms=now_ms, encode=self._encode,
                                 replies_topic=self.topics.replies)
                self._apply(partition, saga_id, step, commit)
            except RecordError as exc:
                log.error("saga %s %r: a %s timer failed and the saga stays where it was: %s",
                          self.name, saga_id, fired.kind, exc)
        self._submit(commit)

    # -- committing ----------------------------------------------------------------------

    def _submit(self, commit: _Commit) -> asyncio.Future[None]:
        """Produce ``commit``'s journal records now; queue the rest for the committer."""
        return self._commits.submit(commit, commit.journal)

    async def _durable(self, waiting: Sequence[Pending[_Commit]]) -> None:
        """The journal is acknowledged: send the commands it names, the dead letters, then store it."""
        for pending in waiting:
            commit = pending.commit
            offsets = self.owner.settle(await pending.delivery)
            if commit.commands:
                await self._publisher.publish(commit.commands)
            if commit.dead:
                await self._publisher.publish(commit.dead)
            self._store.write(commit.write, offsets)

    def _completed(self, commit: _Commit) -> None:
        """``commit`` is stored: arm its timers, and let go of the sagas that ended."""
        for timer in commit.timers:
            if self.owner.is_ready(self.owner.home(timer.saga_id)):
                self._arm(timer)
        for saga_id in commit.touched:
            self._dirty[saga_id] -= 1
            if self._dirty[saga_id] <= 0:
                del self._dirty[saga_id]
                saga = self._sagas.get(saga_id)
                if saga is not None and saga.ended:
                    # Stored now: an ended saga answers from RocksDB and needs no
                    # running state; its end stays in the bounded memory of ends.
                    del self._sagas[saga_id]
                    self._cancel_timers(saga_id)
                    self._remember_end(saga)

    # -- recovery ------------------------------------------------------------------------

    def _forget(self, partition: int) -> None:
        """Drop what memory holds of ``partition`` before it is caught up again."""
        for saga_id in [s for s in self._sagas if self.owner.home(s) == partition]:
            del self._sagas[saga_id]
            self._cancel_timers(saga_id)
        for saga_id in [s for s in self._ended if self.owner.home(s) == partition]:
            del self._ended[saga_id]
        self._tails[partition] = []

    def _drop(self, partitions: set[int]) -> None:
        if not partitions:
            return
        self.owner.revoke(partitions)
        for partition in partitions:
            self._forget(partition)
            self._tails.pop(partition, None)

    def _cancel_timers(self, saga_id: str) -> None:
        for handle in self._timers.pop(saga_id, {}).values():
            handle.cancel()

    def _restore_chunk(self, partition: int, chunk: list[Incoming]) -> None:
        """Store the journal records this store lacks (``PartitionOwner`` reads them)."""
        written: list[tuple[int, SagaJournalEntry, bytes]] = []
        seen: set[tuple[str, int]] = set()
        tail = self._tails.setdefault(partition, [])
        for record in chunk:
            try:
                entry = avro.decode_as(record.value or b"", SagaJournalEntry)
                if entry.saga != self.name:
                    raise SchemaError(f"a record of saga {entry.saga[:100]!r}")
                check_id(entry.saga_id, "saga_id")
                if self.owner.home(entry.saga_id) != partition:
                    raise SchemaError(f"a record of {entry.saga_id[:100]!r}, whose home is another partition")
                if record.key != f"{entry.saga_id}/{entry.seq}".encode("utf-8", "surrogatepass"):
                    raise SchemaError(f"its key {record.key!r:.100} does not match its value")
            except RecordError as exc:
                log.error("skipping saga journal record %s/%d@%d: %s",
                          record.topic, record.partition, record.offset, exc)
                continue
            key = (entry.saga_id, entry.seq)
            if key in seen or self._store.has(*key):
                # A second record at one seq (a zombie's): the first in offset order counts.
                continue
            seen.add(key)
            written.append((partition, entry, record.value or b""))
            tail.append(entry)
        self._store.write(written, {partition: chunk[-1].offset + 1})

    async def _caught_up(self, partition: int, end: int) -> None:
        """The journal is applied up to ``end``: resend what a crash may have cut, recover."""
        self._store.write((), {partition: end})
        commit = _Commit()
        now_ms = self._now_ms()
        running: dict[str, SagaState] = {}
        for saga_id in self._store.running(partition):
            try:
                saga = core.restore(self.definition, self._store.records(saga_id))
            except Exception as exc:  # noqa: BLE001 - a stored state that no longer reads back
                log.error("saga %s cannot restore %r: %s: %s", self.name, saga_id, type(exc).__name__, exc)
                continue
            if saga is not None and not saga.ended:
                running[saga_id] = saga
        resent = 0
        for entry in self._tails.pop(partition, []):
            current = running.get(entry.saga_id)
            if current is not None and current.seq == entry.seq:
                continue  # the current state: on_enter(recovering=True) sends its commands
            for command in entry.commands:
                envelope = core.command_envelope(entry.saga_id, command, now_ms, self.topics.replies)
                aggregate = self._aggregates.get(command.aggregate)
                if aggregate is None:
                    log.error("saga %s %r: cannot resend %s to unknown aggregate %r",
                              self.name, entry.saga_id, command.command_id, command.aggregate)
                    continue
                commit.commands.append(self._command(core.SagaCommand(aggregate, envelope)))
                resent += 1
        recovered = 0
        for saga_id, saga in running.items():
            self._sagas[saga_id] = saga
            try:
                step = core.recover(self.definition, saga, now_ms=now_ms, encode=self._encode,
                                    replies_topic=self.topics.replies)
                self._apply(partition, saga_id, step, commit)
                recovered += 1
            except RecordError as exc:
                log.error("saga %s %r: on_enter(recovering=True) failed; the saga waits for events: %s",
                          self.name, saga_id, exc)
        if running or resent:
            log.info("saga %s partition %d recovered: %d running sagas, %d journaled commands sent again",
                     self.name, partition, recovered, resent)
        self._submit(commit)

    # -- small things --------------------------------------------------------------------

    def _now_ms(self) -> int:
        return self.journaled.now_ms()

    def _ensure_tasks(self) -> None:
        if self.journaled.started:
            return
        self._inputs.open()
        self.journaled.spawn(self._inputs.run, self._commits.run)


__all__ = ["SagaAgent", "SagaStore", "SagaTopics", "saga_router"]
