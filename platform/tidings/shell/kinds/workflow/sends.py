"""Workflow sends to aggregates, the shell side: produce commands, time attempts, read replies
and watch events topics for filter steps (the pure step: ``core/workflow/sends.py``).

- ``SendCommand``: at ``not_before`` the command is produced to the aggregate's commands
  topic (its home partition) with the step key as command and correlation id,
  ``reply_to = {app}.workflow.{name}.replies`` and ``reply_key = instance id``, so the
  aggregate's reply lands on the partition of the workflow's inbox, which this worker owns
  (Faust assigns co-subscribed topics of one partition count together). At the attempt's
  end ``SendTimedOut`` is fed in. A filter step also gets a watch on the aggregate's
  events topic (``EventsTail``).
- A record of the replies topic is decoded (Avro or JSON), mapped to its step by its
  correlation id and fed in as ``CommandReplied``. The topic is open to any producer: a
  record that does not decode is dead-lettered; one that answers nothing pending is
  dropped with a log line; neither stops the agent.
- ``EventsTail`` reads the home partition of each watched aggregate id with one plain
  consumer (no group: it works whichever worker owns the aggregate), from the offset of
  the step's *stored* start time less a margin (``offsets_for_times``). So an event the
  aggregate stored while this worker was down, or between two attempts, is still seen
  after a restart; reading earlier than needed is harmless because the correlation id is
  unique to the step. What it finds is fed in as ``EventsSeen`` and, when the filter
  accepts it, journaled as the step's result like any other input.
- ``SendSignal`` (``ctx.signal``, ``core/workflow/signal_sends.py``): at ``not_before`` a
  ``signal`` request is produced to the target workflow's inbox (the target instance's
  partition), with the step key as request id and signal id and ``reply_to`` this
  workflow's replies topic; the target's ``WorkflowReply`` comes back there (keyed by the
  request id, so forwarded to the instance's partition like any reply) and is fed in as
  ``SignalReplied``. At the attempt's end ``SignalTimedOut`` is fed in. A workflow the app
  does not declare is answered ``rejected`` at once (its inbox topic does not exist).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from confluent_kafka import OFFSET_END, Consumer, TopicPartition

from ....codec import avro
from ....codec.content import decode_record
from ....codec.payloads import load_payload, payload_of
from ....core.limits import check_command, check_id
from ....core.partitioning import partition_for
from ....core.limits import check_inbox
from ....core.records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from ....core.workflow.signal_sends import SendSignal, SignalReplied, SignalTimedOut, StopSignal
from ....core.workflow_records import WorkflowInbox, WorkflowReply
from ....core.workflow import WorkflowInstance
from ....core.workflow.inbox_rules import StoredEnd
from ....core.workflow.sends import (
    CommandReplied,
    EventsSeen,
    SendCommand,
    SendTimedOut,
    SentEvent,
    StopSend,
    pending_send,
)
from ....errors import RecordError, SchemaError
from ...runtime.connection import KafkaConnection
from ...runtime.groups import DEFAULT_PREFIX, reader_group
from ...runtime.io import Incoming, Outgoing
from ...runtime.kafka import fatal_error, is_fatal, not_authorized
from ...runtime.pipeline import stop_worker
from ...runtime.threads import OwnThread
from ...runtime.tracing import PRODUCER, Carrier, Tracing, headers_of


class Commit(Protocol):
    """One round of the agent's decisions, as a send step adds to it (``agent._Commit``)."""

    @property
    def dead(self) -> list[Outgoing]:
        """Dead letters and forwards, awaited before the round's offsets commit."""
        ...


log = logging.getLogger(__name__)

#: How far before a step's stored start the events topic is read: producers' clocks
#: (Kafka's CreateTime) may be behind this worker's; earlier records are only skipped.
WATCH_MARGIN_MS = 60_000

_PATH = re.compile(r"[0-9]+(\.[0-9]+)*")


@dataclass(eq=False, slots=True)
class _Watch:
    """One filter step waiting for events of one aggregate instance under its correlation id."""

    instance_id: str
    path: str
    topic: str
    partition: int
    aggregate_id: str
    correlation_id: str
    registry: Any
    from_ms: int


@dataclass(slots=True)
class _Sending:
    """What runs for one pending send step: the scheduled send, the attempt's timer, a watch."""

    send: asyncio.TimerHandle | None = None
    timeout: asyncio.TimerHandle | None = None
    watch: _Watch | None = None

    def stop_timers(self) -> None:
        for handle in (self.send, self.timeout):
            if handle is not None:
                handle.cancel()
        self.send = self.timeout = None


@dataclass(slots=True)
class _Tail:
    watches: dict[str, list[_Watch]] = field(default_factory=dict)


class StepHost(Protocol):
    """What the send steps need of their workflow agent (``WorkflowAgent`` is one).

    ``commit`` is the agent's own round of decisions (``agent._Commit``), handed back as the
    agent gave it: typed ``Any`` here so this module does not import the agent (a circle).
    """

    @property
    def name(self) -> str:
        """The workflow's name."""
        ...

    @property
    def replies_topic(self) -> str:
        """Where the aggregates answer the workflow's commands."""
        ...

    def now(self) -> float:
        """The agent's clock, in seconds."""
        ...

    def home(self, instance_id: str) -> int:
        """The partition of ``instance_id``."""
        ...

    def forward(self, record: Incoming, instance_id: str) -> Outgoing | None:
        """``record`` re-addressed to the home partition of ``instance_id``, or None if home."""
        ...

    def dead_letter(self, record: Incoming, error: RecordError) -> Outgoing:
        """The dead letter of ``record``."""
        ...

    def known(self, instance_id: str, commit: Any, now_ms: int) -> WorkflowInstance | StoredEnd | None:
        """What the agent knows of an instance: live, ended, or nothing."""
        ...

    def refusal(self, instance: WorkflowInstance, message: Any, commit: Any, now_ms: int) -> str | None:
        """Feed ``message`` to ``instance`` in ``commit``; return why it was refused, or None."""
        ...

    def feed(self, instance_id: str, message: Any) -> None:
        """Feed ``message`` to the instance later, as one of the agent's own inputs (it stays
        in memory until then)."""
        ...

    def hold(self, instance_id: str) -> None:
        """Keep the instance in memory (a send of it is pending) until ``release``."""
        ...

    def release(self, instance_id: str) -> None:
        """Undo one ``hold``."""
        ...

    def publish_later(self, records: list[Outgoing]) -> None:
        """Produce ``records`` without waiting for them."""
        ...

    def run_context(self, instance_id: str) -> Carrier | None:
        """The trace context of the instance's run (journaled in its ``Started``), or None."""
        ...

    def signal_inbox(self, workflow: str) -> tuple[str, int] | None:
        """The inbox topic of the app's workflow ``workflow`` and its partition count; None
        when the app declares no such workflow."""
        ...


class WorkflowSends:
    """The send steps of one workflow agent: commands out, replies and watched events in."""

    def __init__(self, agent: StepHost, *, connection: KafkaConnection, command_timeout: float,
                 group_prefix: str = DEFAULT_PREFIX, tracing: Tracing | None = None) -> None:
        self._group_prefix = group_prefix
        self._tracing = tracing
        self._agent = agent
        self._connection = connection
        self._command_timeout_ms = int(command_timeout * 1000)
        self._sending: dict[tuple[str, str], _Sending] = {}
        self._tail: EventsTail | None = None
        self._prefix = f"{agent.name}/"
        # Commands due now, produced together once the loop turns (one producer call, not one each).
        self._outbox: list[Outgoing] = []

    # -- replies ---------------------------------------------------------------------------

    def reply_record(self, record: Incoming, commit: Commit, now_ms: int) -> None:
        """Turn one record of the replies topic into ``CommandReplied`` for its pending step."""
        agent = self._agent
        name = agent.name
        if _is_workflow_reply(record.value):
            self._signal_reply(record, commit, now_ms)
            return
        try:
            reply = decode_record(record.value, ReplyEnvelope, headers=record.headers,
                                  timestamp_ms=record.timestamp_ms)
            # Checked before the id is hashed, stored or logged: a lone surrogate or a
            # 300 KB id is no step key, and would fail deep inside with an unclear reason.
            check_id(reply.correlation_id, "correlation_id")
            check_id(reply.command_id, "command_id")
            instance_id, path = self._step_of(reply.correlation_id)
            if reply.command_id != reply.correlation_id:
                raise SchemaError(f"a reply to command {reply.command_id[:200]!r}, which workflow {name!r} "
                                  f"did not send: its commands carry the step key {reply.correlation_id[:200]!r} "
                                  "as command id and correlation id")
        except RecordError as exc:
            commit.dead.append(agent.dead_letter(record, exc))
            return
        forward = agent.forward(record, instance_id)
        if forward is not None:
            commit.dead.append(forward)  # keyed elsewhere: decided where the instance lives
            return
        known = agent.known(instance_id, commit, now_ms)
        if known is None:
            # No send of this instance ever went out: not a late repeat, a record nobody asked for.
            commit.dead.append(agent.dead_letter(record, SchemaError(
                f"a reply to {reply.command_id[:200]!r}, for an instance of workflow {name!r} that was never started")))
            return
        request = pending_send(known, path) if isinstance(known, WorkflowInstance) else None
        if request is None:
            # A repeat of a reply already used (every resend is answered), or one for an
            # instance that has ended: nothing to learn from it, and nothing wrong with it.
            log.debug("workflow %s drops a reply to %r: no send step waits for it", name, reply.command_id[:200])
            return
        try:
            events = tuple(self._event(event, request.aggregate.definition.event_types) for event in reply.events)
        except RecordError as exc:
            commit.dead.append(agent.dead_letter(record, exc))
            return
        assert isinstance(known, WorkflowInstance)
        message = CommandReplied(path, reply.command_id, reply.status, events, reply.reason)
        refusal = agent.refusal(known, message, commit, now_ms)
        if refusal is not None:
            # The step waits on: this reply could not answer it (an accepted reply without events).
            commit.dead.append(agent.dead_letter(record, SchemaError(
                f"send step {path} of workflow {name!r} {instance_id[:200]!r} refused the reply: {refusal}")))

    def _signal_reply(self, record: Incoming, commit: Commit, now_ms: int) -> None:
        """Turn a target workflow's answer to a signal step into ``SignalReplied``."""
        agent = self._agent
        try:
            reply = avro.decode_as(record.value or b"", WorkflowReply)
            check_id(reply.request_id, "request_id")
            instance_id, path = self._step_of(reply.request_id)
        except RecordError as exc:
            commit.dead.append(agent.dead_letter(record, exc))
            return
        forward = agent.forward(record, instance_id)
        if forward is not None:
            commit.dead.append(forward)  # keyed by the request id: decided where the instance lives
            return
        known = agent.known(instance_id, commit, now_ms)
        if known is None:
            # No signal of this instance ever went out: not a late repeat, a record nobody asked for.
            commit.dead.append(agent.dead_letter(record, SchemaError(
                f"an answer to {reply.request_id[:200]!r}, for an instance of workflow {agent.name!r} "
                "that was never started")))
            return
        if not isinstance(known, WorkflowInstance):
            log.debug("workflow %s drops an answer to %r: the instance has ended", agent.name,
                      reply.request_id[:200])
            return
        refusal = agent.refusal(known, SignalReplied(path, reply.request_id, reply.answer, reply.reason), commit, now_ms)
        if refusal is not None:
            # A repeat of an answer already used (every resend is answered) is no fault of the record.
            log.debug("workflow %s drops an answer to %r: %s", agent.name, reply.request_id[:200], refusal)

    def _step_of(self, correlation_id: str) -> tuple[str, str]:
        """Return (instance id, path) of the step whose key is ``correlation_id``."""
        if correlation_id.startswith(self._prefix):
            instance_id, _, path = correlation_id[len(self._prefix):].rpartition("/")
            if instance_id and _PATH.fullmatch(path):
                return instance_id, path
        raise SchemaError(f"a reply whose correlation id {correlation_id[:200]!r} names no step of "
                          f"workflow {self._agent.name!r}")

    @staticmethod
    def _event(event: EventEnvelope, registry: Any) -> SentEvent:
        value = load_payload(event.type, event.payload, registry)
        return SentEvent(event.type, value, event.command_id, event.deferred)

    # -- effects ---------------------------------------------------------------------------

    def carry_out(self, instance_id: str, effect: SendCommand | StopSend | SendSignal | StopSignal) -> None:
        """Schedule a send and its timeout (and a watch), or stop everything of a step."""
        key = (instance_id, effect.path)
        if isinstance(effect, (StopSend, StopSignal)):
            self._stop(key)
            return
        if isinstance(effect, SendSignal):
            self._schedule_signal(instance_id, effect)
            return
        sending = self._sending.get(key)
        if sending is None:
            sending = self._sending[key] = _Sending()
            self._agent.hold(instance_id)  # not evictable while its send is pending
        sending.stop_timers()
        loop = asyncio.get_running_loop()
        now = self._agent.now()
        delay = effect.not_before / 1000 - now
        if delay > 0:
            sending.send = loop.call_later(delay, self._send, instance_id, effect)
        else:
            self._send(instance_id, effect)
        end = effect.not_before + (effect.timeout_ms or self._command_timeout_ms)
        if effect.deadline_at is not None:
            end = min(end, effect.deadline_at)
        sending.timeout = loop.call_later(max(0.0, end / 1000 - now), self._feed, instance_id,
                                          SendTimedOut(effect.path, effect.attempt))
        if effect.watch_from is not None and sending.watch is None:
            sending.watch = self._watch(instance_id, effect)

    def _schedule_signal(self, instance_id: str, effect: SendSignal) -> None:
        key = (instance_id, effect.path)
        sending = self._sending.get(key)
        if sending is None:
            sending = self._sending[key] = _Sending()
            self._agent.hold(instance_id)  # not evictable while its signal is pending
        sending.stop_timers()
        loop = asyncio.get_running_loop()
        now = self._agent.now()
        delay = effect.not_before / 1000 - now
        if delay > 0:
            sending.send = loop.call_later(delay, self._send_signal, instance_id, effect)
        else:
            self._send_signal(instance_id, effect)
        end = effect.not_before + (effect.timeout_ms or self._command_timeout_ms)
        if effect.deadline_at is not None:
            end = min(end, effect.deadline_at)
        sending.timeout = loop.call_later(max(0.0, end / 1000 - now), self._feed, instance_id,
                                          SignalTimedOut(effect.path, effect.attempt))

    def _send_signal(self, instance_id: str, effect: SendSignal) -> None:
        target = self._agent.signal_inbox(effect.workflow)
        if target is None:
            self._feed(instance_id, SignalReplied(effect.path, effect.signal_id, "rejected",
                                                  f"this app declares no workflow {effect.workflow[:200]!r}"))
            return
        topic, partitions = target
        try:
            request = check_inbox(WorkflowInbox(
                request_id=effect.signal_id,
                instance_id=effect.instance_id,
                kind="signal",
                timestamp_ms=int(self._agent.now() * 1000),
                payload=effect.payload.encode(),
                signal=effect.name,
                reply_to=self._agent.replies_topic,
                signal_id=effect.signal_id,
            ))
            value = avro.encode(request)
        except RecordError as exc:  # no attempt would change that
            self._feed(instance_id, SignalReplied(effect.path, effect.signal_id, "rejected",
                                                  f"the signal cannot be sent: {exc}"))
            return
        record = Outgoing(topic, effect.instance_id.encode(), value, partition_for(effect.instance_id, partitions))
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(record)

    def _send(self, instance_id: str, effect: SendCommand) -> None:
        aggregate = effect.aggregate
        try:
            record = self._command_record(instance_id, effect)
        except (RecordError, TypeError, ValueError) as exc:
            # The command itself cannot be sent (not the aggregate's, not JSON, too large):
            # no attempt would change that.
            self._feed(instance_id, CommandReplied(
                effect.path, effect.command_id, "rejected",
                reason=f"the command cannot be sent to {aggregate.name}: {type(exc).__name__}: {exc}"))
            return
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(record)

    def _flush(self) -> None:
        records, self._outbox = self._outbox, []
        if records:
            # Not awaited: a lost command is sent again when its attempt times out.
            self._agent.publish_later(records)

    def _command_record(self, instance_id: str, effect: SendCommand) -> Outgoing:
        aggregate = effect.aggregate
        type_name, payload = payload_of(effect.command)
        if type_name not in aggregate.definition.command_types:
            known = ", ".join(sorted(aggregate.definition.command_types))
            raise TypeError(f"{type_name} is not a command of aggregate {aggregate.name!r}; known: {known}")
        envelope = check_command(CommandEnvelope(
            command_id=effect.command_id,
            correlation_id=effect.command_id,
            aggregate_id=effect.aggregate_id,
            type=type_name,
            payload=payload,
            timestamp_ms=int(self._agent.now() * 1000),
            reply_to=self._agent.replies_topic,
            reply_key=instance_id,
        ))
        partition = partition_for(effect.aggregate_id, aggregate.context.partitions)
        tracing = self._tracing
        if tracing is None:
            return Outgoing(aggregate.topics.commands, effect.aggregate_id.encode(), avro.encode(envelope), partition)
        # A producer span under the run; the command carries it to the aggregate's decide.
        span = tracing.start(
            f"send {aggregate.name}", self._agent.run_context(instance_id), kind=PRODUCER,
            attributes={"tidings.workflow": self._agent.name, "tidings.instance_id": instance_id,
                        "tidings.step": effect.path, "tidings.attempt": effect.attempt,
                        "tidings.aggregate": aggregate.name, "tidings.aggregate_id": effect.aggregate_id,
                        "tidings.command_id": effect.command_id, "tidings.command_type": type_name,
                        "messaging.destination.name": aggregate.topics.commands},
        )
        carrier = tracing.carrier(span)
        tracing.end(span)
        envelope = replace(envelope, metadata={**envelope.metadata, **carrier})
        return Outgoing(aggregate.topics.commands, effect.aggregate_id.encode(), avro.encode(envelope), partition,
                        headers_of(carrier))

    def _feed(self, instance_id: str, message: Any) -> None:
        self._agent.feed(instance_id, message)

    def _stop(self, key: tuple[str, str]) -> None:
        sending = self._sending.pop(key, None)
        if sending is None:
            return
        sending.stop_timers()
        if sending.watch is not None and self._tail is not None:
            self._tail.unwatch(sending.watch)
        self._agent.release(key[0])

    def _watch(self, instance_id: str, effect: SendCommand) -> _Watch:
        aggregate = effect.aggregate
        watch = _Watch(
            instance_id=instance_id,
            path=effect.path,
            topic=aggregate.topics.events,
            partition=partition_for(effect.aggregate_id, aggregate.context.partitions),
            aggregate_id=effect.aggregate_id,
            correlation_id=effect.command_id,
            registry=aggregate.definition.event_types,
            from_ms=effect.watch_from or 0,
        )
        if self._tail is None:
            self._tail = EventsTail(self._connection, self._seen, group_prefix=self._group_prefix)
        self._tail.watch(watch)
        return watch

    def _seen(self, watch: _Watch, events: tuple[SentEvent, ...]) -> None:
        if self._sending.get((watch.instance_id, watch.path), _Sending()).watch is watch:
            self._feed(watch.instance_id, EventsSeen(watch.path, events))

    # -- lifecycle -------------------------------------------------------------------------

    def drop(self, partitions: set[int]) -> None:
        """Stop the sends of instances on ``partitions`` (revoked: their new owner resends)."""
        home = self._agent.home
        for key in [k for k in self._sending if home(k[0]) in partitions]:
            self._stop(key)

    def close(self) -> None:
        """Stop every send and the events reader."""
        for key in list(self._sending):
            self._stop(key)
        if self._tail is not None:
            self._tail.close()
            self._tail = None


def _is_workflow_reply(value: bytes | None) -> bool:
    """An Avro ``WorkflowReply`` (a target's answer to a signal step), told by its schema fingerprint."""
    if value is None or len(value) < 10 or value[:2] != avro.MAGIC:
        return False
    version = avro.CATALOGUE.by_fingerprint.get(value[2:10])
    return version is not None and version.record_type is WorkflowReply


class EventsTail:
    """Reads the events topics' partitions that filter steps watch, with one plain consumer.

    A new watch (re)starts its partition at the offset of its start time less
    ``WATCH_MARGIN_MS``, unless the partition is being read from an earlier offset
    already; a partition nobody watches any more is let go. Records are matched on the
    loop, so the watches need no lock; the consumer is only used from one task.
    """

    def __init__(self, connection: KafkaConnection, seen: Callable[[_Watch, tuple[SentEvent, ...]], None], *,
                 group_prefix: str = DEFAULT_PREFIX) -> None:
        self._group_prefix = group_prefix  # its consumer's group: never joined (groups.py)
        self._connection = connection
        self._seen = seen
        self._tails: dict[tuple[str, int], _Tail] = {}
        self._from: dict[tuple[str, int], int] = {}  # partitions to (re)start: earliest ms
        self._assigned: set[tuple[str, int]] = set()
        self._consumer: Consumer | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # Its own thread: its polls would hold one of asyncio's few shared ones (threads.py).
        self._calls = OwnThread("tidings-sends-tail")

    def watch(self, watch: _Watch) -> None:
        where = (watch.topic, watch.partition)
        self._tails.setdefault(where, _Tail()).watches.setdefault(watch.correlation_id, []).append(watch)
        start = watch.from_ms - WATCH_MARGIN_MS
        self._from[where] = min(start, self._from.get(where, start))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
            self._task.add_done_callback(self._ended)

    def unwatch(self, watch: _Watch) -> None:
        where = (watch.topic, watch.partition)
        tail = self._tails.get(where)
        if tail is None:
            return
        watches = tail.watches.get(watch.correlation_id, [])
        if watch in watches:
            watches.remove(watch)
        if not watches:
            tail.watches.pop(watch.correlation_id, None)
        if not tail.watches:
            del self._tails[where]
            self._wake.set()

    def close(self) -> None:
        # The reading task closes the consumer itself: a consume may be running in a thread.
        self._closing = True
        self._wake.set()

    @staticmethod
    def _ended(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the events reader of workflow sends stopped", exc_info=task.exception())

    async def _run(self) -> None:
        try:
            await self._read()
        finally:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            self._calls.close()

    async def _read(self) -> None:
        while not self._closing:
            starts, self._from = self._from, {}
            gone = {where for where in self._assigned if where not in self._tails}
            if starts or gone:
                try:
                    await self._calls.run(self._reassign, starts, gone)
                except Exception:  # noqa: BLE001 - e.g. offsets_for_times timed out: the watches wait
                    log.warning("positioning the events reader of workflow sends failed; retrying", exc_info=True)
                    for where, from_ms in starts.items():  # every start is tried again
                        self._from[where] = min(from_ms, self._from.get(where, from_ms))
                    await asyncio.sleep(1.0)
                    continue
            if not self._assigned:
                self._wake.clear()
                if not self._closing:
                    await self._wake.wait()
                continue
            consumer = self._client()
            try:
                messages = await self._calls.run(consumer.consume, 500, 0.05)
            except Exception:  # noqa: BLE001 - a broker hiccup: try again, the watches wait
                log.warning("reading events for workflow sends failed; retrying", exc_info=True)
                await asyncio.sleep(1.0)
                continue
            for message in messages:
                self._match(message)

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self._connection.consumer(**{
                "group.id": reader_group(self._group_prefix, "sends"),
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 50,
            })
        return self._consumer

    def _reassign(self, starts: dict[tuple[str, int], int], gone: set[tuple[str, int]]) -> None:
        consumer = self._client()
        if gone:
            consumer.incremental_unassign([TopicPartition(t, p) for t, p in gone])
            self._assigned -= gone
        for (topic, partition), from_ms in starts.items():
            where = (topic, partition)
            if where not in self._tails:
                continue  # unwatched meanwhile
            (found,) = consumer.offsets_for_times([TopicPartition(topic, partition, max(from_ms, 0))], 10.0)
            offset = found.offset if found.offset >= 0 else OFFSET_END
            if where in self._assigned:
                (current,) = consumer.position([TopicPartition(topic, partition)])
                if 0 <= current.offset and (offset == OFFSET_END or current.offset <= offset):
                    continue  # read from earlier already: the new watch sees what it needs
                consumer.incremental_unassign([TopicPartition(topic, partition)])
            consumer.incremental_assign([TopicPartition(topic, partition, offset)])
            self._assigned.add(where)

    def _match(self, message: Any) -> None:
        error = message.error()
        if error is not None:
            if is_fatal(error):  # this reader can read nothing more: restart the worker
                stop_worker("reading events for workflow sends", fatal_error(error, "reading events"))
            log.warning("reading events for workflow sends: %s",
                        not_authorized(error, self._connection, "to read the events") or error.str())
            return
        tail = self._tails.get((message.topic(), message.partition()))
        if tail is None:
            return
        try:
            event = avro.decode_as(message.value() or b"", EventEnvelope)
        except RecordError:
            return  # the aggregate's catch-up reports what does not decode
        watches = tail.watches.get(event.correlation_id)
        if not watches:
            return
        for watch in list(watches):
            if watch.aggregate_id != event.aggregate_id:
                continue
            try:
                found = WorkflowSends._event(event, watch.registry)
            except Exception as exc:  # noqa: BLE001 - also user code (a validator): the tail must go on
                log.error("workflow send %s skips event %s/%d@%d: %s: %s", watch.correlation_id[:200],
                          message.topic(), message.partition(), message.offset(), type(exc).__name__, exc)
                continue
            self._seen(watch, (found,))
