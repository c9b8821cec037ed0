"""The step that signals another workflow instance: ``ctx.signal(workflow, instance_id, name, payload)``.

Stored step kind ``signal_send`` (its name: the target workflow's). The signal carries the
step's idempotency key ``{workflow}/{instance_id}/{path}`` as its signal id and its
request id, so the target stores it once however often it is sent: after a replay or a
restart the step, started but not ended, sends it again, and the target (which stores no
second signal with an id its journal holds, ``signal_ids.py``) answers ``accepted`` and
changes nothing.

The interpreter decides; the shell carries out:

- ``SendSignal(path, attempt, ...)``: produce the signal to the target's inbox at
  ``not_before``, answered on this workflow's replies topic; give the attempt up at
  ``not_before + (timeout_ms or the app's command_timeout)`` (at most ``deadline_at``) and
  report ``SignalTimedOut(path, attempt)``.
- ``StopSignal(path)``: the step ended or was abandoned: stop resending and timing.

The target's answer comes back as ``SignalReplied``: ``accepted`` completes the step (value
None); ``not_found`` raises ``WorkflowNotFound`` at the step, ``ended`` ``WorkflowEnded``
(both journaled as a ``StepFailed`` whose error ``type`` names the exception, so a replay
raises the same); ``rejected`` fails it NOT_RETRYABLE with the target's reason. A policy
that runs out without an answer fails it OUTCOME_UNKNOWN: the signal may have been stored.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tidings.core.limits import MAX_ID_BYTES, MAX_PAYLOAD_BYTES, LimitError, check_id
from tidings.core.workflow.failures import ErrorKind, StepError
from tidings.core.workflow.fibers import Fiber, Pending
from tidings.core.workflow.journal import StepCompleted, StepFailed, StepKind, StepStarted
from tidings.core.workflow.paths import idempotency_key
from tidings.core.workflow.requests import StepRequest
from tidings.core.workflow.retry import GiveUp, RetryPolicy
from tidings.errors import WorkflowEnded, WorkflowNotFound, WorkflowStepFailed

if TYPE_CHECKING:
    from tidings.core.workflow.interpreter import WorkflowInstance

#: The stored error types that a replay raises as these exceptions, not ``WorkflowStepFailed``.
_RAISED_AS: Final = {"WorkflowNotFound": WorkflowNotFound, "WorkflowEnded": WorkflowEnded}
ANSWERS: Final = frozenset({"accepted", "not_found", "ended", "rejected"})


def _workflow_name(workflow: Any) -> str:
    name: Any = workflow
    if not isinstance(workflow, str):
        name = getattr(getattr(workflow, "definition", workflow), "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"signal needs a workflow handle (what @app.workflow gives) or its name, not {workflow!r}")
    return name


class SignalSendRequest(StepRequest[None]):
    """``ctx.signal``: deliver signal ``name`` with ``payload`` to ``workflow`` instance ``instance_id``."""

    __slots__ = ("workflow", "instance_id", "name", "payload", "policy", "text")

    def __init__(self, workflow: Any, instance_id: str, name: str, payload: Any, policy: RetryPolicy) -> None:
        self.workflow = _workflow_name(workflow)
        if not isinstance(instance_id, str) or not instance_id:
            raise TypeError(f"signal needs a non-empty instance id, not {instance_id!r}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"signal needs a non-empty signal name, not {name!r}")
        if not isinstance(policy, RetryPolicy):
            raise TypeError(f"signal needs a RetryPolicy, not {policy!r}")
        self.instance_id = instance_id
        self.name = name
        self.payload = payload
        self.policy = policy
        self.text = ""  # the payload as JSON text, set when the step is reached


# -- what the shell feeds in ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SignalReplied:
    """The target's answer to the signal of step ``path`` (``request_id``: the step key).

    ``answer``: ``accepted``, ``not_found``, ``ended`` or ``rejected`` (``reason`` says why).
    """

    path: str
    request_id: str
    answer: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SignalTimedOut:
    """Attempt ``attempt`` of the signal at ``path`` got no answer in time."""

    path: str
    attempt: int


# -- what the shell carries out ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendSignal:
    """Produce signal ``name`` with ``payload`` (JSON text) to ``workflow`` instance ``instance_id``
    at ``not_before`` (ms), with ``signal_id`` as its signal id and request id; report
    ``SignalTimedOut(path, attempt)`` at ``not_before + (timeout_ms or the app's command_timeout)``,
    at most ``deadline_at``."""

    path: str
    attempt: int
    workflow: str
    instance_id: str
    name: str
    payload: str
    signal_id: str
    not_before: int
    timeout_ms: int | None = None
    deadline_at: int | None = None


@dataclass(frozen=True, slots=True)
class StopSignal:
    """The signal step at ``path`` ended or was abandoned: stop resending and timing."""

    path: str


# -- the step ------------------------------------------------------------------------------


def signal_send_step(self: WorkflowInstance, fiber: Fiber, request: SignalSendRequest) -> Any:
    """Start (or replay) a signal step: store its start, then wait for the target's answer."""
    path = fiber.next_path()
    started = self._record(StepStarted(self._next_seq, path, StepKind.SIGNAL_SEND, request.workflow, self._now))
    try:
        key = idempotency_key(self.definition.name, self.instance_id, path)
        if len(key.encode()) > MAX_ID_BYTES:
            raise LimitError(f"its signal id {key[:80]!r}... is longer than {MAX_ID_BYTES} bytes: "
                             "use a shorter instance id")
        check_id(request.instance_id, "the target's instance id")
        check_id(request.name, "the signal's name")
        text = self.definition.codec.encode(request.payload)
        if len(text) > MAX_PAYLOAD_BYTES // 4 and len(text.encode()) > MAX_PAYLOAD_BYTES:
            raise LimitError(f"the signal's payload is larger than {MAX_PAYLOAD_BYTES:,} bytes")
    except Exception as exc:  # noqa: BLE001 - a payload's serializer is user code
        error = StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, "the signal cannot be sent: ")
        self._record(StepFailed(self._next_seq, path, error, at=self._now))
        return None, WorkflowStepFailed(error)
    request.text = text
    return self._wait(fiber, Pending(path, StepKind.SIGNAL_SEND, fiber, request, started.at, None))  # type: ignore[union-attr, arg-type]


def issue_signal(self: WorkflowInstance, pending: Pending) -> None:
    """Send the first attempt (also the first after a restart, whatever the deadline)."""
    _attempt(self, pending, 1, self._now)


def _attempt(self: WorkflowInstance, pending: Pending, attempt: int, at: int) -> None:
    request: SignalSendRequest = pending.request  # type: ignore[assignment]
    policy = request.policy
    deadline_at = policy.deadline_at(pending.started_at)
    if deadline_at is not None and at >= deadline_at:
        deadline_at = None  # after a restart the signal is sent again (a repeat is stored once)
    pending.attempt = attempt
    self._effects.append(SendSignal(
        path=pending.path,
        attempt=attempt,
        workflow=request.workflow,
        instance_id=request.instance_id,
        name=request.name,
        payload=request.text,
        signal_id=idempotency_key(self.definition.name, self.instance_id, pending.path),
        not_before=at,
        timeout_ms=None if policy.attempt_timeout is None else max(int(policy.attempt_timeout.total_seconds() * 1000), 1),
        deadline_at=deadline_at,
    ))


def forget_signal(self: WorkflowInstance, pending: Pending, stop_work: bool) -> None:
    """The step ended or was abandoned: the shell stops its timer and resends."""
    self._effects.append(StopSignal(pending.path))


def stored_signal(self: WorkflowInstance, pending: Pending, record: StepCompleted) -> Any:
    """The value replay gives for a delivered signal: None."""
    return None


def raised_for(error: StepError) -> BaseException:
    """The exception a body gets for a failed signal step (live and on replay alike)."""
    raised = _RAISED_AS.get(error.type or "")
    return raised(error.message) if raised is not None else WorkflowStepFailed(error)


def _pending_signal(self: WorkflowInstance, path: str) -> Pending | None:
    pending = self._pending.get(path)
    return pending if pending is not None and pending.kind == StepKind.SIGNAL_SEND else None


def _fail(self: WorkflowInstance, pending: Pending, error: StepError) -> None:
    self._record(StepFailed(self._next_seq, pending.path, error, at=self._now))
    self._resolve(pending, None, raised_for(error), stop_work=True)


def signal_replied(self: WorkflowInstance, message: SignalReplied) -> str | None:
    """The target answered: complete the step, or raise what the answer says at it."""
    pending = _pending_signal(self, message.path)
    if pending is None:
        return "it answers no pending signal step (a late repeat, or not ours)"
    key = idempotency_key(self.definition.name, self.instance_id, pending.path)
    if message.request_id != key:
        return f"it answers request {message.request_id[:100]!r}, not the step's {key[:100]!r}"
    if message.answer not in ANSWERS:
        return f"the answer {message.answer[:40]!r} is not one of {sorted(ANSWERS)}"
    request: SignalSendRequest = pending.request  # type: ignore[assignment]
    target = f"{request.workflow} {request.instance_id!r}"
    if message.answer == "accepted":
        self._record(StepCompleted(self._next_seq, pending.path, "null", at=self._now))
        self._resolve(pending, None, None, stop_work=True)
    elif message.answer == "not_found":
        _fail(self, pending, StepError(ErrorKind.NOT_RETRYABLE, f"no {target} was started", "WorkflowNotFound"))
    elif message.answer == "ended":
        _fail(self, pending, StepError(
            ErrorKind.NOT_RETRYABLE, f"{target} has ended and takes no more signals", "WorkflowEnded"))
    else:
        reason = message.reason or "no reason given"
        _fail(self, pending, StepError(
            ErrorKind.NOT_RETRYABLE, f"{target} rejected signal {request.name!r}: {reason}", "SignalRejected"))
    return None


def signal_timed_out(self: WorkflowInstance, message: SignalTimedOut) -> str | None:
    """An attempt ran out of time: send again, or fail OUTCOME_UNKNOWN when the policy is spent."""
    pending = _pending_signal(self, message.path)
    if pending is None or pending.attempt != message.attempt:
        return None  # a stale attempt, or a step that ended
    request: SignalSendRequest = pending.request  # type: ignore[assignment]
    decision = request.policy.after_failure(
        attempt=message.attempt, started_at=pending.started_at, now=self._now, error=None, timed_out=True
    )
    if isinstance(decision, GiveUp):
        _fail(self, pending, StepError(
            ErrorKind.OUTCOME_UNKNOWN,
            f"no answer from {request.workflow} {request.instance_id!r} to signal {request.name!r} "
            f"({decision.error.message}); it may have been stored",
            "TimeoutError",
        ))
        return None
    _attempt(self, pending, decision.attempt, decision.at)
    return None
