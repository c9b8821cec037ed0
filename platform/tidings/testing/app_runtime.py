"""An App in memory: every kind it declares on one fake clock, no Kafka.

``AppTestRuntime(app)`` is a ``WorkflowTestRuntime`` that also hosts every aggregate, saga,
projection, orchestration, flow stage and schedule the App declares, and carries out what the workflow runtime leaves undone:
a workflow's ``ctx.send*`` reaches the in-memory aggregate and its reply comes back into the
body, the aggregate's stored events feed the projections and the sagas subscribed to it,
a saga's commands reach the aggregates, their replies come back to it and its
expectation timers fire on the virtual clock, orchestrations step on the events their
``key_of`` routes, and a schedule's due times fire and start its
workflow's runs (the dispatcher's decide -> start -> report, through the schedule aggregate)::

    runtime = AppTestRuntime(build_app())
    runtime.replace_activity("charge", lambda attempt: "receipt-1")
    runtime.workflow("checkout").start("order-1", "order-1")
    runtime.run_until_idle()
    assert runtime.view("balances").get("acc-1")["balance"] == "70"

Every rule is the pure core's, the one the worker applies: ``core.aggregate.handle`` decides
(repeats of a command id get their first verdict, ``expected_version`` conflicts, the
``SagaAlreadyStarted`` check through ``App.sagas_of``), ``core.saga.feed``/``fire`` drive the
sagas, ``WorkflowInstance.advance`` the workflows; payloads go through the codec's
``payload_of``/``load_payload`` both ways, as on the topics. What the shell adds is played
here as the agents do it (``shell/kinds/*/agent.py``): a send's command carries the step key
as command and correlation id; a saga hears the stored events of its aggregates and the
events of the replies to its own commands (deferred ones too), once per event id; a
projection gets each stored event once, in order, and a handler that raises has its writes
dropped (the event is a dead letter, ``dead_letters``).

Everything runs in the runtime's one queue, in time order: a command is decided when its
send falls due, its reply is one more queued input, so nothing recurses and ``advance``
skips the virtual clock over every kind at once. An orchestration's instances are stepped by
``core.orchestration.advance`` with the stored events its ``key_of`` routes to them (their
actions and outcomes kept, not produced). A flow stage takes the source records a test feeds
it (``feed_flow``) and writes each outcome to ``sinks`` as its agent does.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

from tidings.codec.payloads import load_payload, payload_of
from tidings.core import saga as saga_core
from tidings.core.aggregate import AggregateDefinition, AggregateInstance, Handled, handle, restore
from tidings.core.limits import check_command, check_id
from tidings.core.records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from tidings.core import orchestration as orchestration_core
from tidings.core.orchestration_records import OrchestrationActions, OrchestrationOutcome
from tidings.core.saga_records import SagaJournalEntry
from tidings.core.schedule.aggregate import (
    SCHEDULE_AGGREGATE,
    FireSchedule,
    PendingRun,
    ReportStart,
    ScheduleState,
)
from tidings.core.schedule.runs import ScheduledRun, run_id
from tidings.core.workflow.context import instant_ms
from tidings.core.workflow import Attempt, Decision, PublishOutcome, RunActivity
from tidings.core.workflow.sends import CommandReplied, EventsSeen, SendCommand, SendTimedOut, SentEvent, StopSend
from tidings.errors import (
    AggregateVersionConflict,
    KeyOfFailed,
    OrchestrationFailed,
    RecordError,
    SagaAlreadyStarted,
    SchemaError,
)
from tidings.shell.kinds.flow.stage import SourceDecoder, WorkflowFlowAgent
from tidings.shell.kinds.orchestration.agent import SourceEvent
from tidings.shell.kinds.projection.agent import ProjectedEvent
from tidings.shell.kinds.projection.signals import signal_id_for
from tidings.shell.kinds.schedule.handle import ScheduleHandle

from .workflows import FakeClock, WorkflowHandle, WorkflowTestRuntime

if TYPE_CHECKING:
    from tidings.shell.app import App

_REFUSAL_PREFIX = "SagaAlreadyStarted:"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Job:
    """A queued input of a kind other than a workflow: ``run()`` when due.

    It rides the workflow runtime's queue as a message (``path`` is its unique place there),
    so every kind moves on one virtual clock, in time order.
    """

    path: str
    run: Callable[[], None] = field(compare=False)


@dataclass(slots=True)
class DeadLetter:
    """What a worker would have put on ``{app}.deadletter``: whose input, and why."""

    origin: str
    reason: str


class MemoryView:
    """A projection's read model in memory, as ``tidings.View`` reads and writes it.

    The writes of one handler call are kept only when it returns (a call that raises has
    them dropped), as the worker's view does.
    """

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self._event: dict[str, Any] = {}
        self._deleted: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        """Return the value at ``key``, or ``default``."""
        if key in self._deleted:
            return default
        if key in self._event:
            return self._event[key]
        return self._data.get(key, default)

    def put(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` (JSON-compatible: checked now, as the worker's view does)."""
        json.dumps(value)
        self._deleted.discard(key)
        self._event[key] = value

    def delete(self, key: str) -> None:
        """Remove ``key``."""
        self._event.pop(key, None)
        self._deleted.add(key)

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """Iterate entries whose key starts with ``prefix``, in key order."""
        merged = {k: v for k, v in self._data.items() if k.startswith(prefix) and k not in self._deleted}
        merged.update((k, v) for k, v in self._event.items() if k.startswith(prefix))
        for key in sorted(merged):
            yield key, merged[key]

    def _keep(self) -> None:
        for key in self._deleted:
            self._data.pop(key, None)
        self._data.update(self._event)
        self._event.clear()
        self._deleted.clear()

    def _discard(self) -> None:
        self._event.clear()
        self._deleted.clear()


@dataclass(slots=True)
class _Aggregate:
    handle: Any
    instances: dict[str, AggregateInstance[Any]] = field(default_factory=dict)
    events: dict[str, list[EventEnvelope]] = field(default_factory=dict)
    # (aggregate id, command id) -> (first verdict, when): answered again for command_retention.
    verdicts: dict[tuple[str, str], tuple[ReplyEnvelope, int]] = field(default_factory=dict)
    started: set[tuple[str, str, str]] = field(default_factory=set)  # (id, saga, correlation id)

    @property
    def definition(self) -> AggregateDefinition[Any, Any, Any]:
        return cast("AggregateDefinition[Any, Any, Any]", self.handle.definition)


@dataclass(slots=True)
class _Saga:
    handle: Any
    sagas: dict[str, saga_core.SagaState] = field(default_factory=dict)
    journals: dict[str, list[SagaJournalEntry]] = field(default_factory=dict)

    @property
    def replies_topic(self) -> str:
        return str(self.handle.topics.replies)


@dataclass(slots=True)
class _Projection:
    handle: Any
    view: MemoryView = field(default_factory=MemoryView)
    # The last version applied per (aggregate, id), stored with the view as the worker's is.
    versions: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(slots=True)
class _Orchestrated:
    """One orchestration instance: its journaled values, what it asked for, its outcome."""

    state: orchestration_core.InstanceState
    live: Any  # the Coordination that takes the next value; None once finished
    journal: list[tuple[Any, tuple[str, int, int]]] = field(default_factory=list)
    actions: list[OrchestrationActions] = field(default_factory=list)
    outcome: OrchestrationOutcome | None = None


@dataclass(slots=True)
class _Orchestration:
    handle: Any
    instances: dict[str, _Orchestrated] = field(default_factory=dict)


@dataclass(slots=True)
class _Flow:
    stage: Any
    decoder: SourceDecoder
    waiting: dict[str, int] = field(default_factory=dict)  # instance id -> deadline (ms)


class _EventSignals:
    """``event.signal`` of a projection handler, to the runtime's workflows (ids as the worker's)."""

    def __init__(self, runtime: AppTestRuntime, projection: str, event: EventEnvelope, aggregate: str) -> None:
        self._runtime = runtime
        self._projection = projection
        self._event = event
        self._aggregate = aggregate
        self._counts: dict[tuple[str, str, str], int] = {}

    def signal(self, workflow: Any, instance_id: str, name: str, payload: Any, timeout: float | None) -> Any:
        key = (workflow.name, instance_id, name)
        index = self._counts.get(key, 0)
        self._counts[key] = index + 1
        signal_id = signal_id_for(self._projection, self._aggregate, self._event.aggregate_id,
                                  self._event.version, name, index)
        runtime = self._runtime

        async def send() -> None:
            runtime.workflow(workflow.name).signal(instance_id, name, payload, signal_id=signal_id)

        return send()


class _MemoryAggregate:
    """An aggregate handle whose ``send`` is the runtime's (what ``ScheduleHandle`` sends through)."""

    def __init__(self, runtime: AppTestRuntime, handle: Any) -> None:
        self._runtime = runtime
        self._handle = handle
        self.name = handle.name
        self.definition = handle.definition

    async def send(self, aggregate_id: str, command: Any, timeout: float | None = None, **options: Any) -> Any:
        return self._runtime.send(self._handle, aggregate_id, command, **options)


class AppTestRuntime(WorkflowTestRuntime):
    """Hosts every kind ``app`` declares in memory, on one fake clock (see the module's docstring).

    Args:
        app: The App whose definitions to run (nothing of it is opened: no topic, no client).
        clock: The clock; a new ``FakeClock`` by default.
        seed: Seeds the entropy ``new_guid``/``random`` draw from, so tests are repeatable.
    """

    def __init__(self, app: App, *, clock: FakeClock | None = None, seed: int = 0) -> None:
        super().__init__(clock=clock, seed=seed)
        self.app = app
        self.dead_letters: list[DeadLetter] = []
        self._stand_ins: dict[str, Callable[[Attempt], Any]] = {}
        self._aggregates: dict[str, _Aggregate] = {h.name: _Aggregate(h) for h in app.aggregates}
        self._sagas: dict[str, _Saga] = {h.name: _Saga(h) for h in app.sagas}
        self._projections: dict[str, _Projection] = {h.name: _Projection(h) for h in app.projections}
        self._orchestrations: dict[str, _Orchestration] = {
            h.name: _Orchestration(h) for h in app.declared("orchestration")}
        self._command_timeout_ms = int(app.command_timeout * 1000)
        # Filter steps waiting for events under their correlation id: (aggregate, id, correlation) -> step.
        self._watches: dict[tuple[str, str, str], tuple[tuple[str, str], str]] = {}
        stages: list[Any] = list(app.declared("flow"))
        self._flows: dict[str, _Flow] = {
            h.name: _Flow(h, SourceDecoder(h.handle.definition, h.source_schema)) for h in stages}
        #: What each flow stage wrote to its sink topic: ``(key, JSON value)``, in order.
        self.sinks: dict[str, list[tuple[str, Any]]] = {h.sink_topic: [] for h in stages}
        self._jobs = 0
        self._offsets: dict[str, dict[tuple[str, int], int]] = {}
        self._schedules: ScheduleHandle | None = None
        self._runs_started: set[tuple[str, datetime]] = set()
        if SCHEDULE_AGGREGATE in self._aggregates:
            declared = app.schedule_handle()
            self._schedules = replace(declared, aggregate=cast(Any, _MemoryAggregate(self, declared.aggregate)),
                                      clock=self.clock.now)
        for workflow in app.workflows:
            self.register(workflow.definition)

    # ------------------------------------------------------------------ the test's API

    def workflow(self, name: str) -> WorkflowHandle:
        """The in-memory handle of the App's workflow ``name`` (start, signal, update, result...)."""
        if name not in self._definitions:
            raise LookupError(f"app {self.app.name!r} declares no workflow {name!r}; "
                              f"it declares: {', '.join(sorted(self._definitions)) or 'none'}")
        return WorkflowHandle(self, name)

    def replace_activity(self, name: str, stand_in: Callable[[Attempt], Any]) -> None:
        """Run ``stand_in(attempt)`` wherever a body calls activity ``name`` (sync or async).

        Its result (or what it raises) is the activity's, under the body's retry policy.
        """
        if not callable(stand_in):
            raise TypeError(f"a stand-in for activity {name!r} must be callable, not {stand_in!r}")
        self._stand_ins[name] = stand_in

    def send(
        self, aggregate: Any, aggregate_id: str, command: Any, *, expected_version: int | None = None,
        command_id: str | None = None, correlation_id: str | None = None,
    ) -> Any:
        """Send ``command`` to the aggregate (its handle or name) and return the reply event.

        Decided at once, as ``Client.send`` would have it decided; what it causes (sagas,
        projections, replies) runs at the next ``run_until_idle``/``advance``.

        Raises:
            AggregateVersionConflict, SagaAlreadyStarted, SchemaError, LimitError: as ``Client.send``.
            LookupError: The App declares no such aggregate.
        """
        held = self._aggregate(aggregate)
        check_id(aggregate_id, "aggregate_id")  # what the client checks before producing
        command_id = command_id or str(uuid.UUID(int=self._random.getrandbits(128), version=4))
        type_name, payload = payload_of(command)
        if type_name not in held.definition.command_types:
            known = ", ".join(sorted(held.definition.command_types))
            raise SchemaError(f"{type_name} is not a command of aggregate {held.handle.name!r}; known: {known}")
        # Addressed as the client addresses it (its replies topic): what a worker judges by it
        # (a schedule fire that asks for a reply is refused) is judged the same here.
        envelope = CommandEnvelope(command_id=command_id, correlation_id=correlation_id or command_id,
                                   aggregate_id=aggregate_id, type=type_name, payload=payload,
                                   timestamp_ms=self.clock.now_ms, expected_version=expected_version,
                                   reply_to=self.app.replies_topic)
        reply = self._decide(held, check_command(envelope))
        if reply.status == "conflict":
            raise AggregateVersionConflict(aggregate_id, expected_version if expected_version is not None else -1,
                                           reply.version)
        if reply.status == "rejected":
            if (reply.reason or "").startswith(_REFUSAL_PREFIX):
                raise SagaAlreadyStarted(reply.reason)
            raise SchemaError(f"the worker rejected the command: {reply.reason}")
        if reply.status == "ignored" or not reply.events:
            return None
        last = reply.events[-1]
        return load_payload(last.type, last.payload, held.definition.event_types)

    def state(self, aggregate: Any, aggregate_id: str) -> Any:
        """The aggregate instance's live state (its initial state when it has none)."""
        held = self._aggregate(aggregate)
        found = held.instances.get(aggregate_id)
        return held.definition.initial if found is None else found.live

    def events(self, aggregate: Any, aggregate_id: str) -> list[EventEnvelope]:
        """The stored events of an aggregate instance, oldest first (a copy)."""
        return list(self._aggregate(aggregate).events.get(aggregate_id, []))

    def view(self, projection: str) -> MemoryView:
        """The read model of projection ``projection``."""
        return _declared(self._projections, 'projection', projection, self.app.name).view

    def orchestration_actions(self, orchestration: str, instance: str) -> list[OrchestrationActions]:
        """What orchestration instance ``instance`` asked for, one record per position (what the
        worker writes to its actions topic), oldest first."""
        found = _declared(self._orchestrations, 'orchestration', orchestration, self.app.name).instances.get(instance)
        return [] if found is None else list(found.actions)

    def orchestration_outcome(self, orchestration: str, instance: str) -> OrchestrationOutcome | None:
        """The instance's outcome once an event finished it (the record the worker writes to its
        outcomes topic: the position, the last ``Continue`` value encoded)."""
        found = _declared(self._orchestrations, 'orchestration', orchestration, self.app.name).instances.get(instance)
        return None if found is None else found.outcome

    def saga_state(self, saga: str, saga_id: str) -> saga_core.SagaState | None:
        """What saga ``saga`` knows of ``saga_id`` (None: never started)."""
        return _declared(self._sagas, 'saga', saga, self.app.name).sagas.get(saga_id)

    def saga_journal(self, saga: str, saga_id: str) -> list[SagaJournalEntry]:
        """The journal records of saga ``saga_id``, in seq order (a copy)."""
        return list(_declared(self._sagas, 'saga', saga, self.app.name).journals.get(saga_id, []))

    # ------------------------------------------------------------ crash and recover

    def crash(self) -> None:
        """Lose everything not stored: besides the workflows' (``WorkflowTestRuntime.crash``),
        the aggregates' live state (a deferred fold), the sagas' timers and unsent commands,
        the projections' and the dispatcher's queued inputs. Events, first verdicts, saga
        journals and views are stored: they stay."""
        super().crash()
        for held in self._aggregates.values():
            held.instances.clear()
        for saga in self._sagas.values():
            saga.sagas.clear()
        self._watches.clear()
        self._runs_started.clear()
        for orchestration in self._orchestrations.values():
            for found in orchestration.instances.values():
                found.live = None  # rebuilt from its journal by recover()

    def recover(self) -> dict[tuple[str, str], Decision]:
        """What each agent does when it takes its partitions back, then ``WorkflowTestRuntime.recover``:
        an aggregate folds its events again (``core.aggregate.restore``), a projection applies
        what it had not, a saga drives its state again (``core.saga.restore``/``recover``:
        its commands resent under their ids, its expectations armed from the stored entry
        time), the dispatcher starts the pending runs again and arms each next due time."""
        for held in self._aggregates.values():
            for aggregate_id, events in held.events.items():
                instance = AggregateInstance.new(aggregate_id, held.definition.initial)
                for event in events:
                    value = load_payload(event.type, event.payload, held.definition.event_types)
                    instance = restore(held.definition, instance, event, value) or instance
                held.instances[aggregate_id] = instance
        for projection in self._projections.values():
            for source in projection.handle.sources:
                source_held = self._aggregates.get(source.aggregate)
                for events in ([] if source_held is None else source_held.events.values()):
                    for event in events:
                        self._later(f"projection:{projection.handle.name}", self.clock.now_ms,
                                    partial(self._project, projection, source.aggregate, event))
        for saga in self._sagas.values():
            for saga_id, records in saga.journals.items():
                restored = saga_core.restore(saga.handle.definition, records)
                if restored is None:
                    continue
                saga.sagas[saga_id] = restored
                self._saga_step(saga, saga_id, partial(
                    saga_core.recover, saga.handle.definition, restored, now_ms=self.clock.now_ms,
                    encode=self._encode_for_saga, replies_topic=saga.replies_topic))
            # Its router reads the events again from the committed offsets (here: all of them);
            # the core takes each event id once, and an ended saga none.
            for name, held in self._aggregates.items():
                if saga.handle.subscribes_to(name):
                    for events in held.events.values():
                        for event in events:
                            self._later(f"saga:{saga.handle.name}", self.clock.now_ms,
                                        partial(self._saga_event, saga, name, event))
        for orchestration in self._orchestrations.values():
            for key, found in orchestration.instances.items():
                if not found.state.finished:
                    found.live = orchestration_core.replay(self._new_orchestration(orchestration, key),
                                                           [value for value, _ in found.journal])
            for source in orchestration.handle.sources:
                source_held = self._aggregates.get(source.aggregate)
                for events in ([] if source_held is None else source_held.events.values()):
                    for event in events:
                        self._later(f"orchestration:{orchestration.handle.name}", self.clock.now_ms,
                                    partial(self._orchestrate, orchestration, source, event))
        if self._schedules is not None:
            for schedule_id in self._aggregates[SCHEDULE_AGGREGATE].events:
                self._later("schedule-dispatcher", self.clock.now_ms, partial(self._dispatch, schedule_id))
        return super().recover()

    # ------------------------------------------------------------- the queue of jobs

    def deliver(self, workflow: str, instance_id: str, message: Any) -> Decision:
        if isinstance(message, _Job):
            message.run()
            return Decision((), (), None)
        return super().deliver(workflow, instance_id, message)

    def _later(self, owner: str, due_ms: int, run: Callable[[], None]) -> None:
        self._jobs += 1
        self._schedule(("", owner), f"job-{self._jobs}", due_ms, message=_Job(f"job-{self._jobs}", run))

    # ------------------------------------------------------------- workflows' effects

    def _apply(self, key: tuple[str, str], decision: Decision) -> None:
        if self._stand_ins and any(isinstance(e, RunActivity) and e.name in self._stand_ins for e in decision.effects):
            effects = tuple(replace(e, fn=self._stand_ins[e.name])
                            if isinstance(e, RunActivity) and e.name in self._stand_ins else e
                            for e in decision.effects)
            decision = replace(decision, effects=effects)
        super()._apply(key, decision)  # journals first, then the effects it knows
        for effect in decision.effects:
            if isinstance(effect, PublishOutcome):
                for flow in self._flows.values():
                    if flow.stage.handle.name == key[0] and flow.waiting.pop(key[1], None) is not None:
                        self._sink(flow, key[1], effect.outcome)
            elif isinstance(effect, SendCommand):
                self._send_step(key, effect)
            elif isinstance(effect, StopSend):
                scheduled = self._by_path.pop((*key, effect.path), None)
                if scheduled is not None:
                    scheduled.cancelled = True
                for watch, step in list(self._watches.items()):
                    if step == (key, effect.path):
                        del self._watches[watch]

    def _send_step(self, key: tuple[str, str], effect: SendCommand) -> None:
        """``SendCommand``: the command at ``not_before``, its reply fed back; a timeout if none comes."""
        held = self._aggregates.get(str(getattr(effect.aggregate, "name", "")))
        end = effect.not_before + (effect.timeout_ms or self._command_timeout_ms)
        if effect.deadline_at is not None:
            end = min(end, effect.deadline_at)
        if held is None:
            # No worker hosts that aggregate: the attempt times out, as on Kafka.
            self._schedule(key, effect.path, end, message=SendTimedOut(effect.path, effect.attempt))
            return
        if effect.watch_from is not None:
            self._watches[(held.handle.name, effect.aggregate_id, effect.command_id)] = (key, effect.path)

        def send() -> None:
            try:
                type_name, payload = payload_of(effect.command)
                if type_name not in held.definition.command_types:
                    known = ", ".join(sorted(held.definition.command_types))
                    raise TypeError(f"{type_name} is not a command of aggregate {held.handle.name!r}; known: {known}")
            except (RecordError, TypeError, ValueError) as exc:
                message = CommandReplied(effect.path, effect.command_id, "rejected",
                                         reason=f"the command cannot be sent to {held.handle.name}: "
                                                f"{type(exc).__name__}: {exc}")
            else:
                envelope = CommandEnvelope(
                    command_id=effect.command_id, correlation_id=effect.command_id,
                    aggregate_id=effect.aggregate_id, type=type_name, payload=payload,
                    timestamp_ms=self.clock.now_ms, reply_key=key[1])
                reply = self._decide(held, envelope)
                events = tuple(SentEvent(e.type, load_payload(e.type, e.payload, held.definition.event_types),
                                         e.command_id, e.deferred) for e in reply.events)
                message = CommandReplied(effect.path, reply.command_id, reply.status, events, reply.reason)
            if key in self._instances:
                self._schedule(key, effect.path, self.clock.now_ms, message=message)

        if effect.not_before <= self.clock.now_ms:
            send()
        else:
            self._later(f"send:{key[0]}/{key[1]}/{effect.path}", effect.not_before, send)

    # -------------------------------------------------------------------- aggregates

    def _aggregate(self, aggregate: Any) -> _Aggregate:
        name = aggregate if isinstance(aggregate, str) else str(getattr(aggregate, "name", ""))
        held = self._aggregates.get(name)
        if held is None:
            raise LookupError(f"app {self.app.name!r} declares no aggregate {name!r}; "
                              f"it declares: {', '.join(sorted(self._aggregates)) or 'none'}")
        return held

    def _decide(self, held: _Aggregate, command: CommandEnvelope) -> ReplyEnvelope:
        """One command through ``core.aggregate.handle``, as the aggregate agent decides it."""
        definition = held.definition
        aggregate_id = command.aggregate_id
        now_ms = self.clock.now_ms
        retention = definition.command_retention_ms

        def seen(command_id: str) -> bool:
            first = held.verdicts.get((aggregate_id, command_id))
            return first is not None and now_ms - first[1] < retention

        def started(saga: str, correlation_id: str) -> bool:
            return (aggregate_id, saga, correlation_id) in held.started

        instance = held.instances.get(aggregate_id) or AggregateInstance.new(aggregate_id, definition.initial)
        try:
            value = load_payload(command.type, command.payload, definition.command_types)
            admit = getattr(held.handle, "admit", None)
            if admit is not None:
                value = admit(command, value, now_ms)
            handled: Handled[Any] = handle(definition, instance, command, value, now_ms=now_ms, encode=payload_of,
                                           starters=self.app.sagas_of(definition.name), started=started, seen=seen)
        except Exception as exc:  # noqa: BLE001 - user code: the worker dead-letters the command
            reason = f"aggregate {definition.name} failed on command {command.type} for {aggregate_id!r}: " \
                     f"{type(exc).__name__}: {exc}"
            self.dead_letters.append(DeadLetter(f"aggregate {definition.name}", reason))
            return ReplyEnvelope(command.command_id, command.correlation_id, aggregate_id, "rejected",
                                 instance.version, now_ms, reason=reason)
        if handled.duplicate:
            return held.verdicts[(aggregate_id, command.command_id)][0]
        assert handled.reply is not None
        held.instances[aggregate_id] = handled.instance
        held.verdicts[(aggregate_id, command.command_id)] = (handled.reply, now_ms)
        held.started.update((aggregate_id, saga, corr) for saga, corr in handled.sagas)
        if handled.stored:
            held.events.setdefault(aggregate_id, []).extend(handled.stored)
            self._stored(held, handled.stored)
        return handled.reply

    def _stored(self, held: _Aggregate, stored: tuple[EventEnvelope, ...]) -> None:
        """What reads the events topic: projections, subscribed sagas, filter steps' watches."""
        name = held.handle.name
        for projection in self._projections.values():
            if any(source.aggregate == name for source in projection.handle.sources):
                for event in stored:
                    self._later(f"projection:{projection.handle.name}", self.clock.now_ms,
                                partial(self._project, projection, name, event))
        for saga in self._sagas.values():
            if saga.handle.subscribes_to(name):
                for event in stored:
                    self._later(f"saga:{saga.handle.name}", self.clock.now_ms,
                                partial(self._saga_event, saga, name, event))
        for orchestration in self._orchestrations.values():
            for source in orchestration.handle.sources:
                if source.aggregate == name:
                    for event in stored:
                        self._later(f"orchestration:{orchestration.handle.name}", self.clock.now_ms,
                                    partial(self._orchestrate, orchestration, source, event))
        if name == SCHEDULE_AGGREGATE and self._schedules is not None:
            for schedule_id in dict.fromkeys(event.aggregate_id for event in stored):
                self._later("schedule-dispatcher", self.clock.now_ms, partial(self._dispatch, schedule_id))
        for event in stored:
            step = self._watches.get((name, event.aggregate_id, event.correlation_id))
            if step is not None:
                value = load_payload(event.type, event.payload, held.definition.event_types)
                seen = EventsSeen(step[1], (SentEvent(event.type, value, event.command_id, event.deferred),))
                self._schedule(step[0], f"{step[1]}~seen-{event.version}", self.clock.now_ms, message=seen)

    # --------------------------------------------------------------------- schedules

    @property
    def schedules(self) -> ScheduleHandle:
        """The App's ``app.schedules`` handle, sending to the in-memory schedule aggregate on the
        fake clock: ``asyncio.run(runtime.schedules.create(...))`` (its methods are coroutines).

        Raises:
            LookupError: The App declares no schedules.
        """
        if self._schedules is None:
            raise LookupError(f"app {self.app.name!r} declares no schedules (app.schedules([...]))")
        return self._schedules

    def _dispatch(self, schedule_id: str) -> None:
        """The dispatcher's decide -> start -> report for one schedule, from its stored state."""
        held = self._aggregates[SCHEDULE_AGGREGATE]
        instance = held.instances.get(schedule_id)
        if instance is None:
            return
        state: ScheduleState = instance.state
        dues: list[datetime] = []
        tokens: set[str] = set()
        for run in state.pending:
            if (schedule_id, run.due) not in self._runs_started:
                self._start_run(schedule_id, run)
                dues.append(run.due)
                if run.token:
                    tokens.add(run.token)
        if dues:
            self._runs_started.update((schedule_id, due) for due in dues)
            self._dispatcher_command(schedule_id, ReportStart(dues=tuple(dues), tokens=tuple(sorted(tokens))))
            return  # its RunStarted comes back through the journal and arms the next fire
        due = state.next_due()
        armed = ("", "schedule-dispatcher")
        path = f"fire:{schedule_id}"
        if due is None:
            scheduled = self._by_path.pop((*armed, path), None)
            if scheduled is not None:
                scheduled.cancelled = True
            return
        fire = partial(self._fire_schedule, schedule_id, due)
        # One timer per schedule, as the dispatcher's index: a new due time replaces the old.
        self._schedule(armed, path, max(instant_ms(due), self.clock.now_ms), message=_Job(path, fire))

    def _fire_schedule(self, schedule_id: str, due: datetime) -> None:
        self._dispatcher_command(schedule_id, FireSchedule(due=due, now=self.clock.now()))

    def _start_run(self, schedule_id: str, run: PendingRun) -> None:
        instance_id = run_id(schedule_id, run.due)
        try:
            if run.workflow not in self._definitions:
                raise SchemaError(f"this app declares no workflow {run.workflow!r}")
            self.workflow(run.workflow).start(instance_id, ScheduledRun(schedule_id, run.due, run.input))
        except Exception as exc:  # noqa: BLE001 - a run that can never start must not block the rest
            self.dead_letters.append(DeadLetter(
                "schedule-dispatcher", f"schedule {schedule_id!r}: the run {instance_id!r} cannot start: {exc}"))

    def _dispatcher_command(self, schedule_id: str, command: FireSchedule | ReportStart) -> None:
        type_name, payload = payload_of(command)
        self._decide(self._aggregates[SCHEDULE_AGGREGATE], CommandEnvelope(
            command_id=uuid.UUID(int=self._random.getrandbits(128), version=4).hex, correlation_id=schedule_id,
            aggregate_id=schedule_id, type=type_name, payload=payload, timestamp_ms=self.clock.now_ms))

    # ------------------------------------------------------------------- projections

    def _project(self, projection: _Projection, aggregate: str, event: EventEnvelope) -> None:
        """One stored event to the handler; its writes kept only when it returns."""
        name = projection.handle.name
        view = projection.view
        applied = projection.versions.get((aggregate, event.aggregate_id), 0)
        if event.version <= applied:
            return  # applied before (a recovery hands every stored event again)
        projection.versions[(aggregate, event.aggregate_id)] = event.version
        try:
            value = load_payload(event.type, event.payload, self._aggregates[aggregate].definition.event_types)
            signals = _EventSignals(self, name, event, aggregate)
            projected = ProjectedEvent(aggregate, event.aggregate_id, event.version, value, event,
                                       cast(Any, signals))
            result = projection.handle.handler(projected, view)
            if inspect.isawaitable(result):
                _complete(result)
        except Exception as exc:  # noqa: BLE001 - the handler's: the event is a dead letter
            view._discard()
            self.dead_letters.append(DeadLetter(f"projection {name}", f"{type(exc).__name__}: {exc}"))
            return
        view._keep()

    # ------------------------------------------------------------------- flow stages

    def feed_flow(self, flow: str, value: bytes | None) -> None:
        """One record of flow stage ``flow``'s source topic (its value's bytes, JSON or Avro).

        As the stage's agent: the value read as the workflow's input, ``id_of`` asked for the
        instance id, the workflow started; its outcome goes to ``sinks[sink_topic]`` when it
        ends, and an element not ended within the stage's timeout, or a record that cannot
        be used, is a dead letter.
        """
        held = _declared(self._flows, 'flow stage', flow, self.app.name)
        stage = held.stage
        # The agent's own code for what it decides (nothing of it touches Kafka).
        agent = cast(WorkflowFlowAgent, _AsAgent(stage))
        try:
            element = held.decoder.element(value)
            instance_id = WorkflowFlowAgent._id_of(agent, element)
            self.workflow(stage.handle.name).start(instance_id, element)
        except Exception as exc:  # noqa: BLE001 - DecodeError, SchemaError, KeyOfFailed: the record's
            self.dead_letters.append(DeadLetter(f"flow {stage.name}", f"{type(exc).__name__}: {exc}"))
            return
        outcome = self.outcomes.get((stage.handle.name, instance_id))
        if outcome is not None:  # an element replayed after its instance ended
            self._sink(held, instance_id, outcome)
            return
        deadline = self.clock.now_ms + int(stage.timeout * 1000)
        held.waiting[instance_id] = deadline
        self._later(f"flow:{flow}", deadline, partial(self._flow_timeout, held, instance_id))

    def _flow_timeout(self, flow: _Flow, instance_id: str) -> None:
        if flow.waiting.pop(instance_id, None) is not None:
            self.dead_letters.append(DeadLetter(f"flow {flow.stage.name}", (
                f"TimeoutError: flow {flow.stage.name!r}: workflow {flow.stage.handle.name} {instance_id!r} did not "
                f"end within {flow.stage.timeout} s of its start; the element is dead-lettered and the workflow "
                "carries on")))

    def _sink(self, flow: _Flow, instance_id: str, outcome: Any) -> None:
        record = WorkflowFlowAgent._outcome_record(cast(WorkflowFlowAgent, _AsAgent(flow.stage)), instance_id, outcome)
        self.sinks.setdefault(record.topic, []).append((instance_id, json.loads(record.value or b"null")))

    # ---------------------------------------------------------------- orchestrations

    def _orchestrate(self, orchestration: _Orchestration, source: Any, event: EventEnvelope) -> None:
        """The router's ``key_of``, then ``core.orchestration.advance`` for the instance."""
        name = orchestration.handle.name
        try:
            value = load_payload(event.type, event.payload, source.event_types)
            key = orchestration.handle.key_of(SourceEvent(source.aggregate, event.aggregate_id, event.version,
                                                          value, event))
            if key is None:
                return
            if not isinstance(key, str) or not key:
                raise KeyOfFailed(f"key_of of orchestration {name} returned {key!r:.100}, not a non-empty str or None")
            check_id(key, "instance key")
            found = orchestration.instances.get(key)
            if found is None:
                found = _Orchestrated(orchestration_core.InstanceState(key), self._new_orchestration(orchestration, key))
            # One position per stored event: its events topic, partition 0, its place in the journal.
            position = (source.topic, 0, self._offset_of(source.aggregate, event))
            if found.state.finished or found.state.seen(*position):
                return  # routed again after a recovery, or after the end
            advanced = orchestration_core.advance(found.state, found.live, value, source=position, encode=payload_of)
        except Exception as exc:  # noqa: BLE001 - KeyOfFailed, OrchestrationFailed: a dead letter
            self.dead_letters.append(DeadLetter(f"orchestration {name}", f"{type(exc).__name__}: {exc}"))
            return
        orchestration.instances[key] = found
        found.journal.append((value, position))
        found.state, found.live = advanced.state, advanced.orchestration
        if advanced.actions:
            found.actions.append(OrchestrationActions(name, key, advanced.state.sequence, advanced.actions,
                                                      self.clock.now_ms))
        if advanced.outcome is not None:
            found.outcome = OrchestrationOutcome(name, key, advanced.state.sequence, self.clock.now_ms,
                                                 advanced.outcome.type, advanced.outcome.payload)

    def _new_orchestration(self, orchestration: _Orchestration, key: str) -> Any:
        made = orchestration.handle.factory(key)
        if not callable(made):
            raise OrchestrationFailed(f"factory of orchestration {orchestration.handle.name} returned "
                                      f"{made!r}, not an orchestration")
        return made

    def _offset_of(self, aggregate: str, event: EventEnvelope) -> int:
        """The stored event's place among all the aggregate's stored events (its 'offset')."""
        offsets = self._offsets.setdefault(aggregate, {})
        key = (event.aggregate_id, event.version)
        if key not in offsets:
            offsets[key] = len(offsets)
        return offsets[key]

    # ------------------------------------------------------------------------- sagas

    def _saga_event(self, saga: _Saga, aggregate: str, event: EventEnvelope) -> None:
        definition = self._aggregates[aggregate].definition
        value = load_payload(event.type, event.payload, definition.event_types)
        saga_event = saga_core.SagaEvent(aggregate, event.aggregate_id, event.event_id, event.command_id,
                                         event.correlation_id, event.version, event.type, value, event.deferred)
        saga_id = event.correlation_id
        self._saga_step(saga, saga_id, lambda: saga_core.feed(
            saga.handle.definition, saga.sagas.get(saga_id), saga_id, saga_event, now_ms=self.clock.now_ms,
            encode=self._encode_for_saga, replies_topic=saga.replies_topic))

    def _saga_step(self, saga: _Saga, saga_id: str, decide: Callable[[], saga_core.SagaStep]) -> None:
        """Journal a step's records, then send its commands and arm its timers (the agent's order)."""
        try:
            step = decide()
        except Exception as exc:  # noqa: BLE001 - HandlerFailed: the input is a dead letter
            self.dead_letters.append(DeadLetter(f"saga {saga.handle.name}", f"{type(exc).__name__}: {exc}"))
            return
        saga.journals.setdefault(saga_id, []).extend(step.records)
        if step.saga is not None:
            saga.sagas[saga_id] = step.saga
        for command in step.commands:
            self._later(f"saga:{saga.handle.name}", self.clock.now_ms,
                        partial(self._saga_command, saga, saga_id, command))
        for timer in step.timers:
            fired = saga_core.TimerFired(timer.seq, timer.index, timer.kind, timer.due_ms)
            self._later(f"saga:{saga.handle.name}", timer.due_ms, partial(self._saga_timer, saga, saga_id, fired))

    def _saga_timer(self, saga: _Saga, saga_id: str, fired: saga_core.TimerFired) -> None:
        current = saga.sagas.get(saga_id)
        if current is None or current.ended or current.seq != fired.seq:
            return  # its state is over (the agent cancels such timers)
        self._saga_step(saga, saga_id, lambda: saga_core.fire(
            saga.handle.definition, current, fired, now_ms=self.clock.now_ms, encode=self._encode_for_saga,
            replies_topic=saga.replies_topic))

    def _saga_command(self, saga: _Saga, saga_id: str, command: saga_core.SagaCommand) -> None:
        held = self._aggregates.get(str(getattr(command.aggregate, "name", "")))
        if held is None:
            return  # no worker hosts it: the expectation resends or runs out
        reply = self._decide(held, command.envelope)
        current = saga.sagas.get(saga_id)
        if reply.status != "accepted" or current is None or current.ended:
            return  # the agent logs a refusal and goes on; a late answer changes nothing
        for event in reply.events:
            self._later(f"saga:{saga.handle.name}", self.clock.now_ms,
                        partial(self._saga_event, saga, held.handle.name, event))

    def _encode_for_saga(self, aggregate: Any, command: Any) -> tuple[str, bytes]:
        held = self._aggregates.get(str(getattr(aggregate, "name", "")))
        if held is None or held.handle is not aggregate:
            raise TypeError(f"{aggregate!r:.100} is not an aggregate handle of this app")
        type_name, payload = payload_of(command)
        if type_name not in held.definition.command_types:
            known = ", ".join(sorted(held.definition.command_types))
            raise TypeError(f"{type_name!r} is not a command of aggregate {held.handle.name} (known: {known})")
        return type_name, payload


def _declared(kinds: dict[str, T], kind: str, name: str, app: str) -> T:
    """``kinds[name]``, or a LookupError that names what the App declares."""
    found = kinds.get(name)
    if found is None:
        raise LookupError(f"app {app!r} declares no {kind} {name!r}; it declares: {', '.join(sorted(kinds)) or 'none'}")
    return found


@dataclass(frozen=True, slots=True)
class _AsAgent:
    """What ``WorkflowFlowAgent._id_of`` and ``_outcome_record`` read of their agent: its stage."""

    stage: Any


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _complete(awaitable: Any) -> Any:
    """Run an async handler to its end from synchronous code: on a private loop, or, when the
    test's own loop runs in this thread (``run_until_idle_async``), on a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(_awaited(awaitable))
        finally:
            loop.close()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _awaited(awaitable)).result()


__all__ = ["AppTestRuntime", "DeadLetter", "MemoryView"]
