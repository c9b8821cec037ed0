"""Feed: batches complete in order, offsets are reported only after their batch finished."""

from __future__ import annotations

import asyncio
from typing import Any

from tidings.shell.runtime.io import Incoming
from tidings.shell.runtime.pipeline import Feed, next_offsets


def _records(start: int, stop: int, partition: int = 0) -> list[Incoming]:
    return [Incoming("t", partition, offset, None, b"v") for offset in range(start, stop)]


def test_every_record_is_reported_once_in_order_after_its_batch_finished() -> None:
    started: list[list[int]] = []
    finished: set[int] = set()
    reported: list[int] = []

    async def start(batch: list[Incoming]) -> Any:
        offsets = [record.offset for record in batch]
        started.append(offsets)
        # Nothing of this batch may be reported before its finish ran.
        assert not reported or reported[-1] <= offsets[0]

        async def finish() -> None:
            await asyncio.sleep(0.001)
            finished.update(offsets)

        return finish

    async def done(offsets: dict[tuple[str, int], int]) -> None:
        (next_offset,) = offsets.values()
        assert set(range(next_offset)) <= finished
        reported.append(next_offset)

    async def scenario() -> None:
        feed = Feed(start, "test", done, max_batch=64)
        feed.run()
        for first in range(0, 500, 7):
            feed.put(_records(first, min(first + 7, 500)))
            await asyncio.sleep(0)
        while not reported or reported[-1] < 500:
            await asyncio.sleep(0.001)
        feed.stop()

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert reported == sorted(reported) and reported[-1] == 500
    assert [offset for batch in started for offset in batch] == list(range(500))
    assert max(len(batch) for batch in started) <= 64
    # Records that arrive while a batch is in flight are grouped, not sent one by one.
    assert len(started) < 500 // 7


def test_drain_drops_buffered_records_of_revoked_partitions_and_waits_for_batches() -> None:
    decided: list[Incoming] = []
    release = asyncio.Event()

    async def start(batch: list[Incoming]) -> Any:
        decided.extend(batch)

        async def finish() -> None:
            await release.wait()

        return finish

    async def done(offsets: dict[tuple[str, int], int]) -> None:
        return None

    async def scenario() -> None:
        feed = Feed(start, "test", done, max_in_flight=1)
        feed.run()
        feed.put(_records(0, 3, partition=0))
        await asyncio.sleep(0.01)  # the first batch is in flight, waiting for its finish
        feed.put(_records(0, 3, partition=1) + _records(3, 5, partition=0))
        draining = asyncio.ensure_future(feed.drain([("t", 1)]))
        await asyncio.sleep(0.01)
        assert not draining.done()  # the batch in flight has not completed
        release.set()
        await asyncio.wait_for(draining, 5)
        await asyncio.sleep(0.01)
        feed.stop()

    asyncio.run(scenario())
    assert [(r.partition, r.offset) for r in decided] == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)]


def test_next_offsets_are_one_past_the_last_record_per_partition() -> None:
    records = _records(5, 9) + _records(0, 2, partition=3)
    assert next_offsets(records) == {("t", 0): 9, ("t", 3): 2}
