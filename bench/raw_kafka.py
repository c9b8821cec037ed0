"""The reference: raw Kafka clients moving small records through the same broker.

Every figure tidings reports sits next to what the bare clients do on this machine in the
same run: confluent-kafka (librdkafka, what the tidings client uses) and aiokafka (what
Faust, hence the worker, uses). Records are ~200 B, like tidings' Avro envelopes, keyed
over 1,000 keys, on fresh 8-partition topics configured like a commands topic, produced
with ``linger.ms`` batching and ``acks=all``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.topics import apply_topics, spec_for

PARTITIONS = 8
RECORD_BYTES = 200
KEYS = 1000


@dataclass(frozen=True, slots=True)
class RawFigures:
    """Records per second of one client library, and (confluent only) single-record latency."""

    records: int
    produce_s: float
    consume_s: float
    end_to_end_s: float | None = None
    round_trips_s: list[float] = field(default_factory=list)


def fresh_topic(bootstrap: str, what: str) -> str:
    """Create an 8-partition topic named for ``what`` and return its name."""
    name = f"bench-raw-{what}-{uuid.uuid4().hex[:8]}"
    apply_topics(KafkaConnection.of(bootstrap), [spec_for("commands", name, partitions=PARTITIONS)], out=lambda _: None)
    _await_leaders(bootstrap, name)
    return name


def confluent(bootstrap: str, records: int, *, pings: int, progress: Callable[[str], None]) -> RawFigures:
    """Measure confluent-kafka: produce, then consume, then both at once, then pings.

    Args:
        bootstrap: The broker.
        records: How many records each phase moves.
        pings: How many single records to time from produce to consume (idle latency).
        progress: Where progress lines go.
    """
    topic = fresh_topic(bootstrap, "confluent")
    progress(f"raw confluent-kafka: producing {records:,} records of {RECORD_BYTES} B")
    start, end = _produce_all(bootstrap, topic, records)
    produce_s = end - start
    progress(f"raw confluent-kafka: consuming them back ({records / produce_s:,.0f} /s produced)")
    first, last = _consume_all(bootstrap, topic, records, OFFSET_BEGINNING)
    consume_s = last - first

    progress("raw confluent-kafka: producing and consuming at once (end to end)")
    topic = fresh_topic(bootstrap, "confluent-e2e")
    ends: list[tuple[float, float]] = []
    reader = threading.Thread(
        target=lambda: ends.append(_consume_all(bootstrap, topic, records, OFFSET_BEGINNING)),
        daemon=True,
    )
    reader.start()
    started = _produce_all(bootstrap, topic, records)[0]
    reader.join()
    end_to_end_s = ends[0][1] - started

    progress(f"raw confluent-kafka: {pings} single-record round trips on an idle broker")
    return RawFigures(records, produce_s, consume_s, end_to_end_s, _round_trips(bootstrap, pings))


def aiokafka(bootstrap: str, records: int, *, progress: Callable[[str], None]) -> RawFigures:
    """Measure aiokafka (Faust's transport): produce all, then consume all."""
    topic = fresh_topic(bootstrap, "aiokafka")
    progress(f"raw aiokafka: producing and consuming {records:,} records")
    produce_s, consume_s = asyncio.run(_aiokafka(bootstrap, topic, records))
    return RawFigures(records, produce_s, consume_s)


def _producer(bootstrap: str, **overrides: object) -> Producer:
    config: dict[str, object] = {
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "partitioner": "murmur2_random",
    }
    config.update(overrides)
    return KafkaConnection.of(bootstrap).producer(**config)


def _consumer(bootstrap: str, **overrides: object) -> Consumer:
    config: dict[str, object] = {
        "group.id": f"bench-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 10,
    }
    config.update(overrides)
    return KafkaConnection.of(bootstrap).consumer(**config)


def _produce_all(bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    """Produce ``records`` records and wait for every ack.

    Returns:
        ``perf_counter()`` at the first produce and once every record was acknowledged.
    """
    producer = _producer(bootstrap)
    value = os.urandom(RECORD_BYTES)
    keys = [f"account-{i}".encode() for i in range(KEYS)]
    # Connect and get the idempotent producer id before the clock starts.
    producer.produce(topic, value, b"warm-up", partition=0)
    producer.flush(30)
    produce = producer.produce
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                produce(topic, value, keys[i % KEYS])
                break
            except BufferError:  # librdkafka's queue is full: let it drain a little
                producer.poll(0.005)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError(f"raw producer could not deliver everything to {topic}")
    return start, time.perf_counter()


def _consume_all(bootstrap: str, topic: str, records: int, offset: int) -> tuple[float, float]:
    """Read ``records`` records of ``topic`` (plus the warm-up one).

    Returns:
        ``perf_counter()`` when the first and the last record arrived.
    """
    consumer = _consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, p, offset) for p in range(PARTITIONS)])
        seen = 0
        first = None
        deadline = time.monotonic() + 120
        while seen < records + 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {seen:,} of {records:,} records came back from {topic}")
            for message in consumer.consume(10_000, 0.1):
                if message.error() is None:
                    seen += 1
                    if first is None:
                        first = time.perf_counter()
        assert first is not None
        return first, time.perf_counter()
    finally:
        consumer.close()


def _round_trips(bootstrap: str, pings: int) -> list[float]:
    """Time single records from produce to consume, one at a time, on an idle topic."""
    topic = fresh_topic(bootstrap, "ping")
    producer = _producer(bootstrap, **{"linger.ms": 0})
    consumer = _consumer(bootstrap)
    samples = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        consumer.consume(1, 1.0)  # connect and fetch before timing
        value = os.urandom(RECORD_BYTES)
        for i in range(pings + 10):
            start = time.perf_counter()
            producer.produce(topic, value, f"account-{i}".encode())
            producer.poll(0)
            while not [m for m in consumer.consume(1, 1.0) if m.error() is None]:
                pass
            if i >= 10:  # the first few warm up connections and fetch sessions
                samples.append(time.perf_counter() - start)
        producer.flush(10)
    finally:
        consumer.close()
    return samples


async def _aiokafka(bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    from aiokafka.structs import TopicPartition as AioPartition

    # The connection's security settings, translated for aiokafka (KafkaConnection.aiokafka).
    connection = KafkaConnection.of(bootstrap)
    producer = connection.aiokafka_producer(acks="all", linger_ms=5, enable_idempotence=True)
    await producer.start()
    try:
        value = os.urandom(RECORD_BYTES)
        keys = [f"account-{i}".encode() for i in range(KEYS)]
        await producer.send_and_wait(topic, value, key=b"warm-up")
        start = time.perf_counter()
        pending = [await producer.send(topic, value, key=keys[i % KEYS]) for i in range(records)]
        await asyncio.gather(*pending)
        produce_s = time.perf_counter() - start
    finally:
        await producer.stop()

    consumer = connection.aiokafka_consumer(enable_auto_commit=False, fetch_max_wait_ms=10,
                                            max_partition_fetch_bytes=4 << 20)
    await consumer.start()
    try:
        partitions = [AioPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        seen = 0
        start = None
        while seen < records + 1:
            batches = await consumer.getmany(timeout_ms=100, max_records=10_000)
            seen += sum(len(batch) for batch in batches.values())
            if seen and start is None:
                start = time.perf_counter()  # from the first fetch on: connecting is not consuming
        assert start is not None
        consume_s = time.perf_counter() - start
    finally:
        await consumer.stop()
    return produce_s, consume_s


def _await_leaders(bootstrap: str, topic: str, wait: float = 30.0) -> None:
    """Wait until every partition of a new topic has a leader (produce would stall otherwise)."""
    consumer = _consumer(bootstrap)
    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            described = consumer.list_topics(topic, timeout=5).topics.get(topic)
            if (described is not None and described.error is None
                    and len(described.partitions) == PARTITIONS
                    and all(p.leader >= 0 for p in described.partitions.values())):
                return
            time.sleep(0.1)
        raise RuntimeError(f"topic {topic} has no leaders after {wait} s")
    finally:
        consumer.close()
