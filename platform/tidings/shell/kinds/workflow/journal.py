"""Read one workflow instance's journal back from Kafka, decoded, oldest first.

What a test against a running system, or an operator, wants to see of one instance: the
records its worker journaled (``{app}.workflow.{name}.journal``, key ``{instance_id}/{seq}``,
partition ``murmur2(instance_id) % partitions``), as the core's ``JournalRecord`` values.
``WorkflowHandle.journal`` and ``tidings journal`` are built on ``read_journal``.
"""

from __future__ import annotations

import logging

from ....codec import avro
from ....core.partitioning import partition_for
from ....core.workflow.journal import JournalRecord
from ....core.workflow_records import WorkflowJournalEntry
from ....errors import BrokerError, RecordError
from ...runtime.connection import KafkaConnection
from ...runtime.groups import DEFAULT_PREFIX, reader_group
from ...runtime.io import Incoming
from ...runtime.journaled import first_per_seq
from ...runtime.kafka import read_range, topic_partitions, watermarks

log = logging.getLogger(__name__)


def read_journal(
    connection: KafkaConnection, topic: str, partitions: int, instance_id: str, *, timeout: float = 30.0,
    group_prefix: str = DEFAULT_PREFIX,
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
        group_prefix: The prefix of the reader's group id: never joined, nothing committed,
            but a cluster with an authorizer wants DESCRIBE on it (``groups.py``); the app's
            ``{app}.`` is covered by its workers' ACLs, whose principal may read the journal.

    Returns:
        The instance's records in seq order; empty when it was never started.

    Raises:
        BrokerError: The topic is missing or has another partition count, or Kafka gave
            nothing for ``timeout`` seconds.
    """
    consumer = connection.consumer(
        **{
            "group.id": reader_group(group_prefix, "journal"),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        found = len(topic_partitions(consumer, topic, timeout, connection=connection))
        if found != partitions:
            raise BrokerError(f"{topic} has {found} partitions where the App declares {partitions}")
        partition = partition_for(instance_id, partitions)
        low, high = watermarks(consumer, topic, partition, timeout)

        def decode(record: Incoming, seq: int) -> JournalRecord | None:
            try:
                entry = avro.decode_as(record.value or b"", WorkflowJournalEntry)  # type: ignore[type-var]
            except RecordError as exc:
                log.warning("skipping unreadable journal record %s/%d@%d: %s", topic, partition, record.offset, exc)
                return None
            if entry.instance_id != instance_id or entry.record.seq != seq:
                log.warning("skipping journal record %s/%d@%d: its key %r does not match its value",
                            topic, partition, record.offset, record.key)
                return None
            return entry.record

        return first_per_seq(read_range(consumer, topic, partition, low, high, timeout=timeout,
                                         connection=connection), instance_id, decode)
    finally:
        consumer.close()

