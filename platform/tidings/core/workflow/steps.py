"""How the interpreter decides each kind of step request.

Each handler takes ``(instance, fiber, request)`` and returns ``(value, exception)`` to
continue the fiber at once, or ``BLOCKED`` when the fiber waits for an input. They are part
of ``WorkflowInstance`` (and use its private methods); they live here to keep each module
to one concern: the interpreter schedules, the handlers decide steps.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidings.core.workflow.children import ChildAwaitRequest, ChildStartRequest, await_step, start_step
from tidings.core.workflow.context import ms_instant
from tidings.core.workflow.fibers import BLOCKED, Fiber, Group, Pending
from tidings.core.workflow.journal import StepCompleted, StepKind, StepStarted, VersionMarker
from tidings.core.workflow.requests import (
    ActivityRequest,
    AllRequest,
    CallRequest,
    GuidRequest,
    NowRequest,
    RaceRequest,
    RandomRequest,
    SignalRequest,
    TimerRequest,
    VersionRequest,
)
from tidings.core.workflow.sends import (
    CommandReplied,
    EventsSeen,
    SendRequest,
    SendTimedOut,
    command_replied,
    events_seen,
    forget_send,
    issue_send,
    send_step,
    send_timed_out,
    stored_send,
)
from tidings.core.workflow.signal_sends import (
    SignalReplied,
    SignalSendRequest,
    SignalTimedOut,
    forget_signal,
    issue_signal,
    raised_for,
    signal_replied,
    signal_send_step,
    signal_timed_out,
    stored_signal,
)
from tidings.core.workflow.failures import StepError
from tidings.core.workflow.queries import QueryRegisterRequest, register_step
from tidings.core.workflow.updates import UpdateReplyRequest, UpdateWaitRequest, reply_step, wait_step
from tidings.errors import DefinitionError, ForeignAwaitError

if TYPE_CHECKING:
    from tidings.core.workflow.interpreter import WorkflowInstance


def foreign_await(awaited: Any) -> ForeignAwaitError:
    """Return the error thrown into a body that awaited something other than a step."""
    cancel = getattr(awaited, "cancel", None)
    if callable(cancel):
        cancel()  # an asyncio future: nobody will ever wait for it
    return ForeignAwaitError(
        f"a workflow body awaited {awaited!r}, which is not a ctx step: its result could not be "
        "journaled or replayed. Await only ctx steps and @subroutine calls; do I/O in ctx.activity."
    )


def explain_body_error(error: BaseException) -> BaseException:
    """Turn asyncio's "no running event loop" (a foreign await outside a loop) into a clear error."""
    if isinstance(error, RuntimeError) and "no running event loop" in str(error):
        explained = foreign_await(error)
        explained.__cause__ = error
        return explained
    return error




def _activity(self: WorkflowInstance, fiber: Fiber, request: ActivityRequest[Any]) -> Any:
    path = fiber.next_path()
    started = self._record(StepStarted(self._next_seq, path, StepKind.ACTIVITY, request.name, self._now))
    return self._wait(fiber, Pending(path, StepKind.ACTIVITY, fiber, request, started.at, None))  # type: ignore[union-attr, arg-type]


def _timer(self: WorkflowInstance, fiber: Fiber, request: TimerRequest) -> Any:
    path = fiber.next_path()
    due = request.due_ms if request.due_ms is not None else self._now + (request.delay_ms or 0)
    started = self._record(StepStarted(self._next_seq, path, StepKind.TIMER, "", self._now, due))
    return self._wait(fiber, Pending(path, StepKind.TIMER, fiber, request, started.at, started.due))  # type: ignore[union-attr, arg-type]


def _inline(self: WorkflowInstance, fiber: Fiber, kind: str, produce: Callable[[], str]) -> str:
    path = fiber.next_path()
    self._record(StepStarted(self._next_seq, path, kind, "", self._now))
    replay = self._replay
    # While replaying, the stored value wins: draw no entropy for a value that is dropped.
    value = "" if replay is not None and replay.peek() is not None else produce()
    completed = self._record(StepCompleted(self._next_seq, path, value, at=self._now))
    assert isinstance(completed, StepCompleted)
    return completed.result


def _now(self: WorkflowInstance, fiber: Fiber, request: NowRequest) -> Any:
    return ms_instant(int(_inline(self, fiber, StepKind.NOW, lambda: str(self._now)))), None


def _guid(self: WorkflowInstance, fiber: Fiber, request: GuidRequest) -> Any:
    def produce() -> str:
        return json.dumps(str(uuid.UUID(bytes=self._entropy(16), version=4)))

    return uuid.UUID(json.loads(_inline(self, fiber, StepKind.GUID, produce))), None


def _random(self: WorkflowInstance, fiber: Fiber, request: RandomRequest) -> Any:
    def produce() -> str:
        return repr((int.from_bytes(self._entropy(8), "big") >> 11) / float(1 << 53))

    return float(_inline(self, fiber, StepKind.RANDOM, produce)), None


def _signal(self: WorkflowInstance, fiber: Fiber, request: SignalRequest[Any]) -> Any:
    path = fiber.next_path()
    due = None if request.timeout_ms is None else self._now + request.timeout_ms
    started = self._record(StepStarted(self._next_seq, path, StepKind.SIGNAL, request.name, self._now, due))
    pending = Pending(path, StepKind.SIGNAL, fiber, request, started.at, started.due)  # type: ignore[union-attr, arg-type]
    queue = self._signals.get(request.name) if self._signals is not None else None
    if queue:
        # Stored signals exist only while nobody waits for them, so this wait is the oldest.
        return self._consume(pending, queue.pop(0))
    waiters = self._waiters
    if waiters is None:
        waiters = self._waiters = {}
    queue_of_waiters = waiters.get(request.name)
    if queue_of_waiters is None:
        queue_of_waiters = waiters[request.name] = []
    queue_of_waiters.append(pending)
    return self._wait(fiber, pending)


def _version(self: WorkflowInstance, fiber: Fiber, request: VersionRequest) -> Any:
    number = fiber.counter + 1
    position = f"{fiber.prefix}{number}"
    if fiber.version_at != number:
        fiber.version_at, fiber.version_ids = number, set()
    ids = fiber.version_ids
    assert ids is not None
    if request.change_id in ids:
        return None, DefinitionError(
            f"version({request.change_id!r})",
            [f"the change id {request.change_id!r} is used twice at position {position}; give each change its own id"],
        )
    ids.add(request.change_id)
    replay = self._replay
    if replay is not None:
        stored = replay.versions.get((position, request.change_id))
        if stored is not None:
            return stored, None
        if replay.max_step.get(fiber.prefix, 0) >= number:
            return 1, None  # the instance had passed this point before the change: old code
    # Appended, never checked in order: a marker may be new in the middle of a replay.
    self._append(VersionMarker(self._next_seq, position, request.change_id, request.latest))
    return request.latest, None


def _parallel(self: WorkflowInstance, fiber: Fiber, request: AllRequest | RaceRequest) -> Any:
    path = fiber.next_path()
    kind = StepKind.RACE if isinstance(request, RaceRequest) else StepKind.ALL
    self._record(StepStarted(self._next_seq, path, kind, "", self._now))
    branches = request.branches
    if not branches:
        if kind == StepKind.RACE:
            return None, DefinitionError("race", ["race needs at least one branch"])
        return (() if request.as_tuple else []), None  # type: ignore[union-attr]
    group = Group(path, request, fiber)
    limit = getattr(request, "limit", None) or len(branches)
    for _ in range(min(limit, len(branches))):
        self._ready.append((group.spawn_next(), None, None))
    fiber.waiting = group
    return BLOCKED


def _call(self: WorkflowInstance, fiber: Fiber, request: CallRequest[Any]) -> Any:
    # The subroutine becomes the innermost frame; the caller resumes when it returns.
    fiber.frames.append(request.start())
    return None, None


STEP_HANDLERS: dict[type[Any], Callable[[WorkflowInstance, Fiber, Any], Any]] = {
    ActivityRequest: _activity,
    TimerRequest: _timer,
    NowRequest: _now,
    GuidRequest: _guid,
    RandomRequest: _random,
    SignalRequest: _signal,
    VersionRequest: _version,
    AllRequest: _parallel,
    RaceRequest: _parallel,
    CallRequest: _call,
    SendRequest: send_step,
    ChildStartRequest: start_step,
    ChildAwaitRequest: await_step,
    SignalSendRequest: signal_send_step,
    UpdateWaitRequest: wait_step,
    UpdateReplyRequest: reply_step,
    QueryRegisterRequest: register_step,
}


@dataclass(frozen=True, slots=True)
class PendingKind:
    """How the interpreter issues, forgets and reads back a pending step of a kind it does
    not handle itself (activities, timers and signal waits are built in)."""

    issue: Callable[[WorkflowInstance, Pending], None]
    forget: Callable[[WorkflowInstance, Pending, bool], None]
    stored_value: Callable[[WorkflowInstance, Pending, StepCompleted], Any]
    raised: Callable[[StepError], BaseException] | None = None
    """The exception a stored failure raises at the step (None: ``WorkflowStepFailed``)."""


PENDING_KINDS: dict[str, PendingKind] = {
    StepKind.SEND: PendingKind(issue_send, forget_send, stored_send),
    StepKind.SIGNAL_SEND: PendingKind(issue_signal, forget_signal, stored_signal, raised_for),
}

MESSAGE_HANDLERS: dict[type[Any], Callable[[WorkflowInstance, Any], str | None]] = {
    CommandReplied: command_replied,
    EventsSeen: events_seen,
    SendTimedOut: send_timed_out,
    SignalReplied: signal_replied,
    SignalTimedOut: signal_timed_out,
}
"""Inbox messages of such kinds: each returns why it was refused, or None."""
