"""Kafka clients behind the shell's seams: a Faust-backed publisher, a partition reader.

Kafka errors are translated to ``BrokerError`` here, at the boundary.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..errors import BrokerError
from .io import Delivered, Incoming, Outgoing

log = logging.getLogger(__name__)


def watermarks(consumer: Consumer, topic: str, partition: int, timeout: float = 30.0) -> tuple[int, int]:
    """Return the (low, high) offsets of a partition, waiting out a new topic's election.

    Right after a topic is created, metadata can name a leader before that broker serves
    the partition; offset requests then fail with NOT_LEADER for a moment.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            retriable = isinstance(error, KafkaError) and error.code() in _ELECTION_ERRORS
            if not retriable or time.monotonic() > deadline:
                raise BrokerError(f"reading the offsets of {topic}/{partition}: {exc}") from exc
            time.sleep(0.05)


_ELECTION_ERRORS = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TIMED_OUT,
    }
)


class FaustPublisher:
    """Produces through the Faust app's (aiokafka) producer and waits for every ack."""

    def __init__(self, faust_app: Any) -> None:
        self._app = faust_app
        self._background: set[asyncio.Task[Any]] = set()

    async def publish(self, records: Sequence[Outgoing]) -> list[Delivered]:
        producer = self._app.producer
        try:
            # Enqueue everything first so the producer batches; then wait for all acks.
            pending = [
                await producer.send(
                    r.topic, r.key, r.value, r.partition, None, list(r.headers) or None
                )
                for r in records
            ]
            metadata = await asyncio.gather(*pending)
        except Exception as exc:  # aiokafka raises several unrelated types
            raise BrokerError(f"producing {len(records)} records failed: {exc}") from exc
        return [Delivered(m.topic, m.partition, m.offset) for m in metadata]

    def publish_later(self, records: Sequence[Outgoing]) -> None:
        task = asyncio.ensure_future(self.publish(records))
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("records sent without waiting were lost: %s", task.exception())


class KafkaPartitionReader:
    """Reads partitions by assignment (no consumer group), with confluent-kafka in a thread."""

    def __init__(self, bootstrap: str, *, chunk: int = 2000) -> None:
        self._bootstrap = bootstrap
        self._chunk = chunk
        self._consumer: Consumer | None = None
        # One consumer is not safe to share between concurrent reads.
        self._lock = asyncio.Lock()

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    "bootstrap.servers": self._bootstrap,
                    "group.id": f"tidings-reader-{uuid.uuid4().hex}",
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                    "fetch.max.bytes": 52428800,
                }
            )
        return self._consumer

    async def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        async with self._lock:
            return await asyncio.to_thread(watermarks, self._client(), topic, partition)

    async def read(
        self, topic: str, partition: int, start: int, end: int
    ) -> AsyncIterator[list[Incoming]]:
        async with self._lock:
            consumer = self._client()
            consumer.assign([TopicPartition(topic, partition, start)])
            position = start
            try:
                while position < end:
                    messages = await asyncio.to_thread(consumer.consume, self._chunk, 0.1)
                    if not messages:
                        # Compaction can leave no record at the last offsets: trust the
                        # fetch position once nothing more arrives.
                        (current,) = consumer.position([TopicPartition(topic, partition)])
                        if current.offset >= end:
                            break
                        continue
                    chunk: list[Incoming] = []
                    for message in messages:
                        if message.error() is not None:
                            raise BrokerError(f"reading {topic}/{partition}: {message.error()}")
                        offset = message.offset()
                        if offset >= end:
                            position = end
                            break
                        position = offset + 1
                        chunk.append(
                            Incoming(
                                topic,
                                partition,
                                offset,
                                message.key(),
                                message.value(),
                                {k: v for k, v in (message.headers() or [])},
                                message.timestamp()[1],
                            )
                        )
                    if chunk:
                        yield chunk
            finally:
                consumer.unassign()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
