"""The reader of a workflow's replies topic (shell/kinds/workflow/replies.py), on the real broker.

It must read a partition from where it ended when the worker started to follow it (older
replies are answered again after recovery resends; reading them would be harmless but
slow), deliver everything produced from then on, in batches, and stop delivering a
partition once unfollowed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tidings.shell.kinds.workflow.replies import RepliesReader
from tidings.shell.runtime.io import Incoming
from tidings.shell.runtime.topics import TopicSpec, apply_topics
from tests.kafka_clients import kafka

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = kafka(bootstrap).producer()
    for value in values:
        producer.produce(topic, value, b"k", partition=partition)
    assert producer.flush(30) == 0


async def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_follows_from_the_end_delivers_what_comes_after_and_stops_when_unfollowed(
    kafka_bootstrap: str, app_id: str
) -> None:
    topic = f"{app_id}.workflow.w.replies"
    apply_topics(kafka(kafka_bootstrap), [TopicSpec(topic, 2, 1, {})], out=lambda line: None)
    _produce(kafka_bootstrap, topic, 0, [b"old-0", b"old-1"])
    batches: list[list[Incoming]] = []

    def read() -> list[tuple[int, bytes | None]]:
        return [(r.partition, r.value) for batch in batches for r in batch]

    async def scenario() -> None:
        reader = RepliesReader(kafka(kafka_bootstrap), topic, batches.append)
        try:
            await reader.follow([0])
            # Positioned: everything produced from now on is read, nothing from before.
            await asyncio.to_thread(_produce, kafka_bootstrap, topic, 0, [b"new-%d" % n for n in range(50)])
            await asyncio.to_thread(_produce, kafka_bootstrap, topic, 1, [b"not followed"])
            await _until(lambda: len(read()) >= 50)
            assert read() == [(0, b"new-%d" % n) for n in range(50)]
            assert len(batches) < 50  # what had arrived was handed over together

            await reader.follow([1])
            await asyncio.to_thread(_produce, kafka_bootstrap, topic, 1, [b"one"])
            await _until(lambda: len(read()) >= 51)
            assert read()[50:] == [(1, b"one")]  # partition 1 from its end at follow

            reader.unfollow([0])
            await asyncio.sleep(0.5)  # the reader applies it between two reads
            await asyncio.to_thread(_produce, kafka_bootstrap, topic, 0, [b"after unfollow"])
            await asyncio.to_thread(_produce, kafka_bootstrap, topic, 1, [b"two"])
            await _until(lambda: len(read()) >= 52)
            await asyncio.sleep(0.5)
            assert read()[51:] == [(1, b"two")]
        finally:
            reader.close()
            await asyncio.sleep(0.3)  # the reading task closes its consumer

    asyncio.run(scenario())
