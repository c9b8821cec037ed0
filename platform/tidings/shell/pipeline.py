"""Feed a Faust stream to an agent in batches, pipelined, acking only finished batches.

Faust hands records over one at a time; agents want batches (one produce round trip and
one RocksDB write per batch) and want to decide the next batch while the previous one's
events are still being acknowledged by the broker. ``run_batches`` does both:

- records are taken without Faust's automatic acks (``stream.noack()``) into a buffer;
  a batch is whatever the buffer holds (up to ``max_batch``) when one of the
  ``max_in_flight`` slots frees up: one record when idle (low latency), many under load
  (one round trip for all of them), with no timer;
- ``start(batch)`` decides the batch and starts its writes; it returns a ``finish``
  coroutine function that waits for the writes. Finishes run in batch order in a second
  task, and each batch's records are acked only after its finish returned: a crash
  re-delivers every record whose effects are not durable.

Anything raised from ``start`` or ``finish`` is Kafka failing or a bug (bad records are
dead-lettered by the agents): the process exits with status 70 without acking, so its
supervisor restarts it and the records are delivered again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn

from .io import Incoming

log = logging.getLogger(__name__)

Finish = Callable[[], Awaitable[None]]
Start = Callable[[list[Incoming]], Awaitable[Finish]]

#: Exit status of a worker that stopped because Kafka or a handler failed.
EXIT_FAILED = 70
#: Most records one batch takes (also Faust's poll size; its buffer holds four batches).
BATCH_SIZE = 2000


async def run_batches(
    stream: Any, start: Start, *, what: str, max_batch: int = BATCH_SIZE, max_in_flight: int = 2
) -> None:
    """Consume ``stream`` (a Faust stream) in pipelined batches; see the module docstring."""
    stream = stream.noack()
    buffer: list[Any] = []
    arrived = asyncio.Event()  # the buffer has records
    room = asyncio.Event()  # the buffer is below its bound (back-pressure on Faust)
    room.set()
    slots = asyncio.Semaphore(max_in_flight)
    finishing: asyncio.Queue[tuple[Finish, list[Any]]] = asyncio.Queue()

    async def decide() -> None:
        while True:
            await arrived.wait()
            # Wait for a slot *before* taking the batch: records keep arriving meanwhile,
            # so the batch grows with the load and the broker's round trip.
            await slots.acquire()
            batch = buffer[:max_batch]
            del buffer[:max_batch]
            if not buffer:
                arrived.clear()
            if len(buffer) < 4 * max_batch:
                room.set()
            try:
                finish = await start(_incoming(batch))
            except Exception:
                stop_worker(what)
            finishing.put_nowait((finish, batch))

    async def complete() -> None:
        while True:
            finish, events = await finishing.get()
            try:
                await finish()
            except Exception:
                stop_worker(what)
            for event in events:
                await stream.ack(event)
            slots.release()

    workers = [asyncio.ensure_future(decide()), asyncio.ensure_future(complete())]
    try:
        async for event in stream.events():
            buffer.append(event)
            arrived.set()
            if len(buffer) >= 4 * max_batch:
                room.clear()
                await room.wait()
            for task in workers:
                if task.done():
                    task.result()
    finally:
        for task in workers:
            task.cancel()


def agent_body(start: Start, what: str, *, max_in_flight: int = 2) -> Callable[[Any], Awaitable[None]]:
    """Return a Faust agent body that runs ``start`` over pipelined batches of its stream.

    Args:
        start: Decides a batch and returns what completes it (see ``run_batches``).
        what: What the agent does, for logs and the agent function's name.
        max_in_flight: Batches decided but not yet finished.
    """

    async def consume(stream: Any) -> None:
        await run_batches(stream, start, what=what, max_in_flight=max_in_flight)

    consume.__name__ = "consume_" + "".join(c if c.isalnum() else "_" for c in what)
    return consume


def stop_worker(what: str, error: BaseException | None = None) -> NoReturn:
    """Log that ``what`` failed (``error``, or the exception being handled) and exit 70.

    Without acking: the supervisor restarts the worker and the records come again.
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


def _incoming(events: Sequence[Any]) -> list[Incoming]:
    records = []
    for event in events:
        message = event.message
        headers = message.headers or ()
        if isinstance(headers, dict):
            headers = headers.items()
        records.append(
            Incoming(
                message.topic,
                message.partition,
                message.offset,
                message.key,
                message.value,
                {name: value for name, value in headers},
                int(message.timestamp * 1000) if message.timestamp else None,
            )
        )
    return records
