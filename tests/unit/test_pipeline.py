"""run_batches: records are acked only after their batch finished, in order, nothing lost."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from tidings.shell.pipeline import run_batches


class FakeStream:
    """The slice of a Faust stream run_batches uses: noack(), events(), ack()."""

    def __init__(self, records: int) -> None:
        self.records = records
        self.acked: list[int] = []

    def noack(self) -> FakeStream:
        return self

    async def events(self) -> Any:
        for offset in range(self.records):
            message = SimpleNamespace(topic="t", partition=0, offset=offset, key=None,
                                      value=b"v", headers=None, timestamp=1.0)
            yield SimpleNamespace(message=message)
            if offset % 7 == 0:
                await asyncio.sleep(0)  # let the batcher run now and then, as Faust would
        await asyncio.sleep(3600)  # a stream never ends; the test cancels it

    async def ack(self, event: Any) -> None:
        self.acked.append(event.message.offset)


def test_every_record_is_acked_once_in_order_after_its_batch_finished() -> None:
    stream = FakeStream(500)
    started: list[list[int]] = []
    finished: set[int] = set()

    async def start(batch: list[Any]) -> Any:
        offsets = [record.offset for record in batch]
        started.append(offsets)
        # Nothing of this batch may be acked before its finish ran.
        assert not set(offsets) & set(stream.acked)

        async def finish() -> None:
            await asyncio.sleep(0.001)
            finished.update(offsets)

        return finish

    async def scenario() -> None:
        task = asyncio.ensure_future(run_batches(stream, start, what="test", max_batch=64))
        while len(stream.acked) < 500:
            await asyncio.sleep(0.001)
            assert set(stream.acked) <= finished
        task.cancel()

    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert stream.acked == list(range(500))
    assert [offset for batch in started for offset in batch] == list(range(500))
    assert max(len(batch) for batch in started) <= 64
    # Records that arrive while a batch is in flight are grouped, not sent one by one.
    assert len(started) < 500
