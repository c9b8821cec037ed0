"""An in-memory workflow runtime for unit tests: a fake clock, journals in a dict, no Kafka.

It plays the shell's part exactly as the Faust agent does: requests go through the same
inbox rules (``tidings.core.workflow.inbox_rules``), so ``start``, ``signal``, ``cancel``,
``status``, ``result`` and ``value`` answer and raise as the hosted handle does; it
journals a decision's records first, then carries out its effects; ``crash()`` forgets
everything that is not journaled (live instances, scheduled attempts and timers, a result
not yet stored) and ``recover()`` rebuilds every instance by replay. Time moves only when the test moves it, so a test of a
five-minute sleep or a one-hour deadline takes no real time::

    runtime = WorkflowTestRuntime()
    enrich = runtime.register(define_workflow("enrich", enrich_body))
    enrich.start("order-17", "ABC")
    runtime.run_until_idle()              # runs the activities that are due
    runtime.advance(timedelta(minutes=5))  # fires the sleep
    assert isinstance(enrich.outcome("order-17"), Finished)

Activities run synchronously in ``run_until_idle``/``advance`` (an async function on a
private event loop), or concurrently as asyncio tasks in ``run_until_idle_async``.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from collections.abc import Sequence
from typing import Any

from tidings.core.workflow import (
    ActivityResult,
    ArmTimer,
    Attempt,
    Cancel,
    CancelActivity,
    Cancelled,
    CancelTimer,
    Decision,
    Faulted,
    InboxMessage,
    JournalRecord,
    Outcome,
    PublishOutcome,
    ReportParked,
    RunActivity,
    Signal,
    Start,
    StepError,
    TimerFired,
    WorkflowDefinition,
    WorkflowInstance,
    WorkflowStatus,
)
from tidings.core.workflow.attempt_ends import attempt_raised
from tidings.core.workflow.child_records import AckParent, CancelChild, StartChild, TellParent
from tidings.core.workflow.signal_sends import SendSignal, SignalReplied
from tidings.core.workflow.context import instant_ms, ms_instant
from tidings.core.workflow_records import WorkflowInbox
from tidings.core.workflow_links import link_request
from tidings.core.workflow.updates import AnswerUpdate
from tidings.core.workflow.queries import caller_args, query_value, run_query
from tidings.core.workflow.effects import DropRun
from tidings.core.workflow.inbox_rules import (
    AwaitEnd,
    AwaitUpdate,
    Feed,
    InboxReply,
    Known,
    RunQuery,
    answer_fed,
    answer_status,
    decide_request,
    queried_instance,
    query_reply,
    outcome_fields_of,
    outcome_from,
)
from tidings.errors import (
    AttemptTimedOut,  # noqa: F401 - tests import it from here
    ReplyTimeout,
    SchemaError,
    WorkflowCancelled,
    WorkflowEnded,
    WorkflowFaulted,
    WorkflowNotFound,
    WorkflowUpdateFailed,
    WorkflowUpdateRejected,
)

DEFAULT_START = datetime(2026, 1, 1, tzinfo=timezone.utc)
"""Where a ``FakeClock`` starts unless told otherwise."""


class FakeClock:
    """A clock that moves only when told to; ``now_ms`` is what the interpreter receives."""

    __slots__ = ("_ms",)

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        self._ms = instant_ms(start)

    @property
    def now_ms(self) -> int:
        """The current time in ms since the epoch (UTC)."""
        return self._ms

    def now(self) -> datetime:
        """The current time as an aware UTC datetime."""
        return ms_instant(self._ms)

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward by ``delta``."""
        if delta < timedelta(0):
            raise ValueError("a clock does not go back")
        self._ms += int(delta.total_seconds() * 1000)

    def set_ms(self, ms: int) -> None:
        """Move the clock to ``ms`` (never backwards)."""
        self._ms = max(self._ms, ms)


@dataclass(order=True)
class _Scheduled:
    due: int
    order: int
    key: tuple[str, str] = field(compare=False)
    message: InboxMessage | None = field(compare=False, default=None)
    run: RunActivity | None = field(compare=False, default=None)
    attempt: Attempt | None = field(compare=False, default=None)
    cancelled: bool = field(compare=False, default=False)


@dataclass(frozen=True, slots=True)
class _Request:
    """An inbox request as the rules read it (``WorkflowInbox`` without its addressing)."""

    kind: str
    payload: bytes | None = None
    signal: str | None = None
    wait: bool = False
    signal_id: str | None = None
    input: bytes | None = None
    update: str | None = None
    update_id: str | None = None
    wait_for: str | None = None
    query: str | None = None
    request_id: str = ""
    reply_to: str | None = None


_REPLY_TO = "tidings.testing"
"""The address the runtime's update callers wait on (a topic name the hosted worker would answer)."""


@dataclass(slots=True)
class PendingReply:
    """The answer to one request; ``reply`` is None while it is awaited.

    Only a query with ``wait`` to a running instance is awaited: it is answered when the
    instance ends (``status``, with the outcome), as the hosted worker answers it.
    """

    reply: InboxReply | None = None

    @property
    def answered(self) -> bool:
        """Whether the answer is in."""
        return self.reply is not None


class WorkflowHandle:
    """Starts, signals, cancels and inspects the instances of one registered workflow.

    ``start``, ``signal``, ``cancel``, ``status``, ``result`` and ``value`` answer and raise
    as the hosted ``WorkflowHandle`` does (both follow ``tidings.core.workflow.inbox_rules``);
    ``start``, ``signal`` and ``cancel`` also return what the instance decided. ``ask`` sends
    a raw inbox request, as any producer may.
    """

    def __init__(self, runtime: WorkflowTestRuntime, name: str) -> None:
        self._runtime = runtime
        self.name = name

    def start(self, instance_id: str, input: Any = None) -> Decision:
        """Start an instance; a second start with the same id stores nothing.

        Returns:
            What the start decided (no records for a second start).

        Raises:
            ValueError: ``instance_id`` is not a non-empty string.
            SchemaError: ``input`` cannot be stored or read back as the input type
                (checked before sending, as the hosted handle does).
        """
        _check_id(instance_id)
        definition = self._runtime.definition(self.name)
        try:
            text, _ = definition.codec.convert(input, definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"workflow {self.name!r}: the input cannot be stored: {exc}") from exc
        pending, decision = self._runtime._take(self.name, instance_id, _Request("start", text.encode()))
        if pending.reply is not None and pending.reply.answer == "rejected":
            # The hosted worker dead-letters such a start (its start does not wait for an answer).
            raise SchemaError(f"workflow {self.name!r} rejected the start: {pending.reply.reason}")
        return decision

    def signal(self, instance_id: str, name: str, payload: Any = None, *, signal_id: str | None = None) -> Decision:
        """Deliver signal ``name`` with ``payload``; returns what the instance decided.

        ``signal_id`` names the signal as a projection does (``event.signal``): a repeat of
        a stored id is accepted and stores nothing.

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            WorkflowEnded: The instance has ended.
            SchemaError: The payload cannot be stored.
        """
        _check_id(instance_id)
        try:
            text = self._runtime.definition(self.name).codec.encode(payload)
        except ValueError as exc:
            raise SchemaError(f"the payload of signal {name!r} cannot be stored: {exc}") from exc
        request = _Request("signal", text.encode(), signal=name, signal_id=signal_id)
        reply, decision = self._answer(instance_id, request)
        if reply.answer == "ended":
            raise WorkflowEnded(f"{self.name} {instance_id!r} has ended and takes no signal {name!r}")
        if reply.answer == "rejected":
            raise SchemaError(f"workflow {self.name!r} rejected signal {name!r}: {reply.reason}")
        return decision

    def signal_with_start(
        self, instance_id: str, input: Any, name: str, payload: Any = None, *, signal_id: str | None = None
    ) -> tuple[str, Decision]:
        """Start the instance if it was never started, and in either case deliver the signal.

        Returns:
            ``("started", decision)`` or ``("signalled", decision)``, as the hosted handle answers.

        Raises:
            WorkflowEnded: The instance has ended (nothing is stored).
            SchemaError: The input or the payload cannot be stored.
        """
        _check_id(instance_id)
        definition = self._runtime.definition(self.name)
        try:
            text, _ = definition.codec.convert(input, definition.input_type)
            signal_text = definition.codec.encode(payload)
        except ValueError as exc:
            raise SchemaError(f"workflow {self.name!r}: the input or the payload cannot be stored: {exc}") from exc
        request = _Request("signal_with_start", signal_text.encode(), signal=name, signal_id=signal_id,
                           input=text.encode())
        reply, decision = self._answer(instance_id, request)
        if reply.answer == "ended":
            raise WorkflowEnded(f"{self.name} {instance_id!r} has ended and takes no signal {name!r}")
        if reply.answer == "rejected":
            raise SchemaError(f"workflow {self.name!r} rejected the signal-with-start {name!r}: {reply.reason}")
        return reply.answer, decision

    def update(
        self, instance_id: str, name: str, payload: Any = None, *, update_id: str | None = None,
        wait_for: str = "completed", timeout: timedelta = timedelta(0), type: Any = None,
    ) -> Any:
        """Send update ``name`` and return the body's answer, as the hosted ``handle.update`` does.

        Waiting moves the fake clock (as ``result`` does) until the body answered or ``timeout``
        passed. ``wait_for="accepted"`` returns None once the update is journaled.

        Raises:
            WorkflowNotFound, WorkflowEnded, WorkflowUpdateRejected, WorkflowUpdateFailed,
            ReplyTimeout, SchemaError: as the hosted handle.
        """
        return self._update(instance_id, "update", name, payload, None, update_id, wait_for, timeout, type)

    def update_with_start(
        self, instance_id: str, input: Any, name: str, payload: Any = None, *, update_id: str | None = None,
        wait_for: str = "completed", timeout: timedelta = timedelta(0), type: Any = None,
    ) -> Any:
        """Start the instance if it was never started, then send it the update (one request)."""
        definition = self._runtime.definition(self.name)
        try:
            text, _ = definition.codec.convert(input, definition.input_type)
        except ValueError as exc:
            raise SchemaError(f"workflow {self.name!r}: the input cannot be stored: {exc}") from exc
        return self._update(instance_id, "update_with_start", name, payload, text.encode(), update_id, wait_for,
                            timeout, type)

    def _update(
        self, instance_id: str, kind: str, name: str, payload: Any, input: bytes | None, update_id: str | None,
        wait_for: str, timeout: timedelta, type: Any,
    ) -> Any:
        _check_id(instance_id)
        definition = self._runtime.definition(self.name)
        try:
            text = definition.codec.encode(payload)
        except ValueError as exc:
            raise SchemaError(f"the payload of update {name!r} cannot be stored: {exc}") from exc
        runtime = self._runtime
        runtime._order += 1
        request = _Request(kind, text.encode(), input=input, update=name,
                           update_id=update_id or f"update-{runtime._order}", wait_for=wait_for,
                           request_id=f"request-{runtime._order}", reply_to=_REPLY_TO)
        pending, _ = runtime._take(self.name, instance_id, request)
        runtime._wait_for(pending, timeout)
        reply = pending.reply
        what = f"update {name!r} of {self.name} {instance_id!r}"
        if reply is None:
            runtime._forget(pending)
            raise ReplyTimeout(f"{what} was not answered within {timeout}")
        if reply.answer == "not_found":
            raise WorkflowNotFound(f"no {self.name} instance {instance_id!r} was started")
        if reply.answer == "ended":
            raise WorkflowEnded(f"{self.name} {instance_id!r} has ended and did not take {what}")
        if reply.answer == "rejected":
            raise WorkflowUpdateRejected(f"{what} was rejected, nothing was stored: {reply.reason}")
        if reply.answer == "failed":
            raise WorkflowUpdateFailed(f"{what} failed: {reply.reason}", reply.error)
        if reply.answer == "accepted":
            return None
        return definition.codec.decode(reply.result or "null", type)

    def query(self, instance_id: str, name: str, args: Sequence[Any] | None = None, *, type: Any = None) -> Any:
        """Call the query handler ``name`` with ``args`` and return its value, as the hosted
        ``handle.query`` does (the same rules: nothing is journaled or changed).

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            WorkflowQueryRejected: The instance registered no handler ``name`` (the message
                names the ones it did), or the args are unusable.
            WorkflowQueryFailed: The handler raised, overran its bound or returned no JSON value.
            SchemaError: The args cannot be stored as JSON.
        """
        _check_id(instance_id)
        definition = self._runtime.definition(self.name)
        sent = caller_args(args)
        try:
            text = definition.codec.encode(sent)
        except ValueError as exc:
            raise SchemaError(f"the args of query {name!r} cannot be stored: {exc}") from exc
        reply, _ = self._answer(instance_id, _Request("query_handler", text.encode(), query=name))
        return query_value(reply, f"query {name!r} of {self.name} {instance_id!r}", definition, type)

    def cancel(self, instance_id: str) -> Decision:
        """Request cancellation (a second request, or one to an ended instance, changes nothing).

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
        """
        _check_id(instance_id)
        return self._answer(instance_id, _Request("cancel"))[1]

    def status(self, instance_id: str) -> WorkflowStatus | None:
        """RUNNING/FINISHED/FAULTED/CANCELLED/PARKED, or None when never started."""
        _check_id(instance_id)
        try:
            reply, _ = self._answer(instance_id, _Request("query"))
        except WorkflowNotFound:
            return None
        return None if reply.status is None else WorkflowStatus(reply.status)

    def result(self, instance_id: str, timeout: timedelta = timedelta(0)) -> Outcome:
        """Wait for the instance's outcome: ``Finished(value)``, ``Faulted(error)`` or ``Cancelled()``.

        Waiting moves the fake clock, running what falls due in time order, until the
        instance ends or ``timeout`` has passed; the default runs only what is due now.

        Raises:
            WorkflowNotFound: No instance was ever started with this id.
            ReplyTimeout: It had not ended within ``timeout`` (a ``TimeoutError``).
        """
        _check_id(instance_id)
        pending = self.ask(instance_id, "query", wait=True)
        self._runtime._wait_for(pending, timeout)
        reply = pending.reply
        if reply is None:
            self._runtime._forget(pending)
            raise ReplyTimeout(f"{self.name} {instance_id!r} did not end within {timeout}")
        if reply.answer == "not_found":
            raise WorkflowNotFound(f"no {self.name} instance {instance_id!r} was started")
        assert reply.outcome is not None  # a waiting query is answered once the instance has ended
        return outcome_from(reply.outcome, reply.result, reply.error, self._runtime.definition(self.name))

    def value(self, instance_id: str, timeout: timedelta = timedelta(0)) -> Any:
        """Wait for the instance's result value (see ``result``).

        Raises:
            WorkflowFaulted: It ended Faulted (the message holds the stored error).
            WorkflowCancelled: It ended Cancelled.
            WorkflowNotFound, ReplyTimeout: as for ``result``.
        """
        outcome = self.result(instance_id, timeout)
        if isinstance(outcome, Faulted):
            raise WorkflowFaulted(f"{self.name} {instance_id!r} faulted: {outcome.error}", outcome.error)
        if isinstance(outcome, Cancelled):
            raise WorkflowCancelled(f"{self.name} {instance_id!r} was cancelled")
        return outcome.value

    def ask(
        self,
        instance_id: str,
        kind: str,
        *,
        payload: bytes | None = None,
        signal: str | None = None,
        wait: bool = False,
        signal_id: str | None = None,
        input: bytes | None = None,
        update: str | None = None,
        update_id: str | None = None,
        wait_for: str | None = None,
        query: str | None = None,
    ) -> PendingReply:
        """Send one raw inbox request, as any producer may, and return its answer.

        Args:
            instance_id: The instance.
            kind: ``start``, ``signal``, ``cancel``, ``query`` or ``signal_with_start``.
            payload: JSON bytes: a start's input or a signal's payload (not checked here).
            signal: The signal's name.
            wait: For a query: answer once the instance has ended (``PendingReply.reply``
                stays None until then).
            signal_id: A signal's id (a repeat of a stored one stores nothing).
            input: A signal-with-start's or an update-with-start's input, JSON bytes (not checked here).
            update, update_id, wait_for: An update's name, id and what its caller waits for
                (``completed``: ``PendingReply.reply`` stays None until the body answers).
            query: A ``query_handler``'s query name (``payload``: its args, a JSON array).

        Returns:
            The answer: what the hosted worker would put on the replies topic.
        """
        _check_id(instance_id)
        self._runtime._order += 1
        request = _Request(kind, payload, signal, wait, signal_id, input, update, update_id, wait_for, query,
                           request_id=f"request-{self._runtime._order}", reply_to=_REPLY_TO)
        return self._runtime._take(self.name, instance_id, request)[0]

    def outcome(self, instance_id: str) -> Outcome | None:
        """The live instance's outcome once it has ended, else None (no waiting, no replay)."""
        instance = self._runtime.instance(self.name, instance_id)
        return None if instance is None else instance.outcome

    def journal(self, instance_id: str) -> list[JournalRecord]:
        """The stored journal of an instance (a copy)."""
        return list(self._runtime.journals.get((self.name, instance_id), []))

    def parked_reason(self, instance_id: str) -> str | None:
        """Why the instance is parked, if it is."""
        return self._runtime.parked.get((self.name, instance_id))

    def _answer(self, instance_id: str, request: _Request) -> tuple[InboxReply, Decision]:
        pending, decision = self._runtime._take(self.name, instance_id, request)
        assert pending.reply is not None  # only a waiting query is answered later
        if pending.reply.answer == "not_found":
            raise WorkflowNotFound(f"no {self.name} instance {instance_id!r} was started")
        return pending.reply, decision


def _check_id(instance_id: str) -> None:
    if not isinstance(instance_id, str) or not instance_id:
        raise ValueError(f"instance_id must be a non-empty string, not {instance_id!r}")


class WorkflowTestRuntime:
    """Hosts workflow instances in memory with a fake clock, like the Faust shell does on Kafka.

    Args:
        clock: The clock; a new ``FakeClock`` by default.
        seed: Seeds the entropy ``new_guid``/``random`` draw from, so tests are repeatable.
    """

    def __init__(self, *, clock: FakeClock | None = None, seed: int = 0) -> None:
        self.clock = clock or FakeClock()
        self.journals: dict[tuple[str, str], list[JournalRecord]] = {}
        self.parked: dict[tuple[str, str], str] = {}
        self.outcomes: dict[tuple[str, str], Outcome] = {}
        # How many records of earlier runs each instance's continue_as_new dropped (DropRun).
        self.dropped: dict[tuple[str, str], int] = {}
        self._definitions: dict[str, WorkflowDefinition] = {}
        self._instances: dict[tuple[str, str], WorkflowInstance] = {}
        self._random = random.Random(seed)
        self._queue: list[_Scheduled] = []
        self._by_path: dict[tuple[str, str, str], _Scheduled] = {}
        self._order = 0
        self._generation = 0
        # Queries waiting for their instance to end, answered when it does (AwaitEnd).
        self._waiters: dict[tuple[str, str], list[PendingReply]] = {}
        # Update callers: by request id (the address journaled with the update), and the
        # repeats of an update not answered yet (AwaitUpdate), by (instance, update id).
        self._update_callers: dict[str, PendingReply] = {}
        self._update_repeats: dict[tuple[str, str, str], list[PendingReply]] = {}

    # ----------------------------------------------------------------- definitions

    def register(self, definition: WorkflowDefinition) -> WorkflowHandle:
        """Register a workflow and return its handle."""
        self._definitions[definition.name] = definition
        return WorkflowHandle(self, definition.name)

    def deploy(self, definition: WorkflowDefinition) -> None:
        """Replace a workflow's code; running instances use it after the next ``crash``/``recover``."""
        self._definitions[definition.name] = definition

    def definition(self, workflow: str) -> WorkflowDefinition:
        """The registered (or last deployed) definition of ``workflow``."""
        return self._definitions[workflow]

    def instance(self, workflow: str, instance_id: str) -> WorkflowInstance | None:
        """The live instance, or None when it was never started (or not recovered)."""
        return self._instances.get((workflow, instance_id))

    # ------------------------------------------------------------------- messages

    def deliver(self, workflow: str, instance_id: str, message: InboxMessage) -> Decision:
        """Feed one message to an instance, journal the decision, then schedule its effects.

        ``Start``, ``Signal`` and ``Cancel`` go through the inbox rules as the handle's
        methods do, and raise what those raise. ``ActivityResult`` and ``TimerFired`` are
        the runtime's own inputs: they go straight to the live instance.

        Raises:
            WorkflowNotFound: No live instance takes an ``ActivityResult``/``TimerFired``,
                or as the handle's ``signal``/``cancel``.
        """
        handle = WorkflowHandle(self, workflow)
        if isinstance(message, Start):
            return handle.start(instance_id, message.input)
        if isinstance(message, Signal):
            return handle.signal(instance_id, message.name, message.payload)
        if isinstance(message, Cancel):
            return handle.cancel(instance_id)
        key = (workflow, instance_id)
        instance = self._instances.get(key)
        if instance is None:
            raise WorkflowNotFound(f"no live {workflow} instance {instance_id!r} takes {type(message).__name__}")
        decision = instance.advance(message, self.clock.now_ms)
        self._apply(key, decision)
        return decision

    def _take(
        self, workflow: str, instance_id: str, request: _Request | WorkflowInbox
    ) -> tuple[PendingReply, Decision]:
        """Take one inbox request as the hosted agent does; return its answer and what was decided."""
        key = (workflow, instance_id)
        known = self._known(key)
        verdict = decide_request(request, known)
        status = known.status if isinstance(known, WorkflowInstance) else None
        decision = Decision((), (), status)
        if isinstance(verdict, RunQuery):
            assert known is not None  # never started: answered not_found
            # As the hosted agent: the live state, or an ended instance's journal replayed
            # through its end; nothing is journaled.
            instance = queried_instance(self._definitions[workflow], instance_id, known,
                                        lambda: list(self.journals.get(key, ())), self.clock.now_ms)
            try:
                reply = query_reply(run_query(instance, verdict.name, verdict.args), known)
            finally:
                if instance is not known:
                    instance.close()
            return PendingReply(reply), decision
        if isinstance(verdict, Feed):
            if isinstance(known, WorkflowInstance):
                instance = known
            else:
                instance = WorkflowInstance(self._definitions[workflow], instance_id, entropy=self._random.randbytes)
            decision = instance.advance(verdict.message, self.clock.now_ms)
            caller = None
            if request.kind in ("update", "update_with_start") and request.reply_to:
                caller = self._update_callers[request.request_id] = PendingReply()
            fed = answer_fed(request, instance, decision.rejected, verdict.message)
            if decision.rejected is None:
                self._instances[key] = instance
                self._apply(key, decision)
            if fed is None:  # answered by the AnswerUpdate effect, now or later
                return caller or PendingReply(), decision
            self._update_callers.pop(request.request_id, None)
            verdict = fed
        pending = PendingReply()
        if isinstance(verdict, AwaitEnd):
            self._waiters.setdefault(key, []).append(pending)
        elif isinstance(verdict, AwaitUpdate):
            self._update_repeats.setdefault((*key, verdict.update_id), []).append(pending)
        else:
            pending.reply = verdict.reply
        return pending, decision

    def _known(self, key: tuple[str, str]) -> Known:
        instance = self._instances.get(key)
        if instance is None and self.journals.get(key):
            # Journaled but not live (crash() without recover()): replay it, as the hosted
            # agent replays an instance it does not hold in memory before deciding for it.
            self._recover_one(key)
            instance = self._instances.get(key)
        return instance

    def _wait_for(self, pending: PendingReply, timeout: timedelta) -> None:
        """Run what falls due, in time order, until ``pending`` is answered or ``timeout`` has passed."""
        target = self.clock.now_ms + int(timeout.total_seconds() * 1000)
        self.run_until_idle()
        while pending.reply is None and self._queue and self._queue[0].due <= target:
            self.clock.set_ms(self._queue[0].due)
            self.run_until_idle()
        if pending.reply is None:
            self.clock.set_ms(target)
            self.run_until_idle()

    def _forget(self, pending: PendingReply) -> None:
        for waiting in self._waiters.values():
            if pending in waiting:
                waiting.remove(pending)

    def _apply(self, key: tuple[str, str], decision: Decision) -> None:
        # The shell's one rule: the records are stored before any effect is carried out.
        self.journals.setdefault(key, []).extend(decision.records)
        links = []
        updates: list[AnswerUpdate] = []
        for effect in decision.effects:
            if isinstance(effect, (StartChild, CancelChild, AckParent, TellParent, SendSignal)):
                links.append(effect)
            elif isinstance(effect, RunActivity):
                attempt = Attempt(effect.idempotency_key, effect.attempt)
                self._schedule(key, effect.path, effect.not_before, run=effect, attempt=attempt)
            elif isinstance(effect, ArmTimer):
                self._schedule(key, effect.path, effect.due, message=TimerFired(effect.path))
            elif isinstance(effect, (CancelActivity, CancelTimer)):
                scheduled = self._by_path.pop((*key, effect.path), None)
                if scheduled is not None:
                    scheduled.cancelled = True
                    if scheduled.attempt is not None:
                        scheduled.attempt.cancellation.cancel()
            elif isinstance(effect, PublishOutcome):
                self.outcomes[key] = effect.outcome
            elif isinstance(effect, ReportParked):
                self.parked[key] = effect.reason
            elif isinstance(effect, DropRun):
                # As the worker tombstones them: the old run's records leave the journal.
                kept = [r for r in self.journals[key] if not effect.first <= r.seq <= effect.last]
                self.dropped[key] = self.dropped.get(key, 0) + len(self.journals[key]) - len(kept)
                self.journals[key] = kept
            elif isinstance(effect, AnswerUpdate):
                updates.append(effect)
        instance = self._instances.get(key)
        for answered in updates:
            callers = self._update_repeats.pop((*key, answered.update_id), [])
            if answered.reply is not None and answered.reply.request_id in self._update_callers:
                callers.append(self._update_callers.pop(answered.reply.request_id))
            if answered.answer == "ended" and instance is not None and instance.status is not None:
                reply = replace(answer_status(instance), answer="ended")
            else:
                error = answered.error
                reply = InboxReply(answered.answer, result=answered.result, error=error,
                                   reason=None if error is None else error.message)
            for caller in callers:
                caller.reply = reply
        if instance is not None and instance.outcome is not None and key in self._waiters:
            answer = answer_status(instance)
            for pending in self._waiters.pop(key):
                pending.reply = answer
        for link in links:
            self._link(key, link)

    def _link(self, key: tuple[str, str], effect: Any) -> None:
        """Deliver a child workflow's effect as the inbox record the hosted agent sends.

        A child of a workflow this runtime does not know is never started (its start stays
        in flight, as when no worker hosts that workflow).
        """
        if isinstance(effect, SendSignal):
            self._signal(key, effect)
        elif isinstance(effect, StartChild):
            parent = effect.parent
            target = (effect.workflow, effect.child_id)
            if effect.workflow not in self._definitions:
                return
            known = self._known(target)
            if isinstance(known, WorkflowInstance) and known.status is not None:
                # An existing child acknowledges a repeated start (a parent that restarted).
                if known._parent == parent:  # noqa: SLF001 - the hosted agent reads it too
                    self._link(target, AckParent(parent, effect.workflow))
                    if known.outcome is not None:
                        fields = outcome_fields_of(known.outcome, known.definition)
                        error = fields["error"]
                        self._link(target, TellParent(parent, effect.workflow, fields["outcome"], fields["result"],
                                                      None if error is None else StepError.from_json(error)))
                return
            self._take(*target, link_request("", effect, 0)[1])
        elif isinstance(effect, CancelChild):
            if effect.workflow in self._definitions:
                self._take(effect.workflow, effect.child_id, link_request("", effect, 0)[1])
        elif effect.parent.workflow in self._definitions:
            self._take(effect.parent.workflow, effect.parent.instance_id, link_request(key[1], effect, 0)[1])

    def _signal(self, key: tuple[str, str], effect: SendSignal) -> None:
        """``ctx.signal``: the signal request the hosted agent sends, and the target's answer fed back."""
        reason: str | None
        if effect.workflow not in self._definitions:
            answer, reason = "rejected", f"this app declares no workflow {effect.workflow!r}"
        else:
            request = WorkflowInbox(effect.signal_id, effect.instance_id, "signal", self.clock.now_ms,
                                    payload=effect.payload.encode(), signal=effect.name, signal_id=effect.signal_id)
            pending, _ = self._take(effect.workflow, effect.instance_id, request)
            assert pending.reply is not None  # a signal is answered at once
            answer, reason = pending.reply.answer, pending.reply.reason
        instance = self._instances.get(key)
        if instance is not None:
            self._apply(key, instance.advance(SignalReplied(effect.path, effect.signal_id, answer, reason),
                                              self.clock.now_ms))

    def _schedule(self, key: tuple[str, str], path: str, due: int, **what: Any) -> None:
        self._order += 1
        scheduled = _Scheduled(due, self._order, key, **what)
        previous = self._by_path.get((*key, path))
        if previous is not None:
            previous.cancelled = True
        self._by_path[(*key, path)] = scheduled
        heapq.heappush(self._queue, scheduled)

    # ---------------------------------------------------------------------- time

    def run_until_idle(self, *, max_steps: int = 1_000_000) -> int:
        """Run every activity and timer due by now (and what they lead to); return how many ran."""
        steps = 0
        while self._queue and self._queue[0].due <= self.clock.now_ms:
            scheduled = heapq.heappop(self._queue)
            if scheduled.cancelled:
                continue
            steps += 1
            if steps > max_steps:
                raise RuntimeError(f"still busy after {max_steps} steps")
            self._run(scheduled)
        return steps

    def advance(self, delta: timedelta) -> int:
        """Move the clock forward by ``delta``, running everything that falls due, in time order."""
        target = self.clock.now_ms + int(delta.total_seconds() * 1000)
        steps = self.run_until_idle()
        while self._queue and self._queue[0].due <= target:
            self.clock.set_ms(self._queue[0].due)
            steps += self.run_until_idle()
        self.clock.set_ms(target)
        return steps + self.run_until_idle()

    def next_due(self) -> datetime | None:
        """When the next scheduled attempt or timer is due, if any."""
        live = [s.due for s in self._queue if not s.cancelled]
        return ms_instant(min(live)) if live else None

    def _run(self, scheduled: _Scheduled) -> None:
        key = scheduled.key
        if scheduled.run is not None:
            generation = self._generation
            # Still findable while it runs, so a cancel during the call reaches its token.
            result = self._call(scheduled.run, scheduled.attempt)  # type: ignore[arg-type]
            if generation != self._generation:
                return  # the process "crashed" during the call: its result was never stored
            if self._by_path.get((*key, scheduled.run.path)) is scheduled:
                del self._by_path[(*key, scheduled.run.path)]
            self.deliver(*key, result)
        elif scheduled.message is not None:
            self._by_path.pop((*key, scheduled.message.path), None)  # type: ignore[union-attr]
            self.deliver(*key, scheduled.message)

    @staticmethod
    def _call(run: RunActivity, attempt: Attempt) -> ActivityResult:
        try:
            value = run.fn(attempt)
            if inspect.isawaitable(value):
                loop = asyncio.new_event_loop()
                try:
                    value = loop.run_until_complete(_awaited(value))
                finally:
                    loop.close()
        except Exception as exc:  # noqa: BLE001 - the attempt failed; the policy decides
            return attempt_raised(run.path, run.attempt, exc)  # the worker's rule: TimeoutError times out
        return ActivityResult(run.path, run.attempt, value=value)

    async def run_until_idle_async(self) -> int:
        """Like ``run_until_idle``, but due activities run concurrently as asyncio tasks.

        Sync activity functions run in threads (``asyncio.to_thread``), as in the shell.
        """
        steps = 0
        running: dict[asyncio.Task[ActivityResult], _Scheduled] = {}
        while True:
            while self._queue and self._queue[0].due <= self.clock.now_ms:
                scheduled = heapq.heappop(self._queue)
                if scheduled.cancelled:
                    continue
                steps += 1
                if scheduled.run is not None:
                    task = asyncio.ensure_future(self._call_async(scheduled.run, scheduled.attempt))  # type: ignore[arg-type]
                    running[task] = scheduled
                else:
                    self._run(scheduled)
            if not running:
                return steps
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: running[t].order):
                scheduled = running.pop(task)
                if not scheduled.cancelled:
                    self._by_path.pop((*scheduled.key, scheduled.run.path), None)  # type: ignore[union-attr]
                    self.deliver(*scheduled.key, task.result())

    @staticmethod
    async def _call_async(run: RunActivity, attempt: Attempt) -> ActivityResult:
        try:
            if inspect.iscoroutinefunction(run.fn):
                value = await run.fn(attempt)
            else:
                value = await asyncio.to_thread(run.fn, attempt)
                if inspect.isawaitable(value):
                    value = await value
        except Exception as exc:  # noqa: BLE001
            return attempt_raised(run.path, run.attempt, exc)
        return ActivityResult(run.path, run.attempt, value=value)

    # --------------------------------------------------------------- crash, recover

    def crash(self) -> None:
        """Lose everything that is not journaled: live instances, scheduled work, results in flight.

        Call it from inside an activity to crash after the call and before its result is
        stored: the result is dropped, and the step runs again after ``recover``.
        """
        self._generation += 1
        for instance in self._instances.values():
            instance.close()
        self._instances.clear()
        for scheduled in self._queue:
            scheduled.cancelled = True
        self._queue.clear()
        self._by_path.clear()

    def recover(self) -> dict[tuple[str, str], Decision]:
        """Rebuild every journaled instance by replay, with the code deployed now."""
        return {key: self._recover_one(key) for key, records in list(self.journals.items()) if records}

    def _recover_one(self, key: tuple[str, str]) -> Decision:
        workflow, instance_id = key
        instance, decision = WorkflowInstance.replay(
            self._definitions[workflow], instance_id, self.journals[key], self.clock.now_ms, entropy=self._random.randbytes
        )
        self._instances[key] = instance
        if instance.status is not WorkflowStatus.PARKED:
            self.parked.pop(key, None)
        self._apply(key, decision)
        return decision

    def restart(self) -> dict[tuple[str, str], Decision]:
        """``crash()`` then ``recover()``."""
        self.crash()
        return self.recover()


async def _awaited(awaitable: Any) -> Any:
    return await awaitable

