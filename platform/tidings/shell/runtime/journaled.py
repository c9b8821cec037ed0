"""What every journaled kind's agent repeats, kept once: a kind writes only its decisions and its store.

The model is quix-streams' ``BatchingSink``: the plumbing lives here, and a kind's agent
(saga, workflow, orchestration, aggregate, the schedule dispatcher) composes it:

- ``Journaled``: the ``PartitionOwner`` wired to the worker's ``Runtime`` (journal reader,
  partition count, foreign-writer checks off under transactions, recovery metrics, the
  ``tidings_instances`` gauge), the agent's lock, its background tasks, catching up
  assigned partitions at once, and *recover-again* (someone else wrote a journal
  partition: drop it and catch it up again, foreign records included).
- ``Backstop``: the per-record backstop. Whatever one record (or user code run on it)
  raises becomes that record's dead letter through ``Runtime.dead_letter``, and the records
  after it are decided in order, as if it had not been there.
- ``OwnInputs``: the agent's own inputs (due timers, activity results), decided in
  batches under its lock.
- ``CommitQueue``: a round of decisions is a *commit*. Its journal records are produced at
  once; one task completes commits in the order they were made (awaits the acks, then the
  kind's durable writes, then what waited for them), so nothing that depends on a journal
  record goes out before it, and a crash in between leaves a journal tail the next
  catch-up finds.
- ``EventRouter``: an agent over other kinds' events topics that re-addresses each record
  to an inbox partition of this kind (``route``), dead-lettering what does not route.
- ``Agents``: several agents of one definition (a router and the agent it feeds) as the
  one ``Agent`` the worker hosts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ...errors import DecodeError, RecordError, RecordRejected, SchemaError
from .hosting import Agent, Input, Runtime, TopicPartition
from .io import Delivered, Incoming, Outgoing, PartitionReader
from .owner import CaughtUp, PartitionOwner, Restore
from .pipeline import Finish, stop_worker, stop_worker_on_failure

log = logging.getLogger(__name__)

C = TypeVar("C")
T = TypeVar("T")


def first_per_seq(
    chunks: Iterable[Iterable[Incoming]], instance_id: str, decode: Callable[[Incoming, int], T | None]
) -> list[T]:
    """Return one instance's journal out of the records of its partition, in seq order.

    Its records are keyed ``{instance_id}/{seq}`` ("a/b/3" is seq 3 of instance "a/b",
    never of "a"). Only the partition's owner writes there, so each seq appears once; should
    a zombie have written a seq too, the first record of that seq in offset order is kept,
    as a worker's catch-up keeps it. A tombstone (null value) at a seq removes it.

    Args:
        chunks: The partition's records in offset order (a range reader's chunks).
        instance_id: The instance.
        decode: ``decode(record, seq)``: the record's entry, or None to skip it (it does not
            decode, or its value does not match its key).
    """
    prefix = f"{instance_id}/".encode("utf-8", "surrogatepass")
    by_seq: dict[int, T] = {}
    for chunk in chunks:
        for record in chunk:
            key = record.key or b""
            seq_text = key[len(prefix):]
            if not key.startswith(prefix) or not seq_text.isdigit():
                continue
            seq = int(seq_text)
            if record.value is None:
                # A tombstone: the record at this seq is no longer history (a workflow run
                # that continued as new). Compaction drops both later; until then, skip both.
                by_seq.pop(seq, None)
                continue
            if seq in by_seq:
                continue
            entry = decode(record, seq)
            if entry is not None:
                by_seq[seq] = entry
    return [by_seq[seq] for seq in sorted(by_seq)]


class Journaled:
    """The owner wiring, lock, tasks and recover-again of one journaled kind's agent.

    Args:
        runtime: What the worker gave the agent.
        kind: The kind, for metrics (``"saga"``, ``"schedule-dispatcher"``).
        name: The definition's name.
        what: How logs name the agent; ``"{kind} {name}"`` by default.
        journal: The journal topic the owner catches partitions up from (None: the kind's
            ``catch_up`` reads what it needs itself).
        instances: ``tidings_instances`` on scrape (another thread: copy, then count).
        drop: ``drop(partitions)``: forget everything of ``partitions`` (revoked, or
            written by someone else). Given, a foreign write recovers the partition again
            at once (``recover_again``); otherwise ``on_foreign`` is called.
        ready: Makes partitions ready under the lock; ``owner.ensure_ready`` by default
            (the workflow agent first follows their replies).
        applied, forget, restore, caught_up, catch_up, on_foreign, settle: As ``PartitionOwner``.
        reader: Overrides the runtime's journal reader (tests over an in-memory Kafka).
    """

    def __init__(
        self,
        runtime: Runtime,
        kind: str,
        name: str,
        *,
        what: str | None = None,
        journal: str | None,
        instances: Callable[[], dict[str, int]] | None = None,
        drop: Callable[[set[int]], None] | None = None,
        ready: Callable[[Collection[int]], Awaitable[None]] | None = None,
        applied: Callable[[int], int | None] = lambda partition: None,
        forget: Callable[[int], None] | None = None,
        restore: Restore | None = None,
        caught_up: CaughtUp | None = None,
        catch_up: Callable[[int], Awaitable[None]] | None = None,
        on_foreign: Callable[[int], None] | None = None,
        reader: PartitionReader | None = None,
        settle: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.runtime = runtime
        self.what = what or f"{kind} {name}"
        self._drop = drop
        self._ready = ready
        #: Reads the journal's partitions (and any other topic a catch-up reads).
        self.reader = reader or (runtime.reader() if journal is not None else None)
        self.owner = PartitionOwner(
            self.what,
            journal=journal,
            partitions=runtime.partitions,
            reader=self.reader,
            # Transactions fence a second writer; their commit markers take offsets too.
            foreign_writers=not runtime.exactly_once,
            applied=applied,
            forget=forget,
            restore=restore,
            caught_up=caught_up,
            catch_up=catch_up,
            on_foreign=self.recover_again if drop is not None else on_foreign,
            on_recovered=runtime.metrics.recovery(kind, name),
            settle=settle,
        )
        if instances is not None:
            runtime.metrics.register_instances(kind, name, instances)
        # One lock per agent: its batches, its own inputs (timers, results) and catch-ups
        # decide one at a time, so each sees what the one before it decided.
        self.lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    # -- readiness -------------------------------------------------------------------------

    async def ready(self, partitions: Collection[int]) -> None:
        """Make ``partitions`` ready (the caller holds the lock)."""
        if self._ready is not None:
            await self._ready(partitions)
        else:
            await self.owner.ensure_ready(partitions)

    async def ready_now(self, partitions: Collection[TopicPartition], topic: str) -> None:
        """Catch each assigned partition of ``topic`` up at once.

        Eagerly, not at its first record: running instances have timers, commands and
        activities to resume even when nobody writes to them. An agent that owns no ready
        partition yet (a worker's start, a restart after a crash) catches them all up under
        one hold of the lock: nothing else waits for it, and each partition's replayed
        activities would otherwise wait for the results of the ones before it to be
        decided (a restart with 2,000 in flight: the last of four partitions began 0.3 s
        later). An agent already deciding other partitions takes the lock per partition,
        so their batches go on between two catch-ups.
        """
        mine = sorted(p for name, p in partitions if name == topic)
        if not self.owner.owns_any:
            async with self.lock:
                await self.ready(mine)
            return
        for partition in mine:
            async with self.lock:
                await self.ready([partition])

    def recover_again(self, partition: int) -> None:
        """Someone else wrote ``partition``'s journal (``PartitionOwner.settle``): drop what
        this worker knows of it and catch it up again, foreign records included (detection,
        not fencing: docs/workflows-hosted.md)."""
        assert self._drop is not None
        self._drop({partition})

        async def recover() -> None:
            async with self.lock:
                await self.ready([partition])

        task = asyncio.ensure_future(recover())
        task.add_done_callback(stop_worker_on_failure(f"recovering {self.what}"))

    # -- tasks -----------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    def spawn(self, *loops: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run the agent's background loops; one that fails stops the worker (restarted)."""
        for loop in loops:
            task = asyncio.ensure_future(loop())
            task.add_done_callback(stop_worker_on_failure(f"a task of {self.what}"))
            self._tasks.append(task)

    def close(self) -> None:
        """Cancel the background loops (the worker is stopping)."""
        for task in self._tasks:
            task.cancel()

    def now_ms(self) -> int:
        return int(self.runtime.clock() * 1000)


class Backstop:
    """Turns what one record raises into its dead letter, so the records after it go on.

    Args:
        runtime: Dead letters go through ``runtime.dead_letter`` (counted, bounded).
        what: How logs name the agent.
        wrap: The ``RecordError`` an exception that is not one becomes (a bug, or user
            code raising): ``wrap(f"{prefix}{type}: {message}")``.
        prefix: Says where it failed, before the exception.
    """

    def __init__(
        self,
        runtime: Runtime,
        what: str,
        *,
        wrap: Callable[[str], RecordError] = DecodeError,
        prefix: str = "",
    ) -> None:
        self._runtime = runtime
        self.what = what
        self._wrap = wrap
        self._prefix = prefix

    def each(
        self, records: Iterable[Incoming], decide: Callable[[Incoming], None], letters: list[Outgoing]
    ) -> None:
        """Decide each of ``records`` in order; add the dead letter of each that raised to ``letters``."""
        for record in records:
            try:
                decide(record)
            except Exception as exc:  # noqa: BLE001 - the backstop: no record stops the agent
                letters.append(self.letter(record, exc))

    def letter(self, record: Incoming, exc: Exception) -> Outgoing:
        """Return the dead letter of ``record``, which raised ``exc`` (logged once)."""
        error = exc if isinstance(exc, RecordError) else self._wrap(f"{self._prefix}{type(exc).__name__}: {exc}")
        # A RecordError is the record's fault and says why; anything else is a bug or
        # user code, whose traceback is what a human needs.
        log.error("%s dead-letters %s/%d@%d: %s", self.what, record.topic, record.partition, record.offset,
                  error, exc_info=None if error is exc else exc)
        return self._runtime.dead_letter(record, error)


class OwnInputs(Generic[T]):
    """The agent's own inputs (a due timer, an activity's result), decided in batches under its lock.

    A burst (a thousand timers due together) becomes a few decisions, each one commit,
    instead of one each; taken in arrival order, so an instance sees its inputs in order.

    Args:
        lock: The agent's lock (``Journaled.lock``): inputs are decided between its batches.
        decide: ``decide(items)``: decide a batch of inputs (under the lock).
        most: The most inputs one batch takes.
    """

    def __init__(self, lock: asyncio.Lock, decide: Callable[[list[T]], None], *, most: int = 2000) -> None:
        self._lock = lock
        self._decide = decide
        self._most = most
        self._queue: asyncio.Queue[T] | None = None
        self._deciding = False

    @property
    def is_open(self) -> bool:
        return self._queue is not None

    @property
    def idle(self) -> bool:
        """Nothing queued, and no batch taken and not yet decided."""
        return not self._deciding and (self._queue is None or self._queue.empty())

    def open(self) -> None:
        """Take inputs from now on (the agent's tasks start; on the loop)."""
        self._queue = asyncio.Queue()

    def put(self, item: T) -> None:
        """Queue an input (after ``open``)."""
        assert self._queue is not None
        self._queue.put_nowait(item)

    async def run(self) -> None:
        """Decide what comes in, forever (the agent's task)."""
        assert self._queue is not None
        queue = self._queue
        while True:
            items = [await queue.get()]
            self._deciding = True
            while not queue.empty() and len(items) < self._most:
                items.append(queue.get_nowait())
            try:
                async with self._lock:
                    self._decide(items)
            finally:
                self._deciding = False


@dataclass(slots=True)
class Pending(Generic[C]):
    """A commit whose journal records are produced, waiting for the committer."""

    commit: C
    delivery: Awaitable[list[Delivered]]
    done: asyncio.Future[None]


class CommitQueue(Generic[C]):
    """Produces each commit's journal records at once and completes commits in order, on one task.

    Args:
        runtime: Its publisher produces the journal records.
        what: How logs name the agent.
        durable: ``durable(pending)`` awaits each commit's delivery and writes what must be
            stored before anything depends on it (dead letters, commands, RocksDB). What
            it raises stops the worker: Kafka or RocksDB failed, and a restart recovers.
        completed: ``completed(commit)``: it is durable; carry out what waited for it.
        together: Complete every commit waiting at once in one ``durable`` call (under
            exactly-once they share one transaction commit); else one at a time.
    """

    def __init__(
        self,
        runtime: Runtime,
        what: str,
        *,
        durable: Callable[[Sequence[Pending[C]]], Awaitable[None]],
        completed: Callable[[C], None],
        together: bool = False,
    ) -> None:
        self._publisher = runtime.publisher
        self._what = what
        self._durable = durable
        self._completed = completed
        self._together = together
        self._queue: asyncio.Queue[Pending[C]] | None = None

    def submit(self, commit: C, journal: Sequence[Outgoing]) -> asyncio.Future[None]:
        """Produce ``journal`` now; queue ``commit``; return what resolves once it completed."""
        if self._queue is None:
            self._queue = asyncio.Queue()
        delivery = self._publisher.send(journal)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(Pending(commit, delivery, done))
        return done

    async def run(self) -> None:
        """Complete commits in submission order, forever (the agent's committer task)."""
        if self._queue is None:
            self._queue = asyncio.Queue()
        queue = self._queue
        while True:
            waiting = [await queue.get()]
            while self._together and not queue.empty():
                waiting.append(queue.get_nowait())
            try:
                await self._durable(waiting)
            except Exception:  # noqa: BLE001 - Kafka or RocksDB failed: restart the worker
                stop_worker(f"committing {self._what} records")
            for pending in waiting:
                self._completed(pending.commit)
                if not pending.done.done():
                    pending.done.set_result(None)


@dataclass(frozen=True, slots=True)
class EventSource:
    """One aggregate's events topic another kind reads, with the types to decode its payloads."""

    aggregate: str
    topic: str
    event_types: Mapping[str, type]


class EventRouter:
    """Re-addresses the stored events of other kinds' topics to this kind's inbox partitions.

    It keeps no state: its input offsets are committed once the routed copies are
    acknowledged, and a re-delivered event is routed again (the instance drops the copy).

    Args:
        runtime: Its publisher, and ``runtime.dead_letter`` for what does not route.
        kind, name: Name the router's input ``{kind}-{name}-router``.
        sources: The events topics it reads.
        route: ``route(record)``: the routed copy, or None to skip it; a raise dead-letters it.
    """

    def __init__(
        self,
        runtime: Runtime,
        kind: str,
        name: str,
        *,
        sources: Iterable[str],
        route: Callable[[Incoming], Outgoing | None],
    ) -> None:
        self.name = name
        self._kind = kind
        self.source_topics = list(sources)
        self._route = route
        self._runtime = runtime
        self._backstop = Backstop(runtime, f"{kind} {name}")

    @property
    def inputs(self) -> Sequence[Input]:
        return [Input(f"{self._kind}-{self.name}-router", tuple(self.source_topics), self.start)]

    async def start(self, batch: Sequence[Incoming]) -> Finish:
        """Route ``batch`` and start producing; return what waits for the acks."""
        routed: list[Outgoing] = []
        origins: list[Incoming] = []  # the source record of each routed one
        letters: list[Outgoing] = []

        def route(record: Incoming) -> None:
            outgoing = self._route(record)
            if outgoing is not None:
                routed.append(outgoing)
                origins.append(record)

        self._backstop.each(batch, route, letters)
        delivery = self._runtime.publisher.send(routed)

        async def finish() -> None:
            try:
                await delivery
            except RecordRejected as exc:
                # The routed copy is a little larger than the event: near the size limit it
                # may not fit the inbox. That event goes to the dead letters.
                for index, _, reason in exc.rejections:
                    error = SchemaError(f"the event routed to {self._kind} {self.name} was refused by Kafka: {reason}")
                    letters.append(self._runtime.dead_letter(origins[index], error))
            if letters:
                await self._runtime.publisher.publish(letters)

        return finish

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Nothing to catch up: a router keeps no state."""

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        """Nothing to forget."""

    def close(self) -> None:
        """Nothing to close: the publisher is the worker's."""


@dataclass(frozen=True)
class Agents:
    """Several agents of one definition as the one ``Agent`` the worker hosts: their inputs
    in order, and each told of assignments, revocations and the close."""

    parts: tuple[Agent, ...]

    @property
    def inputs(self) -> Sequence[Input]:
        return [input for part in self.parts for input in part.inputs]

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        for part in self.parts:
            await part.assign(partitions)

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        for part in self.parts:
            part.revoke(partitions)

    def close(self) -> None:
        for part in self.parts:
            part.close()


__all__ = ["Agents", "Backstop", "CommitQueue", "EventRouter", "EventSource", "Journaled", "OwnInputs", "Pending", "first_per_seq"]
