"""Kafka clients behind the shell's seams: a confluent-kafka publisher, a partition reader.

Kafka errors are translated to ``BrokerError`` here, at the boundary.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from functools import partial
from typing import Any, Final, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation

from ...errors import BrokerError, RecordRejected
from .connection import KafkaConnection
from .groups import DEFAULT_PREFIX, reader_group
from .io import Delivered, Incoming, Outgoing
from .threads import OwnThread

log = logging.getLogger(__name__)


def watermarks(
    consumer: Consumer, topic: str, partition: int, timeout: float = 30.0, *,
    ride_out_s: float | None = None,
) -> tuple[int, int]:
    """Return the (low, high) offsets of a partition, waiting out transient broker states.

    Right after a topic is created, metadata can name a leader before that broker serves
    the partition; during and after a broker restart, offset requests fail for a while
    with a leader change, an unknown partition (metadata being refreshed), a transport
    error. Those are retried for ``ride_out_s`` (default ``timeout``); any other error, or
    a fatal one, is raised at once.
    """
    deadline = time.monotonic() + (timeout if ride_out_s is None else ride_out_s)
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError) and is_transient(error)) or time.monotonic() > deadline:
                refused = not_authorized(exc, None, f"to read the offsets of {topic}/{partition}")
                if refused is not None:
                    raise refused from exc
                raise BrokerError(f"reading the offsets of {topic}/{partition}: {exc}") from exc
            if error.code() in _STALE_METADATA_ERRORS:
                _refresh_metadata(consumer, topic)
            time.sleep(0.05 if error.code() in _ELECTION_ERRORS else 0.5)


def _refresh_metadata(consumer: Consumer, topic: str) -> None:
    """Ask for the topic's metadata again. A reader that is not subscribed to ``topic`` keeps
    the partition leaders it saw last: after a cluster's node was killed, its offset requests
    failed with an unknown partition for minutes (the three-node failure test) until asked."""
    try:
        consumer.list_topics(topic, timeout=5.0)
    except KafkaException:
        pass  # the next attempt says what is wrong


#: How long a worker's own readers wait out a broker's transient errors (a restart) before
#: they give up and the worker exits 70: longer than a broker takes to come back.
RIDE_OUT_S = 120.0

_ELECTION_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TIMED_OUT,
    }
)

#: Offset-request errors after which the reader's own metadata may be out of date.
_STALE_METADATA_ERRORS = _ELECTION_ERRORS | frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._DESTROY_BROKER})

#: Errors a broker restart or a leader change causes for a while; librdkafka recovers from
#: them by itself (reconnects, refreshes metadata), so a caller waits and asks again.
TRANSIENT_ERRORS: Final = _ELECTION_ERRORS | frozenset(
    {
        KafkaError._UNKNOWN_PARTITION,  # metadata not refreshed yet after the restart
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._MSG_TIMED_OUT,
        KafkaError._WAIT_COORD,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        # A request in flight to a broker that left the cluster's metadata (a node of a
        # cluster killed): librdkafka drops its handle; asked again, another broker answers.
        KafkaError._DESTROY_BROKER,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NETWORK_EXCEPTION,
        KafkaError._RESOLVE,
    }
)


def is_fatal(error: KafkaError) -> bool:
    """Whether librdkafka says the client is unusable: only a new client can go on.

    A consumer's fatal error (a static member fenced by its ``group.instance.id``,
    FENCED_INSTANCE_ID) reaches the application as an error with code ``_FATAL`` on a
    consumed message, and confluent-kafka builds message errors with ``fatal()`` unset: the
    code must be checked too.
    """
    return bool(error.fatal()) or error.code() == KafkaError._FATAL


def is_transient(error: KafkaError) -> bool:
    """Whether ``error`` is a broker's passing state (restart, leader change): wait and retry."""
    return not is_fatal(error) and (error.code() in TRANSIENT_ERRORS or bool(error.retriable()))


def fatal_error(error: KafkaError, doing: str) -> BrokerError:
    """A ``BrokerError`` for a fatal ``error`` of a client that was ``doing`` something, in one line."""
    hint = ""
    if "group.instance.id" in error.str() or "FENCED_INSTANCE_ID" in error.str():
        hint = (" (a worker restarted with the same instance id takes its partitions back; if "
                "two run with one id, give each its own --instance-id)")
    return BrokerError(f"{doing}: Kafka client failed fatally, only a new one can go on: "
                       f"{error.str()}{hint}")


def incoming(message: Message) -> Incoming:
    """Return a consumed, error-free confluent-kafka message as an ``Incoming`` record."""
    partition, offset = message.partition(), message.offset()
    # Set on every consumed message; None only on messages being produced.
    assert partition is not None and offset is not None
    headers = cast("list[tuple[str, bytes]]", message.headers() or [])
    return Incoming(
        cast(str, message.topic()),
        partition,
        offset,
        cast("bytes | None", message.key()),
        cast("bytes | None", message.value()),
        dict(headers),
        message.timestamp()[1],
    )


def topic_partitions(consumer: Consumer, topic: str, timeout: float = 30.0, *,
                     connection: KafkaConnection | None = None) -> list[int]:
    """Return the partitions of ``topic``, sorted.

    Args:
        connection: The consumer's connection, to name its principal when Kafka refuses it.

    Raises:
        BrokerError: The topic does not exist, the principal may not describe it (a
            cluster with an authorizer answers so for a missing topic too), or Kafka did
            not answer.
    """
    try:
        described = consumer.list_topics(topic, timeout=timeout).topics[topic]
    except KafkaException as exc:
        raise BrokerError(f"reading the metadata of {topic}: {exc}") from exc
    if described.error is not None:
        refused = not_authorized(described.error, connection, f"to describe topic {topic}")
        if refused is not None:
            raise refused
        raise BrokerError(
            f"topic {topic} is not there ({described.error}); run `tidings topics "
            "apply MODULE:APP` or start a worker, which applies the topics"
        )
    return sorted(described.partitions)


#: Kafka's refusals of a principal the ACLs do not allow (``tidings acls``).
AUTHORIZATION_ERRORS: Final = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "consumer group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
}

#: What to do about a refusal, in one line.
ACLS_HINT: Final = ("apply the app's ACLs as a principal that may alter them: `tidings acls MODULE:APP "
                    "--worker User:W --client User:C --apply` (docs/acls.md)")


def error_code(error: object) -> int | None:
    """The Kafka error code of a ``KafkaError``, a ``KafkaException`` or its ``BrokerError``."""
    if isinstance(error, BrokerError):
        error = error.__cause__
    if isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    return error.code() if isinstance(error, KafkaError) else None


def not_authorized(error: object, connection: KafkaConnection | None, doing: str) -> BrokerError | None:
    """The one-line ``BrokerError`` for an authorization refusal; None for any other error.

    Kafka with an authorizer answers TOPIC_AUTHORIZATION_FAILED for a topic the principal
    may not describe whether it exists or not, so the message never says "not there".

    Args:
        error: A ``KafkaError``, ``KafkaException`` or a ``BrokerError`` caused by one.
        connection: The connection Kafka refused, to name its principal.
        doing: What was refused, e.g. ``to read topic bank.replies.teller``.
    """
    code = error_code(error)
    if code not in AUTHORIZATION_ERRORS:
        return None
    principal = connection.principal if connection is not None else "this connection's principal"
    failure = BrokerError(f"{principal} is not authorized {doing}: the cluster's ACLs refuse it on the "
                          f"{AUTHORIZATION_ERRORS[code]} ({KafkaError(code).name()}); {ACLS_HINT}")
    if isinstance(error, BaseException):
        failure.__cause__ = error
    return failure


class TopicCheck:
    """Answers "may this worker write that topic?" from the cluster's metadata, remembering answers.

    For a name taken from a record (a ``reply_to``, the inbox of a child's parent workflow):
    a record to a topic nobody made would be refused only after librdkafka's metadata
    propagation wait (~30 s) while the agent's commits wait for it; in a transaction, one
    the principal may not write fails the whole transaction (the coordinator refuses to add
    its partition, TOPIC_AUTHORIZATION_FAILED, and the transaction's abort then failed
    fatally with INVALID_TXN_STATE, measured on Kafka 4 with librdkafka 2.16), so every
    record with it would be redone and refused again. The admin's topic description names
    the operations the principal may do (``include_authorized_operations``; a cluster
    without an authorizer lists them all). No consumer group is involved.

    An answer is remembered for ``forget_s`` (a topic created, deleted or an ACL changed
    meanwhile is seen then); up to 10,000 names, the oldest forgotten first.
    """

    def __init__(self, connection: KafkaConnection, *, forget_s: float = 60.0, timeout: float = 10.0) -> None:
        self._connection = connection
        self._forget_s = forget_s
        self._timeout = timeout
        self._known: dict[str, tuple[float, str | None, bool]] = {}  # topic -> (when, refusal, exists)
        self._admin: Any = None

    def exists(self, topic: str) -> bool:
        """Whether ``topic`` exists and this principal may describe it. Blocks for one
        metadata request when not remembered.

        Raises:
            BrokerError: Kafka did not answer.
        """
        return self._check(topic)[1]

    def refusal(self, topic: str) -> str | None:
        """Why a record to ``topic`` would be refused (no such topic, not authorized); None
        when this principal may write it. Blocks as ``exists`` does.

        Raises:
            BrokerError: Kafka did not answer.
        """
        return self._check(topic)[0]

    def forget(self, topic: str) -> None:
        """Ask Kafka again next time (a write to ``topic`` failed after all)."""
        self._known.pop(topic, None)

    def _check(self, topic: str) -> tuple[str | None, bool]:
        known = self._known.get(topic)
        if known is not None and time.monotonic() - known[0] < self._forget_s:
            return known[1], known[2]
        refusal, exists = self._describe(topic)
        self._known.pop(topic, None)
        self._known[topic] = (time.monotonic(), refusal, exists)
        if len(self._known) > 10_000:  # a flood of invented names: forget the oldest
            self._known.pop(next(iter(self._known)))
        return refusal, exists

    def _describe(self, topic: str) -> tuple[str | None, bool]:
        if self._admin is None:
            self._admin = self._connection.admin()
        try:
            future = self._admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                                 request_timeout=self._timeout)[topic]
            described = future.result(timeout=self._timeout + 5)
        except KafkaException as exc:
            code = error_code(exc)
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                return (f"{self._connection.principal} may not describe topic {topic[:120]!r} (it may not "
                        "exist either: Kafka does not tell); grant it WRITE and DESCRIBE on the topic"), False
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError.TOPIC_EXCEPTION):
                return f"no topic {topic[:120]!r} on {self._connection}", False
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or is_transient(error) or is_fatal(error):
                # Kafka did not answer: the batch fails and is redone, as for any broker outage.
                raise BrokerError(f"describing topic {topic[:120]!r} on {self._connection}: {exc}") from exc
            # Any other answer is about this name (one record's), never a reason to stop.
            return f"Kafka refused to describe topic {topic[:120]!r}: {error.str()}", False
        except (TimeoutError, ValueError) as exc:
            raise BrokerError(f"describing topic {topic[:120]!r} on {self._connection}: {exc!r}") from exc
        operations = described.authorized_operations
        if operations is not None and AclOperation.WRITE not in operations and AclOperation.ALL not in operations:
            return (f"{self._connection.principal} may describe topic {topic[:120]!r} but not write it "
                    "(no WRITE ACL)"), True
        return None, True

    def close(self) -> None:
        self._admin = None  # an AdminClient has no close: it is destroyed when collected


class ConfluentPublisher:
    """Produces with confluent-kafka (librdkafka) and resolves asyncio futures on acks.

    librdkafka batches and retries in its own threads; a thread of ours serves its
    delivery callbacks and hands each batch's outcome to the event loop. The producer is
    idempotent, so retries neither duplicate nor reorder records of one partition.
    """

    def __init__(
        self, connection: KafkaConnection, *, linger_ms: float = 0.0,
        on_fatal: Callable[[BrokerError], None] | None = None,
    ) -> None:
        config = producer_config(linger_ms=linger_ms)
        # A fatal error (the idempotent producer lost its sequence) makes every later
        # produce fail; sends nobody waits for would only log that: tell the owner at once.
        self._on_fatal = on_fatal
        config["error_cb"] = self._error
        self._producer = connection.producer(**config)
        self._background: set[asyncio.Future[Any]] = set()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="tidings-producer", daemon=True)
        self._thread.start()

    def send(self, records: Sequence[Outgoing]) -> asyncio.Future[list[Delivered]]:
        """Enqueue ``records`` in order; the future resolves to their positions.

        Never raises for one record: a record Kafka refuses for a reason tied to it (an
        invalid or unknown topic, a record over the size limit), whether ``produce``
        refuses it at once or the broker later, fails only the future, with
        ``RecordRejected`` once every other record of the send is acknowledged.

        Raises:
            BrokerError: ``produce`` failed for a reason tied to the producer or the
                broker (a fatal idempotence error, a closed producer): the caller stops.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Delivered]] = loop.create_future()
        if not records:
            future.set_result([])
            return future
        produce_records(self._producer, records, _Batch(loop, future, len(records)))
        return future

    async def publish(self, records: Sequence[Outgoing]) -> list[Delivered]:
        return await self.send(records)

    def publish_later(self, records: Sequence[Outgoing]) -> None:
        """Produce ``records`` without waiting; a failure is logged, never raised.

        A refused record (``RecordRejected``: a reply to an invalid or unknown topic, a
        record too large) is dropped with a warning; the others are produced.
        """
        future = self.send(records)
        self._background.add(future)
        future.add_done_callback(partial(sent_in_background, self._background))

    def _serve(self) -> None:
        while not self._stopping.is_set():
            self._producer.poll(0.05)

    def _error(self, error: KafkaError) -> None:
        if is_fatal(error):
            failure = fatal_error(error, "producing")
            if self._on_fatal is not None:
                self._on_fatal(failure)
            else:
                log.error("%s", failure)
        else:  # librdkafka reconnects and retries by itself
            log.debug("producer: %s", error.str())

    def close(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (up to ``timeout``), stop serving callbacks, destroy the
        producer (what is still queued, the brokers down, is dropped: nothing was acked)."""
        self._stopping.set()
        self._thread.join(timeout)
        close_producer(self._producer, timeout)


def close_producer(producer: Producer, timeout: float) -> None:
    """Flush ``producer`` for up to ``timeout`` s, purge what is left, and destroy it.

    Without ``close`` the librdkafka handle lives until Python frees the object, and keeps
    reconnecting and retrying meanwhile (seen: a closed Client's producer retrying for the
    rest of the process after a broker restart).
    """
    if producer.flush(timeout) > 0:
        producer.purge()  # fails their delivery reports with _PURGE_QUEUE
        producer.flush(1.0)  # serves those reports
    producer.close()



def producer_config(*, linger_ms: float = 0.0) -> dict[str, Any]:
    """Return the confluent-kafka settings every tidings producer shares (beside the
    connection's, which they override: ``KafkaConnection.producer(**producer_config())``).

    Idempotent with ``acks=all``, so librdkafka's retries neither duplicate nor reorder
    the records of one partition; the transactional publisher adds its own keys.
    """
    # No linger: each hop of a workflow step (journal, outcome, reply) would wait for it,
    # and under load librdkafka batches anyway (records queue while a request is out).
    return {
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger_ms,
        # Topics are declared (topics/, `tidings topics apply`). A reply_to naming a
        # topic nobody made must not create one with the broker's default layout.
        "allow.auto.create.topics": False,
        "partitioner": "murmur2_random",
        "queue.buffering.max.messages": 1_000_000,
        "batch.num.messages": 10_000,
    }


def produce_records(producer: Producer, records: Sequence[Outgoing], batch: _Batch) -> None:
    """Hand ``records`` to librdkafka in order; their reports go to ``batch``.

    A record refused before queueing for a reason tied to it is counted as rejected in
    ``batch`` (no delivery report follows for it).

    Raises:
        BrokerError: ``produce`` failed for a reason tied to the producer or the broker;
            the records before the failing one are queued, the rest are not. The
            ``KafkaException`` is the ``__cause__``.
    """
    for index, record in enumerate(records):
        kwargs: dict[str, Any] = {"on_delivery": partial(batch.delivered, index)}
        if record.partition is not None:
            kwargs["partition"] = record.partition
        if record.headers:
            kwargs["headers"] = list(record.headers)
        while True:
            try:
                producer.produce(record.topic, record.value, record.key, **kwargs)
                break
            except BufferError:
                # The local queue is full: let librdkafka drain it, then retry.
                producer.poll(0.01)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not (isinstance(error, KafkaError) and error.code() in RECORD_ERRORS):
                    raise BrokerError(f"producing to {record.topic[:120]!r} failed: {exc}") from exc
                # Refused before queueing (librdkafka remembers a topic the broker
                # called invalid, and checks its own size limit): no report follows.
                batch.rejected(index, record.topic, error.str())
                break
            except ValueError as exc:
                # A topic name with a NUL or a lone surrogate never reaches librdkafka.
                batch.rejected(index, record.topic, f"{type(exc).__name__}: {exc}")
                break


def sent_in_background(background: set[asyncio.Future[Any]], future: asyncio.Future[Any]) -> None:
    """Done-callback of a send nobody waits for: forget it, and log it if it failed."""
    background.discard(future)
    if future.cancelled():
        return
    error = future.exception()
    if isinstance(error, RecordRejected):
        log.warning("records sent without waiting were refused by Kafka and dropped: %s", error)
    elif error is not None:
        log.warning("records sent without waiting were lost: %s", error)


#: Kafka errors tied to one record rather than to the producer or the broker: retrying
#: that record fails the same way, so it is refused (``RecordRejected``) and the caller
#: dead-letters or drops it. An unknown topic is one a hostile ``reply_to`` names when
#: the broker does not create topics on demand.
RECORD_ERRORS: Final = frozenset(
    {
        KafkaError.TOPIC_EXCEPTION,  # an invalid topic name, from the broker
        KafkaError._UNKNOWN_TOPIC,  # librdkafka knows the topic does not exist
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,  # an explicit partition the topic does not have
        KafkaError.MSG_SIZE_TOO_LARGE,  # over the producer's or the topic's limit
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_TIMESTAMP,
    }
)


class _Batch:
    """Collects the delivery reports of one ``send`` call (on the producer's thread)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[list[Delivered]], size: int
    ) -> None:
        self._loop = loop
        self._future = future
        self._positions: list[Delivered | None] = [None] * size
        self._rejections: list[tuple[int, str, str]] = []
        self._remaining = size
        self._failed = False
        # Callbacks run in whichever thread calls poll(): ours, or the loop's on BufferError.
        self._lock = threading.Lock()

    def delivered(self, index: int, error: KafkaError | None, message: Any) -> None:
        if error is not None and error.code() in RECORD_ERRORS:
            self.rejected(index, message.topic(), error.str())
            return
        with self._lock:
            if self._failed:
                return
            if error is not None:
                self._failed = True
                failure = not_authorized(error, None, f"to write topic {message.topic()}") or BrokerError(
                    f"producing to {message.topic()} failed: {error}")
                self._loop.call_soon_threadsafe(settle_future, self._future, None, failure)
                return
            self._positions[index] = Delivered(
                message.topic(), message.partition(), message.offset()
            )
            self._remaining -= 1
            done = self._remaining == 0
        if done:
            self._finish()

    def rejected(self, index: int, topic: str, reason: str) -> None:
        """Count record ``index`` as refused by Kafka for a reason tied to it."""
        with self._lock:
            if self._failed:
                return
            self._rejections.append((index, topic, reason))
            self._remaining -= 1
            done = self._remaining == 0
        if done:
            self._finish()

    def _finish(self) -> None:
        # Called once, by whichever report was the last; the batch changes no more.
        if self._rejections:
            failure = RecordRejected(sorted(self._rejections), self._positions)
            self._loop.call_soon_threadsafe(settle_future, self._future, None, failure)
        else:
            self._loop.call_soon_threadsafe(settle_future, self._future, self._positions, None)


def settle_future(
    future: asyncio.Future[Any], result: Any, error: BaseException | None
) -> None:
    """Resolve ``future`` with ``error`` or ``result`` unless it is done (on its loop)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def take_waiting(consumer: Consumer, limit: int, timeout: float) -> list[Message]:
    """Up to ``limit`` messages: wait at most ``timeout`` for the first, none for the rest.

    ``consume(n, timeout)`` itself returns only once it has ``n`` messages or ``timeout``
    passed, so a reader asking it for a batch holds each record it gets up to ``timeout``
    (measured: every client's outcome 10 ms late on average with a 20 ms poll, each caught-up
    partition 100 ms). ``poll`` returns at the first message; ``consume(n, 0)`` then takes what
    else has arrived without waiting.
    """
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(limit - 1, 0)] if limit > 1 else [first]


class PartitionRange:
    """The bookkeeping of reading offsets [start, end) of one partition, one ``consume`` at a time.

    The one range reader: the worker's ``KafkaPartitionReader`` (async, its own thread)
    and the blocking ``read_range`` both step it with what each ``consume`` call returns.
    """

    def __init__(self, topic: str, partition: int, start: int, end: int,
                 connection: KafkaConnection | None = None) -> None:
        self.connection = connection  # to name the principal Kafka refused
        self.topic = topic
        self.partition = partition
        self.position = start  # the next offset wanted
        self.end = end

    @property
    def done(self) -> bool:
        return self.position >= self.end

    def wanted(self, limit: int) -> int:
        """How many messages to ask one ``consume`` for: at most what is left of the range.

        Not more than the range holds: what is past its end would be fetched for nothing.
        """
        return max(1, min(limit, self.end - self.position))

    def take(self, messages: Sequence[Message]) -> list[Incoming]:
        """Return the records of ``messages`` inside the range, in offset order.

        Raises:
            BrokerError: Kafka failed for good (fatal, or an error a retry will not fix).
        """
        chunk: list[Incoming] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if is_transient(error):  # a broker restart: librdkafka fetches again
                    log.info("reading %s/%d: %s", self.topic, self.partition, error.str())
                    continue
                if is_fatal(error):
                    raise fatal_error(error, f"reading {self.topic}/{self.partition}")
                refused = not_authorized(error, self.connection, f"to read {self.topic}/{self.partition}")
                raise refused or BrokerError(f"reading {self.topic}/{self.partition}: {error}")
            record = incoming(message)
            if record.offset >= self.end:
                self.position = self.end
                break
            self.position = record.offset + 1
            chunk.append(record)
        return chunk

    def settled(self, consumer: Consumer) -> bool:
        """Nothing more arrived: whether the range is read all the same.

        Compaction can leave no record at the last offsets: once nothing more comes, the
        consumer's fetch position is trusted.
        """
        (current,) = consumer.position([TopicPartition(self.topic, self.partition)])
        if current.offset >= self.end:
            self.position = self.end
        return self.done


def read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, *, timeout: float,
    connection: KafkaConnection | None = None,
) -> Iterator[list[Incoming]]:
    """Yield the records of ``topic``/``partition`` from ``start`` up to (not including) ``end``, in chunks.

    Blocking: it assigns ``consumer`` to the partition (no group, nothing committed).

    Raises:
        BrokerError: Nothing arrived for ``timeout`` seconds before ``end``, or Kafka failed.
    """
    if end <= start:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    reading = PartitionRange(topic, partition, start, end, connection)
    deadline = time.monotonic() + timeout
    while not reading.done:
        messages = take_waiting(consumer, reading.wanted(1000), 0.1)
        if not messages:
            if reading.settled(consumer):
                break
            if time.monotonic() > deadline:
                raise BrokerError(f"reading {topic}/{partition}: nothing after offset {reading.position} "
                                  f"for {timeout} s (the end is {end})")
            continue
        deadline = time.monotonic() + timeout
        chunk = reading.take(messages)
        if chunk:
            yield chunk


class KafkaPartitionReader:
    """Reads partitions by assignment (no consumer group), with confluent-kafka in a thread.

    Its group id is ``{group_prefix}reader-{uuid}``: the group is never joined and nothing is
    committed, but librdkafka still asks for its coordinator, and a principal the ACLs do not
    allow DESCRIBE on it gets GROUP_AUTHORIZATION_FAILED among the records it reads. A
    worker's readers take the app's prefix ``{app}.``, which its ACLs cover (``acls.py``).
    """

    def __init__(self, connection: KafkaConnection, *, chunk: int = 2000,
                 on_read: Callable[[], None] | None = None, group_prefix: str = DEFAULT_PREFIX) -> None:
        self._connection = connection
        self._group_prefix = group_prefix
        self._chunk = chunk
        # Told of every chunk read: a long catch-up is progress (liveness.py), not deafness.
        self._on_read = on_read
        self._consumer: Consumer | None = None
        # One consumer is not safe to share between concurrent reads.
        self._lock = asyncio.Lock()
        # Its own thread: its reads would hold one of asyncio's few shared ones (threads.py).
        self._calls = OwnThread("tidings-reader")

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self._connection.consumer(
                **{
                    "group.id": reader_group(self._group_prefix, "reader"),
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                    "fetch.max.bytes": 52428800,
                    # One fetch is in flight at a time; after a read ends, the next
                    # partition's first fetch waits for it, so the broker must not hold it
                    # long (librdkafka's default 500 ms cost each recovered partition that).
                    "fetch.wait.max.ms": 10,
                }
            )
        return self._consumer

    async def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        async with self._lock:
            return await self._calls.run(partial(watermarks, ride_out_s=RIDE_OUT_S),
                                         self._client(), topic, partition)

    async def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> AsyncIterator[list[Incoming]]:
        async with self._lock:
            consumer = self._client()
            consumer.assign([TopicPartition(topic, partition, start)])
            reading = PartitionRange(topic, partition, start, end, self._connection)
            try:
                while not reading.done:
                    messages = await self._calls.run(take_waiting, consumer, reading.wanted(self._chunk), 0.1)
                    if not messages:
                        if reading.settled(consumer):
                            break
                        continue
                    chunk = reading.take(messages)
                    if self._on_read is not None:
                        self._on_read()
                    if chunk:
                        yield chunk
            finally:
                consumer.unassign()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._calls.close()
        self._calls.close()
