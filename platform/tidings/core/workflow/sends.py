"""Steps that send a command to an aggregate: ``ctx.send``, ``ctx.send_with``, ``ctx.send_with_filter``.

One stored step kind, ``send``, for all three, so one can replace the other in a running
workflow. Every send of a step carries the step's idempotency key
``{workflow}/{instance_id}/{path}`` as its command id and its correlation id, so the
aggregate recognises a repeat and the reply to an earlier send still answers the step.

The interpreter decides; the shell carries out:

- ``SendCommand(path, attempt, ...)``: produce the command at ``not_before``; give the
  attempt up at ``not_before + (timeout_ms or the app's command_timeout)`` (at most
  ``deadline_at``) and report ``SendTimedOut(path, attempt)``. With ``watch_from`` set
  (a filter step), also read the events the aggregate stores under the step's correlation
  id from the aggregate's events topic, starting at that stored time, and report them as
  ``EventsSeen`` - so an event stored while the worker was down, or between two attempts,
  is still seen (beyond the reference, whose wait is in memory).
- ``StopSend(path)``: the step ended or was abandoned; stop resending, timing, watching.

The shell turns a reply on the workflow's replies topic into ``CommandReplied``. A reply
answers only the step whose key it names; ``send`` takes only the last event of an
``accepted`` reply to its own command; ``rejected``, ``ignored`` and ``conflict`` fail the
step NOT_RETRYABLE with the reason; ``send_with_filter`` takes the first event its filter
accepts. A policy that runs out fails the step OUTCOME_UNKNOWN: the command may have been
applied. The chosen event is stored as ``{"type": name, "event": value}``, so replay reads it
back as the aggregate's event class (or as ``type=`` when given).

Pure: no I/O; the aggregate handle and the command are opaque to the core (it reads the
handle's ``name`` and ``definition.event_types``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, TypeVar

from tidings.core.limits import MAX_ID_BYTES
from tidings.core.workflow.failures import ErrorKind, StepError
from tidings.core.workflow.fibers import Fiber, Pending
from tidings.core.workflow.journal import StepCompleted, StepFailed, StepKind, StepStarted
from tidings.core.workflow.paths import idempotency_key
from tidings.core.workflow.requests import StepRequest
from tidings.core.workflow.retry import GiveUp, RetryPolicy
from tidings.errors import DefinitionError, WorkflowStepFailed

if TYPE_CHECKING:
    from tidings.core.workflow.interpreter import WorkflowInstance

T = TypeVar("T")

#: The reason prefix of an aggregate that refused a command because its event would start
#: a saga that already exists (``tidings.errors.SagaAlreadyStarted``); kept in the failure.
SAGA_ALREADY_STARTED: Final = "SagaAlreadyStarted:"

EventFilter = Callable[[Any], bool]
"""``send_with_filter``'s test of one event (the aggregate's event value)."""


class SendRequest(StepRequest[T]):
    """``ctx.send`` / ``ctx.send_with`` / ``ctx.send_with_filter``."""

    __slots__ = ("aggregate", "aggregate_id", "command", "policy", "filter", "type")

    def __init__(
        self,
        aggregate: Any,
        aggregate_id: str,
        command: Any,
        policy: RetryPolicy,
        filter: EventFilter | None,
        type: Any,
    ) -> None:
        name = getattr(aggregate, "name", None)
        registry = getattr(getattr(aggregate, "definition", None), "event_types", None)
        if not isinstance(name, str) or registry is None:
            raise TypeError(f"send needs an aggregate handle (what app.aggregate returns), not {aggregate!r}")
        if not isinstance(aggregate_id, str) or not aggregate_id:
            raise TypeError(f"send needs a non-empty aggregate id, not {aggregate_id!r}")
        if filter is not None and not callable(filter):
            raise TypeError(f"send_with_filter needs a callable filter, not {filter!r}")
        _check_horizon(policy, aggregate)
        self.aggregate = aggregate
        self.aggregate_id = aggregate_id
        self.command = command
        self.policy = policy
        self.filter = filter
        self.type = type

    @property
    def aggregate_name(self) -> str:
        """The aggregate's name, stored as the step's name."""
        return str(self.aggregate.name)


#: What an attempt of a send waits for its reply when neither the policy nor the app says:
#: ``App(command_timeout)``'s default, used only to bound a policy's horizon.
DEFAULT_ATTEMPT_TIMEOUT: Final = timedelta(seconds=30)


def _check_horizon(policy: RetryPolicy, aggregate: Any) -> None:
    """Refuse a policy that may resend after the aggregate forgot the command's first verdict.

    Every send of a step carries one command id; the aggregate recognises it for its
    ``command_retention``. A resend later than that would be decided again.
    """
    retention = getattr(getattr(aggregate, "definition", None), "command_retention", None)
    if not isinstance(retention, timedelta) or not isinstance(policy, RetryPolicy):
        return
    horizon = policy.horizon(DEFAULT_ATTEMPT_TIMEOUT)
    if horizon is None or horizon > retention:
        lasts = "for ever" if horizon is None else f"for {horizon}"
        raise DefinitionError(
            f"send to {aggregate.name}", [
                f"the retry policy resends {lasts}, longer than the aggregate remembers a command "
                f"id (command_retention={retention}): give the policy a deadline within it, or "
                f"declare the aggregate with a longer command_retention"
            ])


# -- what the shell feeds in ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SentEvent:
    """An event the aggregate published: its stable type name and its value (decoded by the shell)."""

    type: str
    value: Any
    command_id: str
    deferred: bool = False


@dataclass(frozen=True, slots=True)
class CommandReplied:
    """The aggregate's reply to command ``command_id``, for the send step at ``path``.

    ``status`` is ``accepted`` (``events`` holds the command's events, the reply event
    last), ``ignored``, ``conflict`` or ``rejected`` (``reason`` says why).
    """

    path: str
    command_id: str
    status: str
    events: tuple[SentEvent, ...] = ()
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class EventsSeen:
    """Events the aggregate stored under the step's correlation id (read from its events topic)."""

    path: str
    events: tuple[SentEvent, ...]


@dataclass(frozen=True, slots=True)
class SendTimedOut:
    """Attempt ``attempt`` of the send at ``path`` got no usable reply in time."""

    path: str
    attempt: int


# -- what the shell carries out ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendCommand:
    """Produce ``command`` to ``aggregate_id`` at ``not_before`` (ms), with ``command_id`` as
    command and correlation id; report ``SendTimedOut(path, attempt)`` at
    ``not_before + (timeout_ms or the app's command_timeout)``, at most ``deadline_at``.

    ``watch_from`` (ms, filter steps only): report the events the aggregate stores under
    ``command_id`` from then on as ``EventsSeen`` (once per step, not per attempt).
    """

    path: str
    attempt: int
    aggregate: Any = field(repr=False, compare=False)
    aggregate_id: str
    command: Any = field(repr=False, compare=False)
    command_id: str
    not_before: int
    timeout_ms: int | None = None
    deadline_at: int | None = None
    watch_from: int | None = None


@dataclass(frozen=True, slots=True)
class StopSend:
    """The send step at ``path`` ended or was abandoned: stop resending, timing and watching."""

    path: str


# -- the step ------------------------------------------------------------------------------


def send_step(self: WorkflowInstance, fiber: Fiber, request: SendRequest[Any]) -> Any:
    """Start (or replay) a send step: store its start, then wait for a reply."""
    path = fiber.next_path()
    started = self._record(StepStarted(self._next_seq, path, StepKind.SEND, request.aggregate_name, self._now))
    key = idempotency_key(self.definition.name, self.instance_id, path)
    if len(key.encode()) > MAX_ID_BYTES:
        # The aggregate would refuse such a command id without a reply; say why at once.
        error = StepError(ErrorKind.NOT_RETRYABLE, f"the command id {key[:80]!r}... is longer than "
                          f"{MAX_ID_BYTES} bytes: use a shorter instance id", "LimitError")
        self._record(StepFailed(self._next_seq, path, error, at=self._now))
        return None, WorkflowStepFailed(error)
    return self._wait(fiber, Pending(path, StepKind.SEND, fiber, request, started.at, None))  # type: ignore[union-attr, arg-type]


def issue_send(self: WorkflowInstance, pending: Pending) -> None:
    """Send the first attempt (also the first after a restart, whatever the deadline)."""
    _attempt(self, pending, 1, self._now)


def _attempt(self: WorkflowInstance, pending: Pending, attempt: int, at: int) -> None:
    request: SendRequest[Any] = pending.request  # type: ignore[assignment]
    policy = request.policy
    deadline_at = policy.deadline_at(pending.started_at)
    if deadline_at is not None and at >= deadline_at:
        # After a restart the command is sent again even past the deadline (a repeat is
        # safe, the outcome is unknown); that attempt runs to its end.
        deadline_at = None
    pending.attempt = attempt
    self._effects.append(SendCommand(
        path=pending.path,
        attempt=attempt,
        aggregate=request.aggregate,
        aggregate_id=request.aggregate_id,
        command=request.command,
        command_id=idempotency_key(self.definition.name, self.instance_id, pending.path),
        not_before=at,
        timeout_ms=None if policy.attempt_timeout is None else max(int(policy.attempt_timeout.total_seconds() * 1000), 1),
        deadline_at=deadline_at,
        watch_from=pending.started_at if request.filter is not None else None,
    ))


def forget_send(self: WorkflowInstance, pending: Pending, stop_work: bool) -> None:
    """The step ended or was abandoned: the shell stops its timer, resends and watch."""
    self._effects.append(StopSend(pending.path))


def _pending_send(self: WorkflowInstance, path: str) -> Pending | None:
    pending = self._pending.get(path)
    return pending if pending is not None and pending.kind == StepKind.SEND else None


def pending_send(self: WorkflowInstance, path: str) -> SendRequest[Any] | None:
    """The request of the send step pending at ``path``, or None (for the shell's decoding)."""
    pending = _pending_send(self, path)
    return None if pending is None else pending.request  # type: ignore[return-value]


def send_timed_out(self: WorkflowInstance, message: SendTimedOut) -> str | None:
    """An attempt ran out of time: send again, or fail OUTCOME_UNKNOWN when the policy is spent."""
    pending = _pending_send(self, message.path)
    if pending is None or pending.attempt != message.attempt:
        return None  # a stale attempt, or a step that ended
    request: SendRequest[Any] = pending.request  # type: ignore[assignment]
    decision = request.policy.after_failure(
        attempt=message.attempt, started_at=pending.started_at, now=self._now, error=None, timed_out=True
    )
    if isinstance(decision, GiveUp):
        key = idempotency_key(self.definition.name, self.instance_id, pending.path)
        self._fail(pending, StepError(
            ErrorKind.OUTCOME_UNKNOWN,
            f"no reply to command {key} for {request.aggregate_name}/{request.aggregate_id} "
            f"({decision.error.message}); it may have been applied",
            "TimeoutError",
        ))
        return None
    _attempt(self, pending, decision.attempt, decision.at)
    return None


def command_replied(self: WorkflowInstance, message: CommandReplied) -> str | None:
    """A reply came in: it answers the step whose command it names, whichever send it answers."""
    pending = _pending_send(self, message.path)
    if pending is None:
        return "it answers no pending send step (a late repeat, or not ours)"
    key = idempotency_key(self.definition.name, self.instance_id, pending.path)
    if message.command_id != key:
        return f"it answers command {message.command_id[:100]!r}, not the step's {key[:100]!r}"
    request: SendRequest[Any] = pending.request  # type: ignore[assignment]
    if message.status != "accepted":
        reason = message.reason or f"the aggregate answered {message.status}"
        kind = "SagaAlreadyStarted" if reason.startswith(SAGA_ALREADY_STARTED) else f"Command{message.status.title()}"
        if not reason.startswith(SAGA_ALREADY_STARTED):
            reason = f"{request.aggregate_name}/{request.aggregate_id} {message.status} the command: {reason}"
        self._fail(pending, StepError(ErrorKind.NOT_RETRYABLE, reason, kind))
        return None
    if request.filter is None:
        if not message.events:
            return "an accepted reply without events"
        _complete(self, pending, message.events[-1])
        return None
    _offer(self, pending, message.events)
    return None


def events_seen(self: WorkflowInstance, message: EventsSeen) -> str | None:
    """Events stored under the step's correlation id: a filter step takes the first it accepts."""
    pending = _pending_send(self, message.path)
    if pending is None:
        return "it matches no pending send step"
    if pending.request.filter is None:  # type: ignore[attr-defined]
        return None  # send takes only the reply to its own command
    _offer(self, pending, message.events)
    return None


def _offer(self: WorkflowInstance, pending: Pending, events: tuple[SentEvent, ...]) -> None:
    request: SendRequest[Any] = pending.request  # type: ignore[assignment]
    assert request.filter is not None
    for event in events:
        try:
            accepted = bool(request.filter(event.value))
        except Exception as exc:  # noqa: BLE001 - the filter is user code
            self._fail(pending, StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, f"the filter raised on {event.type}: "))
            return
        if accepted:
            _complete(self, pending, event)
            return


def _complete(self: WorkflowInstance, pending: Pending, event: SentEvent) -> None:
    request: SendRequest[Any] = pending.request  # type: ignore[assignment]
    codec = self.definition.codec
    try:
        text = f'{{"type":{json.dumps(event.type)},"event":{codec.encode(event.value)}}}'
        value = read_event(self, request, text)
    except ValueError as exc:
        self._fail(pending, StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, "the event cannot be stored: "))
        return
    self._record(StepCompleted(self._next_seq, pending.path, text, at=self._now))
    self._resolve(pending, value, None, stop_work=True)


def read_event(self: WorkflowInstance, request: SendRequest[Any], text: str) -> Any:
    """Read a stored send result back: as ``type=`` when given, else as the aggregate's event class.

    Raises:
        ValueError: The text is not a stored event, or does not read as its type.
    """
    stored = json.loads(text)
    if not isinstance(stored, dict) or not isinstance(stored.get("type"), str) or "event" not in stored:
        raise ValueError(f"not a stored event: {text[:200]!r}")
    declared = request.type
    if declared is None:
        declared = request.aggregate.definition.event_types.get(stored["type"])
    event = stored["event"]
    if declared is None:
        return event  # a plain JSON event
    return self.definition.codec.decode(json.dumps(event), declared)


def stored_send(self: WorkflowInstance, pending: Pending, record: StepCompleted) -> Any:
    """The value replay gives for a stored send result."""
    return read_event(self, pending.request, record.result)  # type: ignore[arg-type]
