"""The publisher against the real broker: a record Kafka refuses fails only its send, never the caller.

Before, ``produce`` raised ``KafkaException`` out of ``send`` for a topic librdkafka knew to
be invalid (a hostile ``reply_to`` on its second try), and the worker crash-looped.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from confluent_kafka.admin import NewTopic

from tidings.errors import BrokerError, RecordRejected
from tidings.shell.runtime.io import Outgoing
from tidings.shell.runtime.kafka import ConfluentPublisher
from tidings.testing.topics import read_topic
from tests.kafka_clients import kafka

INVALID_TOPIC = "not a topic!"
SMALL_LIMIT = 16 * 1024


def create_topics(bootstrap: str, *topics: NewTopic) -> None:
    admin = kafka(bootstrap).admin()
    for future in admin.create_topics(list(topics), operation_timeout=30).values():
        future.result(30)


def test_refused_records_fail_only_their_send_and_the_others_are_produced(
    kafka_bootstrap: str, app_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    ok, small = f"{app_id}.limits.ok", f"{app_id}.limits.small"
    create_topics(
        kafka_bootstrap,
        NewTopic(ok, 1, 1),
        # The broker refuses any record above this size on this topic.
        NewTopic(small, 1, 1, config={"max.message.bytes": str(SMALL_LIMIT)}),
    )

    async def scenario() -> None:
        publisher = ConfluentPublisher(kafka(kafka_bootstrap))
        try:
            # The broker refuses the invalid name and the oversized record; the others land.
            first = publisher.send(
                [
                    Outgoing(ok, b"k", b"one"),
                    Outgoing(INVALID_TOPIC, b"k", b"reply"),
                    Outgoing(small, b"k", b"x" * (4 * SMALL_LIMIT)),
                    Outgoing(ok, b"k", b"two"),
                ]
            )
            with pytest.raises(RecordRejected) as refused:
                await first
            assert isinstance(refused.value, BrokerError)
            assert [(index, topic) for index, topic, _ in refused.value.rejections] == [
                (1, INVALID_TOPIC),
                (2, small),
            ]
            assert "Invalid topic" in refused.value.rejections[0][2]
            assert "too large" in refused.value.rejections[1][2]
            positions = refused.value.delivered
            assert [p is None for p in positions] == [False, True, True, False]
            assert (positions[0].offset, positions[3].offset) == (0, 1)

            # librdkafka now knows the name is invalid and produce() refuses it at once;
            # send must still not raise. A record over the producer's own limit (1 MB)
            # and a name with a NUL byte are refused before queueing too.
            second = publisher.send(
                [
                    Outgoing(INVALID_TOPIC, b"k", b"reply"),
                    Outgoing(ok, b"k", b"x" * 1_100_000),
                    Outgoing("nul\x00topic", b"k", b"reply"),
                    Outgoing(ok, b"k", b"three"),
                ]
            )
            with pytest.raises(RecordRejected) as refused_again:
                await second
            assert [index for index, _, _ in refused_again.value.rejections] == [0, 1, 2]
            assert refused_again.value.delivered[3].offset == 2

            # The idempotent producer is not broken by a refusal on a partition.
            (fits,) = await publisher.publish([Outgoing(small, b"k", b"fits")])
            assert fits.offset >= 0

            # publish_later logs and drops a refused record, and produces the rest.
            with caplog.at_level(logging.WARNING, logger="tidings.shell.runtime.kafka"):
                publisher.publish_later([Outgoing(INVALID_TOPIC, b"k", b"reply"), Outgoing(ok, b"k", b"four")])
                for _ in range(600):
                    if "refused by Kafka and dropped" in caplog.text:
                        break
                    await asyncio.sleep(0.05)
            assert "refused by Kafka and dropped" in caplog.text
            assert INVALID_TOPIC in caplog.text
        finally:
            publisher.close()

    asyncio.run(scenario())
    assert [r.value for r in read_topic(kafka_bootstrap, ok)] == [b"one", b"two", b"three", b"four"]
    assert [r.value for r in read_topic(kafka_bootstrap, small)] == [b"fits"]
