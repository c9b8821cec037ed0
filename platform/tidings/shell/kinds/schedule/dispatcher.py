"""The schedule dispatcher: the schedule journal -> due-time timers -> fires -> runs started.

Schedules are the aggregate ``schedule`` (``core/schedule/aggregate.py``): every decision
about a schedule, including which due times run and with what workflow and input, is made
by that aggregate from its own state and stored in its journal. The dispatcher only makes
time pass. It runs on every worker, for the partitions of the journal this worker owns,
and follows **decide -> start -> report**:

1. **Fold.** The journal's records (consumed in the app's group, like a projection's) are
   folded with the aggregate's own ``restore``/``fold`` into the same states the aggregate
   holds, stored in RocksDB (``shell/kinds/schedule/store.py``) with a due-time index entry per
   schedule. A partition taken over is first caught up from the journal (the
   ``PartitionOwner``), its timers are rebuilt from one index scan, and its pending runs are
   started again.
2. **Wake** for the earliest due time of the partitions it owns (one heap and one sleep;
   no scan of every schedule per tick) and send ``FireSchedule(due, now)`` to the schedule
   aggregate, ``now`` read from this worker's clock (the aggregate decides at its own
   worker's instant and refuses a ``now`` more than a second ahead of it). It decides the runs
   (``decide_fire``: lateness, catch-up, pauses, early fires) and stores ``RunsDecided``
   with the workflow and input each run gets. A fire that is lost or ignored is sent again
   after ``refire_after`` seconds; a repeated fire decides nothing twice.
3. **Start.** When ``RunsDecided`` comes back through the journal, each pending run's
   workflow is started with id ``{schedule}@{due}`` and input ``ScheduledRun(schedule, due,
   input)``: a ``start`` record on the workflow's inbox, acknowledged by the broker (the start
   is stored). A start of an existing id stores nothing, so starting again is safe.
4. **Report.** Then ``ReportStart(dues, tokens)`` to the aggregate, which clears the pending
   runs. ``tokens`` are the start tokens the journal stored with the runs (the worker that
   admitted the fire drew them): the aggregate refuses a report without them, so a producer
   that can write the commands topic but not read the journal cannot clear a run.

A crash between any two steps leaves the run pending in the journal; whoever owns the
partition next starts it again under the same id, and one workflow instance serves it. A run
that cannot start (its workflow is not in this app, its input does not fit the workflow's
input type) is dead-lettered with the reason and reported, so it does not block the rest.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ....codec import avro
from ....codec.payloads import load_payload, payload_of
from ....core.aggregate import AggregateInstance, restore
from ....core.limits import check_command, check_id
from ....core.partitioning import partition_for
from ....core.records import CommandEnvelope, EventEnvelope
from ....core.schedule.aggregate import FireSchedule, PendingRun, ReportStart, RunStarted
from ....core.schedule.runs import ScheduledRun, format_due, run_id
from ....core.workflow_records import WorkflowInbox
from ....errors import RecordError, SchemaError
from ...runtime.hosting import Input, Runtime, TopicPartition
from ...runtime.ids import RandomIds
from ...runtime.io import Incoming, Outgoing
from ...runtime.journaled import Journaled
from ...runtime.tracing import PRODUCER, headers_of
from .store import ScheduleStore, StoredSchedule

if TYPE_CHECKING:
    from ..aggregate.handle import AggregateHandle
    from ..workflow.handle import WorkflowHandle

log = logging.getLogger(__name__)

#: Seconds after which a fire that decided nothing visible is sent again.
REFIRE_AFTER = 10.0
#: The longest sleep: a clock that jumps is noticed within this many seconds.
MAX_SLEEP = 30.0


@dataclass(frozen=True, slots=True)
class _Timer:
    due: datetime  # the due time the fire is for (the index's hint)
    fire_at: float  # when to send it (again), seconds since the epoch


class ScheduleDispatcher:
    """Fires the schedules of the journal partitions this worker owns, and starts their runs."""

    def __init__(
        self,
        aggregate: AggregateHandle[Any, Any, Any],
        *,
        workflow: Callable[[str], WorkflowHandle],
        store: ScheduleStore,
        runtime: Runtime,
        refire_after: float = REFIRE_AFTER,
    ) -> None:
        self._definition = aggregate.definition
        self._topics = aggregate.topics
        # A fire or report command per schedule: ids without a system call each (runtime/ids.py).
        self._ids = RandomIds()
        self._workflow = workflow
        self._store = store
        self._runtime = runtime
        self._publisher = runtime.publisher
        self._clock = runtime.clock
        self._refire_after = refire_after
        self.journaled = Journaled(
            runtime, "schedule-dispatcher", self._definition.name, what="schedule dispatcher",
            journal=aggregate.topics.events, applied=store.offset, forget=self._forget,
            restore=self._restore_chunk, caught_up=self._caught_up,
        )
        self.owner = self.journaled.owner
        self._next: dict[int, int] = {}  # next journal offset to apply, per ready partition
        self._timers: dict[int, dict[str, _Timer]] = {}
        self._heap: list[tuple[float, str, int]] = []  # (fire_at, id, partition); stale entries skipped
        self._started: set[tuple[str, datetime]] = set()  # starts stored, report not yet folded
        self._wake: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None
        # Schedules with runs to start, taken by the starter task in one go: the journal's
        # consumer never waits for a start's acknowledgement, and a burst of runs due
        # together is started in few produce batches.
        self._to_start: dict[str, StoredSchedule] = {}
        self._start_wake: asyncio.Event | None = None
        self._starter: asyncio.Task[None] | None = None

    # -- the hosting seam ----------------------------------------------------------------

    @property
    def inputs(self) -> Sequence[Input]:
        # One batch at a time: each batch's folds must see the previous one's.
        return [Input("schedule-dispatcher", (self._topics.events,), self._start, max_in_flight=1)]

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Catch each new journal partition up at once: its timers must run even if no
        record ever arrives on it again."""
        mine = sorted(p for topic, p in partitions if topic == self._topics.events)
        if not mine:
            return
        self._ensure_loop()
        task = asyncio.create_task(self._ready(mine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # Returns once caught up: /readyz waits for it (shell/runtime/readiness.py). A
        # close() cancels the task, and this wait with it.
        await task

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        mine = [p for topic, p in partitions if topic == self._topics.events]
        self.owner.revoke(mine)
        for partition in mine:
            self._forget(partition)

    def close(self) -> None:
        for task in (*self._tasks, *(t for t in (self._loop, self._starter) if t is not None)):
            task.cancel()
        self._store.close()

    # -- the journal -----------------------------------------------------------------------

    async def _ready(self, partitions: list[int]) -> None:
        while True:
            try:
                await self.owner.ensure_ready(partitions)
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Kafka or RocksDB: try again, the timers need it
                log.exception("schedule dispatcher: catching up partitions %s failed; trying again in 5 s",
                              partitions)
                await asyncio.sleep(5.0)

    async def _start(self, batch: Sequence[Incoming]) -> Callable[[], Awaitable[None]]:
        self._ensure_loop()
        await self.owner.ensure_ready({record.partition for record in batch})
        changed: dict[str, StoredSchedule] = {}
        offsets: dict[int, int] = {}
        for record in batch:
            partition = record.partition
            if not self.owner.is_ready(partition) or record.offset < self._next.get(partition, 0):
                continue  # revoked meanwhile, or applied before a crash
            self._apply(partition, record, changed)
            self._next[partition] = offsets[partition] = record.offset + 1
        self._store.write(changed, offsets)
        self._index(changed.values())
        self._queue_starts(changed.values())
        return _nothing

    def _restore_chunk(self, partition: int, chunk: list[Incoming]) -> None:
        changed: dict[str, StoredSchedule] = {}
        for record in chunk:
            self._apply(partition, record, changed)
        if chunk:
            self._store.write(changed, {partition: chunk[-1].offset + 1})

    async def _caught_up(self, partition: int, end: int) -> None:
        self._next[partition] = end
        self._store.write({}, {partition: end})
        timers = self._timers[partition] = {}
        pending: list[StoredSchedule] = []
        for schedule_id, entry in self._store.index(partition):
            if entry.next_due is not None:
                timers[schedule_id] = self._push(partition, schedule_id, entry.next_due)
            if entry.pending:
                loaded = self._store.load(schedule_id)
                if loaded is not None:
                    pending.append(StoredSchedule(schedule_id, partition, *loaded))
        log.info("schedule dispatcher: partition %d ready, %d schedules due later, %d with runs to start",
                 partition, len(timers), len(pending))
        self._wakeup()
        self._queue_starts(pending)

    def _apply(self, partition: int, record: Incoming, changed: dict[str, StoredSchedule]) -> None:
        """Fold one journal record into ``changed``; a record the aggregate would skip is skipped."""
        try:
            event = avro.decode_as(record.value or b"", EventEnvelope)
            schedule_id = event.aggregate_id
            if self.owner.home(schedule_id) != partition:
                raise SchemaError(f"an event of {schedule_id[:100]!r} on partition {partition}, "
                                  "which is not its home partition")
            value = load_payload(event.type, event.payload, self._definition.event_types)
            current = changed.get(schedule_id) or self._stored(partition, schedule_id)
            instance = AggregateInstance(schedule_id, current.version, current.state, current.state)
            restored = restore(self._definition, instance, event, value)
        except Exception as exc:  # noqa: BLE001 - the aggregate's own catch-up skips it too
            log.error("schedule dispatcher skips journal record %s/%d@%d: %s: %s", record.topic,
                      record.partition, record.offset, type(exc).__name__, exc)
            return
        if restored is None:
            return  # an applied or out-of-order version: not part of the schedule's history
        if isinstance(value, RunStarted):
            self._started.difference_update((schedule_id, due) for due in value.dues)
        changed[schedule_id] = StoredSchedule(schedule_id, partition, restored.version, restored.state)

    def _stored(self, partition: int, schedule_id: str) -> StoredSchedule:
        loaded = self._store.load(schedule_id)
        if loaded is None:
            return StoredSchedule(schedule_id, partition, 0, self._definition.initial)
        return StoredSchedule(schedule_id, partition, *loaded)

    def _forget(self, partition: int) -> None:
        self._next.pop(partition, None)
        self._timers.pop(partition, None)  # heap entries of the partition are skipped as stale
        self._started = {(s, due) for s, due in self._started if self.owner.home(s) != partition}

    # -- timers ----------------------------------------------------------------------------

    def _index(self, schedules: Iterable[StoredSchedule]) -> None:
        for schedule in schedules:
            timers = self._timers.get(schedule.partition)
            if timers is None:
                continue  # revoked meanwhile
            entry = schedule.entry
            current = timers.get(schedule.schedule_id)
            if entry.next_due is None:
                timers.pop(schedule.schedule_id, None)
            elif current is None or current.due != entry.next_due:
                timers[schedule.schedule_id] = self._push(schedule.partition, schedule.schedule_id, entry.next_due)
                self._wakeup()

    def _push(self, partition: int, schedule_id: str, due: datetime, fire_at: float | None = None) -> _Timer:
        timer = _Timer(due, due.timestamp() if fire_at is None else fire_at)
        heapq.heappush(self._heap, (timer.fire_at, schedule_id, partition))
        return timer

    def _wakeup(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _ensure_loop(self) -> None:
        if self._loop is None or self._loop.done():
            self._wake = asyncio.Event()
            self._loop = asyncio.create_task(self._run_timers())
        if self._starter is None or self._starter.done():
            self._start_wake = asyncio.Event()
            self._starter = asyncio.create_task(self._run_starts())
            if self._to_start:
                self._start_wake.set()

    async def _run_timers(self) -> None:
        assert self._wake is not None
        while True:
            try:
                fires = self._due_now(self._clock())
                if fires:
                    await self._fire(fires)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a failed produce: the timers fire again later
                log.exception("schedule dispatcher: sending fires failed; they are sent again in %g s",
                              self._refire_after)
            self._wake.clear()
            delay = MAX_SLEEP if not self._heap else min(MAX_SLEEP, self._heap[0][0] - self._clock())
            if delay > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                except TimeoutError:
                    pass

    def _due_now(self, now: float) -> list[tuple[str, int, datetime]]:
        """Pop every timer due at ``now``; each is set to fire again after ``refire_after``."""
        fires: list[tuple[str, int, datetime]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            fire_at, schedule_id, partition = heapq.heappop(heap)
            timers = self._timers.get(partition)
            timer = None if timers is None else timers.get(schedule_id)
            if timers is None or timer is None or timer.fire_at != fire_at:
                continue  # replaced, removed or revoked since it was pushed
            fires.append((schedule_id, partition, timer.due))
            timers[schedule_id] = self._push(partition, schedule_id, timer.due, now + self._refire_after)
        live = sum(len(timers) for timers in self._timers.values())
        if len(heap) > 2 * live + 1024:
            # Stale entries pile up when schedules change often: keep the heap near the live count.
            self._heap = [(t.fire_at, s, p) for p, timers in self._timers.items() for s, t in timers.items()]
            heapq.heapify(self._heap)
        return fires

    async def _fire(self, fires: list[tuple[str, int, datetime]]) -> None:
        now = datetime.fromtimestamp(self._clock(), UTC)
        records = [self._command(schedule_id, partition, FireSchedule(due=due, now=now))
                   for schedule_id, partition, due in fires]
        await self._publisher.publish(records)

    # -- runs ------------------------------------------------------------------------------

    def _queue_starts(self, schedules: Iterable[StoredSchedule]) -> None:
        """Hand the schedules with pending runs to the starter task (stored in RocksDB already:
        a crash before they start leaves them pending for the next catch-up)."""
        for schedule in schedules:
            if schedule.state.pending:
                self._to_start[schedule.schedule_id] = schedule
        if self._to_start and self._start_wake is not None:
            self._start_wake.set()

    async def _run_starts(self) -> None:
        assert self._start_wake is not None
        while True:
            await self._start_wake.wait()
            self._start_wake.clear()
            batch, self._to_start = self._to_start, {}
            mine = [s for s in batch.values() if self.owner.is_ready(s.partition)]
            try:
                await self._start_runs(mine)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Kafka refused: try again; a start is idempotent
                log.exception("schedule dispatcher: starting %d schedules' runs failed; trying again in 1 s",
                              len(mine))
                for schedule in mine:
                    self._to_start.setdefault(schedule.schedule_id, schedule)
                await asyncio.sleep(1.0)
                self._start_wake.set()

    async def _start_runs(self, schedules: Iterable[StoredSchedule]) -> None:
        """Start every pending run not started yet, then report them to the aggregate."""
        starts: list[Outgoing] = []
        letters: list[Outgoing] = []
        reports: list[tuple[StoredSchedule, list[datetime], set[str]]] = []
        for schedule in schedules:
            dues = []
            tokens: set[str] = set()
            for run in schedule.state.pending:
                if (schedule.schedule_id, run.due) in self._started:
                    continue
                try:
                    starts.append(self._start_record(schedule.schedule_id, run))
                except Exception as exc:  # noqa: BLE001 - a run that can never start must not block the rest
                    letters.append(self._unstartable(schedule, run, exc))
                dues.append(run.due)
                if run.token:
                    tokens.add(run.token)
            if dues:
                reports.append((schedule, dues, tokens))
        if not reports:
            return
        await self._publisher.publish(starts + letters)  # the starts are stored: now report them
        for schedule, dues, _ in reports:
            self._started.update((schedule.schedule_id, due) for due in dues)
        await self._report(reports)

    async def _report(self, reports: list[tuple[StoredSchedule, list[datetime], set[str]]]) -> None:
        # The runs' start tokens, as the journal stored them: the aggregate clears a pending
        # run only for a report that carries its token (a client cannot read the journal).
        await self._publisher.publish([
            self._command(schedule.schedule_id, schedule.partition,
                          ReportStart(dues=tuple(dues), tokens=tuple(sorted(tokens))))
            for schedule, dues, tokens in reports
        ])

    def _start_record(self, schedule_id: str, run: PendingRun) -> Outgoing:
        workflow = self._workflow(run.workflow)
        # A schedule created by a raw producer may have an id too long for its run ids.
        instance_id = check_id(run_id(schedule_id, run.due), "run id")
        try:
            text, _ = workflow.definition.codec.convert(
                ScheduledRun(schedule_id, run.due, run.input), workflow.definition.input_type
            )
        except ValueError as exc:
            raise SchemaError(f"the input does not fit workflow {run.workflow!r}'s input type: {exc}") from exc
        request = WorkflowInbox(
            f"start:{instance_id}", instance_id, "start", int(self._clock() * 1000), payload=text.encode(),
        )
        partition = partition_for(instance_id, workflow.context.partitions)
        tracing = self._runtime.tracing
        if tracing is None:
            return Outgoing(workflow.topics.inbox, instance_id.encode(), avro.encode(request), partition)
        # Each run is a trace of its own: this producer span is the parent of the run's span.
        span = tracing.start(f"schedule {run.workflow}", None, kind=PRODUCER,
                             attributes={"tidings.schedule_id": schedule_id, "tidings.workflow": run.workflow,
                                         "tidings.instance_id": instance_id, "tidings.due": format_due(run.due),
                                         "messaging.destination.name": workflow.topics.inbox})
        carrier = tracing.carrier(span)
        tracing.end(span)
        request = replace(request, metadata=carrier)
        return Outgoing(workflow.topics.inbox, instance_id.encode(), avro.encode(request), partition,
                        headers_of(carrier))

    def _unstartable(self, schedule: StoredSchedule, run: PendingRun, error: Exception) -> Outgoing:
        instance_id = run_id(schedule.schedule_id, run.due)
        log.error("schedule %s: the run %s cannot start, dead-lettered: %s", schedule.schedule_id[:100],
                  instance_id[:120], error)
        value = json.dumps({"schedule": schedule.schedule_id, "due": format_due(run.due),
                            "workflow": run.workflow, "input": run.input}).encode()
        record = Incoming(self._topics.events, schedule.partition, -1, instance_id.encode(), value,
                          timestamp_ms=int(self._clock() * 1000))
        reason = f"schedule {schedule.schedule_id!r}: the run {instance_id!r} cannot start: {error}"
        return self._runtime.dead_letter(record, RecordError(reason))

    def _command(self, schedule_id: str, partition: int, command: FireSchedule | ReportStart) -> Outgoing:
        type_name, payload = payload_of(command)
        envelope = check_command(CommandEnvelope(
            command_id=self._ids.hex(),
            correlation_id=schedule_id,
            aggregate_id=schedule_id,
            type=type_name,
            payload=payload,
            timestamp_ms=int(self._clock() * 1000),
        ))
        return Outgoing(self._topics.commands, schedule_id.encode(), avro.encode(envelope), partition)


async def _nothing() -> None:
    return None


__all__ = ["REFIRE_AFTER", "ScheduleDispatcher"]
