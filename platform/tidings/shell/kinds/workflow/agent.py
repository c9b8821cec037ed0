"""The workflow agent: inbox topic -> ``WorkflowInstance.advance`` -> journal, effects.

Every input of an instance is decided one at a time, under one lock per agent: inbox
records (start, signal, cancel, query) in pipelined batches from Faust, replies to sends
in batches from their own reader (``kinds/workflow/replies.py``), and the shell's own inputs (an
activity's result, a due timer) from a queue. Each decision becomes a *commit*:

1. the decision's journal records are produced at once (key ``{instance_id}/{seq}``, the
   instance's partition), in decision order;
2. a single committer task takes commits in that order: it waits for the broker's acks,
   sends dead letters (awaited), writes RocksDB (journal, status, running index, timers,
   offsets) in one batch, and only then carries out the effects (runs activities, arms
   timers) and publishes outcomes, statuses and replies. So no effect and no reply ever
   precedes the journal records it depends on. The one exception, an activity whose
   input cannot depend on anything unacknowledged, starts at step 1 (``_early_activities``).

On partition assignment the agent catches up with the journal topic (another worker may
have written there), then replays every RUNNING or PARKED instance of the partition and
carries out the effects replay gives: pending activities run again, timers are re-armed
with their stored due time (the time that remains). A journal record written for an inbox
record carries that record's offset in a header, so after a crash an inbox record whose
records are already journaled is skipped, never applied twice. See docs/workflows-hosted.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ....codec import avro
from ....core.workflow import (
    ActivityResult,
    ArmTimer,
    Attempt,
    CancelActivity,
    CancelTimer,
    Ended,
    InboxMessage,
    PublishOutcome,
    ReportParked,
    RunActivity,
    Started,
    DropRun,
    StepCompleted,
    StepError,
    StepAttemptFailed,
    StepFailed,
    StepStarted,
    TimerFired,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowStatus,
)
from ....core.workflow.inbox_rules import (
    AwaitEnd,
    AwaitUpdate,
    Feed,
    InboxReply,
    Refuse,
    RunQuery,
    UPDATE_KINDS,
    StoredEnd,
    answer_fed,
    answer_status,
    decide_request,
    queried_instance,
    query_reply,
)
from ....core.workflow.inbox import Start
from ....core.workflow.queries import run_query
from ....core.workflow.updates import AnswerUpdate, ReplyAddress, Update, answer_in
from ....core.workflow_records import WorkflowInbox, WorkflowJournalEntry, WorkflowStatusRecord
from ....errors import BrokerError, RecordError, RecordRejected, SchemaError
from ...runtime.hosting import Input, Runtime, TopicPartition
from ...runtime.io import Incoming, Outgoing
from ...runtime.journaled import Backstop, CommitQueue, Journaled, OwnInputs, Pending
from ...runtime.tracing import CONSUMER, TRACEPARENT, Carrier, Tracing, carrier_of
from ....core.workflow.sends import SendCommand, StopSend
from ....core.workflow.signal_sends import SendSignal, StopSignal
from .activities import DaemonPool, Skippable, ThreadedAttempts, run_attempt, runs_threaded, settle_returned
from .replies import RepliesReader
from .sends import WorkflowSends
from .children import CHILD_EFFECTS, ChildLinks
from .codec import (
    INBOX_OFFSET_HEADER,
    answer_of,
    decode_inbox,
    is_json_request,
    outcome_fields,
    outcome_fields_of,
    outcome_record,
    reply_record,
)
from .store import StoreWrite, WorkflowStore

log = logging.getLogger(__name__)


def _json_update(message: Any) -> Any:
    """A JSON request's update (or an update-with-start's): its caller is answered in JSON."""
    if isinstance(message, Update) and message.reply is not None:
        return replace(message, reply=replace(message.reply, as_json=True))
    if isinstance(message, Start) and message.update is not None:
        return replace(message, update=_json_update(message.update))
    return message

_ENDED = (WorkflowStatus.FINISHED, WorkflowStatus.FAULTED, WorkflowStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class WorkflowTopics:
    """The topics of one workflow definition."""

    inbox: str
    journal: str
    outcomes: str
    status: str
    replies: str
    deadletter: str


def _tombstoned(key: bytes | None) -> tuple[str, int] | None:
    """The instance and seq a journal tombstone's key ``{instance_id}/{seq}`` names (None: not one)."""
    instance_id, _, seq = (key or b"").decode("utf-8", "surrogatepass").rpartition("/")
    return (instance_id, int(seq)) if instance_id and seq.isdigit() else None


@dataclass(slots=True)
class _Commit:
    """What one round of decisions produced, waiting for the journal's acks."""

    journal: list[Outgoing] = field(default_factory=list)
    dead: list[Outgoing] = field(default_factory=list)  # dead letters, forwards: awaited
    links: list[Outgoing] = field(default_factory=list)  # to parents and children: awaited, may be refused
    # Outcomes and statuses: acknowledged before the store moves past the commit (at least
    # once), so a worker killed right after its store write cannot lose them: the journal's
    # catch-up, which would publish them again, starts after that write.
    kept: list[Outgoing] = field(default_factory=list)
    after: list[Outgoing] = field(default_factory=list)  # replies: published once durable, may be lost
    write: StoreWrite = field(default_factory=StoreWrite)
    effects: list[tuple[str, Any]] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)
    unsettled: Counter[str] = field(default_factory=Counter)  # see WorkflowAgent._unsettled
    ended: list[int] = field(default_factory=list)  # start times (ms) of instances whose outcome is in after


class WorkflowAgent:
    """Hosts the instances of one workflow definition on the partitions assigned here."""

    def __init__(
        self,
        definition: WorkflowDefinition,
        *,
        topics: WorkflowTopics,
        store: WorkflowStore,
        runtime: Runtime,
        cache_size: int = 10_000,
        # Sync activities mostly wait on I/O (an HTTP call, a database), and threads start on
        # demand: 64 made a restart with 2,000 pending 50 ms activities take 1.6 s on its own.
        activity_threads: int = 256,
        command_timeout: float = 30.0,
        workflows: Collection[str] | None = None,
    ) -> None:
        self.definition = definition
        # The app's workflow names: a child's start may only name one of them as its parent
        # (None: not checked).
        self._workflows = None if workflows is None else frozenset(workflows)
        self._topics = runtime.topic_check()
        self.topics = topics
        self._partitions = runtime.partitions
        self._store = store
        self._runtime = runtime
        self._exactly_once = runtime.exactly_once
        self._committed = runtime.committed
        self._publisher = runtime.publisher
        self._clock = runtime.clock
        self._cache_size = cache_size
        self._children = ChildLinks.of_inbox(topics.inbox, definition.name, runtime.partitions)
        self.journaled = Journaled(
            runtime, "workflow", definition.name, journal=topics.journal, instances=self._instances,
            drop=self._drop, ready=self._ready, applied=store.journal_offset,
            forget=self._begin_catch_up, restore=self._restore_chunk, caught_up=self._caught_up,
            settle=self._settled,
        )
        self.owner = self.journaled.owner
        self._partition_of = self.owner.home
        self._metrics = runtime.metrics
        self._backstop = Backstop(runtime, f"workflow {definition.name}",
                                  prefix="the workflow agent failed on this record: ")
        self._commits = CommitQueue(runtime, f"workflow {definition.name}", durable=self._durable,
                                    completed=self._completed, together=True)
        # When each live instance started (ms, from its Started record): its run time is
        # observed when its outcome is published. Entries go with the cached instance.
        self._started_at: dict[str, int] = {}
        # Sync activities block; the loop's default pool (cores + 4 threads) is far too small,
        # and its threads would hold a stopping worker until their attempts end.
        self._executor: concurrent.futures.Executor = DaemonPool(activity_threads, "tidings-activity")
        self._activity_threads = activity_threads
        self._lock = self.journaled.lock
        self._cache: OrderedDict[str, WorkflowInstance] = OrderedDict()
        self._inbox_applied: dict[int, int] = {}
        # Each running attempt: what cancels it (its task, or its pool future) and the attempt.
        self._activities: dict[tuple[str, str], tuple[asyncio.Future[None] | Skippable, Attempt]] = {}
        self._threaded: ThreadedAttempts[str] | None = None
        # The worker is stopping (wind_down): attempts due from now on are not started; the
        # idempotency keys of those held, for the stop's log line.
        self._winding = False
        self._held: list[str] = []
        # When each attempt that waits for its not_before is due (ms): one still waiting
        # when the worker stops has not begun, and is held at once instead of waited for.
        self._due: dict[tuple[str, str], int] = {}
        self._last_commit: asyncio.Future[None] | None = None
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._busy: Counter[str] = Counter()  # live activities and timers: not evictable
        self._dirty: Counter[str] = Counter()  # decided, not yet in RocksDB: not evictable
        # Journal records not acknowledged yet that an activity's input could come from
        # (anything but Started, StepStarted and StepAttemptFailed): while an instance has some, its new
        # activities wait for the acks (see _submit).
        self._unsettled: Counter[str] = Counter()
        # Queries waiting for the end: (request id, reply_to, answer in JSON).
        self._waiters: dict[str, list[tuple[str, str, bool]]] = {}
        # Repeats of updates the body has not answered yet, per (instance, update id): answered
        # with the first caller, whose address the journal keeps (a restart loses these: a
        # caller that repeats its update after it is found again).
        self._update_waiters: dict[tuple[str, str], list[ReplyAddress]] = {}
        self._inputs: OwnInputs[tuple[str, InboxMessage]] = OwnInputs(self._lock, self._decide_own)
        self._tracing = runtime.tracing
        # Traces on: each running attempt's span, and when each step started (kind, name,
        # ns) until it ends, for the step's span (docs/tracing.md).
        self._attempt_spans: dict[tuple[str, str], Any] = {}
        self._step_starts: dict[str, dict[str, tuple[str, str, int]]] = {}
        self._sends = WorkflowSends(self, connection=runtime.connection, command_timeout=command_timeout,
                                    group_prefix=runtime.group_prefix, tracing=runtime.tracing)
        # Replies to sends are read outside Faust, in batches (kinds/workflow/replies.py).
        self._replies = RepliesReader(runtime.connection, topics.replies, self._replied,
                                      group_prefix=runtime.group_prefix)
        self._reply_batches: asyncio.Queue[list[Incoming]] | None = None

    # -- the hosting seam ----------------------------------------------------------------

    @property
    def inputs(self) -> Sequence[Input]:
        # The replies topic (co-partitioned with the inbox) is read by self._replies for
        # the inbox partitions this worker owns: see kinds/workflow/replies.py.
        return [Input(f"workflow-{self.definition.name}", (self.topics.inbox,), self.start,
                      partitions=self._partitions)]

    async def start(self, batch: Sequence[Incoming]) -> Callable[[], Awaitable[None]]:
        """Decide a batch of inbox records; return what waits for it to be committed."""
        self._ensure_tasks()
        async with self._lock:
            await self._ready({record.partition for record in batch})
            commit = _Commit()
            now_ms = self._now_ms()
            if self._tracing is None or len(batch) == 1:
                self._backstop.each(batch, lambda record: self._inbox_record(record, commit, now_ms), commit.dead)
            else:
                # The batch is decided at once: its span links to the trace of each record
                # (a batch of one has none: the run's span is in its trace already).
                with self._tracing.span(f"workflow batch {self.definition.name}", None, kind=CONSUMER,
                                        links=(carrier_of(None, record.headers) for record in batch),
                                        attributes={"tidings.workflow": self.definition.name,
                                                    "messaging.batch.message_count": len(batch)}):
                    self._backstop.each(batch, lambda record: self._inbox_record(record, commit, now_ms),
                                        commit.dead)
            for record in batch:
                offsets = commit.write.inbox_offsets
                offsets[record.partition] = max(record.offset, offsets.get(record.partition, -1))
            done = self._submit(commit)

        async def finish() -> None:
            await done

        return finish

    async def assign(self, partitions: Collection[TopicPartition]) -> None:
        """Recover assigned inbox partitions at once: catch up, replay what is running.

        Eagerly, not at the first inbox record: running instances have timers and
        activities to resume even when nobody writes to them.
        """
        self._ensure_tasks()
        await self.journaled.ready_now(partitions, self.topics.inbox)

    def revoke(self, partitions: Collection[TopicPartition]) -> None:
        """Stop everything of revoked inbox partitions: another worker owns their instances."""
        gone = {p for topic, p in partitions if topic == self.topics.inbox}
        self._replies.unfollow(gone)
        self._drop(gone)

    async def _ready(self, partitions: Collection[int]) -> None:
        """Read the partitions' replies from their end, then catch them up (under the lock).

        In this order: recovery sends the pending commands again, and their replies must
        come after the position the replies reader starts from.
        """
        await self._replies.follow(p for p in partitions if not self.owner.is_ready(p))
        await self.owner.ensure_ready(partitions)

    def _replied(self, records: list[Incoming]) -> None:
        assert self._reply_batches is not None
        self._reply_batches.put_nowait(records)

    async def _decide_replies(self) -> None:
        """Decide each batch of replies to sends as one commit (see kinds/workflow/replies.py)."""
        assert self._reply_batches is not None
        while True:
            records = await self._reply_batches.get()
            while not self._reply_batches.empty():
                records += self._reply_batches.get_nowait()
            async with self._lock:
                self._decide_reply_batch(records)

    def _decide_reply_batch(self, records: list[Incoming]) -> None:
        commit = _Commit()
        now_ms = self._now_ms()
        # Revoked, or recovering: the pending command is sent again.
        ready = [record for record in records if self.owner.is_ready(record.partition)]
        self._backstop.each(ready, lambda record: self._sends.reply_record(record, commit, now_ms), commit.dead)
        self._submit(commit)

    def _drop(self, gone: set[int]) -> None:
        """Stop everything of ``gone`` partitions and forget them."""
        if not gone:
            return
        self.owner.revoke(gone)
        for partition in gone:
            self._inbox_applied.pop(partition, None)
        self._forget_cached(*gone)
        for key in [k for k in self._activities if self._partition(k[0]) in gone]:
            if self._attempt_spans:
                self._end_attempt(key, None, "revoked")
            self._due.pop(key, None)
            task, attempt = self._activities.pop(key)
            attempt.cancellation.cancel()
            task.cancel()
            self._busy[key[0]] -= 1
        for key in [k for k in self._timers if self._partition(k[0]) in gone]:
            self._timers.pop(key).cancel()
            self._busy[key[0]] -= 1
        for instance_id in [i for i in self._waiters if self._partition(i) in gone]:
            del self._waiters[instance_id]
        for key in [k for k in self._update_waiters if self._partition(k[0]) in gone]:
            del self._update_waiters[key]
        for instance_id in [i for i in self._step_starts if self._partition(i) in gone]:
            del self._step_starts[instance_id]
        self._sends.drop(gone)
        self._busy = +self._busy

    def wind_down(self) -> None:
        """Start no activity attempt from now on (the worker is stopping, ``hosting.Winding``).

        The step of one not started is journaled as started and not ended, as that of one
        abandoned: the partition's next owner replays the instance and runs it. An attempt
        still waiting for its ``not_before`` (a retry's backoff) is stopped now: it has not
        begun, so nothing is worth waiting for."""
        self._winding = True
        now_ms = self._now_ms()
        for key, due in list(self._due.items()):
            if due > now_ms and key in self._activities:
                self._held.append(self._activities[key][1].idempotency_key)
                self._stop_activity(key)
        self._due.clear()

    async def wound_down(self) -> None:
        """Return once no attempt runs and the results that came are decided and committed."""
        # Polled: a stop happens once, and an attempt's end goes through ThreadedAttempts
        # or a task, then the own inputs' queue, the lock and the committer.
        while self._activities or not self._inputs.idle:
            await asyncio.sleep(0.05)
        if self._last_commit is not None:
            await asyncio.shield(self._last_commit)  # commits complete in order: all before it too

    def abandon(self) -> list[str]:
        """Cancel every running attempt, its ``cancellation`` set first; its result, if one
        comes, is dropped. Return the attempts abandoned and held, for the stop's log line."""
        abandoned = [f"activity {attempt.idempotency_key} (attempt {attempt.number})"
                     for _, attempt in self._activities.values()]
        abandoned += [f"activity {key} (not started)" for key in self._held]
        self._held.clear()
        for key in list(self._activities):
            self._stop_activity(key)
        self._busy = +self._busy
        return abandoned

    def close(self) -> None:
        """Cancel the agent's tasks, activities and timers (the worker is stopping)."""
        self.journaled.close()
        self._drop(set(range(self._partitions)))
        self._sends.close()
        self._replies.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._threaded is not None:
            self._threaded.close()
        self._store.close()

    def _forget_cached(self, *partitions: int) -> None:
        """Drop the live instances of ``partitions`` (RocksDB keeps their journals)."""
        gone = set(partitions)
        for instance_id in [i for i in self._cache if self._partition(i) in gone]:
            self._cache.pop(instance_id).close()
            self._started_at.pop(instance_id, None)

    def _instances(self) -> dict[str, int]:
        """``tidings_instances``, on scrape (another thread: only a copy, then counts)."""
        statuses = Counter(instance.status for instance in list(self._cache.values()))
        return {"cached": sum(statuses.values()), "running": statuses[WorkflowStatus.RUNNING],
                "parked": statuses[WorkflowStatus.PARKED]}

    # -- deciding ----------------------------------------------------------------------

    def _inbox_record(self, record: Incoming, commit: _Commit, now_ms: int) -> None:
        try:
            request = self._decode(record)
        except RecordError as exc:
            commit.dead.append(self._runtime.dead_letter(record, exc))
            return
        forward = self.owner.forward(record, request.instance_id)
        if forward is not None:
            commit.dead.append(forward)  # another partitioner: decided where the instance lives
            return
        if record.offset <= self._inbox_applied.get(record.partition, -1):
            return  # journaled before a crash; the inbox offset was not committed yet
        known = self._known(request.instance_id, commit, now_ms)
        if isinstance(known, StoredEnd) and request.kind in UPDATE_KINDS and request.update_id:
            # Ended and not in memory: a repeat of an update it answered gets that answer.
            known = replace(known, answered=answer_in(self._store.journal(request.instance_id), request.update_id))
        verdict = decide_request(request, known)
        as_json = is_json_request(record)  # a JSON request is answered in JSON
        if isinstance(verdict, RunQuery):
            assert known is not None  # never started: answered not_found
            self._reply(commit, request, self._query(request.instance_id, known, verdict, now_ms), as_json)
            return
        if isinstance(verdict, Feed):
            if isinstance(known, WorkflowInstance):
                instance = known
            else:
                instance = WorkflowInstance(self.definition, request.instance_id)
            message = verdict.message
            if as_json and isinstance(message, Start):
                message = replace(message, outcome_json=True)  # journaled: its outcome is JSON too
            if as_json:
                message = _json_update(message)  # its caller is answered in JSON, after a restart too
            if self._tracing is not None and isinstance(message, Start) and known is None:
                decided = self._start_traced(self._tracing, instance, message, request, record, commit, now_ms)
            else:
                decided = self._advance(instance, message, commit, now_ms, record.offset)
            fed = answer_fed(request, instance, None if decided is not None else self._refusal, message)
            if fed is None:
                return  # an update whose caller waits for the body's answer (AnswerUpdate)
            verdict = fed
        if request.kind == "start" and request.parent_id is not None and known is not None:
            # A parent that restarted mid-start waits for the acknowledgement again.
            commit.links.extend(self._children.repeated_start(request, known, self._store, self.definition.name, now_ms))
        if isinstance(verdict, AwaitUpdate):
            if request.reply_to:
                waiting = self._update_waiters.setdefault((request.instance_id, verdict.update_id), [])
                address = ReplyAddress(request.reply_to, request.request_id, as_json)
                if address not in waiting:  # a caller resends under one request id while it waits
                    waiting.append(address)
            return
        if isinstance(verdict, AwaitEnd):
            if request.reply_to:
                self._waiters.setdefault(request.instance_id, []).append(
                    (request.request_id, request.reply_to, as_json))
            return
        if isinstance(verdict, Refuse):
            error = SchemaError(verdict.reason)
            commit.dead.append(self._runtime.dead_letter(record, error))
        self._reply(commit, request, verdict.reply, as_json)

    def _query(self, instance_id: str, known: WorkflowInstance | StoredEnd, query: RunQuery, now_ms: int) -> InboxReply:
        """Answer a query from the instance's state; nothing is journaled, fed or kept.

        An ended instance not in memory is rebuilt for the query alone: its journal replayed
        with the body run through its end (``queried_instance``), then dropped."""
        instance = queried_instance(self.definition, instance_id, known,
                                    lambda: self._store.journal(instance_id), now_ms)
        try:
            return query_reply(run_query(instance, query.name, query.args), known)
        finally:
            if instance is not known:
                instance.close()

    def _start_traced(
        self, tracing: Tracing, instance: WorkflowInstance, message: Start, request: WorkflowInbox,
        record: Incoming, commit: _Commit, now_ms: int,
    ) -> Any:
        """Start an instance inside its run's span, whose context the ``Started`` record
        journals: every later span of the run is its child, on any worker, after any restart.

        The span ends once the start is decided (a span cannot outlive its process, a run
        can); the run's steps, attempts, sends and end are its children."""
        span = tracing.start(
            f"workflow {self.definition.name}", carrier_of(request.metadata, record.headers), kind=CONSUMER,
            attributes={"tidings.workflow": self.definition.name, "tidings.instance_id": instance.instance_id,
                        "tidings.parent_id": request.parent_id},
        )
        try:
            message = replace(message, traceparent=tracing.carrier(span).get(TRACEPARENT))
            decided = self._advance(instance, message, commit, now_ms, record.offset)
        except BaseException as exc:
            tracing.end(span, exc)
            raise
        tracing.end(span, None if decided is not None else self._refusal)
        return decided

    def run_context(self, instance_id: str) -> Carrier | None:
        """The trace context of the instance's run (its ``Started`` record's), or None."""
        instance = self._cache.get(instance_id)
        traceparent = None if instance is None else instance.traceparent
        return None if traceparent is None else {TRACEPARENT: traceparent}

    def _trace_record(self, tracing: Tracing, instance_id: str, record: Any) -> None:
        """A span for each step that ended and for the run's end, under the run's context."""
        if isinstance(record, StepStarted):
            self._step_starts.setdefault(instance_id, {})[record.path] = (record.kind, record.name,
                                                                           record.at * 1_000_000)
            return
        if isinstance(record, Ended):
            span = tracing.start(f"workflow {self.definition.name} {record.outcome}", self.run_context(instance_id),
                                 attributes={"tidings.workflow": self.definition.name,
                                             "tidings.instance_id": instance_id, "tidings.outcome": record.outcome})
            tracing.end(span, None if record.error is None else record.error.message)
            self._step_starts.pop(instance_id, None)
            return
        if not isinstance(record, (StepCompleted, StepFailed)):
            return
        starts = self._step_starts.get(instance_id)
        started = (None if starts is None else starts.pop(record.path, None)) or self._stored_start(instance_id,
                                                                                                    record.path)
        if started is None:
            return
        kind, name, began = started
        span = tracing.start(
            f"step {kind} {name}".rstrip(), self.run_context(instance_id), start_ns=began,
            attributes={"tidings.workflow": self.definition.name, "tidings.instance_id": instance_id,
                        "tidings.step": record.path, "tidings.step.kind": kind, "tidings.step.name": name or None,
                        "tidings.attempt": record.attempt},
        )
        tracing.end(span, record.error.message if isinstance(record, StepFailed) else None)

    def _stored_start(self, instance_id: str, path: str) -> tuple[str, str, int] | None:
        """A step started before this worker took the instance: its start from the journal."""
        for stored in reversed(self._store.journal(instance_id)):
            if isinstance(stored, StepStarted) and stored.path == path:
                return stored.kind, stored.name, stored.at * 1_000_000
        return None

    def _decode(self, record: Incoming) -> WorkflowInbox:
        """Decode an inbox record; its ``reply_to`` must be a topic a reply may go to."""
        request = decode_inbox(record)
        self._runtime.reply_topic(request.reply_to)
        parent = request.parent_workflow
        if request.kind == "start" and parent is not None and self._workflows is not None \
                and parent not in self._workflows and not self._topics.exists(self._children.inbox(parent)):
            # Its reports would go to the inbox of a workflow that does not exist: a topic
            # nobody made, which Kafka takes ~30 s to refuse while this agent's commits wait.
            # (A workflow this worker's code lacks but whose topics exist is another
            # version's, during a rolling update: its child starts normally.)
            raise SchemaError(f"a child's start names parent workflow {parent[:100]!r}, which is no "
                              f"workflow of this app")
        return request

    def _known(self, instance_id: str, commit: _Commit, now_ms: int) -> WorkflowInstance | StoredEnd | None:
        """Return what the inbox rules need to know of an instance: live, ended, or nothing."""
        instance = self._cache.get(instance_id)
        if instance is not None:
            return instance
        stored = self._store.status(instance_id)
        if stored is None:
            return None
        if stored["status"] not in (s.value for s in _ENDED):
            return self._replayed(instance_id, commit, now_ms)
        # Ended: answered from RocksDB, never replayed.
        fields = answer_of(stored)
        error = fields.get("error")
        return StoredEnd(
            status=fields["status"],
            outcome=fields.get("outcome"),
            result=fields.get("result"),
            error=StepError.from_json(error) if isinstance(error, dict) else error,
            reason=fields.get("reason"),
        )

    def _advance(
        self,
        instance: WorkflowInstance,
        message: InboxMessage,
        commit: _Commit,
        now_ms: int,
        inbox_offset: int | None = None,
    ) -> Any:
        """Feed ``message``; add its records and effects to ``commit``; None if refused."""
        before = instance.status
        decision = instance.advance(message, now_ms)
        if decision.rejected is not None:
            self._refusal = decision.rejected
            return None
        self._refusal = None
        instance_id = instance.instance_id
        self._remember(instance)
        self._record(instance_id, decision.records, commit, inbox_offset)
        self._effects(instance_id, decision.effects, commit)
        if (decision.status is not before or decision.records and isinstance(decision.records[-1], Ended)
                or any(isinstance(e, DropRun) for e in decision.effects)):
            self._status_changed(instance, decision, commit, now_ms)
        return decision

    def _effects(self, instance_id: str, effects: Sequence[Any], commit: _Commit) -> None:
        for effect in effects:
            if isinstance(effect, DropRun):
                self._drop_run(instance_id, effect, commit)
                continue
            if isinstance(effect, AnswerUpdate):
                self._answer_update(instance_id, effect, commit)
                continue
            if isinstance(effect, CHILD_EFFECTS):
                # Acknowledged before RocksDB is written, like dead letters (kinds/workflow/children.py).
                trace = None if self._tracing is None else self.run_context(instance_id)
                commit.links.append(self._children.outgoing(instance_id, effect, self._now_ms(), trace))
                continue
            commit.effects.append((instance_id, effect))
            if isinstance(effect, ArmTimer):
                commit.write.timers[(instance_id, effect.path)] = effect.due
            elif isinstance(effect, CancelTimer):
                commit.write.timers[(instance_id, effect.path)] = None

    def _drop_run(self, instance_id: str, effect: DropRun, commit: _Commit) -> None:
        """The instance continued as new: tombstone its old run's journal records.

        The tombstones go on the journal after the new run's records (the Started first):
        one producer, one partition, in order (idempotent, or one transaction under
        exactly-once), so none is written unless the new start is; they are this worker's own
        journal writes, as the partition's owner counts them. The store drops the old records
        in the write that stores the new ones, once all are acknowledged. A crash before
        leaves the old run in the journal: the replay keeps only the new run and drops it again.
        """
        partition = self._partition(instance_id)
        for seq in range(effect.first, effect.last + 1):
            commit.journal.append(Outgoing(self.topics.journal, f"{instance_id}/{seq}".encode(), None, partition))
            commit.write.dropped.append((instance_id, seq))
        self._metrics.workflow_continued(self.definition.name)

    def _answer_update(self, instance_id: str, effect: AnswerUpdate, commit: _Commit) -> None:
        """Answer an update's callers once the body's answer (or the instance's end) is durable."""
        addresses = [] if effect.reply is None else [effect.reply]
        addresses += self._update_waiters.pop((instance_id, effect.update_id), ())
        if not addresses:
            return
        fields: dict[str, Any] = {"result": effect.result, "error": effect.error,
                                  "reason": None if effect.error is None else effect.error.message}
        instance = self._cache.get(instance_id)
        if effect.answer == "ended" and instance is not None and instance.status is not None:
            fields = answer_status(instance).fields()
        now_ms = self._now_ms()
        seen: set[tuple[str, str]] = set()
        for address in addresses:
            if (address.reply_to, address.request_id) in seen:
                continue  # a caller that repeated its request under the same request id
            seen.add((address.reply_to, address.request_id))
            commit.after.append(reply_record(address.reply_to, address.request_id, instance_id, effect.answer,
                                             now_ms, as_json=address.as_json, **fields))

    def _record(
        self, instance_id: str, records: Sequence[Any], commit: _Commit, inbox_offset: int | None
    ) -> None:
        partition = self._partition(instance_id)
        headers = () if inbox_offset is None else ((INBOX_OFFSET_HEADER, b"%d" % inbox_offset),)
        tracing = self._tracing
        for record in records:
            if tracing is not None:
                self._trace_record(tracing, instance_id, record)
            key = f"{instance_id}/{record.seq}".encode()
            value = avro.encode(WorkflowJournalEntry(instance_id, record))
            commit.journal.append(Outgoing(self.topics.journal, key, value, partition, headers))
            commit.write.records.append((instance_id, record))
            if isinstance(record, Started):
                self._started_at[instance_id] = record.at
            if not isinstance(record, (Started, StepStarted, StepAttemptFailed)):
                commit.unsettled[instance_id] += 1
                self._unsettled[instance_id] += 1
        if instance_id not in commit.touched:
            commit.touched.add(instance_id)
            self._dirty[instance_id] += 1

    def _status_changed(self, instance: WorkflowInstance, decision: Any, commit: _Commit, now_ms: int) -> None:
        instance_id = instance.instance_id
        status = instance.status
        if status is None:
            return
        partition = self._partition(instance_id)
        stored: dict[str, Any] = {"status": status.value}
        if instance.run > 1:
            stored["run"] = instance.run  # for status and describe: which run this is
        reason = next((e.reason for e in decision.effects if isinstance(e, ReportParked)), None)
        started_at = self._started_at.get(instance_id)
        if started_at is not None:
            stored["started_at"] = started_at  # for the status record of a later catch-up's end
        if status in _ENDED and instance.outcome is not None:
            ended = next((r for r in decision.records if isinstance(r, Ended)), None)
            stored["outcome"] = (
                outcome_fields(ended) if ended is not None else outcome_fields_of(instance.outcome, self.definition)
            )
            commit.write.running[instance_id] = (partition, False)
            commit.kept.append(self._outcome_record(instance_id, stored["outcome"], now_ms, instance.outcome_json))
            started = self._started_at.pop(instance_id, None)
            if started is not None:
                commit.ended.append(started)
            for request_id, reply_to, as_json in self._waiters.pop(instance_id, ()):
                commit.after.append(reply_record(reply_to, request_id, instance_id, "status", now_ms,
                                                 as_json=as_json, **answer_of(stored)))
        else:
            commit.write.running[instance_id] = (partition, True)
        if instance.outcome_json:
            stored["outcome_json"] = True  # for a catch-up that reads only the Ended record
        if reason is not None:
            stored["reason"] = reason
            log.warning("workflow %s instance %r is parked: %s", self.definition.name, instance_id, reason)
        commit.write.statuses[instance_id] = stored
        commit.kept.append(self._status_record(instance_id, status.value, now_ms, reason, started_at))

    def _replayed(self, instance_id: str, commit: _Commit, now_ms: int) -> WorkflowInstance:
        """Rebuild an instance that is not in memory from its stored journal."""
        records = self._store.journal(instance_id)
        self._metrics.workflow_replayed(self.definition.name, len(records))
        if records and isinstance(records[0], Started):
            self._started_at[instance_id] = records[0].at
        instance, decision = WorkflowInstance.replay(self.definition, instance_id, records, now_ms)
        self._remember(instance)
        self._record(instance_id, decision.records, commit, None)
        self._effects(instance_id, [e for e in decision.effects if not isinstance(e, PublishOutcome)], commit)
        stored = self._store.status(instance_id) or {}
        if instance.status is not None and stored.get("status") != instance.status.value:
            self._status_changed(instance, decision, commit, now_ms)
        return instance

    def _reply(self, commit: _Commit, request: WorkflowInbox, reply: InboxReply, as_json: bool) -> None:
        if request.reply_to:
            commit.after.append(reply_record(
                request.reply_to, request.request_id, request.instance_id, reply.answer, self._now_ms(),
                as_json=as_json, **reply.fields(),
            ))

    _refusal: str | None = None

    # -- what the send steps use (``sends.StepHost``) ------------------------------------

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def replies_topic(self) -> str:
        return self.topics.replies

    def now(self) -> float:
        return self._clock()

    def home(self, instance_id: str) -> int:
        return self._partition_of(instance_id)

    def forward(self, record: Incoming, instance_id: str) -> Outgoing | None:
        return self.owner.forward(record, instance_id)

    def dead_letter(self, record: Incoming, error: RecordError) -> Outgoing:
        return self._runtime.dead_letter(record, error)

    def known(self, instance_id: str, commit: _Commit, now_ms: int) -> WorkflowInstance | StoredEnd | None:
        return self._known(instance_id, commit, now_ms)

    def refusal(self, instance: WorkflowInstance, message: InboxMessage, commit: _Commit, now_ms: int) -> str | None:
        if self._advance(instance, message, commit, now_ms) is None:
            return self._refusal
        return None

    def feed(self, instance_id: str, message: InboxMessage) -> None:
        if not self._inputs.is_open:
            return
        self._busy[instance_id] += 1  # released by _decide_own when it takes this
        self._inputs.put((instance_id, message))

    def hold(self, instance_id: str) -> None:
        self._busy[instance_id] += 1

    def release(self, instance_id: str) -> None:
        self._busy[instance_id] -= 1
        if self._busy[instance_id] <= 0:
            del self._busy[instance_id]

    def signal_inbox(self, workflow: str) -> tuple[str, int] | None:
        inbox = self._children.inbox(workflow)
        if self._workflows is not None and workflow not in self._workflows:
            # Not in this worker's code: another version's during a rolling update if its
            # inbox exists (as for a child's parent, _decode); else no workflow of this app.
            try:
                if not self._topics.exists(inbox):
                    return None
            except BrokerError:
                pass  # unknown for now: sent, and sent again when its attempt times out
        return inbox, self._children.partitions

    def publish_later(self, records: list[Outgoing]) -> None:
        self._publisher.publish_later(records)

    # -- the shell's own inputs: activity results and due timers --------------------------

    def _decide_own(self, items: list[tuple[str, InboxMessage]]) -> None:
        """Decide a batch of results and due timers as one commit (``OwnInputs``, under the lock)."""
        commit = _Commit()
        now_ms = self._now_ms()
        for instance_id, message in items:
            self._busy[instance_id] -= 1  # held since the activity or timer started
            if self._busy[instance_id] <= 0:
                del self._busy[instance_id]
            if not self.owner.is_ready(self._partition(instance_id)):
                continue  # revoked meanwhile: the new owner replays and re-issues it
            instance = self._cache.get(instance_id)
            if instance is None:
                continue  # ended, or revoked and recovered: nothing waits for this
            if isinstance(message, TimerFired):
                commit.write.timers[(instance_id, message.path)] = None
            self._advance(instance, message, commit, now_ms)
        self._submit(commit)

    def _carry_out(self, instance_id: str, effect: Any) -> None:
        key = (instance_id, getattr(effect, "path", ""))
        if isinstance(effect, RunActivity):
            self._stop_activity(key)
            if self._winding:  # the worker is stopping: the next owner replays and runs it
                self._held.append(effect.idempotency_key)
                return
            attempt = Attempt(effect.idempotency_key, effect.attempt)
            running: asyncio.Future[None] | Skippable
            if self._tracing is not None:
                self._attempt_spans[key] = self._tracing.start(
                    f"activity {effect.name}", self.run_context(instance_id),
                    attributes={"tidings.workflow": self.definition.name, "tidings.instance_id": instance_id,
                                "tidings.step": effect.path, "tidings.activity": effect.name,
                                "tidings.attempt": effect.attempt, "tidings.idempotency_key": effect.idempotency_key})
            if self._threaded is not None and runs_threaded(effect, self._clock()):
                running = self._threaded.submit(instance_id, effect, attempt)
            else:
                if self._tracing is not None:
                    # The task copies the current context: the activity's own spans are the attempt's children.
                    with self._tracing.within(self._tracing.carrier(self._attempt_spans[key])):
                        running = asyncio.ensure_future(self._call(instance_id, effect, attempt))
                else:
                    running = asyncio.ensure_future(self._call(instance_id, effect, attempt))
                if effect.not_before > self._now_ms():
                    self._due[key] = effect.not_before
            self._activities[key] = (running, attempt)
            self._busy[instance_id] += 1
        elif isinstance(effect, CancelActivity):
            self._stop_activity(key)
        elif isinstance(effect, ArmTimer):
            self._stop_timer(key)
            delay = max(0.0, (effect.due - self._now_ms()) / 1000)
            loop = asyncio.get_running_loop()
            self._timers[key] = loop.call_later(delay, self._fire, instance_id, effect.path)
            self._busy[instance_id] += 1
        elif isinstance(effect, CancelTimer):
            self._stop_timer(key)
        elif isinstance(effect, (SendCommand, StopSend, SendSignal, StopSignal)):
            self._sends.carry_out(instance_id, effect)

    def _end_attempt(self, key: tuple[str, str], result: ActivityResult | None, why: str = "") -> None:
        """End the span of the attempt at ``key``: with its result, or stopped (``why``)."""
        span = self._attempt_spans.pop(key, None)
        if span is None or self._tracing is None:
            return
        if result is None:
            span.set_attribute("tidings.attempt.stopped", why)
            self._tracing.end(span)
        elif result.timed_out:
            self._tracing.end(span, "the attempt timed out")
        else:
            self._tracing.end(span, result.error)

    def _stop_activity(self, key: tuple[str, str]) -> None:
        if self._attempt_spans:
            self._end_attempt(key, None, "cancelled")
        self._due.pop(key, None)
        running = self._activities.pop(key, None)
        if running is not None:
            task, attempt = running
            attempt.cancellation.cancel()
            task.cancel()
            self._busy[key[0]] -= 1

    def _stop_timer(self, key: tuple[str, str]) -> None:
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()
            self._busy[key[0]] -= 1

    def _fire(self, instance_id: str, path: str) -> None:
        if self._timers.pop((instance_id, path), None) is None:
            return  # stopped meanwhile
        # The instance stays busy (not evictable) until _decide_own has taken this.
        self._inputs.put((instance_id, TimerFired(path)))

    def _threaded_ended(self, ended: list[tuple[str, RunActivity, Attempt, Any]]) -> None:
        """Results of sync attempts run by ``ThreadedAttempts`` (on the loop, in batches)."""
        for instance_id, effect, attempt, result in ended:
            if isinstance(result, ActivityResult):
                self._ended(instance_id, effect, attempt, result)
            else:  # the function returned an awaitable: await it on the loop
                key = (instance_id, effect.path)
                current = self._activities.get(key)
                if current is None or current[1] is not attempt:
                    continue
                task = asyncio.ensure_future(self._settle(instance_id, effect, attempt, result))
                self._activities[key] = (task, attempt)

    async def _settle(self, instance_id: str, effect: RunActivity, attempt: Attempt, returned: Any) -> None:
        self._ended(instance_id, effect, attempt, await settle_returned(effect, returned))

    async def _call(self, instance_id: str, effect: RunActivity, attempt: Attempt) -> None:
        self._ended(instance_id, effect, attempt,
                    await run_attempt(effect, attempt, self._executor, self._clock))

    def _ended(self, instance_id: str, effect: RunActivity, attempt: Attempt, result: ActivityResult) -> None:
        self._metrics.activity_attempt(self.definition.name, effect.name,
                                       failed=result.error is not None or result.timed_out)
        key = (instance_id, effect.path)
        current = self._activities.get(key)
        if current is None or current[1] is not attempt:
            return  # cancelled or replaced meanwhile: the result would be ignored anyway
        if self._attempt_spans:
            self._end_attempt(key, result)
        del self._activities[key]
        self._due.pop(key, None)
        # The instance stays busy (not evictable) until _decide_own has taken the result:
        # evicted in between, its result would find no instance and be lost.
        self._inputs.put((instance_id, result))

    # -- committing --------------------------------------------------------------------

    def _submit(self, commit: _Commit) -> asyncio.Future[None]:
        """Produce ``commit``'s journal records now; queue the rest for the committer."""
        records = commit.journal
        if self._exactly_once and commit.kept:
            # Outcomes and statuses go to the app's own topics: in the journal's transaction
            # they become visible with it, so they need not wait for its acknowledgement
            # (AddPartitionsToTxn and the produce, two round trips at idle) to be produced.
            # Replies stay behind it: a hostile reply_to refused would doom the journal too.
            records, commit.kept = [*commit.journal, *commit.kept], []
        done = self._commits.submit(commit, records)
        self._last_commit = done
        # Nothing awaits in between: the committer cannot take the commit before these
        # are out of its effects.
        for instance_id, effect in self._early_activities(commit):
            self._carry_out(instance_id, effect)
        return done

    def _early_activities(self, commit: _Commit) -> list[tuple[str, Any]]:
        """Take from ``commit`` the activities (and sends) that may start before its acks, and return them.

        An activity runs at least once anyway: if the worker dies before its start record
        is stored, replay runs it again. What must hold is that a re-run gets the *same
        input* under the same idempotency key, so an activity may only start early when
        nothing its input could come from is unacknowledged: the instance's unacknowledged
        records are only Started and StepStarted (an input re-read from the inbox after a
        crash is the same input). After a step's result, the next activity waits for it.
        """
        per_step = Counter((i, getattr(e, "path", None)) for i, e in commit.effects)
        early, rest = [], []
        for item in commit.effects:
            instance_id, effect = item
            if (
                isinstance(effect, (RunActivity, SendCommand))
                and not self._unsettled.get(instance_id)
                and per_step[(instance_id, effect.path)] == 1  # no cancel of it in the same commit
                and self.owner.is_ready(self._partition(instance_id))
            ):
                early.append(item)
            else:
                rest.append(item)
        commit.effects = rest
        return early

    async def _durable(self, waiting: Sequence[Pending[_Commit]]) -> None:
        """Every commit waiting now is completed in one go: under exactly-once they share
        one transaction commit instead of paying one each."""
        for pending in waiting:
            commit = pending.commit
            delivered = await pending.delivery
            commit.write.journal_offsets.update(self.owner.settle(delivered))
            if commit.dead:
                await self._publisher.publish(commit.dead)
            if commit.links:
                await self._children.send(self._publisher, commit.links)
        if self._exactly_once:
            # Outcomes, statuses and answers go into the journal's own transaction:
            # it makes them visible together, so they need not wait for it first.
            for pending in waiting:
                if pending.commit.kept or pending.commit.after:
                    self._publisher.publish_later([*pending.commit.kept, *pending.commit.after])
                    pending.commit.kept, pending.commit.after = [], []
            # Acknowledged is not yet durable: the journal records count once their
            # transaction commits. The effects below (the next activity) must not
            # run on a result a crash would still abort. Without effects there is
            # nothing to hold back: the outcome's own waiter commits it soon.
            if any(pending.commit.effects for pending in waiting):
                assert self._committed is not None
                await self._committed()
            elif any(pending.commit.ended for pending in waiting):
                # An outcome a caller may be waiting for, produced by no input (an activity's
                # result): have its transaction committed now, not at the publisher's
                # MAX_OPEN_S. Nothing here depends on it, so it is not awaited.
                assert self._committed is not None
                asyncio.ensure_future(self._committed()).add_done_callback(_retrieved)
        else:
            kept = [record for pending in waiting for record in pending.commit.kept]
            if kept:
                await self._publisher.send(kept)
            for pending in waiting:
                pending.commit.kept = []
        for pending in waiting:
            self._store.write(pending.commit.write)

    def _completed(self, commit: _Commit) -> None:
        """``commit`` is durable: publish what waited for it and carry out its effects."""
        for instance_id in commit.touched:
            self._dirty[instance_id] -= 1
            if self._dirty[instance_id] <= 0:
                del self._dirty[instance_id]
        self._unsettled.subtract(commit.unsettled)
        self._unsettled = +self._unsettled
        if commit.after:
            self._publisher.publish_later(commit.after)
        if commit.ended:
            self._metrics.workflow_ended(self.definition.name, commit.ended)
        for instance_id, effect in commit.effects:
            if self.owner.is_ready(self._partition(instance_id)):
                self._carry_out(instance_id, effect)
        self._evict(commit.touched)

    def _evict(self, touched: Iterable[str]) -> None:
        for instance_id in touched:
            instance = self._cache.get(instance_id)
            if instance is not None and instance.status in _ENDED and not self._dirty.get(instance_id):
                # Ended instances answer from RocksDB; nothing of them needs memory.
                del self._cache[instance_id]
                self._started_at.pop(instance_id, None)
                instance.close()
        skipped = 0
        while len(self._cache) - skipped > self._cache_size:
            instance_id, instance = next(iter(self._cache.items()))
            if self._busy.get(instance_id) or self._dirty.get(instance_id):
                self._cache.move_to_end(instance_id)  # pinned by live work; try the next
                skipped += 1
                continue
            del self._cache[instance_id]
            self._started_at.pop(instance_id, None)
            instance.close()

    # -- recovery ----------------------------------------------------------------------

    async def _settled(self) -> None:
        """Wait until every commit submitted so far has completed (commits complete in order)."""
        last = self._last_commit
        if last is not None and not last.done():
            await asyncio.shield(last)

    def _begin_catch_up(self, partition: int) -> None:
        self._forget_cached(partition)
        self._inbox_applied[partition] = self._store.inbox_offset(partition)

    async def _restore_chunk(self, partition: int, chunk: list[Incoming]) -> None:
        """Apply journal records this store has not seen (``PartitionOwner`` reads them)."""
        now_ms = self._now_ms()
        applied = self._inbox_applied[partition]
        change = StoreWrite()
        after: list[Outgoing] = []
        seen: set[tuple[str, int]] = set()
        for record in chunk:
            header = record.headers.get(INBOX_OFFSET_HEADER)
            if header is not None and header.isdigit():
                applied = max(applied, int(header))
            if record.value is None:
                # A tombstone: a run that continued as new dropped this record.
                dropped = _tombstoned(record.key)
                if dropped is not None and self._partition(dropped[0]) == partition:
                    change.dropped.append(dropped)
                continue
            try:
                entry = avro.decode_as(record.value or b"", WorkflowJournalEntry)  # type: ignore[type-var]
                if self._partition(entry.instance_id) != partition:
                    raise SchemaError(f"a record of {entry.instance_id[:100]!r}, whose home is "
                                      f"another partition")
            except RecordError as exc:
                log.error("skipping journal record %s/%d@%d: %s",
                          record.topic, record.partition, record.offset, exc)
                continue
            key = (entry.instance_id, entry.record.seq)
            if key in seen or self._store.has_record(*key):
                # A second record at one seq (a zombie's): the first in offset order is the
                # instance's history, as for aggregates and ``read_journal``.
                continue
            seen.add(key)
            self._restore(entry, partition, change, after, now_ms)
        change.journal_offsets[partition] = chunk[-1].offset + 1
        change.inbox_offsets[partition] = applied
        self._inbox_applied[partition] = applied
        if after:
            # Ended while this store was behind: its outcome (and a child's report to its
            # parent) may never have been published. Acknowledged before the store moves
            # past the end, or a crash in between would lose them for good.
            try:
                await self._publisher.send(after)
            except RecordRejected as exc:  # e.g. a report to a parent workflow's missing inbox
                log.warning("workflow %s: a record caught up from the journal was refused, dropped: %s",
                            self.definition.name, exc)
        self._store.write(change)

    def _caught_up(self, partition: int, end: int) -> None:
        """The journal is applied up to ``end``: store that, then replay what is running."""
        applied = self._inbox_applied[partition]
        self._store.write(StoreWrite(journal_offsets={partition: end}, inbox_offsets={partition: applied}))
        commit = _Commit()
        now_ms = self._now_ms()
        for instance_id in self._store.running(partition):
            self._replayed(instance_id, commit, now_ms)
        self._submit(commit)

    def _restore(
        self, entry: WorkflowJournalEntry, partition: int, change: StoreWrite, after: list[Outgoing], now_ms: int
    ) -> None:
        instance_id, record = entry.instance_id, entry.record
        change.records.append((instance_id, record))
        if isinstance(record, Started):
            change.running[instance_id] = (partition, True)
            change.statuses[instance_id] = {"status": WorkflowStatus.RUNNING.value, "started_at": record.at}
            if record.outcome_json:
                change.statuses[instance_id]["outcome_json"] = True
        elif isinstance(record, Ended):
            change.running[instance_id] = (partition, False)
            fields = outcome_fields(record)
            status = {"finished": "FINISHED", "faulted": "FAULTED", "cancelled": "CANCELLED"}[record.outcome]
            # Its Started is in this chunk or stored before: either way the status has the flag.
            before = change.statuses.get(instance_id) or self._store.status(instance_id) or {}
            as_json = bool(before.get("outcome_json"))
            started_at = before.get("started_at")
            change.statuses[instance_id] = {"status": status, "outcome": fields}
            if as_json:
                change.statuses[instance_id]["outcome_json"] = True
            if isinstance(started_at, int):
                change.statuses[instance_id]["started_at"] = started_at
            after.append(self._outcome_record(instance_id, fields, record.at, as_json))
            after.append(self._status_record(instance_id, status, record.at, started_at=started_at))
            after.extend(self._children.restored_end(instance_id, record, change.records, self._store, self.definition.name))

    # -- small things ------------------------------------------------------------------

    def _outcome_record(self, instance_id: str, fields: dict[str, Any], now_ms: int, as_json: bool) -> Outgoing:
        """The outcome record: JSON when the start was JSON or the app writes JSON outcomes."""
        topic, partition = self.topics.outcomes, self._partition(instance_id)
        return outcome_record(topic, partition, self.definition.name, instance_id, fields, now_ms,
                              as_json=as_json or self._runtime.json_outcomes)

    def _status_record(self, instance_id: str, status: str, at: int, reason: str | None = None,
                       started_at: Any = None) -> Outgoing:
        started = started_at if isinstance(started_at, int) else None
        record = WorkflowStatusRecord(instance_id, self.definition.name, status, at, reason, started)
        return Outgoing(self.topics.status, instance_id.encode(), avro.encode(record), self._partition(instance_id))

    def _remember(self, instance: WorkflowInstance) -> None:
        self._cache[instance.instance_id] = instance
        self._cache.move_to_end(instance.instance_id)

    def _partition(self, instance_id: str) -> int:
        return self._partition_of(instance_id)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _ensure_tasks(self) -> None:
        if self.journaled.started:
            return
        self._inputs.open()
        self._reply_batches = asyncio.Queue()
        self._threaded = ThreadedAttempts(self._activity_threads, asyncio.get_running_loop(),
                                          self._threaded_ended)
        self.journaled.spawn(self._inputs.run, self._commits.run, self._decide_replies)


def _retrieved(future: asyncio.Future[None]) -> None:
    """Take a commit's failure that nothing awaits: the committer reports it (and stops the worker)."""
    if not future.cancelled():
        future.exception()
