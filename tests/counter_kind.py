"""A counter kind written only against the hosting protocol, to show what a kind gets for free.

It is the smallest journaled kind: ``{app}.counter.{name}.inbox`` takes increments (key =
counter id, value ``b"+1"``); each one is journaled at ``{app}.counter.{name}.journal``
(key ``{id}/{n}``, value ``n``, the id's home partition) and the new count is published to
``{app}.counter.{name}.outcomes`` (key id, value ``n``). Its store is memory only, so
everything a worker knows comes from the journal through the ``PartitionOwner``'s catch-up.

Adding a kind is this one module: a pure core (``count_increment`` decides, ``restore_count``
folds the journal back; no I/O, tested without a broker) and a shell around it. What the
shell uses of the platform is exactly what a new kind (a saga, a schedule) would use:
``context.KindContext`` (the app's name and partitions, never ``App``),
``hosting.Hosted``/``Agent``/``Input``/``Runtime``, ``owner.PartitionOwner`` (readiness,
catch-up, ``forward``, ``settle``), ``Runtime.dead_letter`` and ``Runtime.publisher``. It
imports nothing of ``app.py``, of the other kinds or of Faust, and needs no change to either:
it is declared like any kind, with ``app.host(CounterKind(app, "clicks"))``
(``tests/integration/test_counter_kind.py``).

Exactly once per inbox record, without a request id: each journal record carries the
offset of the inbox record it counts (header ``inbox-offset``; the inbox and the journal
are co-partitioned), and a record at or below the highest offset the journal holds for
its partition is known to be counted already (re-delivered after a crash, before its
offset was committed). A misrouted record is forwarded; if the worker dies between the
forward and the commit, the forward is repeated and the increment counted twice: a real
kind dedupes with an id carried in the record (as commands and workflow requests do).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from tidings.errors import DecodeError, RecordError
from tidings.shell.runtime.context import KindContext
from tidings.shell.runtime.hosting import Input, Runtime, TopicPartition
from tidings.shell.runtime.io import Incoming, Outgoing
from tidings.shell.runtime.owner import PartitionOwner
from tidings.shell.runtime.topics import TopicSpec, deadletter_topic, spec_for, topic_name

log = logging.getLogger(__name__)

#: The only value an increment may hold.
INCREMENT = b"+1"
#: Longest counter id, in UTF-8 bytes (it is a journal key segment).
MAX_ID_BYTES = 200
#: Header of a journal record: the offset of the inbox record it counts.
INBOX_OFFSET = "inbox-offset"


# -- the pure core ---------------------------------------------------------------------------


def count_increment(counts: Mapping[str, int], counted_up_to: int, counter_id: str, offset: int) -> int | None:
    """Decide the increment of ``counter_id`` at inbox ``offset``: its new count, or None.

    None when the partition's journal already counts an inbox record at or past ``offset``
    (``counted_up_to``): a record re-delivered after a crash, before its offset was committed.
    """
    if offset <= counted_up_to:
        return None
    return counts.get(counter_id, 0) + 1


def restore_count(counts: Mapping[str, int], counter_id: str, count: int) -> bool:
    """Whether the journal record ``{counter_id}/{count}`` is the id's next count.

    The first record at each number wins: any other is a second record at a number already
    counted (a worker's own write replayed after a foreign-writer alarm, or a zombie's).
    """
    return count == counts.get(counter_id, 0) + 1


# -- the shell -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CounterTopics:
    """The topics of one counter definition."""

    inbox: str
    journal: str
    outcomes: str
    deadletter: str


class CounterKind:
    """The ``Hosted`` of one counter definition: its topics, and how to open its agent."""

    def __init__(self, context: KindContext, name: str) -> None:
        self._name = name
        self.partitions = context.partitions
        self.topics = CounterTopics(
            inbox=topic_name(context.name, self.kind, name, "inbox"),
            journal=topic_name(context.name, self.kind, name, "journal"),
            outcomes=topic_name(context.name, self.kind, name, "outcomes"),
            deadletter=deadletter_topic(context.name),
        )

    @property
    def kind(self) -> str:
        return "counter"

    @property
    def name(self) -> str:
        return self._name

    def topic_specs(self) -> list[TopicSpec]:
        """Inbox, journal and outcomes, co-partitioned, and the app's dead-letter topic."""
        topics, partitions = self.topics, self.partitions
        return [
            spec_for("inbox", topics.inbox, partitions=partitions),
            spec_for("journal", topics.journal, partitions=partitions),
            spec_for("outcomes", topics.outcomes, partitions=partitions),
            spec_for("deadletter", topics.deadletter, partitions=partitions),
        ]

    def open(self, runtime: Runtime) -> CounterAgent:
        return CounterAgent(self.name, self.topics, runtime)


@dataclass(slots=True)
class _Decided:
    """What deciding one batch produced, waiting for the journal's acks."""

    journal: list[Outgoing] = field(default_factory=list)
    outcomes: list[Outgoing] = field(default_factory=list)
    after: list[Outgoing] = field(default_factory=list)  # forwards and dead letters


class CounterAgent:
    """Counts increments per id over the inbox partitions assigned to this worker.

    Memory holds, per partition: the counts, the next journal offset they include
    (``applied``, where a catch-up resumes) and the highest inbox offset the journal
    records as counted. All three are rebuilt from the journal by the owner's catch-up.
    """

    def __init__(self, name: str, topics: CounterTopics, runtime: Runtime) -> None:
        self.name = name
        self.topics = topics
        self._runtime = runtime
        self._counts: dict[int, dict[str, int]] = {}
        self._applied: dict[int, int] = {}
        self._counted: dict[int, int] = {}
        self.owner = PartitionOwner(
            f"counter {name}",
            journal=topics.journal,
            partitions=runtime.partitions,
            reader=runtime.reader(),
            # Transactions fence a second writer; their commit markers take offsets too.
            foreign_writers=not runtime.exactly_once,
            applied=self._applied.get,
            restore=self._restore,
            caught_up=self._caught_up,
            # A foreign writer: memory stays as it is (it holds everything up to ``applied``
            # plus this worker's own writes since), and the catch-up the owner runs before
            # the partition's next record reads from ``applied`` on, foreign records
            # included; ``_restore`` skips what memory already counts.
            on_foreign=lambda partition: None,
        )

    # -- the hosting seam ----------------------------------------------------------------

    @property
    def inputs(self) -> Sequence[Input]:
        return [Input(f"counter-{self.name}", (self.topics.inbox,), self.start,
                      partitions=self.owner.partitions)]

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Nothing at once: the owner catches a partition up before its first record."""

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        """Forget revoked partitions: another worker counts there now."""
        mine = [p for topic, p in partitions if topic == self.topics.inbox]
        self.owner.revoke(mine)
        for partition in mine:
            self._counts.pop(partition, None)
            self._applied.pop(partition, None)
            self._counted.pop(partition, None)

    def close(self) -> None:
        """Nothing to close: memory only, and the runtime closes the reader."""

    # -- deciding ------------------------------------------------------------------------

    async def start(self, batch: list[Incoming]) -> Callable[[], Awaitable[None]]:
        """Count ``batch`` and start journaling it; return what completes it."""
        await self.owner.ensure_ready({record.partition for record in batch})
        decided = _Decided()
        for record in batch:
            try:
                self._decide(record, decided)
            except RecordError as exc:
                log.error("counter %s dead-letters %s/%d@%d: %s", self.name, record.topic,
                          record.partition, record.offset, exc)
                decided.after.append(self._runtime.dead_letter(record, exc))
        publisher = self._runtime.publisher
        delivery = publisher.send(decided.journal)

        async def finish() -> None:
            delivered = await delivery
            # The owner's check: a journal write that does not start where the last one
            # ended means another writer; that partition's offset is left out (and caught
            # up again before its next record).
            self._applied.update(self.owner.settle(delivered))
            await publisher.publish(decided.outcomes + decided.after)

        return finish

    def _decide(self, record: Incoming, decided: _Decided) -> None:
        counter_id = _counter_id(record)
        forward = self.owner.forward(record, counter_id)
        if forward is not None:
            decided.after.append(forward)
            return
        partition = record.partition
        counts = self._counts.setdefault(partition, {})
        count = count_increment(counts, self._counted.get(partition, -1), counter_id, record.offset)
        if count is None:
            log.info("counter %s: inbox %d@%d is counted already", self.name, partition, record.offset)
            return
        counts[counter_id] = count
        self._counted[partition] = record.offset
        value = str(count).encode()
        decided.journal.append(Outgoing(
            self.topics.journal, f"{counter_id}/{count}".encode(), value, partition,
            ((INBOX_OFFSET, str(record.offset).encode()),),
        ))
        decided.outcomes.append(Outgoing(self.topics.outcomes, counter_id.encode(), value, partition))

    # -- catch-up ------------------------------------------------------------------------

    def _restore(self, partition: int, chunk: list[Incoming]) -> None:
        """Apply journal records: the first record at each ``{id}/{n}`` wins."""
        counts = self._counts.setdefault(partition, {})
        for record in chunk:
            self._applied[partition] = record.offset + 1
            try:
                counter_id, _, number = (record.key or b"").decode().rpartition("/")
                count = int(number)
            except ValueError as exc:
                log.error("counter %s skips journal record %d@%d: %s", self.name, partition,
                          record.offset, exc)
                continue
            offset = record.headers.get(INBOX_OFFSET)
            if offset is not None:
                self._counted[partition] = max(self._counted.get(partition, -1), int(offset))
            if restore_count(counts, counter_id, count):
                counts[counter_id] = count

    def _caught_up(self, partition: int, end: int) -> None:
        self._applied[partition] = end


def _counter_id(record: Incoming) -> str:
    """The counter id of an increment record (its key); ``DecodeError`` if it is not one."""
    if not record.key:
        raise DecodeError("an increment needs its counter id as the record key")
    if len(record.key) > MAX_ID_BYTES:
        raise DecodeError(f"a counter id is at most {MAX_ID_BYTES} bytes, not {len(record.key)}")
    try:
        counter_id = record.key.decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"the counter id is not UTF-8: {exc}") from exc
    if record.value != INCREMENT:
        raise DecodeError(f"an increment's value is {INCREMENT!r}, not {(record.value or b'')[:40]!r}")
    return counter_id
