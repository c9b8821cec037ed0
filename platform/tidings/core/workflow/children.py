"""Child workflows in the interpreter: the ``start_child``/``await_child`` steps and their inputs.

Like ``steps.py``, the functions here take the ``WorkflowInstance`` and use its private
methods; they live apart so that the interpreter only registers them. The records and
effects they use are in ``child_records.py``; the rules are in ``docs/workflows.md``
("Start other workflows"):

- ``start_child`` stores ``StepStarted(kind=child_start, name=<child workflow>)`` and asks
  the shell to ``StartChild``. The step completes with the ``ChildHandle`` when the
  child's ``ChildStarted`` acknowledgement arrives (or its ``ChildEnded``: a child that
  ended has started). After a restart the start is sent again; it is idempotent per child
  id ``{parent_id}:{path}``, so the same child answers.
- A child's outcome is journaled on arrival (``ChildOutcome``), like a signal: an
  ``await_child`` reached later finds it, every await of that child gets it, and a
  repeated report changes nothing. The await completes with the result read as its type;
  a faulted child fails it ``CHILD_FAULTED`` (with the child's error in the message), a
  cancelled child ``CANCELLED``, a result its type cannot read ``NOT_RETRYABLE``.
- Cancelling the parent sends a ``CancelChild`` for every child it awaits and every child
  whose start is in flight; the effect is issued live only, never on replay, so it is sent
  once. A child started and not awaited runs on; a parked parent cancels nothing (it
  waits on no step).
- Each ``start_child`` step draws a random token, stored in its ``StepStarted`` and sent
  with the child's start; the child keeps it (``Started.parent_token``) and every report it
  sends carries it. A report is accepted only with the token of the step it names, so a
  producer that may write the parent's inbox but read no inbox or journal cannot end the
  step with a made-up child (docs/security.md). A step stored before tokens existed has
  none, and its reports are accepted as they were.
"""

from __future__ import annotations

import hmac
import json
from typing import TYPE_CHECKING, Any

from tidings.core.limits import MAX_PAYLOAD_BYTES, LimitError, check_id, load_json
from tidings.core.workflow.child_records import (
    AckParent,
    CancelChild,
    ChildEnded,
    ChildHandle,
    ChildOutcome,
    ChildStarted,
    ParentRef,
    StartChild,
    TellParent,
)
from tidings.core.workflow.failures import ErrorKind, StepError
from tidings.core.workflow.fibers import Fiber, Pending
from tidings.core.workflow.outcomes import WorkflowStatus
from tidings.core.workflow.journal import StepCompleted, StepFailed, StepKind, StepStarted
from tidings.core.workflow.paths import child_id
from tidings.core.workflow.requests import CallRequest, StepRequest
from tidings.errors import JournalMismatch, WorkflowStepFailed

if TYPE_CHECKING:  # definition imports context, which imports this module
    from tidings.core.workflow.definition import WorkflowDefinition
    from tidings.core.workflow.interpreter import WorkflowInstance

OUTCOMES = frozenset({"finished", "faulted", "cancelled"})
TOKEN_BYTES = 16  # a child's token: 128 random bits, as a schedule run's start token


def definition_of(workflow: Any) -> WorkflowDefinition:
    """Return the definition behind a workflow handle (``@app.workflow``) or a definition.

    Raises:
        TypeError: ``workflow`` is neither.
    """
    definition = getattr(workflow, "definition", workflow)
    if not all(hasattr(definition, name) for name in ("name", "body", "input_type", "result_type", "codec")):
        raise TypeError(f"a child workflow must be a workflow handle or definition, not {workflow!r}")
    return definition


class ChildStartRequest(StepRequest[ChildHandle]):
    """``ctx.start_child``: start ``definition`` with ``input``; give the handle once the start is stored."""

    __slots__ = ("definition", "input", "text")

    def __init__(self, definition: WorkflowDefinition, input: Any) -> None:
        self.definition = definition
        self.input = input
        self.text = ""  # the input as JSON text, set when the step is reached


class ChildAwaitRequest(StepRequest[Any]):
    """``ctx.await_child``: wait for the child's outcome and give its result, read as ``type``."""

    __slots__ = ("handle", "type")

    def __init__(self, handle: ChildHandle, type: Any) -> None:
        self.handle = handle
        self.type = type


async def _start_and_await(definition: WorkflowDefinition, input: Any, type: Any) -> Any:
    handle = await ChildStartRequest(definition, input)
    return await ChildAwaitRequest(handle, type)


def child_call(definition: WorkflowDefinition, input: Any, type: Any) -> StepRequest[Any]:
    """``ctx.child``: a ``start_child`` step then an ``await_child`` step, as one call."""
    return CallRequest(_start_and_await, (definition, input, type), {})


class _Child:
    """What the parent knows of one child: its workflow, its stored outcome, who waits for it."""

    __slots__ = ("workflow", "text", "token", "outcome", "waiters")

    def __init__(self, workflow: str, text: str, token: str | None) -> None:
        self.workflow = workflow
        self.text = text  # the child's input as stored: a start sent again must carry it
        self.token = token  # what its reports must carry (None: a step stored before tokens)
        self.outcome: ChildOutcome | None = None
        self.waiters: list[Pending] = []


def _children(self: WorkflowInstance) -> dict[str, _Child]:
    children = self._children
    if children is None:
        children = self._children = {}
    return children


# -- steps --------------------------------------------------------------------------------


def start_step(self: WorkflowInstance, fiber: Fiber, request: ChildStartRequest) -> Any:
    """Decide a ``start_child`` step: store its start, register the child, send its start."""
    path = fiber.next_path()
    definition = request.definition
    replay = self._replay
    # Replaying, the stored token wins (as a stored value does): draw none to drop.
    token = None if replay is not None and replay.peek() is not None else self._entropy(TOKEN_BYTES).hex()
    started = self._record(StepStarted(self._next_seq, path, StepKind.CHILD_START, definition.name, self._now,
                                       token=token))
    try:
        check_id(child_id(self.instance_id, path), "the child's id")
        text, _ = definition.codec.convert(request.input, definition.input_type)
        if len(text) > MAX_PAYLOAD_BYTES // 4 and len(text.encode()) > MAX_PAYLOAD_BYTES:
            raise LimitError(f"the child's input is larger than {MAX_PAYLOAD_BYTES:,} bytes")
    except Exception as exc:  # noqa: BLE001 - a validator of the input type is user code
        error = StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, "the child cannot be started: ")
        self._record(StepFailed(self._next_seq, path, error, at=self._now))
        return None, WorkflowStepFailed(error)
    request.text = text
    _children(self)[path] = _Child(definition.name, text, started.token)  # type: ignore[union-attr]
    pending = Pending(path, StepKind.CHILD_START, fiber, request, started.at, None)  # type: ignore[union-attr, arg-type]
    return self._wait(fiber, pending)


def await_step(self: WorkflowInstance, fiber: Fiber, request: ChildAwaitRequest) -> Any:
    """Decide an ``await_child`` step: the stored outcome now, or wait for it."""
    handle = request.handle
    child = _child_of(self, handle)
    if child is None:
        return None, ValueError(
            f"await_child got {handle!r}, which is no child this instance started; "
            "await the handle start_child gave"
        )
    path = fiber.next_path()
    started = self._record(StepStarted(self._next_seq, path, StepKind.CHILD_AWAIT, handle.id, self._now))
    pending = Pending(path, StepKind.CHILD_AWAIT, fiber, request, started.at, None)  # type: ignore[union-attr, arg-type]
    if child.outcome is not None:
        return _consume(self, pending, child.outcome)
    child.waiters.append(pending)
    return self._wait(fiber, pending)


def _child_of(self: WorkflowInstance, handle: Any) -> _Child | None:
    if not isinstance(handle, ChildHandle) or self._children is None:
        return None
    prefix = f"{self.instance_id}:"
    if not handle.id.startswith(prefix):
        return None
    child = self._children.get(handle.id[len(prefix):])
    return child if child is not None and child.workflow == handle.workflow else None


def issue(self: WorkflowInstance, pending: Pending) -> None:
    """Tell the shell to start a pending child (live, and again after a replay)."""
    if pending.kind != StepKind.CHILD_START:
        return  # an await has nothing to issue: the outcome comes to the instance
    request: ChildStartRequest = pending.request  # type: ignore[assignment]
    parent = ParentRef(self.definition.name, self.instance_id, pending.path, _children(self)[pending.path].token)
    self._effects.append(
        StartChild(pending.path, request.definition.name, child_id(self.instance_id, pending.path), request.text, parent)
    )


def reask(self: WorkflowInstance) -> None:
    """After a replay: send the start of every awaited child with no stored outcome again.

    The child answers a repeated start of its own parent with its acknowledgement and,
    once it has ended, its outcome again (``repeated_start`` in the shell), so an outcome
    report lost on its way (a crash of the child's worker, a record Kafka refused) does
    not leave this instance waiting for ever. A start still pending is issued anyway.
    """
    if self._children is None:
        return
    for path, child in self._children.items():
        if child.outcome is None and child.waiters and path not in self._pending:
            parent = ParentRef(self.definition.name, self.instance_id, path, child.token)
            self._effects.append(StartChild(path, child.workflow, child_id(self.instance_id, path), child.text, parent))


def stored_handle(self: WorkflowInstance, pending: Pending) -> ChildHandle:
    """The value of a stored ``start_child`` completion (replay)."""
    request: ChildStartRequest = pending.request  # type: ignore[assignment]
    return _handle(self, pending.path, request)


def _handle(self: WorkflowInstance, path: str, request: ChildStartRequest) -> ChildHandle:
    definition = request.definition
    return ChildHandle(definition.name, child_id(self.instance_id, path), definition.result_type)


def _handle_json(handle: ChildHandle) -> str:
    return json.dumps({"workflow": handle.workflow, "id": handle.id})


# -- inputs -------------------------------------------------------------------------------


def _reported_child(self: WorkflowInstance, message: ChildStarted | ChildEnded) -> _Child | str:
    """The child a report is about, or why the report is refused (no such child, wrong token)."""
    child = self._children.get(message.path) if self._children is not None else None
    if child is None or child.workflow != message.workflow:
        return f"no child workflow {message.workflow!r} was started at step {message.path!r}"
    if child.token is not None and not (
        message.token is not None and hmac.compare_digest(message.token.encode(), child.token.encode())
    ):
        # Only the child's worker knows the token: this report comes from somebody else.
        return (f"the report of child workflow {message.workflow!r} at step {message.path!r} does not carry "
                "the token its parent gave that child: it was not sent by the child's worker")
    return child


def accept_started(self: WorkflowInstance, message: ChildStarted) -> str | None:
    """Take a child's acknowledgement: complete its pending start; a repeat changes nothing."""
    child = _reported_child(self, message)
    if isinstance(child, str):
        return child
    _complete_start(self, message.path, message.workflow)
    return None  # completed, or a repeated acknowledgement (or one for a start that was cancelled)


def accept_ended(self: WorkflowInstance, message: ChildEnded) -> str | None:
    """Store a child's outcome (once) and give it to the steps awaiting it."""
    child = _reported_child(self, message)
    if isinstance(child, str):
        return child
    if message.outcome not in OUTCOMES:
        return f"a child's outcome must be one of {sorted(OUTCOMES)}, not {message.outcome!r}"
    if message.outcome == "finished" and message.result is None:
        return "a finished child's report carries no result"
    if child.outcome is not None:
        return None  # a repeated report: the first one is stored
    # A child that ended has started: its acknowledgement may be lost or late.
    _complete_start(self, message.path, message.workflow)
    record = ChildOutcome(
        self._next_seq, message.path, message.workflow, message.outcome, self._now,
        message.result if message.outcome == "finished" else None,
        message.error if message.outcome == "faulted" else None,
    )
    stored = self._record(record)
    if self._status is WorkflowStatus.RUNNING:
        self._apply_stored(stored)
    else:
        child.outcome = stored  # type: ignore[assignment]  # parked: kept for the replay
    return None


def _complete_start(self: WorkflowInstance, path: str, workflow: str) -> bool:
    pending = self._pending.get(path)
    if pending is None or pending.kind != StepKind.CHILD_START:
        return False
    request: ChildStartRequest = pending.request  # type: ignore[assignment]
    if request.definition.name != workflow:
        return False
    handle = _handle(self, path, request)
    self._record(StepCompleted(self._next_seq, path, _handle_json(handle), at=self._now))
    self._resolve(pending, handle, None, stop_work=False)
    return True


def apply_outcome(self: WorkflowInstance, record: ChildOutcome) -> None:
    """Apply a stored child outcome (live: just recorded; replay: in journal order)."""
    child = self._children.get(record.path) if self._children is not None else None
    if child is None or child.workflow != record.name:
        raise JournalMismatch(f"the journal holds an outcome of child {record.path} that the body did not start")
    child.outcome = record
    waiters, child.waiters = child.waiters, []
    for waiter in waiters:
        if waiter.path not in self._pending or self._pending[waiter.path] is not waiter:
            continue  # abandoned (a lost race) or cancelled meanwhile
        value, exc = _consume(self, waiter, record)
        self._resolve(waiter, value, exc, stop_work=False)


def _consume(self: WorkflowInstance, pending: Pending, record: ChildOutcome) -> tuple[Any, BaseException | None]:
    request: ChildAwaitRequest = pending.request  # type: ignore[assignment]
    handle = request.handle
    what = f"child workflow {handle.workflow} {handle.id!r}"
    if record.outcome == "finished":
        declared = request.type if request.type is not None else handle.result_type
        try:
            value = self.definition.codec.decode(record.result or "null", declared)
        except ValueError as exc:
            error = StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, f"the result of {what} cannot be read: ")
        else:
            self._record(StepCompleted(self._next_seq, pending.path, record.result or "null", record.seq, at=self._now))
            return value, None
    elif record.outcome == "faulted":
        cause = record.error or StepError(None, "faulted")
        error = StepError(ErrorKind.CHILD_FAULTED, f"{what} faulted: {cause}", cause.type)
    else:
        error = StepError(ErrorKind.CANCELLED, f"{what} was cancelled")
    self._record(StepFailed(self._next_seq, pending.path, error, record.seq, at=self._now))
    return None, WorkflowStepFailed(error)


def cancel_children(self: WorkflowInstance) -> None:
    """The instance is being cancelled (live): cancel the children it awaits or is starting.

    Never on replay: the cancel is sent once, when the cancellation is decided. A child
    started and not awaited is left running.
    """
    if self._replay is not None:
        return
    for pending in self._pending.values():
        if pending.kind == StepKind.CHILD_START:
            request: ChildStartRequest = pending.request  # type: ignore[assignment]
            self._effects.append(CancelChild(request.definition.name, child_id(self.instance_id, pending.path)))
        elif pending.kind == StepKind.CHILD_AWAIT:
            handle = pending.request.handle  # type: ignore[attr-defined]
            self._effects.append(CancelChild(handle.workflow, handle.id))


# -- the child's side ---------------------------------------------------------------------


def ack_parent(self: WorkflowInstance) -> None:
    """This instance is a running child: tell its parent it has started."""
    parent = self._parent
    if parent is not None:
        self._effects.append(AckParent(parent, self.definition.name))


def tell_parent(self: WorkflowInstance, outcome: str, result: str | None, error: StepError | None) -> None:
    """This instance is a child that has ended: tell its parent how."""
    parent = self._parent
    if parent is not None:
        self._effects.append(TellParent(parent, self.definition.name, outcome, result, error))


def parent_of_started(
    parent_workflow: str | None, parent_id: str | None, parent_path: str | None, parent_token: str | None = None,
) -> ParentRef | None:
    """The parent a ``Started`` record names, or None when it names none (or only part of one)."""
    if parent_workflow and parent_id and parent_path:
        return ParentRef(parent_workflow, parent_id, parent_path, parent_token or None)
    return None


# -- inbox records ------------------------------------------------------------------------

CHILD_REPORTS = frozenset({"child_started", "child_ended"})
"""The inbox kinds a child sends its parent."""


def parent_of_request(request: Any) -> ParentRef | None | str:
    """The parent a ``start`` request names; None for none; a reason when it names only part of one."""
    fields = (getattr(request, "parent_workflow", None), getattr(request, "parent_id", None),
              getattr(request, "parent_path", None))
    if not any(fields):
        return None
    parent = parent_of_started(*fields, getattr(request, "parent_token", None))
    return parent if parent is not None else "a child's start names its parent by parent_workflow, parent_id and parent_path"


def child_report(request: Any) -> ChildStarted | ChildEnded | str:
    """Read a ``child_started``/``child_ended`` inbox record as the parent's input, or say why not.

    The record may come from any producer: it is only read here; whether the parent has
    such a child is decided by the instance (``accept_started``/``accept_ended``).
    """
    path, workflow = getattr(request, "parent_path", None), getattr(request, "child_workflow", None)
    if not path or not workflow:
        return "a child's report needs parent_path and child_workflow"
    token = getattr(request, "parent_token", None)
    if request.kind == "child_started":
        return ChildStarted(path, workflow, token)
    outcome = getattr(request, "outcome", None)
    if outcome not in OUTCOMES:
        return f"a child's outcome must be one of {sorted(OUTCOMES)}, not {outcome!r}"
    result = None
    if outcome == "finished":
        if request.payload is None:
            return "a finished child's report carries no result"
        try:
            load_json(request.payload, "the child's result")  # bounded: the bytes come from outside
            result = request.payload.decode()
        except ValueError as exc:  # also invalid UTF-8 and LimitError
            return f"the child's result is not JSON: {exc}"
    return ChildEnded(path, workflow, outcome, result, getattr(request, "error", None) if outcome == "faulted" else None,
                      token)
