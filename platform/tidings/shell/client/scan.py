"""Read whole topics once, to the ends they have now, handing each record to a function.

What ``tidings list`` builds its indexes from: a compacted topic keyed by instance (a
workflow's status topic), or a journal whose keys say which instance and which version or
seq a record is (an aggregate's events), or the dead-letter topic. One assign-only consumer
reads every partition of every topic asked for at once (nothing committed; a group id with
the app's prefix, which its ACLs cover: ``groups.py``), so listing the twenty workflows of
an app costs one consumer, not twenty.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping

from confluent_kafka import Message, TopicPartition

from ...errors import BrokerError
from ..runtime.connection import KafkaConnection
from ..runtime.groups import DEFAULT_PREFIX, reader_group
from ..runtime.io import Incoming
from ..runtime.kafka import PartitionRange, take_waiting, topic_partitions, watermarks

#: Most records one ``consume`` call returns.
BATCH = 10_000


def read_topics(
    connection: KafkaConnection, takers: Mapping[str, Callable[[Incoming], None]], *,
    group_prefix: str = DEFAULT_PREFIX, timeout: float = 30.0, only: Mapping[str, set[int]] | None = None,
    starts: Mapping[tuple[str, int], int] | None = None,
) -> int:
    """Hand every record of each topic of ``takers``, up to the ends it had at start, to its function.

    Records of one partition come in offset order. A taker must not raise for a record it
    cannot read (any producer the ACLs let in may have written it): it skips it. Blocking.

    Args:
        connection: The Kafka cluster and its client properties.
        takers: Each topic to read, and what takes its records.
        group_prefix: The prefix of the reader's group id (never joined).
        timeout: Seconds to wait for Kafka, and for the next record while some are missing.
        only: Read only these partitions of a topic named here (one instance's, say).
        starts: Begin these partitions at this offset instead of their low watermark (a
            consumer group's committed offsets: what it has not acknowledged yet).

    Returns:
        How many records were read.

    Raises:
        BrokerError: A topic is missing, the principal may not read it, or Kafka gave
            nothing for ``timeout`` seconds before the ends.
    """
    consumer = connection.consumer(**{
        "group.id": reader_group(group_prefix, "list"),
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        # Records removed by retention between the watermark query and the fetch: go on
        # from the earliest left instead of jumping to the end.
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 10,
    })
    try:
        ranges: dict[tuple[str, int], PartitionRange] = {}
        for topic in takers:
            for partition in topic_partitions(consumer, topic, timeout, connection=connection):
                if only is not None and topic in only and partition not in only[topic]:
                    continue
                low, high = watermarks(consumer, topic, partition, timeout)
                if starts is not None and (topic, partition) in starts:
                    low = min(max(low, starts[(topic, partition)]), high)
                if high > low:
                    ranges[(topic, partition)] = PartitionRange(topic, partition, low, high, connection)
        if not ranges:
            return 0
        consumer.assign([TopicPartition(t, p, r.position) for (t, p), r in ranges.items()])
        read = 0
        deadline = time.monotonic() + timeout
        while ranges:
            messages = take_waiting(consumer, BATCH, 0.1)
            if not messages:
                for key in [key for key, reading in ranges.items() if reading.settled(consumer)]:
                    del ranges[key]
                if ranges and time.monotonic() > deadline:
                    left = ", ".join(f"{t}/{p}" for t, p in list(ranges)[:3])
                    raise BrokerError(f"reading {left}: nothing more for {timeout:g} s before their ends")
                continue
            deadline = time.monotonic() + timeout
            by_partition: dict[tuple[str, int], list[Message]] = defaultdict(list)
            for message in messages:
                by_partition[(message.topic() or "", message.partition() or 0)].append(message)
            for key, batch in by_partition.items():
                reading = ranges.get(key)
                if reading is None:
                    # A partition read to its end (later records are not asked for), or an
                    # error of no partition: PartitionRange raises it unless it is transient.
                    errors = [m for m in batch if m.error() is not None]
                    if errors:
                        PartitionRange(key[0], key[1], 0, 1, connection).take(errors)
                    continue
                take = takers[key[0]]
                for record in reading.take(batch):
                    take(record)
                    read += 1
                if reading.done:
                    del ranges[key]
                    consumer.pause([TopicPartition(*key)])
        return read
    finally:
        consumer.close()
