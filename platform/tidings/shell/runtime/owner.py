"""The partition owner: what every journaled kind needs to own an instance's partition.

Every record about an instance lives in partition ``murmur2(instance_id) % partitions`` of
each of its kind's topics (SPEC §2), and one worker at a time owns that partition. Owning it
takes the same four things in every kind, kept here once:

- **readiness**: before the first record of a partition is decided, the worker's store must
  hold everything the journal holds (another worker may have written since this one last
  owned it). ``ensure_ready`` catches each new partition up once; ``revoke`` forgets it.
- **catch-up**: read the journal partition from the offset the store has applied up to its
  end, and hand each chunk to the kind's ``restore``; then ``caught_up`` (the kind writes
  the new offset, replays running instances). A kind with its own recovery passes
  ``catch_up`` instead.
- **forwarding**: a record that another partitioner put on the wrong partition is sent to
  its instance's home partition of the same topic (``forward``), never decided here.
- **foreign writers**: only the owner writes its journal partitions, and its records land
  back to back. ``settle`` checks that each acknowledged write starts where the previous
  one ended; a gap means someone else wrote (a zombie worker that lost the partition without
  noticing): the partition is marked not ready and the kind's ``on_foreign`` runs, so it is
  caught up again, foreign records included, before anything more is decided there. This
  detects a second writer; fencing it takes Kafka transactions.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ...core.partitioning import partition_for
from .io import Delivered, Incoming, Outgoing, PartitionReader

log = logging.getLogger(__name__)

Restore = Callable[[int, list[Incoming]], "Awaitable[None] | None"]
CaughtUp = Callable[[int, int], "Awaitable[None] | None"]


class PartitionOwner:
    """Readiness, catch-up, homes and journal ends of one definition's partitions.

    Args:
        what: The definition, for logs (``"workflow enrich"``).
        journal: The journal topic (None for a kind without one: no catch-up, no checks).
        partitions: The app's partition count.
        reader: Reads journal partitions outside the consumer group.
        applied: ``applied(partition)``: the next journal offset the kind's store holds.
        forget: ``forget(partition)``: drop what memory holds of the partition; called
            before its catch-up reads the journal.
        restore: ``restore(partition, chunk)``: apply journal records the store lacks.
        caught_up: ``caught_up(partition, end)``: the journal is applied up to ``end``;
            the partition is ready (the kind may replay and write).
        catch_up: Replaces the journal catch-up (``catch_up(partition)``) for kinds whose
            recovery reads more than a journal.
        on_foreign: ``on_foreign(partition)``: someone else wrote the journal partition;
            forget its instances (the next ``ensure_ready`` catches it up again).
        on_recovered: ``on_recovered(partition, seconds)``: a catch-up ended and took that
            long (``Metrics.recovery``).
        settle: Awaited before a catch-up reads the journal's end: the agent's journal writes
            still in flight have landed (or failed) by then.
        foreign_writers: Check that the journal's acknowledged writes land back to back
            (``settle``). Off when the worker writes in transactions: a zombie's writes
            are fenced then, and each commit marker takes an offset after our records.
    """

    def __init__(
        self,
        what: str,
        *,
        journal: str | None,
        partitions: int,
        reader: PartitionReader | None = None,
        applied: Callable[[int], int | None] = lambda partition: None,
        forget: Callable[[int], None] | None = None,
        restore: Restore | None = None,
        caught_up: CaughtUp | None = None,
        catch_up: Callable[[int], Awaitable[None]] | None = None,
        on_foreign: Callable[[int], None] | None = None,
        on_recovered: Callable[[int, float], None] | None = None,
        foreign_writers: bool = True,
        settle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.what = what
        self.journal = journal
        self.partitions = partitions
        self._reader = reader
        self._applied = applied
        self._forget = forget
        self._restore = restore
        self._caught_up = caught_up
        self._custom_catch_up = catch_up
        self._on_foreign = on_foreign
        self._on_recovered = on_recovered
        self._check_writers = foreign_writers
        self._settle = settle
        self._ready: set[int] = set()
        # One catch-up per partition at a time: an eager one started on assignment and a
        # batch that arrives meanwhile must not both apply the journal.
        self._catching: dict[int, asyncio.Lock] = {}
        self._journal_end: dict[int, int] = {}  # next offset of each journal partition
        # murmur2 in Python costs microseconds, and one input asks for its instance's
        # partition several times (records, statuses, effects, readiness).
        self.home: Callable[[str], int] = functools.lru_cache(maxsize=65_536)(
            functools.partial(partition_for, partitions=partitions)
        )

    # -- readiness -----------------------------------------------------------------------

    def is_ready(self, partition: int) -> bool:
        return partition in self._ready

    @property
    def owns_any(self) -> bool:
        """Whether some partition is ready: its records are being decided."""
        return bool(self._ready)

    async def ensure_ready(self, partitions: Iterable[int]) -> None:
        """Catch up, in partition order, each of ``partitions`` not ready yet.

        Concurrent callers for one partition wait for the first one's catch-up.
        """
        for partition in sorted(set(partitions) - self._ready):
            lock = self._catching.setdefault(partition, asyncio.Lock())
            async with lock:
                if partition not in self._ready:
                    await self.catch_up(partition)

    async def catch_up(self, partition: int) -> None:
        """Bring ``partition`` up to date with the journal now, then mark it ready.

        Prefer ``ensure_ready``, which never runs two catch-ups of a partition at once.
        """
        began = time.perf_counter()
        await self._catch_up(partition)
        if self._on_recovered is not None:
            self._on_recovered(partition, time.perf_counter() - began)

    async def _catch_up(self, partition: int) -> None:
        if self._forget is not None:
            self._forget(partition)
        if self._custom_catch_up is not None:
            await self._custom_catch_up(partition)
            self._ready.add(partition)
            return
        if self._settle is not None:
            # Journal records produced before the partition was revoked may still be on their
            # way (a broker outage): their end must be read after they land, or the instances
            # replay without them and redo a step (a child's token was seen drawn twice).
            await self._settle()
        end = await self._read_journal(partition) if self.journal is not None else 0
        self._journal_end[partition] = end
        self._ready.add(partition)
        if self._caught_up is not None:
            await _maybe(self._caught_up(partition, end))

    def revoke(self, partitions: Iterable[int]) -> None:
        """Forget ``partitions``: they must be caught up again before their next record."""
        for partition in partitions:
            self._ready.discard(partition)
            self._journal_end.pop(partition, None)

    async def _read_journal(self, partition: int) -> int:
        assert self.journal is not None and self._reader is not None
        low, high = await self._reader.watermarks(self.journal, partition)
        start = max(self._applied(partition) or 0, low)
        if start < high:
            log.info("restoring %s partition %d from the journal: offsets %d..%d",
                     self.what, partition, start, high)
            async for chunk in self._reader.read(self.journal, partition, start, high):
                if self._restore is not None:
                    await _maybe(self._restore(partition, chunk))
        return high

    # -- homes ---------------------------------------------------------------------------

    def forward(self, record: Incoming, instance_id: str) -> Outgoing | None:
        """Return ``record`` re-addressed to its instance's home partition, or None if home.

        A producer with another partitioner (or none: a missing key) put it elsewhere; it
        is decided only where its instance lives, after the records already there.
        """
        home = self.home(instance_id)
        if home == record.partition:
            return None
        return Outgoing(record.topic, record.key, record.value, home, tuple(record.headers.items()))

    # -- journal ends --------------------------------------------------------------------

    def settle(self, delivered: Sequence[Delivered]) -> dict[int, int]:
        """Check acknowledged journal writes; return the new journal end per partition.

        Partitions not ready (revoked, or being caught up) are left out: their store offset
        must not move past records nobody has read yet. A partition whose write did not
        start where the last one ended had another writer: it is left out too, marked not
        ready and handed to ``on_foreign``.
        """
        counts: Counter[int] = Counter()
        ends: dict[int, int] = {}
        unknown: set[int] = set()
        for position in delivered:
            if position.topic != self.journal:
                continue
            if position.offset is None:
                unknown.add(position.partition)
                continue
            counts[position.partition] += 1
            ends[position.partition] = max(ends.get(position.partition, 0), position.offset + 1)
        for partition in unknown:
            # A write Kafka stored without saying where (Delivered): the end is not known,
            # so the store's offset stays behind (a catch-up reads these records again and
            # finds them stored) and the next write is not checked against a guess.
            log.warning("%s: Kafka acknowledged journal records of partition %d without their "
                        "offsets (an idempotent retry after a leader change); the store's journal "
                        "offset stays where it was until the next write", self.what, partition)
            ends.pop(partition, None)
            self._journal_end.pop(partition, None)
        for partition, end in list(ends.items()):
            if partition not in self._ready:
                del ends[partition]
                continue
            expected = self._journal_end.get(partition)
            first = end - counts[partition]
            if self._check_writers and expected is not None and first != expected:
                log.warning("%s: journal partition %d moved under us: it has records this worker "
                            "did not write (offsets %d..%d); recovering the partition again",
                            self.what, partition, expected, first)
                del ends[partition]
                self.revoke([partition])
                if self._on_foreign is not None:
                    self._on_foreign(partition)
            else:
                self._journal_end[partition] = end
        return ends


async def _maybe(result: Awaitable[None] | None) -> None:
    if inspect.isawaitable(result):
        await result
