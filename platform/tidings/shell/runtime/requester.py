"""One requester per ``Client``: one producer, one reply reader, one outcome watcher.

Everything a program asks a tidings worker goes through here: commands to aggregates and
requests to workflow inboxes (``start``, ``signal``, ``cancel``, ``query``). A request is
keyed by its instance (aggregate id, workflow instance id), so the producer's ``murmur2``
partitioner puts it on the partition that owns the instance, behind every earlier request
to it. A request that wants an answer names the app's one replies topic as ``reply_to``;
the answer comes back there keyed by the request's command or request id, and one thread
(``replies.ReplyReader``) reads that topic and tells the two kinds of answer apart by
their Avro schema (``ReplyEnvelope`` for commands, ``WorkflowReply`` for workflows).

A workflow's outcome is read where the worker writes it, on the workflow's outcomes topic
(``OutcomeWatcher``): a caller notes the end offset of its instance's outcomes partition
before it asks the worker anything, and any outcome written after the question shows up
from that offset on. So an outcome written by a worker that restarted, or that took the
partition over, wakes the caller when it is written; no promise held in a worker's memory
is needed.

The requester makes its producer and threads on first use and ``close`` stops them; a
later request starts them again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ...codec import avro
from ...codec.answers import decode_reply
from ...core.records import CommandEnvelope, ReplyEnvelope
from ...core.workflow_records import WorkflowInbox, WorkflowReply
from ...errors import BrokerError
from .connection import KafkaConnection
from .groups import DEFAULT_PREFIX, reader_group
from .ids import RandomIds
from .kafka import close_producer, is_fatal, settle_future, take_waiting, watermarks
from .liveness import Liveness, read_statistics
from .replies import RECOVER_AFTER_S, ReplyReader
from . import tracing
from .tracing import PRODUCER, Tracing, headers_of

log = logging.getLogger(__name__)

T = TypeVar("T")
Answer = ReplyEnvelope | WorkflowReply

#: Seconds one turn of the outcome watcher's thread waits for records; also how soon it
#: notices a partition to assign (only the first wait on a partition pays it) or ``close``.
POLL_S = 0.02
#: Seconds a partition stays assigned after its last waiter left: a program waiting for
#: one result after another then notes no offset and assigns nothing for each.
LINGER_S = 30.0
#: Seconds to wait for Kafka when noting an end offset.
NOTE_TIMEOUT_S = 30.0
#: A request not delivered for this long has its producer replaced by a new one (see
#: ``Requester._produce``).
STUCK_S = 30.0


class Requester:
    """Produces requests and waits for their answers and outcomes, for one ``Client``.

    Args:
        connection: The Kafka cluster and its client properties.
        replies_topic: The replies topic every request with an answer names: the app's,
            or the client principal's own (``acls.client_replies_topic``).
        group_prefix: The prefix of its readers' group ids (``groups.reader_group``): a
            client's is ``{app}.client.``, so one prefixed Group ACL covers them.
    """

    def __init__(self, connection: KafkaConnection, *, replies_topic: str,
                 group_prefix: str = DEFAULT_PREFIX) -> None:
        self.connection = connection
        self.replies_topic = replies_topic
        self.group_prefix = group_prefix
        #: Request and command ids (``uuid4().hex`` would make a system call per request).
        self.ids = RandomIds()
        self._producer: RequestSender | None = None
        # Each request is a producer span whose context travels in its metadata and headers
        # (docs/tracing.md); None when traces are off.
        self._tracing = tracing.from_environment()
        self._replies: ReplyReader[Answer] | None = None
        self._outcomes: OutcomeWatcher | None = None

    async def send(self, topic: str, request: WorkflowInbox) -> None:
        """Produce ``request`` and return once the broker has it (it is durable then).

        Raises:
            BrokerError: Producing failed.
        """
        loop = asyncio.get_running_loop()
        delivered: asyncio.Future[None] = loop.create_future()

        def report(error: KafkaError | None, message: Any) -> None:  # on the producer's thread
            failure = None if error is None else BrokerError(f"producing to {topic} failed: {error}")
            _call_soon(loop, settle_future, delivered, None, failure)

        self._produce(topic, request, report)
        await delivered

    @overload
    async def ask(self, topic: str, request: CommandEnvelope, timeout: float) -> ReplyEnvelope | None: ...

    @overload
    async def ask(self, topic: str, request: WorkflowInbox, timeout: float) -> WorkflowReply | None: ...

    async def ask(self, topic: str, request: CommandEnvelope | WorkflowInbox, timeout: float) -> Answer | None:
        """Produce ``request`` and return its answer, or None when none came within ``timeout`` s.

        The request must name this requester's replies topic as ``reply_to``.

        Raises:
            BrokerError: The replies topic cannot be read, or producing failed.
        """
        async with self.answer_to(topic, request) as answered:
            # Not asyncio.wait_for: it waits on a future of its own that a callback of this
            # one resolves, one more turn of the loop per request; the timer ends this one.
            # Its time up, the caller gets None; an answer after that is dropped.
            timer = asyncio.get_running_loop().call_later(timeout, settle_future, answered, None, None)
            try:
                return await answered
            finally:
                timer.cancel()

    @asynccontextmanager
    async def answer_to(
        self, topic: str, request: CommandEnvelope | WorkflowInbox
    ) -> AsyncIterator[asyncio.Future[Answer]]:
        """Produce ``request`` and yield the future of its answer, forgotten on exit.

        ``ask`` waits on it with a timeout; a request that may get no answer at all (a
        watched start) is waited on beside whatever else the caller waits for, with no task
        or timer of its own. The request must name this requester's replies topic.

        Raises:
            BrokerError: The replies topic cannot be read (on entry); the future fails with
                it when producing fails.
        """
        replies = self._reply_reader()
        await replies.start()
        loop = asyncio.get_running_loop()
        key = _answer_key(request)
        answered = replies.expect(key)

        def report(error: KafkaError | None, message: Any) -> None:  # on the producer's thread
            # Only a failure wakes the caller (at once, rather than at its timeout): an ack
            # is not worth a wake-up of the loop per request; the answer follows it.
            if error is not None:
                _call_soon(loop, settle_future, answered, None, BrokerError(f"producing to {topic} failed: {error}"))

        try:
            self._produce(topic, request, report)
            yield answered
        finally:
            replies.forget(key)

    @asynccontextmanager
    async def outcome(
        self, topic: str, partition: int, instance_id: str, read: Callable[[bytes], T]
    ) -> AsyncIterator[asyncio.Future[T]]:
        """Watch ``partition`` of the outcomes ``topic`` for the record keyed ``instance_id``.

        On entry the partition's end offset is noted (one question to Kafka, unless the
        partition is watched already), so ask the worker anything only inside the block:
        every outcome written after that is seen. The future yielded resolves with
        ``read(value)`` of the first such record for which ``read`` does not raise
        (a record that does not read is logged and skipped).

        Raises:
            BrokerError: The topic does not exist, or Kafka did not answer.
        """
        watcher = self._outcome_watcher()
        waiter = await watcher.watch(topic, partition, instance_id, read)
        try:
            yield waiter.future
        finally:
            watcher.forget(waiter)

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for produced records to be delivered; return how many are left."""
        return 0 if self._producer is None else self._producer.flush(timeout)

    def close(self) -> None:
        """Deliver what was produced, stop the threads and close the Kafka clients.

        Callers still waiting get no answer (their timeout ends the wait). A later request
        opens new ones.
        """
        producer, replies, outcomes = self._producer, self._replies, self._outcomes
        self._producer = self._replies = self._outcomes = None
        if producer is not None:
            producer.close()
        if replies is not None:
            replies.close()
        if outcomes is not None:
            outcomes.close()

    # -- internals ---------------------------------------------------------------------

    def _produce(
        self, topic: str, request: CommandEnvelope | WorkflowInbox, report: Callable[[KafkaError | None, Any], None]
    ) -> None:
        if self._producer is None:
            self._producer = RequestSender(self.connection)
        elif self._producer.stuck_for() > STUCK_S:
            # librdkafka asks one broker for the idempotent producer's id and retries that
            # broker for ever (confluent-kafka-python#1335); seen after a controller failover
            # on the local cluster, where one broker kept answering COORDINATOR_LOAD_IN_PROGRESS
            # and a client's every request waited. A new producer asks again, of a broker
            # drawn afresh. The old one's queue is purged: its callers get a BrokerError (a
            # caller retrying with the same command id is safe).
            log.warning("requests to Kafka were not delivered for %.0f s; producing with a new producer",
                        self._producer.stuck_for())
            stuck, self._producer = self._producer, RequestSender(self.connection)
            stuck.close(1.0)
        key = request.aggregate_id if isinstance(request, CommandEnvelope) else request.instance_id
        if self._tracing is not None:
            self._produce_traced(self._tracing, topic, key, request, report)
            return
        # Keyed by instance, no partition: the producer's murmur2 picks the owner's.
        self._producer.produce(topic, key.encode(), avro.encode(request), report)

    def _produce_traced(
        self, tracing: Tracing, topic: str, key: str, request: CommandEnvelope | WorkflowInbox,
        report: Callable[[KafkaError | None, Any], None],
    ) -> None:
        """Produce ``request`` inside a producer span (the caller's current span its parent),
        its context in the envelope's metadata and in a ``traceparent`` header."""
        assert self._producer is not None
        if isinstance(request, CommandEnvelope):
            name = f"send {topic}"
            attributes: dict[str, Any] = {"tidings.aggregate_id": request.aggregate_id,
                                          "tidings.command_id": request.command_id,
                                          "tidings.command_type": request.type}
        else:
            name = f"{request.kind} {topic}"
            attributes = {"tidings.instance_id": request.instance_id, "tidings.request": request.kind,
                          "tidings.request_id": request.request_id}
        attributes["messaging.destination.name"] = topic
        with tracing.span(name, kind=PRODUCER, attributes=attributes) as span:
            carrier = tracing.carrier(span)
            request = dataclasses.replace(request, metadata={**request.metadata, **carrier})
            self._producer.produce(topic, key.encode(), avro.encode(request), report, headers=headers_of(carrier))

    def _reply_reader(self) -> ReplyReader[Answer]:
        if self._replies is None:
            self._replies = ReplyReader(self.connection, self.replies_topic, decode=_decode_answer,
                                        group_prefix=self.group_prefix)
        return self._replies

    def _outcome_watcher(self) -> OutcomeWatcher:
        if self._outcomes is None:
            self._outcomes = OutcomeWatcher(self.connection, group_prefix=self.group_prefix)
        return self._outcomes


class RequestSender:
    """The requester's one producer; a thread of its own serves the delivery reports.

    So ``send`` returns at the broker's ack, not at some later turn of another thread.
    Idempotent, so librdkafka's retries neither duplicate nor reorder the requests to one
    partition.
    """

    def __init__(self, connection: KafkaConnection) -> None:
        self._producer = connection.producer(
            **{
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "acks": "all",
                # A request to a topic nobody declared fails instead of creating it with the
                # broker's default partition count (its instances would land elsewhere).
                "allow.auto.create.topics": False,
                # No linger: a request is one record, and a caller waits for its answer.
                # Under load librdkafka batches anyway (records queue while a request is out).
                "linger.ms": 0,
            }
        )
        self._stopping = threading.Event()
        # When each record not yet reported was produced (monotonic), by a token of its own.
        self._pending: dict[int, float] = {}
        self._next_token = 0
        self._pending_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="tidings-producer", daemon=True)
        self._thread.start()

    def stuck_for(self) -> float:
        """Seconds the oldest record produced and not yet reported has waited (0 if none)."""
        with self._pending_lock:
            # Tokens are taken in produce order and the dict keeps insertion order: the first
            # entry is the oldest (``min`` over 1,000 in flight cost 3 % of a client's loop).
            oldest = next(iter(self._pending.values()), None)
        return 0.0 if oldest is None else time.monotonic() - oldest

    def produce(self, topic: str, key: bytes, value: bytes, report: Callable[[KafkaError | None, Any], None],
                headers: Sequence[tuple[str, bytes]] = ()) -> None:
        """Queue one record; ``report(error, message)`` runs on delivery, in the producer's thread.

        Raises:
            BrokerError: librdkafka refused the record (too large, for one).
        """
        with self._pending_lock:
            token = self._next_token
            self._next_token += 1
            self._pending[token] = time.monotonic()

        def reported(error: KafkaError | None, message: Any) -> None:
            with self._pending_lock:
                self._pending.pop(token, None)
            report(error, message)

        try:
            self._enqueue(topic, key, value, reported, headers)
        except BaseException:
            with self._pending_lock:
                self._pending.pop(token, None)
            raise

    def _enqueue(self, topic: str, key: bytes, value: bytes, report: Callable[[KafkaError | None, Any], None],
                 headers: Sequence[tuple[str, bytes]]) -> None:
        while True:
            try:
                if headers:
                    self._producer.produce(topic, value, key, on_delivery=report, headers=list(headers))
                else:
                    self._producer.produce(topic, value, key, on_delivery=report)
                return
            except BufferError:
                self._producer.poll(0.01)  # the local queue is full: let librdkafka drain it
            except KafkaException as exc:
                raise BrokerError(f"producing to {topic} failed: {exc}") from exc

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` s for what is queued to be delivered; return how many are left."""
        return int(self._producer.flush(timeout))

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (up to ``timeout``), stop serving delivery reports and
        destroy the producer: nothing of it keeps retrying once the client is closed."""
        self._stopping.set()
        self._thread.join(timeout)
        close_producer(self._producer, timeout)

    def _serve(self) -> None:
        while not self._stopping.is_set():
            self._producer.poll(0.05)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: Any) -> None:
    """Run ``callback(*args)`` on ``loop`` from another thread, unless the loop has closed.

    A client serves one ``asyncio.run`` after another; an answer or a delivery report for a
    loop that is gone concerns nobody, and raising would kill the thread that serves them all.
    """
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass


def _settle_all(outcomes: list[tuple[asyncio.Future[Any], Any]]) -> None:
    for future, outcome in outcomes:
        settle_future(future, outcome, None)


def _answer_key(request: CommandEnvelope | WorkflowInbox) -> str:
    # Commands and workflow requests pick their ids independently: one namespace each.
    if isinstance(request, CommandEnvelope):
        return f"command/{request.command_id}"
    return f"workflow/{request.request_id}"


def _decode_answer(value: bytes) -> tuple[str, Answer] | None:
    # Avro, or JSON when another client's JSON request shares this replies topic.
    answer = decode_reply(value)
    if isinstance(answer, ReplyEnvelope):
        return f"command/{answer.command_id}", answer
    if isinstance(answer, WorkflowReply):
        return f"workflow/{answer.request_id}", answer
    return None  # another record on the replies topic: nobody waits for it


# -- outcomes ----------------------------------------------------------------------------


@dataclass(eq=False)
class Waiter(Generic[T]):
    """One caller waiting for the outcome record of ``key`` on one partition."""

    topic: str
    partition: int
    key: bytes
    read: Callable[[bytes], T]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]


@dataclass
class _Watched:
    """A partition the watcher reads, and who waits on it."""

    #: The offset to assign it from; None once the thread has assigned it.
    start: int | None
    waiters: dict[bytes, list[Waiter[Any]]] = field(default_factory=dict)
    #: When its last waiter left (None while it has waiters).
    idle_since: float | None = None


class OutcomeWatcher:
    """Reads the outcomes partitions callers wait on, in one thread, and wakes them.

    A partition is assigned (no consumer group) from the end offset noted by its first
    waiter, and read on while anyone waits on it and ``LINGER_S`` after. A later waiter of
    a partition already read needs no offset of its own: every record it can wait for is
    written after it registered, so after the position the thread had then.

    End offsets are read with a second consumer, from the caller's side: a query on the
    consumer the thread polls waited for the poll (seconds, or its whole timeout), and one
    made by the thread between polls would queue behind its long fetch.

    Like the reply reader, the thread starts a new consumer where the old one was when
    records wait on its partitions, a broker answers and it read nothing for
    ``RECOVER_AFTER_S`` (seen after broker restarts), or when the consumer fails fatally.

    Args:
        connection: The Kafka cluster and its client properties.
    """

    def __init__(self, connection: KafkaConnection, *, group_prefix: str = DEFAULT_PREFIX) -> None:
        self.connection = connection
        self._group_prefix = group_prefix
        self._liveness = Liveness(report_after_s=0.0)
        self._consumer = self._new_consumer()
        self._offsets = connection.consumer(
            **{
                "group.id": reader_group(group_prefix, "offsets"),
                "enable.auto.commit": False,
            }
        )
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], _Watched] = {}
        self._noting: dict[tuple[str, int], concurrent.futures.Future[None]] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        # One query of end offsets at a time (from the loops' threads), none after close.
        self._offsets_lock = threading.Lock()
        self._closed = False
        self._thread: threading.Thread | None = None

    async def watch(self, topic: str, partition: int, key: str, read: Callable[[bytes], T]) -> Waiter[T]:
        """Register a waiter for the outcome record keyed ``key``; return once it is registered.

        Raises:
            BrokerError: The end offset could not be read.
        """
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tidings-outcomes", daemon=True)
            self._thread.start()
        loop = asyncio.get_running_loop()
        waiter = Waiter(topic, partition, key.encode(), read, loop, loop.create_future())
        where = (topic, partition)
        while True:
            with self._lock:
                if self._closed:
                    raise BrokerError("the outcome watcher is closed (its client was closed, or it failed)")
                if where in self._partitions:
                    self._add(waiter)
                    return waiter
                noting = self._noting.get(where)
                mine = noting is None
                if noting is None:
                    noting = self._noting[where] = concurrent.futures.Future()
            if not mine:
                # Another caller is noting this partition's end: its offset serves this
                # waiter too, because this waiter asks the worker only after it is noted.
                await asyncio.wrap_future(noting)
                continue
            try:
                end = await asyncio.to_thread(self._end_offset, topic, partition)
                with self._lock:
                    self._partitions[where] = _Watched(start=end)
                    self._add(waiter)
            finally:
                with self._lock:
                    self._noting.pop(where, None)
                noting.set_result(None)  # the others look again: registered, or they note
            self._wake.set()
            return waiter

    def forget(self, waiter: Waiter[Any]) -> None:
        """Stop waiting (the waiter's partition is read on for ``LINGER_S``)."""
        with self._lock:
            watched = self._partitions.get((waiter.topic, waiter.partition))
            if watched is None:
                return
            same_key = watched.waiters.get(waiter.key, [])
            if waiter in same_key:
                same_key.remove(waiter)
            if not same_key:
                watched.waiters.pop(waiter.key, None)
            if not watched.waiters:
                watched.idle_since = time.monotonic()

    def close(self) -> None:
        """Stop the thread and close the consumer; waiting callers are not woken."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self._close_consumers()

    # -- internals ---------------------------------------------------------------------

    def _new_consumer(self) -> Consumer:
        self._liveness = Liveness(report_after_s=0.0)
        return self.connection.consumer(
            **{
                "group.id": reader_group(self._group_prefix, "outcomes"),
                "enable.auto.commit": False,
                # Reading from further back only costs records; skipping one loses a wake-up.
                "auto.offset.reset": "earliest",
                # One fetch is in flight at a time: a partition assigned during an idle long
                # poll is first fetched when it returns (librdkafka's default holds it 500 ms).
                "fetch.wait.max.ms": 50,
                # Tells the recovery check whether records wait and a broker answers.
                "statistics.interval.ms": 1000,
                "stats_cb": self._statistics,
            }
        )

    def _statistics(self, stats: str) -> None:
        read = read_statistics(stats, subscribed=False)  # assigned, never joined
        if read is not None:
            self._liveness.observe(read.waiting, read.brokers_up)

    def _renew(self, positions: dict[tuple[str, int], int]) -> None:
        """Replace the polled consumer by a new one assigned where the old one was."""
        with self._offsets_lock:
            if self._closed:
                return
            old, self._consumer = self._consumer, self._new_consumer()
        try:
            old.close()
        except Exception:  # noqa: BLE001 - a fatal consumer may refuse even that
            log.debug("closing the old outcomes consumer failed", exc_info=True)
        if positions:
            self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])

    def _add(self, waiter: Waiter[Any]) -> None:
        watched = self._partitions[(waiter.topic, waiter.partition)]
        watched.waiters.setdefault(waiter.key, []).append(waiter)
        watched.idle_since = None

    def _end_offset(self, topic: str, partition: int) -> int:
        with self._offsets_lock:
            if self._closed:
                raise BrokerError("the client was closed while it waited for an outcome")
            return watermarks(self._offsets, topic, partition, NOTE_TIMEOUT_S)[1]

    def _close_consumers(self) -> None:
        with self._offsets_lock:
            if not self._closed:
                self._closed = True
                self._offsets.close()
                self._consumer.close()

    def _run(self) -> None:
        # Where the thread is in each assigned partition: a new consumer starts there.
        positions: dict[tuple[str, int], int] = {}
        try:
            while not self._stopping.is_set():
                self._reassign(positions)
                if not positions:
                    self._wake.wait(1.0)
                    self._wake.clear()
                    continue
                if self._liveness.health().stalled_for >= RECOVER_AFTER_S:
                    log.warning("the outcome watcher read nothing for %.0f s with outcomes waiting; "
                                "reading again with a new consumer", RECOVER_AFTER_S)
                    self._renew(positions)
                settled: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
                for message in take_waiting(self._consumer, 500, POLL_S):
                    error = message.error()
                    if error is None:
                        where = (message.topic(), message.partition())
                        offset = message.offset()
                        if where in positions and offset is not None:
                            positions[where] = offset + 1
                        self._liveness.progressed()
                        self._deliver(message.topic(), message.partition(), message.key(), message.value(), settled)
                    elif is_fatal(error):
                        log.warning("reading outcomes: %s; reading again with a new consumer", error.str())
                        self._renew(positions)
                        break
                    else:
                        log.debug("reading outcomes: %s", error)
                # One wake-up of each caller's loop per batch read, not one per outcome: a
                # burst of 10,000 outcomes was 10,000 writes to the loop's self-pipe.
                for loop, outcomes in settled.items():
                    _call_soon(loop, _settle_all, outcomes)
        except Exception:  # noqa: BLE001 - a caller would hang; its timeout still ends its wait
            log.exception("the outcome watcher stopped; waiting callers time out")
        finally:
            self._close_consumers()

    def _reassign(self, assigned: dict[tuple[str, int], int]) -> None:
        """Assign the partitions new waiters noted; drop the ones idle beyond ``LINGER_S``.

        ``assigned`` maps each assigned partition to the position read up to.
        """
        now = time.monotonic()
        with self._lock:
            new = []
            for where, watched in self._partitions.items():
                if watched.start is not None:
                    new.append(TopicPartition(*where, watched.start))
                    watched.start = None
            idle = [
                where for where, watched in self._partitions.items()
                if watched.idle_since is not None and now - watched.idle_since > LINGER_S
            ]
            for where in idle:
                del self._partitions[where]
        if new:
            self._consumer.incremental_assign(new)
            assigned.update(((tp.topic, tp.partition), tp.offset) for tp in new)
        dropped = [TopicPartition(*where) for where in idle if where in assigned]
        if dropped:
            self._consumer.incremental_unassign(dropped)
            for where in idle:
                assigned.pop(where, None)

    def _deliver(
        self, topic: Any, partition: Any, key: Any, value: Any,
        settled: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]],
    ) -> None:
        """Read the outcome for each of its waiters into ``settled`` (by the waiter's loop)."""
        if not isinstance(key, bytes) or not isinstance(value, bytes):
            return  # a tombstone, or a record keyed by nothing: no outcome
        with self._lock:
            watched = self._partitions.get((topic, partition))
            waiters = list(watched.waiters.get(key, ())) if watched is not None else []
        for waiter in waiters:
            try:
                outcome = waiter.read(value)
            except Exception as exc:  # noqa: BLE001 - not an outcome record; wait for the next
                log.warning("skipping outcome record %s/%s keyed %r: %s", topic, partition, key, exc)
                continue
            settled.setdefault(waiter.loop, []).append((waiter.future, outcome))

