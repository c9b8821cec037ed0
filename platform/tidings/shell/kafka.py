"""Kafka clients behind the shell's seams: a Faust-backed publisher, a partition reader.

Kafka errors are translated to ``BrokerError`` here, at the boundary.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from ..errors import BrokerError
from .io import Delivered, Incoming, Outgoing

log = logging.getLogger(__name__)


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
            try:
                low, high = await asyncio.to_thread(
                    self._client().get_watermark_offsets,
                    TopicPartition(topic, partition),
                    10.0,
                )
            except KafkaException as exc:
                raise BrokerError(f"reading the offsets of {topic}/{partition}: {exc}") from exc
            return int(low), int(high)

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
