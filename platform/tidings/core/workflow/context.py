"""``WorkflowContext``: the steps a workflow body awaits.

``ctx`` holds no state of the instance: each method returns a step request (plain data) and
the interpreter that drives the body decides it. So one context serves every instance, and a
body cannot reach the journal, the clock or the network except through a step.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar, overload

from tidings.core.workflow.child_records import ChildHandle
from tidings.core.workflow.continuing import ContinueAsNewRequest
from tidings.core.workflow.children import ChildAwaitRequest, ChildStartRequest, child_call, definition_of
from tidings.core.workflow.requests import (
    ActivityRequest,
    AllRequest,
    GuidRequest,
    NowRequest,
    RaceRequest,
    RandomRequest,
    SignalRequest,
    StepRequest,
    TimerRequest,
    VersionRequest,
)
from tidings.core.workflow.retry import Retry, RetryPolicy
from tidings.core.workflow.sends import EventFilter, SendRequest
from tidings.core.workflow.signal_sends import SignalSendRequest
from tidings.core.workflow.queries import QueryHandler, QueryRegisterRequest
from tidings.core.workflow.updates import UpdateCall, UpdateWaitRequest

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")


def duration_ms(duration: timedelta) -> int:
    """Return ``duration`` in whole milliseconds."""
    return int(duration.total_seconds() * 1000)


def instant_ms(instant: datetime) -> int:
    """Return ``instant`` as ms since the epoch; a naive datetime is read as UTC."""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=timezone.utc)
    return int(instant.timestamp() * 1000)


def ms_instant(ms: int) -> datetime:
    """Return the aware UTC datetime of ``ms`` since the epoch."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


class WorkflowContext:
    """The steps of a workflow body: ``await ctx.<step>(...)``.

    Every step is journaled under its path (see ``docs/workflows.md``); a body must await
    nothing but these steps and ``@subroutine`` calls.
    """

    __slots__ = ()

    def activity(
        self,
        name: str,
        policy: RetryPolicy,
        fn: Callable[..., T | Awaitable[T]],
        *,
        type: Any = None,
    ) -> StepRequest[T]:
        """Call an external system; the call runs at least once.

        ``fn(attempt)`` runs outside the interpreter (a sync ``fn`` in a thread) and gets an
        ``Attempt`` whose ``idempotency_key`` is the same for every attempt and restart:
        pass it to the external system so a repeated call is recognised.

        *Journaled:* the step's path, kind and ``name`` with its start time when first
        reached; the result as JSON, or the failure, when it ends. Attempts are not stored.
        *Idempotent by:* ``{workflow}/{instance_id}/{path}``.
        *Replay:* a stored result is given without a call; a stored failure is raised; a
        step with only its start stored runs again (attempts and backoff begin again, the
        deadline stays measured from the stored start).

        Args:
            name: Stored; must not change while instances are running.
            policy: Attempts, backoff, deadline, attempt timeout and ``retry_on``.
            fn: The call, sync or async.
            type: The declared result type (a pydantic model, ``list[int]`` ...); the result
                is read back as this type. None keeps plain JSON values.

        Raises:
            WorkflowStepFailed: DEADLINE_EXCEEDED, ATTEMPTS_EXHAUSTED, NOT_RETRYABLE (also when
                the result cannot be stored as JSON or read back as ``type``), CANCELLED.
        """
        return ActivityRequest(name, policy, fn, type)

    def sleep(self, duration: timedelta) -> StepRequest[None]:
        """Wait for ``duration``.

        *Journaled:* the due time, when the step is first reached; then its completion.
        *Idempotent by:* the step path (one timer per path).
        *Replay:* the stored due time is used, so a restart does not postpone it; the timer
        is re-armed with the time that remains.

        Raises:
            WorkflowStepFailed: CANCELLED.
        """
        return TimerRequest(delay_ms=max(duration_ms(duration), 0))

    def until(self, instant: datetime) -> StepRequest[None]:
        """Wait until ``instant``; a naive datetime is read as UTC.

        *Journaled:* the due time, when first reached; then the completion.
        *Idempotent by:* the step path.
        *Replay:* as ``sleep``.

        Raises:
            WorkflowStepFailed: CANCELLED.
        """
        return TimerRequest(due_ms=instant_ms(instant))

    def now(self) -> StepRequest[datetime]:
        """Return the current UTC time (aware datetime, millisecond precision).

        *Journaled:* the value. *Idempotent by:* the step path.
        *Replay:* returns the stored value.
        """
        return NowRequest()

    def new_guid(self) -> StepRequest[uuid.UUID]:
        """Return a new random UUID.

        *Journaled:* the value. *Idempotent by:* the step path.
        *Replay:* returns the stored value.
        """
        return GuidRequest()

    def random(self) -> StepRequest[float]:
        """Return a random number in [0, 1).

        *Journaled:* the value. *Idempotent by:* the step path.
        *Replay:* returns the stored value.
        """
        return RandomRequest()

    def all(self, branches: Iterable[Awaitable[T]]) -> StepRequest[list[T]]:
        """Run the branches together and give every result, in branch order.

        A branch is a step, a ``@subroutine`` call or a coroutine of this body. Branches
        take turns deterministically; branch ``b`` of this step at path ``p`` numbers its
        steps ``p.b.1, p.b.2 ...``. If a branch fails, the others are abandoned (their
        activities cancelled) and the failure is raised here.

        *Journaled:* the step's start; every branch's own steps. Every branch result is in
        this instance's journal, so fan out over thousands of items with child workflows.
        *Idempotent by:* the step path and the branch paths.
        *Replay:* the branches replay from their stored steps.
        """
        return AllRequest(list(branches))

    def all_at_most(
        self, limit: int, items: Iterable[A], body: Callable[[A], Awaitable[T]]
    ) -> StepRequest[list[T]]:
        """Run ``body(item)`` for every item, at most ``limit`` at a time; results in item order.

        *Journaled:* as ``all``, branch ``b`` being item ``b``.
        *Idempotent by:* the step path and the branch paths.
        *Replay:* as ``all``.
        """
        if limit < 1:
            raise ValueError(f"all_at_most needs a limit of at least 1, got {limit}")
        return AllRequest(list(items), body=body, limit=limit)

    def race(self, branches: Iterable[Awaitable[T]]) -> StepRequest[T]:
        """Run the branches together; the first to finish decides, with its value or exception.

        The others are abandoned (their activities cancelled, their timers dropped).

        *Journaled:* the step's start and the winner's branch number.
        *Idempotent by:* the step path.
        *Replay:* the stored winner is checked, so replay selects the same branch.
        """
        return RaceRequest(list(branches))

    @overload
    def both(self, a: Awaitable[A], b: Awaitable[B], /) -> StepRequest[tuple[A, B]]: ...
    @overload
    def both(self, a: Awaitable[A], b: Awaitable[B], c: Awaitable[C], /) -> StepRequest[tuple[A, B, C]]: ...
    @overload
    def both(self, *steps: Awaitable[Any]) -> StepRequest[tuple[Any, ...]]: ...
    def both(self, *steps: Awaitable[Any]) -> StepRequest[tuple[Any, ...]]:
        """Run a fixed set of steps of different types together (F#'s ``and!``); give a tuple.

        If one fails, the others are abandoned and the failure is raised here.

        *Journaled:* as ``all``. *Idempotent by:* the step path.
        *Replay:* as ``all``.
        """
        if len(steps) < 2:
            raise ValueError("both needs at least two steps")
        return AllRequest(list(steps), as_tuple=True)

    def wait_signal(self, name: str, type: Any = None) -> StepRequest[Any]:
        """Wait for a signal named ``name`` and give its payload, read as ``type``.

        A signal that arrived before the body reached this step was stored and is consumed
        here; signals with one name are consumed oldest first.

        *Journaled:* signals when they arrive; the step's start; the consumed signal's
        number with its payload.
        *Idempotent by:* the step path; a signal is consumed once.
        *Replay:* gives the stored payload; no signal is lost or consumed twice.

        Raises:
            WorkflowStepFailed: BAD_PAYLOAD when the payload cannot be read as ``type`` (the
                signal is consumed); CANCELLED.
        """
        return SignalRequest(name, type, None)

    def wait_signal_for(self, name: str, timeout: timedelta, type: Any = None) -> StepRequest[Any]:
        """Wait for a signal named ``name`` for at most ``timeout``; None when the time passes.

        The timeout is measured from the stored start of the step. A signal that arrives
        after the wait gave None stays stored for the next wait.

        *Journaled:* as ``wait_signal``, plus the due time.
        *Idempotent by:* the step path.
        *Replay:* gives the stored payload or None; the timer is re-armed with the time left.

        Raises:
            WorkflowStepFailed: BAD_PAYLOAD, CANCELLED.
        """
        return SignalRequest(name, type, max(duration_ms(timeout), 0))

    def wait_update(self, name: str, type: Any = None) -> StepRequest[UpdateCall]:
        """Wait for an update named ``name`` and give it as an ``UpdateCall``: its ``payload``
        (read as ``type``, default the declared type), its ``id``, and ``reply``/``fail``.

        The update must be declared (``@app.workflow(..., updates=...)``): it was checked on
        arrival (declared name, payload type, validator) and journaled then. One that arrived
        before the body reached this step was stored and is taken here, oldest first. The body
        may run any steps before it answers with ``await call.reply(value)`` or
        ``await call.fail(message)``; the caller gets the answer once it is journaled. An
        update the body never answers is answered ``ended`` when the instance ends.

        *Journaled:* the update when it is accepted (``UpdateReceived``); the step's start;
        the taken update's number with its payload; the answer (``UpdateAnswered``).
        *Idempotent by:* the update id: a repeat stores nothing and gets the first answer.
        *Replay:* gives the stored update; the stored answer is not sent again.

        Raises:
            WorkflowStepFailed: BAD_PAYLOAD when the payload cannot be read as ``type`` (the
                update is taken and its caller answered that failure); CANCELLED.
        """
        return UpdateWaitRequest(name, type)

    def on_query(self, name: str, handler: QueryHandler) -> StepRequest[None]:
        """Register ``handler`` as the query ``name``: ``await ctx.on_query("items", lambda: list(items))``.

        A caller's ``handle.query(id, name, args)`` calls ``handler(*args)`` on the worker that
        owns the instance and gets its value (stored as JSON): a handler closes over the body's
        variables and reads them. Registering again under the same name replaces the handler.
        A handler must only read (a change is journaled nowhere), return quickly (it is
        stopped after ``QUERY_BUDGET_S``) and be a plain function. One that raises answers the
        caller an error; the instance is untouched.

        *Journaled:* nothing, and it takes no step path: adding or moving a registration
        changes no journal. *Replay:* the body registers its handlers again as it runs again,
        so a query after a restart, to a parked instance (the state at the park) or to an
        ended one (its journal replayed through the end) answers from the replayed state.

        Raises:
            DefinitionError: ``name`` is not a string of 1 to 200 characters, or ``handler`` is
                not a plain callable.
        """
        return QueryRegisterRequest(name, handler)
    def continue_as_new(self, input: Any = None) -> StepRequest[None]:
        """End this run and start the instance afresh with ``input``: same id, an empty journal.

        ``await ctx.continue_as_new(next_state)`` does not return: the run ends there (it
        raises ``ContinueAsNew``, a BaseException, so ``except Exception`` does not stop it;
        ``finally`` blocks run). The next run's body starts with ``input`` and run number + 1;
        the signals and updates the run had stored and not taken are handed to the next run;
        the run's activities and timers are stopped; no outcome is written (the last run's
        is the instance's). Once the next run's start is stored, the old run's journal
        records are tombstoned: a restart replays only the current run. Use it in a workflow
        that loops for ever, e.g. every N iterations.

        *Journaled:* ``ContinuedAsNew`` (the old run's last record), then the new run's
        ``Started`` (``run``) and the carried signals and updates.
        *Replay:* a run is replayed from its own ``Started``; an old run is never replayed.

        Raises:
            ContinueAsNew: Always (the run ends). An ``input`` that is not of the workflow's
                input type faults the instance with NOT_RETRYABLE instead.
        """
        return ContinueAsNewRequest(input)

    def version(self, change_id: str, latest: int) -> StepRequest[int]:
        """Record which version of the code this instance runs, to change a running workflow.

        A new instance stores ``latest`` and gets it. An instance that had already passed
        this point (its journal holds a step of this branch at or after this position)
        gets 1 and stores nothing. The step takes no position, so adding it does not move
        the steps after it.

        *Journaled:* a marker under (position, ``change_id``) for instances that get
        ``latest``. *Idempotent by:* position and ``change_id``; the same ``change_id``
        twice at one position is an error.
        *Replay:* gives the stored number, or 1 as above.
        """
        if latest < 1:
            raise ValueError(f"version numbers start at 1, got latest={latest}")
        return VersionRequest(change_id, latest)

    # -- commands to aggregates (core/workflow/sends.py) ----------------------------------

    def send(self, aggregate: Any, aggregate_id: str, command: Any, *, type: Any = None) -> StepRequest[Any]:
        """``send_with`` under ``Retry.command``: send again when no reply came in time, with
        backoff, for five minutes."""
        return SendRequest(aggregate, aggregate_id, command, Retry.command, None, type)

    def send_with(
        self, policy: RetryPolicy, aggregate: Any, aggregate_id: str, command: Any, *, type: Any = None
    ) -> StepRequest[Any]:
        """Send ``command`` to ``aggregate_id`` under ``policy`` and give the reply: the last
        event of the aggregate's verdict on this command.

        Every send of the step carries the step's idempotency key as command id and
        correlation id, so a late reply to an earlier send still answers the step. One send
        waits ``policy.attempt_timeout`` (default ``App(command_timeout=30)``), then the
        command is sent again, with backoff.

        *Journaled:* the step's start (kind ``send``, the aggregate's name); the event.
        *Idempotent by:* the command id ``{workflow}/{instance_id}/{path}``.
        *Replay:* a stored event is given without a send; a step with only its start sends
        the command again (the aggregate answers a repeat with its first verdict).

        Raises:
            WorkflowStepFailed: NOT_RETRYABLE when the aggregate rejected, ignored or
                conflicted on the command (the reason is kept; a saga that had started
                already gives ``SagaAlreadyStarted: ...``), or the event cannot be read as
                ``type``; OUTCOME_UNKNOWN when the policy ran out without a reply (the
                command may have been applied); CANCELLED.
        """
        return SendRequest(aggregate, aggregate_id, command, policy, None, type)

    def send_with_filter(
        self,
        policy: RetryPolicy,
        filter: EventFilter,
        aggregate: Any,
        aggregate_id: str,
        command: Any,
        *,
        type: Any = None,
    ) -> StepRequest[Any]:
        """Send ``command`` under ``policy`` and give the first event ``filter`` accepts among
        the events the aggregate publishes under the step's correlation id: the reply's
        events, and events other commands with that correlation id (a saga's) make it store.

        Beyond the reference, the wait is durable: the aggregate's events topic is read
        from the step's stored start, so an event stored while the worker was down, or
        between two attempts, is still seen, whichever worker owns the aggregate. Each
        attempt still ends after the attempt timeout and the command is sent again.
        ``filter`` must depend on the event alone; if it raises, the step fails
        NOT_RETRYABLE. Stored as ``send`` stores its step, so one can replace the other.

        Raises:
            WorkflowStepFailed: as ``send_with``, and NOT_RETRYABLE when ``filter`` raises.
        """
        return SendRequest(aggregate, aggregate_id, command, policy, filter, type)

    def signal(
        self, workflow: Any, instance_id: str, name: str, payload: Any = None, *, policy: RetryPolicy = Retry.command
    ) -> StepRequest[None]:
        """Deliver signal ``name`` with ``payload`` to instance ``instance_id`` of ``workflow``;
        return once the target has stored it.

        ``workflow`` is a workflow handle (``@app.workflow``), a definition or a workflow's
        name, of the same app (any worker of the app hosts it; the signal goes to its inbox).
        The signal's id is this step's idempotency key ``{workflow}/{instance_id}/{path}``,
        so the target stores it once however often it is sent. One send waits
        ``policy.attempt_timeout`` (default ``App(command_timeout=30)``) for the target's
        answer, then the signal is sent again, with backoff (``Retry.command``: for five
        minutes).

        *Journaled:* the step's start (kind ``signal_send``, the target workflow's name); its
        end (``null``, or the failure).
        *Idempotent by:* the signal id.
        *Replay:* a stored end is given without a send; a step with only its start sends the
        signal again (the target answers a repeat ``accepted`` and stores nothing).

        Raises:
            WorkflowNotFound: No instance ``instance_id`` of ``workflow`` was ever started.
            WorkflowEnded: The target has ended (also a repeat whose first send was stored
                but whose answer was lost, when the target ended meanwhile).
            WorkflowStepFailed: NOT_RETRYABLE when the payload cannot be stored, or the
                target rejected the signal (its reason kept); OUTCOME_UNKNOWN when the policy
                ran out without an answer (the signal may have been stored); CANCELLED.
        """
        return SignalSendRequest(workflow, instance_id, name, payload, policy)

    def child(self, workflow: Any, input: Any = None, *, type: Any = None) -> StepRequest[Any]:
        """Start a child workflow and wait for its result: ``start_child`` then ``await_child``.

        Takes two step positions (the start, then the await).

        Args:
            workflow: The child's handle (``@app.workflow``) or definition; another
                workflow of the same app, hosted by any worker of the app.
            input: The child's input, stored as its input type.
            type: How the result is read; default: the child workflow's result type.

        Raises:
            WorkflowStepFailed: as ``start_child`` and ``await_child``.
        """
        return child_call(definition_of(workflow), input, type)

    def start_child(self, workflow: Any, input: Any = None) -> StepRequest[ChildHandle]:
        """Start a child workflow; give its ``ChildHandle`` once the child's start is stored.

        The child's id is this instance's id, a colon, and this step's path
        (``order-17:3``), so a start repeated after a crash reaches the same child and does
        not start a second one. A child that is never awaited runs on by itself and
        outlives this workflow. If this workflow is cancelled while the start is in flight,
        the child is cancelled too (once).

        *Journaled:* the step's start (kind ``child_start``, the child workflow's name);
        the handle when the child has stored its start.
        *Idempotent by:* the child id ``{instance_id}:{path}``.
        *Replay:* gives the stored handle; a start with no stored handle is sent again.

        Raises:
            WorkflowStepFailed: NOT_RETRYABLE when the input cannot be stored as the
                child's input type, is larger than ``MAX_PAYLOAD_BYTES``, or the child's
                id would be longer than ``MAX_ID_BYTES``; CANCELLED.
        """
        return ChildStartRequest(definition_of(workflow), input)

    def await_child(self, handle: ChildHandle, type: Any = None) -> StepRequest[Any]:
        """Wait for a child's outcome and give its result, read as ``type``.

        The child's outcome is stored when it arrives, so an await reached after the
        child ended finds it, and awaiting one child twice gives the same outcome.

        *Journaled:* the step's start (kind ``child_await``, the child's id); the child's
        outcome when it arrives; the step's end.
        *Idempotent by:* the step path; the child's outcome is stored once.
        *Replay:* gives the stored result or failure.

        Args:
            handle: What ``start_child`` gave.
            type: How the result is read; default: the child workflow's result type.

        Raises:
            WorkflowStepFailed: CHILD_FAULTED (the child's error in the message) when the
                child faulted; CANCELLED when the child was cancelled (or this workflow
                was, while it waited: the awaited child is then cancelled too);
                NOT_RETRYABLE when the result cannot be read as ``type``.
            ValueError: ``handle`` is no child this instance started.
        """
        return ChildAwaitRequest(handle, type)
