"""Feed an agent's input in batches, pipelined, completing only finished batches.

The worker's intake (``intake.py``) hands over records in lists, as the consumer fetched
them; an agent wants batches (one produce round trip and one RocksDB write per batch)
and wants to decide the next batch while the previous one's writes are still being
acknowledged by the broker. A ``Feed`` does both, one per ``Input``:

- records are appended to a buffer; a batch is whatever the buffer holds (up to
  ``max_batch``) when one of the ``max_in_flight`` slots frees up: one record when idle
  (low latency), many under load (one round trip for all of them), with no timer;
- ``start(batch)`` decides the batch and starts its writes; it returns a ``finish``
  coroutine function that waits for the writes. Finishes run in batch order in a second
  task; only after a batch's finish returned does the feed report the batch's offsets as
  done (``on_done``: the intake commits them, or the transaction carries them), so a
  crash re-delivers every record whose effects are not durable.

Anything raised from ``start``, ``finish`` or ``on_done`` is Kafka failing or a bug (bad
records are dead-lettered by the agents): the process exits with status 70 without
committing, so its supervisor restarts it and the records are delivered again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, NoReturn

from .io import Incoming

log = logging.getLogger(__name__)

Finish = Callable[[], Awaitable[None]]
Start = Callable[[list[Incoming]], Awaitable[Finish]]
#: (topic, partition) -> the next offset to consume: what a finished batch lets commit.
Offsets = dict[tuple[str, int], int]
Done = Callable[[Offsets], Awaitable[None]]

#: Exit status of a worker that stopped because Kafka or a handler failed.
EXIT_FAILED = 70
#: Most records one batch takes.
BATCH_SIZE = 2000


class Feed:
    """One input's buffer and its two tasks: decide batches, complete them in order.

    Args:
        start: Decides a batch and returns what completes it.
        what: What the input does, for logs.
        on_done: Called with a completed batch's offsets, in batch order; awaited
            before the batch's slot frees up.
        max_batch: Most records per batch.
        max_in_flight: Batches decided but not yet completed (1: each batch sees the
            previous one's RocksDB writes).
    """

    def __init__(
        self, start: Start, what: str, on_done: Done, *, max_batch: int = BATCH_SIZE,
        max_in_flight: int = 2,
    ) -> None:
        self.what = what
        self._start = start
        self._on_done = on_done
        self._max_batch = max_batch
        self._buffer: list[Incoming] = []
        self._arrived = asyncio.Event()
        self._slots = asyncio.Semaphore(max_in_flight)
        self._finishing: asyncio.Queue[tuple[Finish, Offsets, int]] = asyncio.Queue()
        self._in_flight = 0  # records of batches taken but not completed
        self._started = 0  # batches taken from the buffer
        self._completed = 0  # batches whose on_done returned
        self._progress = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []

    def put(self, records: Sequence[Incoming]) -> None:
        """Append records (in offset order per partition) to the buffer."""
        self._buffer.extend(records)
        if self._buffer:
            self._arrived.set()

    @property
    def buffered(self) -> int:
        """Records waiting for a batch."""
        return len(self._buffer)

    @property
    def in_flight(self) -> bool:
        """Whether a batch is taken and not completed yet."""
        return self._completed < self._started

    @property
    def pending(self) -> int:
        """Records not completed yet: buffered, or in a batch in flight (liveness.py)."""
        return len(self._buffer) + self._in_flight

    def run(self) -> None:
        """Start the feed's tasks (on the running loop); a failing one stops the worker."""
        for body in (self._decide, self._complete):
            task = asyncio.ensure_future(body())
            task.add_done_callback(stop_worker_on_failure(self.what))
            self._tasks.append(task)

    def stop(self) -> None:
        """Cancel the feed's tasks: batches not completed are not reported."""
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()

    def drop(self, partitions: Collection[tuple[str, int]]) -> None:
        """Drop buffered records of ``partitions`` (lost: another worker may own them)."""
        gone = set(partitions)
        self._buffer = [r for r in self._buffer if (r.topic, r.partition) not in gone]
        if not self._buffer:
            self._arrived.clear()

    async def drain(self, partitions: Collection[tuple[str, int]]) -> None:
        """Drop buffered records of ``partitions``; wait until every batch taken so far
        has completed (the partitions are being revoked: their records will go to the
        next owner from the last committed offset)."""
        if partitions:
            self.drop(partitions)
        target = self._started
        async with self._progress:
            await self._progress.wait_for(lambda: self._completed >= target)

    async def _decide(self) -> None:
        while True:
            await self._arrived.wait()
            # Wait for a slot *before* taking the batch: records keep arriving meanwhile,
            # so the batch grows with the load and the broker's round trip.
            await self._slots.acquire()
            batch = self._buffer[: self._max_batch]
            del self._buffer[: self._max_batch]
            if not self._buffer:
                self._arrived.clear()
            if not batch:  # drained while waiting for the slot
                self._slots.release()
                continue
            self._started += 1
            self._in_flight += len(batch)
            finish = await self._start(batch)
            self._finishing.put_nowait((finish, next_offsets(batch), len(batch)))

    async def _complete(self) -> None:
        while True:
            finish, offsets, size = await self._finishing.get()
            await finish()
            await self._on_done(offsets)
            self._in_flight -= size
            self._slots.release()
            async with self._progress:
                self._completed += 1
                self._progress.notify_all()


def next_offsets(records: Sequence[Incoming]) -> Offsets:
    """Return the offset after the last of ``records`` per (topic, partition)."""
    offsets: Offsets = {}
    for record in records:
        key = (record.topic, record.partition)
        if offsets.get(key, -1) <= record.offset:
            offsets[key] = record.offset + 1
    return offsets


def stop_worker(what: str, error: BaseException | None = None) -> NoReturn:
    """Log that ``what`` failed (``error``, or the exception being handled) and exit 70.

    Without committing: the supervisor restarts the worker and the records come again.
    """
    log.critical("%s failed; stopping the worker so it restarts", what, exc_info=error or True)
    logging.shutdown()
    os._exit(EXIT_FAILED)


def stop_worker_on_failure(what: str) -> Callable[[asyncio.Future[Any]], None]:
    """Return a done-callback that stops the worker when its task raised."""

    def check(task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            stop_worker(what, task.exception())

    return check
