"""The hosting seam: what every kind the worker runs implements, and what the worker gives it.

A *kind* is aggregates, projections, workflows, orchestrations (and later sagas, schedules,
stream stages). Each declared definition is a ``Hosted``: it names its topics and, when the
worker starts, ``open``\\s an ``Agent`` with the worker's ``Runtime`` (Kafka connection,
data directory, the shared publisher, dead letters, a store home). The agent lists its
``Input``\\s (topics plus the coroutine that decides a batch of their records) and hears
about partitions being assigned and revoked. Only the worker (``worker.py``) turns this into
Faust agents; nothing here or in a kind imports Faust.

What a kind gets for free lives in ``owner.py`` (``PartitionOwner``: readiness per
partition, catch-up from its journal, forwarding of misrouted records, foreign-writer
detection) and ``journaled.py`` (the owner wired to the runtime, the per-record backstop,
the commit queue, recover-again, the event router, and ``Agents`` for a definition that
runs several); dead letters are ``Runtime.dead_letter``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from ...core.limits import check_reply_to
from ...errors import ReplyUndeliverable
from .connection import KafkaConnection
from .deadletters import DEAD_LETTER_VALUE_BYTES, dead_letter
from .groups import DEFAULT_PREFIX
from .io import Incoming, Outgoing, PartitionReader, Publisher
from .kafka import KafkaPartitionReader, TopicCheck
from .metrics import Metrics
from .pipeline import Start
from .topics import TopicSpec
from .tracing import CONSUMER, Tracing, carrier_of

log = logging.getLogger(__name__)

#: A (topic, partition) pair as the worker reports assignments and revocations.
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Input:
    """One source of records of an agent: the worker runs one Faust agent per input.

    Attributes:
        name: The Faust agent's name, unique in the app (e.g. ``aggregate-account``).
        topics: The topics it consumes, as raw bytes.
        start: Decides a batch and returns what completes it (``pipeline.run_batches``).
        partitions: The partition count to declare the topics with; None for topics the
            app does not own the layout of (another kind's events topic).
        max_in_flight: Batches decided but not yet completed (1: each batch sees the
            previous one's RocksDB writes).
    """

    name: str
    topics: tuple[str, ...]
    start: Start
    partitions: int | None = None
    max_in_flight: int = 2


class Agent(Protocol):
    """A definition running in one worker: what the worker feeds and tells."""

    @property
    def inputs(self) -> Sequence[Input]:
        """The topics this agent consumes and the coroutine that decides each batch."""
        ...

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """React to newly assigned partitions (any topic of the app; ignore others').

        Not awaited by the consumer: records of these partitions may arrive meanwhile, and
        the agent must make them wait until it is ready (``PartitionOwner.ensure_ready``
        runs one catch-up per partition; a batch waits for one in progress).

        Returns once what the agent recovers at assignment is recovered (a catch-up, a
        replay): the worker's ``/readyz`` waits for every agent's ``assign`` to return
        (``readiness.py``). An agent that catches a partition up at its first record instead
        returns at once.
        """
        ...

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        """Forget what is cached for revoked partitions: another worker owns them now."""
        ...

    def close(self) -> None:
        """Stop tasks and close stores and readers (the worker is stopping)."""
        ...


@runtime_checkable
class Winding(Protocol):
    """An agent that runs work of its own beside its batches (a workflow's activity attempts).

    A stopping worker (``worker.py``, docs/operations.md "Stopping") calls ``wind_down``,
    waits for ``wound_down`` up to its grace, then calls ``abandon``, all before it stops
    its intake: an abandoned attempt's step is journaled as started and not ended, so the
    next owner of the partition runs it again. Agents without such work need none of it.
    """

    def wind_down(self) -> None:
        """Start nothing new from now on: what would start is journaled and runs after the restart."""
        ...

    async def wound_down(self) -> None:
        """Return once nothing started runs any more and the results that came are committed."""
        ...

    def abandon(self) -> list[str]:
        """Cancel what still runs (its results are dropped); return each, for the stop's log line."""
        ...


class Hosted(Protocol):
    """A declared definition the worker runs: its topics, and how to open its agent."""

    @property
    def kind(self) -> str:
        """The kind, e.g. ``"aggregate"``; (kind, name) is unique in an app."""
        ...

    @property
    def name(self) -> str:
        """The definition's name."""
        ...

    def topic_specs(self) -> list[TopicSpec]:
        """Every topic this definition needs."""
        ...

    def open(self, runtime: Runtime) -> Agent:
        """Open stores and clients and return the running agent (called once per worker)."""
        ...


def hosted_named(hosted: Iterable[Hosted], kind: str, name: str, *, app: str) -> Hosted:
    """Return the definition of ``kind`` called ``name`` among an app's ``hosted`` ones.

    Args:
        hosted: The app's definitions (``App.hosted``).
        kind: Their kind (``"workflow"``, ``"saga"``).
        name: The definition's name.
        app: The app's name, for the error.

    Raises:
        LookupError: None is (the message lists the known ones).
    """
    known: list[str] = []
    for definition in hosted:
        if definition.kind == kind:
            if definition.name == name:
                return definition
            known.append(definition.name)
    raise LookupError(f"app {app!r} has no {kind} {name!r}; known: {', '.join(sorted(known)) or 'none'}")


@dataclass
class Runtime:
    """What the worker gives every agent it opens.

    Attributes:
        connection: The Kafka cluster and its client properties (every client an agent
            builds is built from it).
        data_dir: The worker's data directory.
        partitions: The app's partition count.
        publisher: The worker's one producer, shared by every agent.
        deadletter_topic: ``{app}.deadletter``.
        own_topics: Every topic the app declares that no reply may be sent to (journals,
            inboxes, commands, outcomes, status, dead letters).
        deadletter_value_limit: Bytes of a bad record's value a dead letter keeps.
        json_outcomes: Write workflow outcome records as JSON (``App(json_outcomes=True)``).
        metrics: The worker's metrics (``metrics.py``); the kinds report to it.
        kind: The kind of the definition this runtime was given to (``scoped``); "" when
            shared. Dead letters are counted under it.
        name: That definition's name.
        exactly_once: The publisher writes in Kafka transactions
            (``App(processing_guarantee="exactly_once")``).
        committed: Exactly once: resolves once every record sent before the call is in a
            committed transaction (``TransactionalPublisher.committed``); None otherwise.
        progress: Told of every chunk a partition reader reads (a catch-up is progress for
            the worker's liveness detector, ``liveness.py``); None when nobody listens.
        group_prefix: The prefix of the group ids of the worker's assign-only readers
            (``groups.reader_group``): ``{app}.``, which the worker's ACLs cover.
        tracing: Where the kinds' spans go (``tracing.py``); None: traces are off, and
            every call site checks only that.
    """

    connection: KafkaConnection
    data_dir: Path
    partitions: int
    publisher: Publisher
    deadletter_topic: str
    own_topics: frozenset[str] = frozenset()
    deadletter_value_limit: int = DEAD_LETTER_VALUE_BYTES
    json_outcomes: bool = False
    exactly_once: bool = False
    committed: Callable[[], Awaitable[None]] | None = None
    progress: Callable[[], None] | None = None
    group_prefix: str = DEFAULT_PREFIX
    clock: Callable[[], float] = time.time
    metrics: Metrics = field(default_factory=Metrics)
    tracing: Tracing | None = None
    kind: str = ""
    name: str = ""
    _closers: list[Callable[[], None]] = field(default_factory=list)
    _topic_check: TopicCheck | None = None

    def scoped(self, kind: str, name: str) -> Runtime:
        """Return this runtime as given to definition ``name`` of ``kind``.

        Everything is shared (publisher, metrics, what is closed with the worker); only the
        definition differs, so what it dead-letters is counted under it.
        """
        return dataclasses.replace(self, kind=kind, name=name)

    def store_path(self, kind: str, name: str) -> Path:
        """Where the RocksDB store of definition ``name`` of ``kind`` lives."""
        return self.data_dir / "stores" / kind / name

    def reader(self) -> PartitionReader:
        """Return a new partition reader, closed when the worker stops."""
        reader = KafkaPartitionReader(self.connection, on_read=self.progress, group_prefix=self.group_prefix)
        self._closers.append(reader.close)
        return reader

    def topic_check(self) -> TopicCheck:
        """Return a new ``TopicCheck`` (is a topic named by a record there?), closed when the worker stops."""
        check = TopicCheck(self.connection)
        self._closers.append(check.close)
        return check

    def on_close(self, close: Callable[[], None]) -> None:
        """Call ``close`` when the worker stops."""
        self._closers.append(close)

    def close(self) -> None:
        """Run the registered closers, newest first."""
        while self._closers:
            self._closers.pop()()

    def reply_topic(self, reply_to: str | None) -> str | None:
        """Return where a reply asked for with ``reply_to`` may go (None: no reply).

        Raises:
            LimitError: ``reply_to`` is not a legal topic name, or names one of the app's
                own topics (a reply written into a journal would corrupt it).
            ReplyUndeliverable: The topic does not exist, or the worker's principal may
                not write it. The request is dead-lettered with the reason, never done:
                in a transaction Kafka refuses the whole transaction for one such write
                (and its abort failed fatally, measured: ``TopicCheck``), and redone it
                would fail the same way each time; at least once the reply would be lost
                after librdkafka's ~30 s wait for the topic. Asked once per topic a minute.
            BrokerError: Kafka did not answer (the batch fails and is redone).
        """
        if not reply_to:
            return None
        topic = check_reply_to(reply_to, self.own_topics)
        refusal = self._reply_topics().refusal(topic)
        if refusal is not None:
            raise ReplyUndeliverable(f"its reply_to cannot be written: {refusal}")
        return topic

    def _reply_topics(self) -> TopicCheck:
        if self._topic_check is None:
            self._topic_check = self.topic_check()
        return self._topic_check

    def dead_letter(self, record: Incoming, error: BaseException) -> Outgoing:
        """Return the dead letter of ``record``, which failed with ``error`` (bounded): a
        ``RecordError``, or what user code raised on it.

        Counted in ``tidings_dead_letters_total`` under this runtime's definition and the
        error's class name."""
        self.metrics.dead_letter(self.kind, self.name, error)
        if self.tracing is not None:
            self._trace_dead_letter(self.tracing, record, error)
        return dead_letter(record, error, self.deadletter_topic, int(self.clock() * 1000),
                           value_limit=self.deadletter_value_limit)

    def _trace_dead_letter(self, tracing: Tracing, record: Incoming, error: BaseException) -> None:
        """A span for a dead letter, under the bad record's trace context when its headers
        carry one (the value did not decode, or its metadata may not be there)."""
        span = tracing.start(
            f"deadletter {self.kind} {self.name}".rstrip(), carrier_of(None, record.headers), kind=CONSUMER,
            attributes={"tidings.kind": self.kind or None, "tidings.name": self.name or None,
                        "messaging.destination.name": record.topic,
                        "messaging.destination.partition.id": str(record.partition),
                        "messaging.kafka.offset": record.offset,
                        "tidings.deadletter.reason": str(error), "error.type": type(error).__name__},
        )
        tracing.end(span, str(error) or type(error).__name__)
