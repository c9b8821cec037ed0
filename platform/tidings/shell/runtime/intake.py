"""The worker's intake: one confluent-kafka consumer for every input of every agent.

Faust delivers records one at a time (fetcher, conductor, a queue per stream, an event
and an ack per record): ~150-220 µs of Python per record on a 2-core machine, more than
deciding an aggregate command costs. The intake takes them the way librdkafka fetched
them instead:

- **one thread** owns the consumer (group = the app's name, ``range`` assignment, so
  equal partition numbers of co-partitioned topics land on one worker). It waits for the
  first record with ``poll`` (returns as soon as one is there), drains what else is
  fetched with ``consume(n, 0)``, turns the messages into ``Incoming`` records and hands
  them to the event loop in one call, grouped by the feeds (``pipeline.Feed``) that read
  their topic. It is the only thread that calls the consumer, commits included.
- **offsets**: a feed reports each completed batch's next offsets; a (topic, partition)
  read by several feeds (two projections of one events topic) is committed up to the
  least any of them completed. At least once, the thread commits them every
  ``commit_interval_s`` (asynchronously) and on revocation (synchronously). Exactly once
  (``App(processing_guarantee="exactly_once")``), ``on_commit`` hands them to the
  transaction instead and the consumer commits nothing itself.
- **rebalances** run in the consumer thread, inside ``poll``: on revocation it asks the
  loop to drop the buffered records of the revoked partitions, waits for every batch in
  flight to complete, commits, tells the agents; on assignment it tells the agents (their
  catch-up is not awaited; ``PartitionOwner.ensure_ready`` makes records wait).
- **back-pressure**: while the feeds hold more than ``max_buffered`` records, the thread
  waits before polling again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from .connection import KafkaConnection
from .kafka import fatal_error, incoming, is_fatal, not_authorized
from .liveness import Liveness, read_statistics
from .pipeline import BATCH_SIZE, Feed, Offsets, Start, stop_worker

log = logging.getLogger(__name__)

Partitions = list[tuple[str, int]]


@dataclass
class _Position:
    """Per assigned (topic, partition): what each reading feed completed, and what is committed."""

    readers: int
    done: dict[int, int] = field(default_factory=dict)  # id(feed) -> next offset
    committed: int = -1


class Intake:
    """Feeds every input's records to its ``Feed`` from one consumer; commits their offsets.

    Args:
        connection: The Kafka cluster and its client properties.
        group_id: The consumer group (the app's name).
        instance_id: Static group membership (KIP-345), or None.
        on_assigned: Called on the loop with newly assigned partitions (not awaited).
        on_revoked: Called on the loop with revoked partitions, after their batches completed.
        on_commit: Exactly once: awaited with completed offsets instead of committing them
            through the consumer (the transaction carries them). None: at least once.
        commit_interval_s: How often completed offsets are committed (at least once).
        max_buffered: Records the feeds may hold before the consumer waits.
        on_lag: Called (in the consumer thread) every ``lag_interval_ms`` with each
            assigned partition's consumer lag, from librdkafka's statistics.
        liveness: Told what the statistics say (records waiting, brokers up) and of every
            completed batch (``liveness.py``); ``held()`` tells it what the intake holds.
        on_lost: Called (in the consumer thread, before the lost partitions are dropped)
            when the worker was out of its group (``Readiness.lost``).
    """

    def __init__(
        self,
        connection: KafkaConnection,
        group_id: str,
        *,
        instance_id: str | None = None,
        on_assigned: Callable[[Partitions], None],
        on_revoked: Callable[[Partitions], None],
        on_commit: Callable[[Offsets], Awaitable[None]] | None = None,
        commit_interval_s: float = 0.5,
        max_buffered: int = 4 * BATCH_SIZE,
        session_timeout_ms: int = 6000,
        on_lag: Callable[[str, int, int], None] | None = None,
        lag_interval_ms: int = 5000,
        liveness: Liveness | None = None,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        config: dict[str, Any] = {
            "group.id": group_id,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            # The broker's minimum: a dead worker's partitions move fast.
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": 1000,
            # An idle fetch returns after this; a record arriving meanwhile ends it at once.
            "fetch.wait.max.ms": 100,
            "isolation.level": "read_committed",
            "allow.auto.create.topics": False,
            # Another app's events topic created after this worker started is found soon.
            "topic.metadata.refresh.interval.ms": 10_000,
        }
        if instance_id:
            config["group.instance.id"] = instance_id
        if on_lag is not None or liveness is not None:
            config["statistics.interval.ms"] = lag_interval_ms
            config["stats_cb"] = partial(_read_statistics, on_lag, liveness)
        # Served inside poll, in the consumer thread: a fatal error raises out of the loop.
        config["error_cb"] = _client_error
        self._connection = connection
        self._config = config
        self._liveness = liveness
        self._on_lost = on_lost
        self._undispatched = 0  # records handed to the loop, not yet in a feed (under _lock)
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._on_commit = on_commit
        self._commit_interval_s = commit_interval_s
        self._max_buffered = max_buffered
        self._feeds: dict[str, list[Feed]] = {}  # topic -> the feeds that read it
        self._all_feeds: list[Feed] = []
        self._positions: dict[tuple[str, int], _Position] = {}
        self._to_commit: dict[tuple[str, int], int] = {}  # guarded by _lock
        self._lock = threading.Lock()
        self._room = threading.Event()
        self._room.set()
        self._stopping = threading.Event()
        self._consumer: Consumer | None = None
        # The group metadata of the last assignment and the committed offsets of its
        # partitions, replaced together (the transaction reads both).
        self._group: tuple[Any, Offsets] = (None, {})
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Future[None] | None = None

    def add(self, topics: Sequence[str], start: Start, what: str, *, max_in_flight: int = 2) -> Feed:
        """Feed the records of ``topics`` to ``start`` in pipelined batches (before ``start``)."""
        feed = Feed(start, what, lambda offsets: self._done(feed, offsets),
                    max_in_flight=max_in_flight)
        for topic in topics:
            self._feeds.setdefault(topic, []).append(feed)
        self._all_feeds.append(feed)
        return feed

    async def _done(self, feed: Feed, offsets: Offsets) -> None:
        if self._liveness is not None:
            self._liveness.progressed()
        committable = self._complete(feed, offsets)
        if not committable:
            return
        if self._on_commit is not None:
            await self._on_commit(committable)
            fence = self._group[1]
            for pair, offset in committable.items():
                if pair in fence or pair in self._positions:
                    fence[pair] = offset
        else:
            with self._lock:
                self._to_commit.update(committable)

    @property
    def consumer(self) -> Consumer:
        """The consumer (for the transaction's group metadata)."""
        assert self._consumer is not None, "the intake is not started"
        return self._consumer

    def group_metadata(self) -> Any:
        """The consumer's group metadata as of the last assignment, sent with a
        transaction's offsets (KIP-447): the coordinator refuses them once the group has
        moved to a newer generation without this worker.

        Read in the consumer thread at each assignment: asked from another thread while
        that one polls, librdkafka blocks the caller until the poll returns.
        """
        return self._group[0]

    def fence_offsets(self, metadata: Any) -> Offsets:
        """The group's committed offsets of the partitions owned under ``metadata`` (the
        last assignment's), for a transaction with no input offsets of its own: sent with
        it, they make Kafka check this worker's generation (KIP-447) before it commits."""
        current, fence = self._group
        return dict(fence) if metadata is current and current is not None else {}

    def held(self) -> int:
        """Records the intake holds that no batch has completed (read from any thread)."""
        with self._lock:
            undispatched = self._undispatched
        return undispatched + sum(feed.pending for feed in self._all_feeds)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the feeds and the consumer thread (subscribes to every feed's topics)."""
        self._loop = asyncio.get_running_loop()
        self._stopped = self._loop.create_future()
        for feed in self._all_feeds:
            feed.run()
        if not self._feeds:
            log.warning("this app declares nothing that consumes a topic: the worker only waits")
            return
        self._consumer = self._connection.consumer(**self._config)
        self._consumer.subscribe(sorted(self._feeds), on_assign=self._assigned,
                                 on_revoke=self._revoked, on_lost=self._lost)
        self._thread = threading.Thread(target=self._serve, name="tidings-intake", daemon=True)
        self._thread.start()

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop polling, let batches in flight complete, commit, leave the group (waiting
        up to ``timeout`` seconds: what is not committed then is delivered again)."""
        if self._thread is None or self._stopped is None:
            return
        self._stopping.set()
        self._room.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._stopped), timeout)
        except asyncio.TimeoutError:
            log.warning("the consumer did not stop within %.1f s", timeout)
        for feed in self._all_feeds:
            feed.stop()
        self._thread = None

    # -- the consumer thread ----------------------------------------------------------------

    def _serve(self) -> None:
        consumer = self.consumer
        last_commit = time.monotonic()
        try:
            while not self._stopping.is_set():
                if not self._room.wait(0.1):
                    self._commit(consumer, last=False)
                    continue
                first = consumer.poll(0.05)
                messages: list[Message] = []
                if first is not None:
                    messages.append(first)
                    messages.extend(consumer.consume(BATCH_SIZE - 1, 0))
                if messages:
                    self._hand_over(messages)
                if time.monotonic() - last_commit >= self._commit_interval_s:
                    self._commit(consumer, last=False)
                    last_commit = time.monotonic()
            self._close(consumer)
        except BaseException as exc:  # noqa: BLE001 - the thread's end must reach the loop
            stop_worker("consuming the inputs", exc)
        finally:
            if self._loop is not None and self._stopped is not None:
                self._loop.call_soon_threadsafe(_resolve, self._stopped)

    def _close(self, consumer: Consumer) -> None:
        # A static member's close leaves its partitions assigned (no revocation follows):
        # complete the batches in flight and commit them here, whatever close does next.
        self._call_in_loop(self._drain_all())
        self._commit(consumer, last=True)
        consumer.close()

    async def _drain_all(self) -> None:
        for feed in self._all_feeds:
            await feed.drain(())

    def _hand_over(self, messages: list[Message]) -> None:
        by_topic: dict[str, list[Any]] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                self._consumer_error(error)
                continue
            record = incoming(message)
            by_topic.setdefault(record.topic, []).append(record)
        if by_topic:
            assert self._loop is not None
            with self._lock:
                self._undispatched += sum(len(records) for records in by_topic.values())
            self._loop.call_soon_threadsafe(self._dispatch, by_topic)

    def _consumer_error(self, error: KafkaError) -> None:
        if is_fatal(error):
            # The consumer is unusable (a static member fenced by its instance id): it
            # fetches and commits nothing more. Exit 70; the restarted worker rejoins.
            raise fatal_error(error, "consuming the inputs")
        # A subscribed topic not there yet (another app's events topic) and transient
        # broker errors: librdkafka retries on its own; so it does after a refusal, which
        # lasts until the ACLs are applied: say so.
        refused = not_authorized(error, self._connection, "to consume the inputs")
        log.warning("consumer: %s", refused if refused is not None else error.str())

    def _commit(self, consumer: Consumer, *, last: bool) -> None:
        with self._lock:
            offsets, self._to_commit = self._to_commit, {}
        if not offsets:
            return
        partitions = [TopicPartition(topic, partition, offset)
                      for (topic, partition), offset in offsets.items()]
        try:
            if last:
                consumer.commit(offsets=partitions, asynchronous=False)
            else:
                consumer.commit(offsets=partitions, asynchronous=True)
        except KafkaException as exc:
            _raise_if_fatal(exc, "committing the inputs' offsets")
            # The group moved on (a rebalance): the next owner re-reads from the last
            # committed offset; idempotent decisions make that safe.
            log.warning("committing offsets failed: %s", exc)

    # -- rebalances (in the consumer thread, inside poll) ---------------------------------

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        pairs = [(tp.topic, tp.partition) for tp in partitions]
        fence: Offsets = {}
        if self._on_commit is not None and partitions:
            try:
                for tp in consumer.committed(partitions, timeout=10):
                    if tp.offset >= 0 and tp.error is None:
                        fence[(tp.topic, tp.partition)] = tp.offset
            except KafkaException as exc:
                _raise_if_fatal(exc, "reading the group's committed offsets")
                log.warning("reading the group's committed offsets failed: %s", exc)
        self._group = (consumer.consumer_group_metadata(), fence)
        log.info("assigned %d partitions", len(pairs))
        self._call_in_loop(self._assign(pairs))

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        pairs = [(tp.topic, tp.partition) for tp in partitions]
        self._call_in_loop(self._revoke(pairs))
        self._commit(consumer, last=True)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Another member may already own them: drop what was not committed.
        pairs = [(tp.topic, tp.partition) for tp in partitions]
        log.warning("lost %d partitions (this worker was out of the group)", len(pairs))
        if self._on_lost is not None:
            self._on_lost()  # thread-safe (Readiness.lost)
        # Not waiting for their batches in flight: after a broker restart they may wait long,
        # and this thread is the only one that sees the consumer's errors (the fatal error
        # of a fenced static member often follows a lost session).
        if self._on_commit is not None and any(feed.in_flight for feed in self._all_feeds):
            # Exactly once, their writes are in the open transaction, which would commit
            # under the next assignment's group metadata although another worker may have
            # decided the same records meanwhile: never let it commit.
            log.critical("this worker was fenced: it was out of its group and lost %d partitions "
                         "with batches in flight; their transaction must not commit", len(pairs))
            raise RuntimeError(f"lost {len(pairs)} partitions with batches in flight (exactly once)")
        # At least once, a batch completing later is harmless: its writes are acknowledged
        # and idempotent, its offsets name records it did process.
        self._call_in_loop(self._forget(pairs))
        with self._lock:
            self._to_commit.clear()

    def _call_in_loop(self, coroutine: Any) -> None:
        assert self._loop is not None
        if self._loop.is_closed():
            coroutine.close()
            return
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            future.result(timeout=120)
        except TimeoutError:
            raise RuntimeError("a rebalance waited 120 s for batches in flight") from None

    async def _assign(self, pairs: Partitions) -> None:
        for pair in pairs:
            readers = len(self._feeds.get(pair[0], ()))
            self._positions[pair] = _Position(readers)
        self._on_assigned(pairs)

    async def _forget(self, pairs: Partitions) -> None:
        for feed in self._all_feeds:
            feed.drop(pairs)
        for pair in pairs:
            self._positions.pop(pair, None)
        self._on_revoked(pairs)

    async def _revoke(self, pairs: Partitions) -> None:
        for feed in self._all_feeds:
            await feed.drain(pairs)
        for pair in pairs:
            self._positions.pop(pair, None)
        self._on_revoked(pairs)

    # -- offsets (on the loop) ----------------------------------------------------------------

    def _dispatch(self, by_topic: dict[str, list[Any]]) -> None:
        with self._lock:
            self._undispatched -= sum(len(records) for records in by_topic.values())
        for topic, records in by_topic.items():
            for feed in self._feeds.get(topic, ()):
                feed.put(records)
        if max((feed.buffered for feed in self._all_feeds), default=0) >= self._max_buffered:
            self._room.clear()
            asyncio.ensure_future(self._wait_for_room())

    async def _wait_for_room(self) -> None:
        while max((feed.buffered for feed in self._all_feeds), default=0) >= self._max_buffered:
            await asyncio.sleep(0.005)
        self._room.set()

    def _complete(self, feed: Feed, offsets: Offsets) -> Offsets:
        """Note ``feed``'s completed offsets; return what may be committed now."""
        committable: Offsets = {}
        for pair, offset in offsets.items():
            position = self._positions.get(pair)
            if position is None:  # revoked meanwhile: the next owner decides again
                continue
            position.done[id(feed)] = offset
            if len(position.done) < position.readers:
                continue
            least = min(position.done.values())
            if least > position.committed:
                position.committed = least
                committable[pair] = least
        return committable


def _read_statistics(on_lag: Callable[[str, int, int], None] | None, liveness: Liveness | None,
                     stats: str) -> None:
    """Hand librdkafka's statistics to ``on_lag`` (each partition's lag) and ``liveness``."""
    read = read_statistics(stats)
    if read is None:
        return
    if on_lag is not None:
        for topic, partition, lag in read.lags:
            on_lag(topic, partition, lag)
    if liveness is not None:
        liveness.observe(read.waiting, read.brokers_up)


def _client_error(error: KafkaError) -> None:
    """The consumer's error callback: a fatal error stops the intake; others pass."""
    if is_fatal(error):
        raise fatal_error(error, "consuming the inputs")
    # Brokers down or restarting, a coordinator moving: librdkafka reconnects by itself.
    log.debug("consumer: %s", error.str())


def _raise_if_fatal(exc: KafkaException, doing: str) -> None:
    error = exc.args[0] if exc.args else None
    if isinstance(error, KafkaError) and is_fatal(error):
        raise fatal_error(error, doing) from exc


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def describe(partitions: Collection[tuple[str, int]]) -> str:
    """``topic[0,1,2] other[3]`` for logs."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{topic}{sorted(ps)}" for topic, ps in sorted(by_topic.items()))
