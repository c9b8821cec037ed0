"""Read whole topics back in tests (confluent-kafka, by assignment, no group)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ..shell.runtime.connection import KafkaConnection
from ..shell.runtime.kafka import incoming, take_waiting, watermarks


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as it sits in a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    timestamp_ms: int | None = None  # the record's timestamp (CreateTime unless the topic logs its append)


def read_topic(
    bootstrap: str | KafkaConnection, topic: str, *, timeout: float = 30.0, isolation: str = "read_committed"
) -> list[StoredRecord]:
    """Return every record of ``topic`` up to its current end, in (partition, offset) order.

    ``isolation="read_uncommitted"`` also returns the records of aborted (and still open)
    transactions; the default, librdkafka's, returns only committed ones, up to the last
    stable offset (nothing of a transaction still open, nor anything after it).
    ``bootstrap`` is a connection, or an address with the environment's Kafka properties.
    """
    consumer = KafkaConnection.of(bootstrap).consumer(
        **{
            "group.id": f"tidings-read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        partitions = sorted(metadata.topics[topic].partitions)
        ends: dict[int, int] = {}
        starts = []
        for partition in partitions:
            low, high = watermarks(consumer, topic, partition, timeout)
            if high > low:
                ends[partition] = high
                starts.append(TopicPartition(topic, partition, low))
        records: list[StoredRecord] = []
        if not starts:
            return records
        consumer.assign(starts)
        remaining = dict(ends)
        deadline = time.monotonic() + timeout
        while remaining:
            messages = take_waiting(consumer, 1000, 0.1)
            if not messages:
                # Compaction may have removed a partition's last records: once nothing more
                # comes, trust the fetch position.
                for position in consumer.position([TopicPartition(topic, p) for p in remaining]):
                    if position.offset >= remaining[position.partition]:
                        del remaining[position.partition]
                if remaining and time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic}: nothing more after {len(records)} records")
            for message in messages:
                if message.error() is not None:
                    continue
                record = incoming(message)
                records.append(
                    StoredRecord(record.partition, record.offset, record.key, record.value, dict(record.headers),
                                 record.timestamp_ms)
                )
                if record.partition in remaining and record.offset >= remaining[record.partition] - 1:
                    del remaining[record.partition]
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def group_assignment(bootstrap: str | KafkaConnection, group: str, topic: str) -> dict[str, set[int]]:
    """Return which partitions of ``topic`` each member of consumer group ``group`` holds.

    A describe that times out (a busy broker, a coordinator that is moving) reads as no
    member holding anything: callers poll until the assignment they wait for shows.
    """
    admin = KafkaConnection.of(bootstrap).admin()
    (future,) = admin.describe_consumer_groups([group], request_timeout=10).values()
    try:
        description = future.result()
    except KafkaException as exc:
        if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError._TIMED_OUT:
            return {}
        raise
    return {
        member.member_id: {
            tp.partition for tp in member.assignment.topic_partitions if tp.topic == topic
        }
        for member in description.members
    }
