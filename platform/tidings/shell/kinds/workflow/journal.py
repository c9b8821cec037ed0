"""Read one workflow instance's journal back from Kafka, decoded, oldest first.

What a test against a running system, or an operator, wants to see of one instance: the
records its worker journaled (``{app}.workflow.{name}.journal``, key ``{instance_id}/{seq}``,
partition ``murmur2(instance_id) % partitions``), as the core's ``JournalRecord`` values.
``WorkflowHandle.journal`` and ``tidings journal`` are built on ``read_journal``.
"""

from __future__ import annotations

import logging
import time
import uuid

from confluent_kafka import Consumer, TopicPartition

from ....codec import avro
from ....core.partitioning import partition_for
from ....core.workflow.journal import JournalRecord
from ....core.workflow_records import WorkflowJournalEntry
from ....errors import BrokerError, RecordError
from ...runtime.connection import KafkaConnection
from ...runtime.io import Incoming
from ...runtime.kafka import incoming, is_transient, topic_partitions, watermarks

log = logging.getLogger(__name__)


def read_journal(
    connection: KafkaConnection, topic: str, partitions: int, instance_id: str, *, timeout: float = 30.0
) -> list[JournalRecord]:
    """Return the journal of ``instance_id`` as it stands in ``topic`` now, oldest first.

    Reads the instance's partition from its low to its high watermark (no consumer group,
    nothing committed), keeps the records keyed ``{instance_id}/{seq}`` and decodes them.
    Blocking: from async code, call it through ``asyncio.to_thread``.

    Only the partition's owner writes there, so each seq appears once. Should a worker that
    lost the partition without noticing (a zombie) have written a seq too, the first record
    of that seq in offset order is kept, as the aggregate journal's reader keeps the first
    record of a version. A record that does not decode is logged and skipped, as a worker's
    recovery skips it.

    Args:
        connection: The Kafka cluster and its client properties.
        topic: The workflow's journal topic (``WorkflowHandle.topics.journal``).
        partitions: The App's partition count; the topic must have as many.
        instance_id: The instance.
        timeout: Seconds to wait for Kafka before giving up.

    Returns:
        The instance's records in seq order; empty when it was never started.

    Raises:
        BrokerError: The topic is missing or has another partition count, or Kafka gave
            nothing for ``timeout`` seconds.
    """
    consumer = connection.consumer(
        **{
            "group.id": f"tidings-journal-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        found = len(topic_partitions(consumer, topic, timeout))
        if found != partitions:
            raise BrokerError(f"{topic} has {found} partitions where the App declares {partitions}")
        partition = partition_for(instance_id, partitions)
        low, high = watermarks(consumer, topic, partition, timeout)
        prefix = f"{instance_id}/".encode()
        by_seq: dict[int, JournalRecord] = {}
        for record in _read(consumer, topic, partition, low, high, timeout):
            key = record.key or b""
            seq_text = key[len(prefix):]
            # "a/b/3" is instance "a/b": the rest after "a/" must be the seq alone.
            if not key.startswith(prefix) or not seq_text.isdigit():
                continue
            try:
                entry = avro.decode_as(record.value or b"", WorkflowJournalEntry)  # type: ignore[type-var]
            except RecordError as exc:
                log.warning("skipping unreadable journal record %s/%d@%d: %s", topic, partition, record.offset, exc)
                continue
            if entry.instance_id != instance_id or entry.record.seq != int(seq_text):
                log.warning("skipping journal record %s/%d@%d: its key %r does not match its value",
                            topic, partition, record.offset, key)
                continue
            by_seq.setdefault(entry.record.seq, entry.record)
        return [by_seq[seq] for seq in sorted(by_seq)]
    finally:
        consumer.close()


def _read(consumer: Consumer, topic: str, partition: int, low: int, high: int, timeout: float) -> list[Incoming]:
    """Return the records of one partition from ``low`` up to (not including) ``high``.

    Raises:
        BrokerError: Nothing arrived for ``timeout`` seconds before ``high``.
    """
    if high <= low:
        return []
    consumer.assign([TopicPartition(topic, partition, low)])
    records: list[Incoming] = []
    deadline = time.monotonic() + timeout
    position = low
    while position < high:
        # consume() waits for the whole count or the timeout: keep each wait short.
        messages = consumer.consume(1000, 0.1)
        if not messages:
            # Compaction can leave no record at the last offsets: once nothing more comes,
            # trust the fetch position.
            (current,) = consumer.position([TopicPartition(topic, partition)])
            if current.offset >= high:
                break
            if time.monotonic() > deadline:
                raise BrokerError(f"reading {topic}/{partition}: nothing after offset {position} for {timeout} s (the end is {high})")
            continue
        deadline = time.monotonic() + timeout
        for message in messages:
            error = message.error()
            if error is not None:
                if is_transient(error):  # a broker restarting: librdkafka fetches again
                    continue
                raise BrokerError(f"reading {topic}/{partition}: {error.str()}")
            record = incoming(message)
            if record.offset >= high:
                position = high
                break
            position = record.offset + 1
            records.append(record)
    return records
