"""An idle client's readers keep their consumers (issue 20: the idle latency's tail).

The outcome watcher and the reply reader only assign partitions; librdkafka reports such a
consumer's group ``init`` for ever. Read as "records waiting", every reader that sat idle
for ``RECOVER_AFTER_S`` looked deaf and was replaced, and the next caller's answer waited for
the new consumer's first fetch. Both readers here sit idle past that time on a real broker:
neither is renewed, and each still hands over the next record at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tidings.shell.runtime.replies import RECOVER_AFTER_S, ReplyReader
from tidings.shell.runtime.requester import OutcomeWatcher
from tidings.shell.runtime.topics import apply_topics, spec_for
from tests.kafka_clients import kafka

IDLE_S = RECOVER_AFTER_S + 3.0


def _count_renewals(monkeypatch: pytest.MonkeyPatch, cls: type, renewed: list[float]) -> None:
    original = cls._renew  # type: ignore[attr-defined]

    def renew(self: Any, *args: Any) -> Any:
        renewed.append(time.monotonic())
        return original(self, *args)

    monkeypatch.setattr(cls, "_renew", renew)


def test_idle_readers_keep_their_consumers_and_answer_at_once(
    kafka_bootstrap: str, app_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes, replies = f"{app_id}.workflow.w.outcomes", f"{app_id}.replies"
    apply_topics(kafka(kafka_bootstrap), [spec_for("outcomes", outcomes, partitions=2),
                                          spec_for("replies", replies, partitions=2)],
                 out=lambda line: None)
    renewed: list[float] = []
    _count_renewals(monkeypatch, OutcomeWatcher, renewed)
    _count_renewals(monkeypatch, ReplyReader, renewed)
    producer = kafka(kafka_bootstrap).producer()
    watcher = OutcomeWatcher(kafka(kafka_bootstrap))
    reader: ReplyReader[bytes] = ReplyReader(kafka(kafka_bootstrap), replies,
                                             decode=lambda value: ("k", value))

    async def scenario() -> None:
        await reader.start()
        first = await watcher.watch(outcomes, 1, "first", bytes)
        producer.produce(outcomes, b"v1", b"first", partition=1)
        producer.flush(10)
        assert await asyncio.wait_for(first.future, 30) == b"v1"
        watcher.forget(first)
        later = await watcher.watch(outcomes, 1, "later", bytes)  # keeps the partition read
        await asyncio.sleep(IDLE_S)
        answer = reader.expect("k")
        producer.produce(outcomes, b"v2", b"later", partition=1)
        producer.produce(replies, b"r", b"k", partition=0)
        producer.flush(10)
        started = time.monotonic()
        assert await asyncio.wait_for(later.future, 30) == b"v2"
        assert await asyncio.wait_for(answer, 30) == b"r"
        # Generous for a loaded machine; a renewal costs a consumer's start and first fetch.
        assert time.monotonic() - started < 2.0

    try:
        asyncio.run(scenario())
    finally:
        watcher.close()
        reader.close()
    assert renewed == [], f"an idle reader was renewed {len(renewed)} time(s)"
