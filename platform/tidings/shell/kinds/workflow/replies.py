"""Reading a workflow's replies topic with a plain consumer, outside Faust.

Aggregates answer a workflow's sends on ``{app}.workflow.{name}.replies``, keyed by the
instance id, so a reply lands on the partition of the instance's inbox. The worker that owns
an inbox partition reads the same replies partition here, by assignment (no consumer group),
and hands what it reads to the agent in batches of whatever has arrived.

Why not through Faust like the inbox: every record Faust delivers costs its per-record
stream machinery and, as the pipeline takes what has arrived as soon as a slot is free,
mostly a batch (journal produce, commit, RocksDB write) of its own. A reply needs neither:
its offset is never committed, because a reply is worth nothing after a restart. Recovery
replays every running instance and sends each pending command again (same command id),
and the aggregate answers a repeat with its first verdict. So a partition is read from its
end as of the moment the worker starts to own it (``follow``, before recovery sends
anything), and a reply that was in flight when the worker stopped is simply answered again.
The effect is the batching activity results already get: one commit per read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, TopicPartition

from ...runtime.connection import KafkaConnection
from ...runtime.groups import DEFAULT_PREFIX, reader_group
from ...runtime.io import Incoming
from ...runtime.kafka import RIDE_OUT_S, fatal_error, incoming, is_fatal, not_authorized, watermarks
from ...runtime.pipeline import stop_worker_on_failure
from ...runtime.threads import OwnThread

log = logging.getLogger(__name__)

#: Most replies taken per read (one commit for all of them).
READ_BATCH = 2000
#: How long one read waits for a first reply before looking for new assignments (seconds).
READ_WAIT_S = 0.1


class RepliesReader:
    """Reads the followed partitions of one replies topic and hands batches to ``handle``.

    ``follow`` and ``unfollow`` are applied by the reading task between two reads, so the
    consumer is only ever used from one thread at a time.

    Args:
        connection: The Kafka cluster and its client properties.
        topic: The replies topic.
        handle: Given each non-empty batch read, on the loop. It must not wait: the agent
            follows partitions while holding its lock, so a reader waiting for that lock
            would never position them. (No bound is needed: replies come only to commands
            sent, and those wait for inbox records the pipeline takes in bounded batches.)
    """

    def __init__(self, connection: KafkaConnection, topic: str, handle: Callable[[list[Incoming]], None], *,
                 group_prefix: str = DEFAULT_PREFIX) -> None:
        self._group_prefix = group_prefix  # its consumer's group: never joined (groups.py)
        self._connection = connection
        self._topic = topic
        self._handle = handle
        self._consumer: Consumer | None = None
        self._assigned: set[int] = set()
        self._to_follow: dict[int, asyncio.Future[None]] = {}
        self._to_drop: set[int] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # Its own thread: its polls would hold one of asyncio's few shared ones (threads.py).
        self._calls = OwnThread(f"tidings-replies-{topic[:40]}")

    async def follow(self, partitions: Iterable[int]) -> None:
        """Start reading ``partitions`` from their current end; return once positioned there.

        Called before a partition's recovery sends anything: every reply to a command sent
        from then on is read.
        """
        waits = []
        for partition in partitions:
            self._to_drop.discard(partition)
            if partition in self._assigned:
                continue
            if partition not in self._to_follow:
                self._to_follow[partition] = asyncio.get_running_loop().create_future()
            waits.append(self._to_follow[partition])
        if not waits:
            return
        self._changed.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
            # A failure here is Kafka failing or a bug: restart, as the pipeline does.
            self._task.add_done_callback(stop_worker_on_failure(f"reading {self._topic}"))
        await asyncio.gather(*waits)

    def unfollow(self, partitions: Iterable[int]) -> None:
        """Stop reading ``partitions`` (revoked: another worker owns their instances)."""
        for partition in partitions:
            waiting = self._to_follow.pop(partition, None)
            if waiting is not None and not waiting.done():
                # Not cancelled: the caller is deciding a batch; what it decides for a
                # partition revoked meanwhile is the owner's business, as without replies.
                waiting.set_result(None)
            if partition in self._assigned:
                self._to_drop.add(partition)
                self._changed.set()

    def close(self) -> None:
        # The reading task closes the consumer itself: a read may be running in a thread.
        self._closing = True
        self._changed.set()
        for waiting in self._to_follow.values():
            if not waiting.done():
                waiting.set_result(None)

    async def _run(self) -> None:
        try:
            while not self._closing:
                if self._to_follow or self._to_drop:
                    await self._reassign()
                if not self._assigned:
                    self._changed.clear()
                    if not (self._closing or self._to_follow or self._to_drop):
                        await self._changed.wait()
                    continue
                records = await self._calls.run(self._read)
                if records and not self._closing:
                    self._handle(records)
        finally:
            if self._consumer is not None:
                consumer, self._consumer = self._consumer, None
                await self._calls.run(consumer.close)
                self._calls.close()

    async def _reassign(self) -> None:
        follow = dict(self._to_follow)
        drop, self._to_drop = self._to_drop, set()
        ends = await self._calls.run(self._apply, list(follow), drop)
        for partition, waiting in follow.items():
            if self._to_follow.get(partition) is waiting:
                del self._to_follow[partition]
                if not waiting.done():
                    waiting.set_result(None)
            elif partition not in self._to_follow:
                self._to_drop.add(partition)  # unfollowed while it was being assigned
            log.debug("reading %s/%d from offset %d", self._topic, partition, ends[partition])

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self._connection.consumer(**{
                "group.id": reader_group(self._group_prefix, "replies"),  # never joined: assign only
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                # The broker answers a fetch as soon as a reply arrives (fetch.min.bytes 1);
                # this only bounds how often an idle reader asks again.
                "fetch.wait.max.ms": 100,
            })
        return self._consumer

    def _apply(self, follow: list[int], drop: set[int]) -> dict[int, int]:
        """Unassign ``drop``; assign ``follow`` at their high watermarks (in a thread)."""
        consumer = self._client()
        if drop:
            consumer.incremental_unassign([TopicPartition(self._topic, p) for p in drop])
            self._assigned -= drop
        # A broker restarting answers "unknown partition", "not leader" for a while: wait.
        ends = {p: watermarks(consumer, self._topic, p, ride_out_s=RIDE_OUT_S)[1]
                for p in follow if p not in self._assigned}
        if ends:
            consumer.incremental_assign([TopicPartition(self._topic, p, end) for p, end in ends.items()])
            self._assigned.update(ends)
        return ends

    def _read(self) -> list[Incoming]:
        """Wait up to ``READ_WAIT_S`` for a reply, then take what else has arrived (in a thread)."""
        consumer = self._client()
        first = consumer.poll(READ_WAIT_S)
        if first is None:
            return []
        messages = [first, *consumer.consume(READ_BATCH - 1, 0)]
        records = []
        for message in messages:
            error = message.error()
            if error is not None:
                if is_fatal(error):  # the consumer is unusable: the task's end stops the worker
                    raise fatal_error(error, f"reading {self._topic}")
                log.warning("reading %s: %s", self._topic,
                            not_authorized(error, self._connection, f"to read {self._topic}") or error.str())
                continue
            records.append(incoming(message))
        return records
