"""Read a whole topic in a thread: every partition from its beginning, to its end or on.

A reader of a compacted topic (a workflow's outcomes) wants every key's record and, when it
follows, each new one as it is written. ``TopicFollower`` does that with one confluent-kafka
consumer by assignment (no consumer group, nothing committed) in a thread of its own, and
hands chunks of records to the event loop through an asyncio queue. The thread keeps at most
``CHUNKS_AHEAD`` chunks the loop has not taken, so a slow reader slows the consumer down
instead of filling memory.

Without ``follow`` it stops at the end offsets it found when it started: partitions that
reach theirs are paused, and their later records are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from ...errors import BrokerError
from ..runtime.connection import KafkaConnection
from ..runtime.groups import DEFAULT_PREFIX, reader_group
from ..runtime.io import Incoming
from ..runtime.kafka import incoming, is_transient, not_authorized, take_waiting, topic_partitions, watermarks

log = logging.getLogger(__name__)

#: Seconds to wait for Kafka when the follower starts.
START_TIMEOUT = 30.0
#: Chunks read ahead of the event loop.
CHUNKS_AHEAD = 4
#: Seconds one poll of the thread waits; also how soon it notices ``close``.
POLL_S = 0.1


class _End:
    """Handed to the loop when nothing more will come (end reached, or closed)."""


_END: Final = _End()


class TopicFollower:
    """Reads every partition of ``topic`` from its beginning, in a thread.

    Call ``start`` once, then ``next_chunk`` until it returns None; ``close`` when done
    (safe from any thread, and more than once). Records of one partition come in offset
    order; partitions interleave.

    Args:
        connection: The Kafka cluster and its client properties.
        topic: The topic to read.
        follow: Keep reading new records; otherwise stop at the ends found at start.
        chunk: Most records per chunk.
    """

    def __init__(self, connection: KafkaConnection, topic: str, *, follow: bool, chunk: int = 500,
                 group_prefix: str = DEFAULT_PREFIX) -> None:
        self.connection = connection
        self._group_prefix = group_prefix
        self.topic = topic
        self.follow = follow
        self._chunk = chunk
        self._queue: asyncio.Queue[list[Incoming] | BaseException | _End] = asyncio.Queue()
        self._slots = threading.Semaphore(CHUNKS_AHEAD)
        self._started = threading.Event()
        self._stopping = threading.Event()
        self._start_error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._finished = False

    async def start(self) -> None:
        """Start the thread; return once every partition is assigned.

        Raises:
            BrokerError: The topic does not exist, or Kafka did not answer in time.
        """
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name=f"tidings-follow-{self.topic}", daemon=True)
            self._thread.start()
        if not self._started.is_set():
            await asyncio.to_thread(self._started.wait, START_TIMEOUT)
        if self._start_error is not None:
            error = self._start_error
            raise error if isinstance(error, BrokerError) else BrokerError(f"reading {self.topic}: {error}")
        if not self._started.is_set():
            raise BrokerError(f"no answer from Kafka at {self.connection} within {START_TIMEOUT:.0f} s")

    async def next_chunk(self) -> list[Incoming] | None:
        """Return the next records, waiting for them; None once there will be no more.

        Raises:
            BrokerError: Reading failed (then every later call returns None).
        """
        if self._finished:
            return None
        item = await self._queue.get()
        self._slots.release()
        if isinstance(item, _End):
            self._finished = True
            return None
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        return item

    def close(self) -> None:
        """Stop the thread and wake a ``start`` or ``next_chunk`` that waits (the latter returns None)."""
        self._stopping.set()
        self._started.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._loop is not None and not self._finished:
            try:
                # The end marker takes no slot from the thread: it has stopped handing chunks.
                self._loop.call_soon_threadsafe(self._queue.put_nowait, _END)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self.connection.consumer(
            **{
                "group.id": reader_group(self._group_prefix, "follow"),
                "enable.auto.commit": False,
                # Records deleted by retention between the watermark query and the fetch: read
                # on from the earliest that is left instead of jumping to the end.
                "auto.offset.reset": "earliest",
            }
        )
        try:
            try:
                ends = self._assign(consumer)
            except Exception as exc:  # noqa: BLE001 - reported to the caller by start()
                self._start_error = exc
                return
            finally:
                self._started.set()
            self._read(consumer, ends)
        except Exception as exc:  # noqa: BLE001 - handed to the loop, raised by next_chunk()
            self._hand(exc if isinstance(exc, BrokerError) else BrokerError(f"reading {self.topic}: {exc}"))
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> dict[int, int]:
        """Assign every partition from its beginning; return the non-empty ones' end offsets."""
        ends: dict[int, int] = {}
        assigned: list[TopicPartition] = []
        for partition in topic_partitions(consumer, self.topic, connection=self.connection):
            low, high = watermarks(consumer, self.topic, partition, START_TIMEOUT)
            if high > low:
                ends[partition] = high
            if self.follow or high > low:
                assigned.append(TopicPartition(self.topic, partition, OFFSET_BEGINNING))
        consumer.assign(assigned)
        return ends

    def _read(self, consumer: Consumer, ends: dict[int, int]) -> None:
        remaining = dict(ends)
        while not self._stopping.is_set():
            if not self.follow and not remaining:
                self._hand(_END)
                return
            messages = take_waiting(consumer, self._chunk, POLL_S)
            chunk = [record for message in messages if (record := self._take(consumer, message, remaining))]
            if chunk:
                self._hand(chunk)
            elif not messages and not self.follow:
                self._finish_compacted(consumer, remaining)

    def _take(self, consumer: Consumer, message: Message, remaining: dict[int, int]) -> Incoming | None:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return None
            if is_transient(error):  # a broker restarting, a leader moving
                log.warning("reading %s: %s (retrying)", self.topic, error)
                return None
            refused = not_authorized(error, self.connection, f"to read {self.topic}/{message.partition()}")
            raise refused or BrokerError(f"reading {self.topic}/{message.partition()}: {error}")
        record = incoming(message)
        if not self.follow:
            end = remaining.get(record.partition)
            if end is None or record.offset >= end:
                return None
            if record.offset >= end - 1:
                del remaining[record.partition]
                consumer.pause([TopicPartition(self.topic, record.partition)])
        return record

    def _finish_compacted(self, consumer: Consumer, remaining: dict[int, int]) -> None:
        # Compaction can leave no record at a partition's last offsets: once nothing more
        # arrives, a fetch position at the end means the partition is read.
        positions = consumer.position([TopicPartition(self.topic, p) for p in remaining])
        for position in positions:
            if position.offset >= remaining[position.partition]:
                del remaining[position.partition]
                consumer.pause([TopicPartition(self.topic, position.partition)])

    def _hand(self, item: list[Incoming] | BaseException | _End) -> None:
        """Give ``item`` to the loop once it has room for it (or drop it when closing)."""
        while not self._stopping.is_set():
            if not self._slots.acquire(timeout=POLL_S):
                continue
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody reads any more
                self._stopping.set()
            return
