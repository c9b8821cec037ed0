"""The workflow interpreter: a pure state machine, one input in, a ``Decision`` out.

``WorkflowInstance.advance(message, now)`` takes one inbox message and returns the journal
records to store and the effects to carry out; ``WorkflowInstance.replay(...)`` rebuilds an
instance from its journal. Neither raises: a body that no longer matches its journal parks
the instance, a body that raises faults it, and an internal error parks it (never faults,
because Faulted is final).

The body is a coroutine driven with ``coro.send()``; every ``await ctx.<step>`` yields a
step request here. Live and replay run the same code: replay walks the journal in order,
lets the body produce its records again (each checked against the stored one, which wins)
and applies as input every stored record the body did not produce (start, signals, cancel,
activity results, timer fires), so branches interleave exactly as they did live.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.core.workflow import children, continuing, updates
from tidings.core.workflow.child_records import ChildEnded, ChildOutcome, ChildStarted
from tidings.core.workflow.context import WorkflowContext
from tidings.core.workflow.definition import WorkflowDefinition
from tidings.core.workflow.effects import (
    ArmTimer,
    CancelActivity,
    CancelTimer,
    Effect,
    PublishOutcome,
    ReportParked,
    RunActivity,
)
from tidings.core.workflow.failures import ErrorKind, StepError
from tidings.core.workflow.fibers import BLOCKED, Fiber, Group, Pending
from tidings.core.workflow.inbox import ActivityResult, Cancel, InboxMessage, Signal, Start, TimerFired
from tidings.core.workflow.journal import (
    CancelRequested,
    Ended,
    JournalRecord,
    SignalReceived,
    Started,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepKind,
    UpdateReceived,
    VersionMarker,
)
from tidings.core.workflow.updates import Update, UpdateAnswered, UpdateBook
from tidings.core.workflow.outcomes import Cancelled, Faulted, Finished, Outcome, WorkflowStatus
from tidings.core.workflow.paths import ROOT_PREFIX, idempotency_key
from tidings.core.workflow.replaying import JournalCursor, describe_record, same_record
from tidings.core.workflow.requests import ActivityRequest
from tidings.core.workflow.retry import GiveUp, RetryAt
from tidings.core.workflow.signal_ids import remember_signal_id, stored_signal_ids
from tidings.core.workflow.steps import MESSAGE_HANDLERS, PENDING_KINDS, STEP_HANDLERS, explain_body_error, foreign_await
from tidings.errors import JournalMismatch, WorkflowStepFailed

Entropy = Callable[[int], bytes]
"""Gives n random bytes; the only source of ``new_guid``/``random`` values (then journaled)."""

_CONTEXT = WorkflowContext()
_ENDED = (WorkflowStatus.FINISHED, WorkflowStatus.FAULTED, WorkflowStatus.CANCELLED)
# Between calls the scratch fields (ready queue, new records, effects) hold this empty tuple
# instead of empty containers: an idle instance must stay small (SPEC: < 2 KB), and any
# use outside a call fails loudly instead of leaking into the next decision.
_IDLE: Any = ()
# What a signal-with-start or an update-with-start journals right after Started.
_WITH_START = (SignalReceived, UpdateReceived)
_CANCELLED_ERROR = StepError(ErrorKind.CANCELLED, "the workflow was cancelled while the step was pending")


@dataclass(frozen=True, slots=True)
class Decision:
    """What one input decided.

    Attributes:
        records: New journal records, in order. Store them before doing any effect.
        effects: What the shell must do once the records are stored.
        status: The instance's status afterwards (None: not started).
        rejected: Why the input was refused, if it was (e.g. a signal to an ended
            instance); nothing was recorded then.
    """

    records: tuple[JournalRecord, ...]
    effects: tuple[Effect, ...]
    status: WorkflowStatus | None
    rejected: str | None = None


class WorkflowInstance:
    """One workflow instance: its body's frames, pending steps, stored signals and status.

    Create it with ``WorkflowInstance(definition, instance_id)`` and feed it ``Start``, or
    rebuild it with ``WorkflowInstance.replay``. Time comes in as ``now`` (ms since the
    epoch, UTC) with every call and is never read here.
    """

    __slots__ = (
        "definition",
        "instance_id",
        "_entropy",
        "_status",
        "_outcome",
        "_root",
        "_pending",
        "_signals",
        "_signal_ids",
        "_waiters",
        "_cancel_requested",
        "_outcome_json",
        "_traceparent",
        "_next_seq",
        "_out",
        "_effects",
        "_ready",
        "_replay",
        "_now",
        "_children",
        "_parent",
        "_updates",
        "_queries",
        "_run_number",
        "_run_start",
    )

    def __init__(self, definition: WorkflowDefinition, instance_id: str, *, entropy: Entropy = os.urandom) -> None:
        self.definition = definition
        self.instance_id = instance_id
        self._entropy = entropy
        self._status: WorkflowStatus | None = None
        self._outcome: Outcome | None = None
        self._root: Fiber | None = None
        self._pending: dict[str, Pending] = {}
        self._signals: dict[str, list[SignalReceived]] | None = None
        # Every signal id the journal holds (None until the first one: most instances get
        # none, and an idle instance must stay small). Derived from the journal on replay.
        self._signal_ids: set[str] | None = None
        self._waiters: dict[str, list[Pending]] | None = None
        self._cancel_requested = False
        self._next_seq = 1
        self._out: list[JournalRecord] = _IDLE
        self._effects: list[Effect] = _IDLE
        self._ready: deque[tuple[Fiber, Any, BaseException | None]] = _IDLE
        self._replay: JournalCursor | None = None
        self._now = 0
        self._children: dict[str, Any] | None = None  # path -> children._Child, once one started
        self._parent: Any = None  # a ParentRef when this instance is a child
        self._outcome_json = False  # from Started: write the outcome record as JSON
        self._traceparent: str | None = None  # from Started: the run's trace context
        self._updates: UpdateBook | None = None  # once an update is stored (updates.py)
        # Query handlers by name, once the body registers one (queries.py). Kept when the
        # instance parks or ends: a query answers from the state it reached.
        self._queries: dict[str, Any] | None = None
        self._run_number = 1  # from Started: which run of the instance this is (continuing.py)
        self._run_start = 1  # the seq of this run's Started: where its records begin

    # ----------------------------------------------------------------------------- public

    @property
    def status(self) -> WorkflowStatus | None:
        """RUNNING, FINISHED, FAULTED, CANCELLED or PARKED; None before ``Start``."""
        return self._status

    @property
    def outcome(self) -> Outcome | None:
        """How the instance ended, once it has."""
        return self._outcome

    @property
    def outcome_json(self) -> bool:
        """Whether its start came as JSON, so its outcome record is written as JSON."""
        return self._outcome_json

    @property
    def traceparent(self) -> str | None:
        """The W3C trace context of the run's span, as its ``Started`` record keeps it."""
        return self._traceparent

    @property
    def run(self) -> int:
        """Which run of the instance this is: 1, then one more after each ``continue_as_new``."""
        return self._run_number

    @property
    def pending_paths(self) -> tuple[str, ...]:
        """The paths of the steps the body waits on (activities, timers, signal waits)."""
        return tuple(self._pending)

    def update_state(self, update_id: str) -> str | UpdateAnswered | None:
        """Update ``update_id``: its ``UpdateAnswered``, ``"pending"`` (accepted, not answered) or None."""
        return None if self._updates is None else self._updates.state(update_id)

    @property
    def next_seq(self) -> int:
        """The sequence number the next journal record will get."""
        return self._next_seq

    def close(self) -> None:
        """Drop the body's frames, e.g. when the shell evicts the instance; nothing is decided.

        The journal is untouched: ``replay`` rebuilds the instance. Closing runs the
        synchronous part of the body's ``finally`` blocks (a step awaited there is not taken).
        """
        root = self._root
        self._root = None
        self._pending = {}
        self._waiters = None
        self._queries = None
        if root is not None and not root.dead:
            self._close_tree(root)

    def _close_tree(self, fiber: Fiber) -> None:
        waiting = fiber.waiting
        if isinstance(waiting, Group):
            waiting.done = True
            for branch in waiting.fibers:
                if branch is not None and not branch.dead:
                    self._close_tree(branch)
        fiber.close()

    def advance(self, message: InboxMessage, now: int) -> Decision:
        """Apply one inbox message and return what it decided; never raises.

        Args:
            message: ``Start``, ``Signal``, ``Cancel``, ``ActivityResult`` or ``TimerFired``.
            now: The current time, ms since the epoch (UTC).

        Returns:
            The records to journal (first) and the effects to carry out (after).
        """
        self._now = now
        self._begin()
        rejected: str | None = None
        try:
            rejected = self._accept(message)
            self._drain()
        except JournalMismatch as exc:  # pragma: no cover - live inputs cannot mismatch
            self._park(str(exc))
        except Exception as exc:  # noqa: BLE001 - never raise out of the core; parking is safe
            self._park(f"internal error while applying {type(message).__name__}: {exc!r}")
        return self._decision(rejected)

    @classmethod
    def replay(
        cls,
        definition: WorkflowDefinition,
        instance_id: str,
        records: Sequence[JournalRecord],
        now: int,
        *,
        entropy: Entropy = os.urandom,
        through_end: bool = False,
    ) -> tuple[WorkflowInstance, Decision]:
        """Rebuild an instance from its journal; never raises.

        Stored results are given to the body without running anything, stored failures are
        raised in it, steps with only a start are issued again (an activity whose deadline
        passed fails DEADLINE_EXCEEDED without another attempt; a timer is re-armed with its
        stored due time). A body that does not match the journal parks the instance.

        Args:
            definition: The workflow, with the code deployed now.
            instance_id: The instance's id.
            records: The instance's journal, in sequence order.
            now: The current time, ms since the epoch (UTC).
            entropy: The source of ``new_guid``/``random`` values taken after the journal.
            through_end: Run the body of an ended instance through its end too (by default
                an ended instance is only its outcome), so the query handlers it registered
                answer from its final state (``queries.py``); the decision is for reading only.

        Returns:
            The instance and the decision of the replay: records the body added after the
            journal's end, and the effects of every pending step.
        """
        instance = cls(definition, instance_id, entropy=entropy)
        instance._now = now
        instance._begin()
        if not records:
            return instance, instance._decision(None)
        # Only the current run is history; an earlier run still stored (a crash came before
        # its tombstones) is dropped again once this replay's records are stored.
        records, dropped = continuing.current_run(records)
        if dropped is not None:
            instance._effects.append(dropped)
        instance._next_seq = records[-1].seq + 1
        if any(type(record) is StepAttemptFailed for record in records):
            # A failed attempt's record is for people: the body never produced it and it is
            # no input, so replay walks the journal as if it were not there.
            records = [record for record in records if type(record) is not StepAttemptFailed]
        last = records[-1]
        if isinstance(last, Ended) and not through_end:
            # An ended instance is its outcome; its body never runs again.
            instance._set_outcome(last)
            instance._updates = updates.answers_of(updates.book_of(records))
            instance._effects.append(PublishOutcome(instance._outcome))  # type: ignore[arg-type]
            first = records[0]
            if isinstance(first, Started):  # a child's report is sent again: the parent ignores repeats
                instance._parent = children.parent_of_started(
                    first.parent_workflow, first.parent_id, first.parent_path, first.parent_token)
                children.tell_parent(instance, last.outcome, last.result, last.error)
            return instance, instance._decision(None)
        # From every record, also those after a point where the body parks: the journal
        # holds those signals, so a repeat of one must store nothing either.
        instance._signal_ids = stored_signal_ids(records)
        instance._updates = updates.book_of(records)
        replay = instance._replay = JournalCursor(records)
        try:
            while replay.pos < len(records) and instance._status is not WorkflowStatus.PARKED:
                record = records[replay.pos]
                replay.pos += 1
                instance._apply_stored(record)
                if type(record) is Started:
                    # Signals journaled with the start (a signal-with-start) were stored before
                    # the body first ran. No other journal holds a SignalReceived right after
                    # Started: every step the body can wait on journals its StepStarted first.
                    while replay.pos < len(records) and type(records[replay.pos]) in _WITH_START:
                        instance._apply_stored(records[replay.pos])
                        replay.pos += 1
                instance._drain()
        except JournalMismatch as exc:
            instance._park(str(exc))
        except Exception as exc:  # noqa: BLE001 - never raise out of the core
            instance._park(f"internal error during replay: {exc!r}")
        instance._replay = None
        if instance._status is WorkflowStatus.RUNNING:
            try:
                instance._reissue()
                instance._drain()
                if instance._status is WorkflowStatus.RUNNING:
                    children.ack_parent(instance)  # an acknowledgement lost in a crash is sent again
                    children.reask(instance)  # and an awaited child's lost outcome is asked for
            except Exception as exc:  # noqa: BLE001
                instance._park(f"internal error after replay: {exc!r}")
        return instance, instance._decision(None)

    # --------------------------------------------------------------------------- inputs

    def _accept(self, message: InboxMessage) -> str | None:
        kind = type(message)
        status = self._status
        if kind is Start:
            if status is None:
                return self._start(message)  # type: ignore[arg-type]
            return None  # idempotent per instance id
        if status is None:
            return "the instance has not been started"
        if status in _ENDED:
            return "the instance has ended" if kind in (Signal, Cancel, Update) else None
        if kind is ChildStarted:
            return children.accept_started(self, message)  # type: ignore[arg-type]
        if kind is ChildEnded:
            return children.accept_ended(self, message)  # type: ignore[arg-type]
        if kind is Signal:
            return self._receive_signal(message)  # type: ignore[arg-type]
        if kind is Cancel:
            self._request_cancel()
            return None
        if kind is Update:
            return updates.receive(self, message)  # type: ignore[arg-type]
        if status is WorkflowStatus.PARKED:
            return None  # a parked instance runs nothing; no activity or timer is its own
        if kind is ActivityResult:
            self._activity_result(message)  # type: ignore[arg-type]
        elif kind is TimerFired:
            pending = self._pending.get(message.path)  # type: ignore[union-attr]
            if pending is not None and pending.due is not None:
                self._record(StepCompleted(self._next_seq, pending.path, "null", at=self._now))
                self._resolve(pending, None, None, stop_work=False)
        else:
            handler = MESSAGE_HANDLERS.get(kind)
            if handler is not None:
                return handler(self, message)
        return None

    def _start(self, message: Start) -> str | None:
        codec = self.definition.codec
        try:
            text, _ = codec.convert(message.input, self.definition.input_type)
        except Exception as exc:  # noqa: BLE001 - a validator of the input type is user code
            return f"the input cannot be stored or read back: {type(exc).__name__}: {exc}"
        signal = message.signal
        signal_text = None
        if signal is not None:
            # Checked before anything is recorded: a signal-with-start stores both or neither.
            try:
                signal_text = codec.encode(signal.payload)
            except ValueError as exc:
                return f"the signal's payload cannot be stored: {exc}"
        update = message.update
        update_text = None
        if update is not None:
            checked = updates.check_update(self.definition, update)  # nothing stored if it is refused
            if isinstance(checked, str):
                return checked
            update_text = checked[0]
        parent = message.parent
        as_json = True if message.outcome_json else None  # null, not false: Avro records stay as they were
        if parent is None:
            started = Started(self._next_seq, text, self._now, outcome_json=as_json, traceparent=message.traceparent)
        else:
            started = Started(self._next_seq, text, self._now, parent.workflow, parent.instance_id, parent.path,
                              as_json, parent.token, message.traceparent)
        self._apply_stored(self._record(started))
        if signal is not None and signal_text is not None:
            # Stored before the body runs (it runs in ``_drain``): replay applies a
            # SignalReceived that follows Started at once the same way (see ``replay``).
            record = self._record(SignalReceived(self._next_seq, signal.name, signal_text, self._now, signal.id))
            if signal.id is not None:
                self._signal_ids = remember_signal_id(self._signal_ids, signal.id)
            self._apply_stored(record)
        if update is not None and update_text is not None:
            updates.store(self, update, update_text)  # before the body runs, as a signal-with-start's
        children.ack_parent(self)
        return None

    def _receive_signal(self, message: Signal) -> str | None:
        if message.id is not None and self._signal_ids is not None and message.id in self._signal_ids:
            return None  # a repeat of a stored signal (see signal_ids.py): nothing more is stored
        try:
            payload = self.definition.codec.encode(message.payload)
        except ValueError as exc:
            return f"the signal's payload cannot be stored: {exc}"
        record = self._record(SignalReceived(self._next_seq, message.name, payload, self._now, message.id))
        if message.id is not None:
            self._signal_ids = remember_signal_id(self._signal_ids, message.id)
        if self._status is WorkflowStatus.RUNNING:
            self._apply_stored(record)
        return None

    def _request_cancel(self) -> None:
        if self._cancel_requested:
            return  # a second cancel changes nothing
        record = self._record(CancelRequested(self._next_seq, self._now))
        if self._status is WorkflowStatus.PARKED:
            # A parked body cannot run its cleanup: it ends at once.
            self._cancel_requested = True
            self._end(Ended(self._next_seq, "cancelled", self._now))
            return
        self._apply_stored(record)

    def _activity_result(self, message: ActivityResult) -> None:
        pending = self._pending.get(message.path)
        if pending is None or pending.kind != StepKind.ACTIVITY or pending.attempt != message.attempt:
            return  # a stale attempt, or a step that ended or was abandoned
        request: ActivityRequest[Any] = pending.request  # type: ignore[assignment]
        if message.error is None and not message.timed_out:
            try:
                text, value = self.definition.codec.convert(message.value, request.type)
            except ValueError as exc:
                self._fail(pending, StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, "the result cannot be stored: "))
                return
            self._record(StepCompleted(self._next_seq, pending.path, text, at=self._now, attempt=message.attempt))
            self._resolve(pending, value, None, stop_work=False)
            return
        decision = request.policy.after_failure(
            attempt=message.attempt,
            started_at=pending.started_at,
            now=self._now,
            error=message.error,
            timed_out=message.timed_out,
        )
        if isinstance(decision, RetryAt):
            # For people only (describe, journal): replay skips it, so behaviour is unchanged.
            cause = message.error if message.error is not None else TimeoutError("the attempt timed out")
            self._record(StepAttemptFailed(self._next_seq, pending.path, message.attempt,
                                           StepError.of_exception(None, cause), self._now, decision.at))
        self._follow(pending, decision)

    def _follow(self, pending: Pending, decision: RetryAt | GiveUp) -> None:
        if isinstance(decision, GiveUp):
            self._fail(pending, decision.error, stop_work=False)
            return
        request: ActivityRequest[Any] = pending.request  # type: ignore[assignment]
        pending.attempt = decision.attempt
        self._effects.append(
            RunActivity(
                path=pending.path,
                name=request.name,
                attempt=decision.attempt,
                fn=request.fn,
                idempotency_key=idempotency_key(self.definition.name, self.instance_id, pending.path),
                not_before=decision.at,
                timeout_at=decision.timeout_at,
            )
        )

    # ---------------------------------------------------------- applying stored records

    def _apply_stored(self, record: JournalRecord) -> None:
        """Apply a record that is an input (live: just recorded; replay: not produced by the body)."""
        kind = type(record)
        if kind is StepCompleted or kind is StepFailed:
            pending = self._pending.get(record.path)  # type: ignore[union-attr]
            if pending is None:
                raise JournalMismatch(f"the journal ends step {record.path} that the body is not waiting on")  # type: ignore[union-attr]
            if kind is StepFailed:
                self._resolve(pending, None, self._raised(pending, record.error), stop_work=False)  # type: ignore[union-attr, arg-type]
            else:
                self._resolve(pending, self._stored_value(pending, record), None, stop_work=False)  # type: ignore[arg-type]
        elif kind is SignalReceived:
            signals = self._signals
            if signals is None:
                signals = self._signals = {}
            queue = signals.get(record.name)  # type: ignore[union-attr]
            if queue is None:
                queue = signals[record.name] = []  # type: ignore[union-attr]
            queue.append(record)  # type: ignore[arg-type]
            self._deliver(record.name)  # type: ignore[union-attr]
        elif kind is UpdateReceived:
            updates.apply_received(self, record)  # type: ignore[arg-type]
        elif kind is VersionMarker:
            pass  # looked up by position, never applied in order
        elif kind is ChildOutcome:
            children.apply_outcome(self, record)  # type: ignore[arg-type]
        elif kind is CancelRequested:
            self._cancel_requested = True
            children.cancel_children(self)
            for pending in list(self._pending.values()):
                self._fail(pending, _CANCELLED_ERROR)
        elif kind is Started:
            if self._root is not None:
                raise JournalMismatch("the journal starts the instance twice")
            try:
                value = self.definition.codec.decode(record.input, self.definition.input_type)  # type: ignore[union-attr]
            except ValueError as exc:
                raise JournalMismatch(f"the stored input cannot be read as {self.definition.input_type!r}: {exc}") from exc
            self._status = WorkflowStatus.RUNNING
            self._parent = children.parent_of_started(
                record.parent_workflow, record.parent_id, record.parent_path, record.parent_token  # type: ignore[union-attr]
            )
            self._outcome_json = bool(record.outcome_json)  # type: ignore[union-attr]
            self._run_number = continuing.run_of(record)  # type: ignore[arg-type]
            self._run_start = record.seq
            self._traceparent = record.traceparent  # type: ignore[union-attr]
            self._root = Fiber(ROOT_PREFIX, self.definition.body(_CONTEXT, value))
            self._ready.append((self._root, None, None))
        else:
            raise JournalMismatch(f"the journal holds {record!r}, which the body did not produce")

    def _stored_value(self, pending: Pending, record: StepCompleted) -> Any:
        other = PENDING_KINDS.get(pending.kind)
        if other is not None:
            try:
                return other.stored_value(self, pending, record)
            except ValueError as exc:
                raise JournalMismatch(f"the stored result of step {pending.path} cannot be read: {exc}") from exc
        if pending.kind == StepKind.TIMER or (pending.kind == StepKind.SIGNAL and record.signal is None):
            return None
        if pending.kind == StepKind.CHILD_START:
            return children.stored_handle(self, pending)
        declared = getattr(pending.request, "type", None)
        try:
            return self.definition.codec.decode(record.result, declared)
        except ValueError as exc:
            raise JournalMismatch(f"the stored result of step {pending.path} cannot be read as {declared!r}: {exc}") from exc

    def _record(self, record: JournalRecord) -> JournalRecord:
        """Produce a record: live, append it; replaying, check it against the stored one and return that."""
        replay = self._replay
        if replay is not None:
            stored = replay.peek()
            if stored is not None:
                if not same_record(stored, record):
                    raise JournalMismatch(f"the body produced {describe_record(record)} where the journal holds {describe_record(stored)}")
                replay.pos += 1
                return stored
            # The journal ends here: from now on the body runs live.
            self._replay = None
        return self._append(record)

    def _append(self, record: JournalRecord) -> JournalRecord:
        self._out.append(record)
        self._next_seq += 1
        return record

    # ------------------------------------------------------------------------ scheduling

    def _drain(self) -> None:
        ready = self._ready
        while ready:
            fiber, value, exc = ready.popleft()
            if not fiber.dead:
                self._run(fiber, value, exc)

    def _run(self, fiber: Fiber, value: Any, exc: BaseException | None) -> None:
        """Resume ``fiber`` with a value (or exception) until it blocks or ends."""
        frames = fiber.frames
        handlers = STEP_HANDLERS
        fiber.waiting = None
        while True:
            frame = frames[-1]
            try:
                request = frame.send(value) if exc is None else frame.throw(exc)
            except StopIteration as stop:
                del frames[-1]
                if frames:
                    value, exc = stop.value, None
                    continue
                self._fiber_ended(fiber, stop.value, None)
                return
            except (Exception, continuing.ContinueAsNew) as error:  # noqa: BLE001 - the body's own exception
                del frames[-1]
                if frames:
                    value, exc = None, error
                    continue
                self._fiber_ended(fiber, None, explain_body_error(error))
                return
            handler = handlers.get(type(request))
            if handler is None:
                value, exc = None, foreign_await(request)
                continue
            result = handler(self, fiber, request)
            if result is BLOCKED:
                return
            value, exc = result

    def _fiber_ended(self, fiber: Fiber, value: Any, exc: BaseException | None) -> None:
        fiber.dead = True
        group = fiber.group
        if group is None:
            self._body_ended(value, exc)
            return
        if group.done:
            return
        if group.is_race:
            winner = str(fiber.branch)
            stored = self._record(StepCompleted(self._next_seq, group.path, winner, at=self._now))
            if stored.result != winner:  # type: ignore[union-attr]
                raise JournalMismatch(f"race {group.path} was won by branch {stored.result} and now by {winner}")  # type: ignore[union-attr]
            self._close_group(group)
            self._ready.append((group.parent, value, exc))
            return
        if exc is not None:
            self._close_group(group)
            self._ready.append((group.parent, None, exc))
            return
        group.results[fiber.branch - 1] = value
        group.remaining -= 1
        if group.spawned < len(group.fibers):
            self._ready.append((group.spawn_next(), None, None))
        if group.remaining == 0:
            group.done = True
            results = group.results
            request = group.request
            self._ready.append((group.parent, tuple(results) if request.as_tuple else results, None))  # type: ignore[union-attr]

    def _close_group(self, group: Group) -> None:
        """End a parallel step: abandon every branch still running."""
        group.done = True
        for fiber in group.fibers:
            if fiber is not None and not fiber.dead:
                self._abandon(fiber)

    def _abandon(self, fiber: Fiber) -> None:
        waiting = fiber.waiting
        if isinstance(waiting, Pending):
            self._forget(waiting, stop_work=True)
        elif isinstance(waiting, Group):
            self._close_group(waiting)
        fiber.close()

    def _resolve(self, pending: Pending, value: Any, exc: BaseException | None, *, stop_work: bool) -> None:
        self._forget(pending, stop_work=stop_work)
        self._ready.append((pending.fiber, value, exc))

    def _forget(self, pending: Pending, *, stop_work: bool) -> None:
        """Remove a pending step; with ``stop_work``, tell the shell to stop its activity/timer."""
        self._pending.pop(pending.path, None)
        if pending.kind == StepKind.SIGNAL and self._waiters is not None:
            waiters = self._waiters.get(pending.request.name)  # type: ignore[attr-defined]
            if waiters is not None and pending in waiters:
                waiters.remove(pending)
        elif pending.kind == StepKind.UPDATE:
            updates.forget_waiter(self, pending)
        if not pending.issued or self._replay is not None:
            return
        other = PENDING_KINDS.get(pending.kind)
        if other is not None:
            other.forget(self, pending, stop_work)
        elif pending.kind == StepKind.ACTIVITY:
            if stop_work:
                self._effects.append(CancelActivity(pending.path))
        elif pending.due is not None and (stop_work or pending.kind == StepKind.SIGNAL):
            self._effects.append(CancelTimer(pending.path))

    def _raised(self, pending: Pending, error: StepError) -> BaseException:
        """What a stored failure of ``pending`` raises in the body (a kind may name its own)."""
        other = PENDING_KINDS.get(pending.kind)
        if other is not None and other.raised is not None:
            return other.raised(error)
        return WorkflowStepFailed(error)

    def _fail(self, pending: Pending, error: StepError, *, stop_work: bool = True) -> None:
        attempt = pending.attempt if pending.kind == StepKind.ACTIVITY and pending.attempt else None
        self._record(StepFailed(self._next_seq, pending.path, error, at=self._now, attempt=attempt))
        self._resolve(pending, None, self._raised(pending, error), stop_work=stop_work)

    def _wait(self, fiber: Fiber, pending: Pending) -> Any:
        """Register a pending step and, when live, tell the shell to run or arm it."""
        self._pending[pending.path] = pending
        fiber.waiting = pending
        if self._replay is None:
            self._issue(pending)
        return BLOCKED

    def _issue(self, pending: Pending) -> None:
        pending.issued = True
        if pending.kind == StepKind.ACTIVITY:
            policy = pending.request.policy  # type: ignore[attr-defined]
            self._follow(pending, policy.first_attempt(started_at=pending.started_at, now=self._now))
        elif pending.kind in PENDING_KINDS:
            PENDING_KINDS[pending.kind].issue(self, pending)
        elif pending.kind == StepKind.UPDATE:
            pass  # nothing to run or arm: the update arrives through the inbox
        elif pending.due is not None:
            self._effects.append(ArmTimer(pending.path, pending.due))
        else:
            children.issue(self, pending)

    def _reissue(self) -> None:
        """After a replay: issue every pending step the journal had started but not ended."""
        for pending in list(self._pending.values()):
            if not pending.issued and pending.path in self._pending:
                self._issue(pending)

    # ------------------------------------------------------------------------- signals

    def _deliver(self, name: str) -> None:
        """Give stored signals named ``name`` to waiting steps, oldest to oldest."""
        waiters = self._waiters.get(name) if self._waiters is not None else None
        queue = self._signals.get(name) if self._signals is not None else None
        while waiters and queue:
            pending = waiters.pop(0)
            value, exc = self._consume(pending, queue.pop(0))
            self._resolve(pending, value, exc, stop_work=False)

    def _consume(self, pending: Pending, signal: SignalReceived) -> tuple[Any, BaseException | None]:
        declared = pending.request.type  # type: ignore[attr-defined]
        try:
            value = self.definition.codec.decode(signal.payload, declared)
        except ValueError as exc:
            error = StepError(ErrorKind.BAD_PAYLOAD, f"signal {signal.name!r} #{signal.seq} cannot be read: {exc}")
            self._record(StepFailed(self._next_seq, pending.path, error, signal.seq, at=self._now))
            return None, WorkflowStepFailed(error)
        self._record(StepCompleted(self._next_seq, pending.path, signal.payload, signal.seq, at=self._now))
        return value, None

    # ------------------------------------------------------------------------- endings

    def _body_ended(self, value: Any, exc: BaseException | None) -> None:
        now = self._now
        if isinstance(exc, continuing.ContinueAsNew):
            continuing.continue_run(self, exc.input)
            return
        if exc is None:
            try:
                text, _ = self.definition.codec.convert(value, self.definition.result_type)
            except ValueError as error:
                failure = StepError.of_exception(ErrorKind.NOT_RETRYABLE, error, "the result cannot be stored: ")
                self._end(Ended(self._next_seq, "faulted", now, error=failure))
                return
            self._end(Ended(self._next_seq, "finished", now, result=text))
        elif isinstance(exc, WorkflowStepFailed) and isinstance(exc.error, StepError):
            if exc.error.kind is ErrorKind.CANCELLED and self._cancel_requested:
                self._end(Ended(self._next_seq, "cancelled", now))
            else:
                self._end(Ended(self._next_seq, "faulted", now, error=exc.error))
        else:
            self._end(Ended(self._next_seq, "faulted", now, error=StepError.of_exception(None, exc)))

    def _end(self, record: Ended) -> None:
        stored = self._record(record)
        unanswered = updates.ended(self) if self._replay is None else []
        self._set_outcome(stored)  # type: ignore[arg-type]
        self._effects.append(PublishOutcome(self._outcome))  # type: ignore[arg-type]
        self._effects.extend(unanswered)  # their callers are answered "ended"
        children.tell_parent(self, stored.outcome, stored.result, stored.error)  # type: ignore[union-attr]

    def _set_outcome(self, record: Ended) -> None:
        if record.outcome == "finished":
            value = self.definition.codec.decode(record.result or "null", self.definition.result_type)
            self._outcome, self._status = Finished(value), WorkflowStatus.FINISHED
        elif record.outcome == "cancelled":
            self._outcome, self._status = Cancelled(), WorkflowStatus.CANCELLED
        else:
            error = record.error or StepError(None, "faulted")
            self._outcome, self._status = Faulted(error), WorkflowStatus.FAULTED
        # An ended instance keeps only its outcome: drop frames, steps and signals.
        self._root = None
        self._pending = {}
        self._signals = self._waiters = self._children = None
        self._signal_ids = None  # an ended instance answers every signal "ended"
        # and every update "ended" but one it answered: a repeat of that gets its first answer.
        self._updates = updates.answers_of(self._updates)
        self._ready.clear()

    def _reset_for_run(self) -> None:
        """Forget the ended run's body, steps, signals and updates before the next run starts.

        Its activities and timers are stopped; what it had stored and not taken is carried
        into the new run by ``continuing.continue_run``, which calls this."""
        for pending in list(self._pending.values()):
            self._forget(pending, stop_work=True)
        self._root = None
        self._pending = {}
        self._signals = self._waiters = self._children = None
        self._signal_ids = None
        self._updates = None
        self._ready.clear()

    def _park(self, reason: str) -> None:
        """Stop running the body: it does not match its journal. Nothing it produced is kept."""
        if self._replay is not None:
            self._next_seq = self._replay.records[-1].seq + 1
            self._out.clear()
            self._replay = None
        self._effects.clear()
        root = self._root
        if root is not None and not root.dead:
            self._abandon(root)
        self._pending = {}
        self._waiters = None
        self._ready.clear()
        self._status = WorkflowStatus.PARKED
        self._effects.append(ReportParked(reason))

    def _begin(self) -> None:
        self._out = []
        self._effects = []
        self._ready = deque()

    def _decision(self, rejected: str | None) -> Decision:
        decision = Decision(tuple(self._out), tuple(self._effects), self._status, rejected)
        self._out = self._effects = self._ready = _IDLE
        return decision




def replay(
    definition: WorkflowDefinition,
    instance_id: str,
    records: Sequence[JournalRecord],
    now: int,
    *,
    entropy: Entropy = os.urandom,
) -> tuple[WorkflowInstance, Decision]:
    """Rebuild an instance from its journal (see ``WorkflowInstance.replay``)."""
    return WorkflowInstance.replay(definition, instance_id, records, now, entropy=entropy)
