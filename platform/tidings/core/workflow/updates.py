"""Updates: requests into a running instance that its body answers, journaled once.

A workflow declares the updates it takes (``UpdateDeclaration``: a name, the payload's type,
an optional validator). An update request is checked on arrival, before anything is stored:
an undeclared name, a payload that does not read as the declared type, or a validator that
raises rejects it, and the instance journals nothing. Once accepted it is journaled
(``UpdateReceived``, with the id that names it and where its caller waits) and stored until
the body takes it with ``await ctx.wait_update(name)``, which gives an ``UpdateCall``; the
body may run steps, then answers with ``await call.reply(value)`` or ``await call.fail(msg)``
(journaled ``UpdateAnswered``). Only then, once that record is durable, the shell answers
the caller (the ``AnswerUpdate`` effect).

An update id is stored once per instance: a repeat (a caller retrying after a timeout, or
after a worker's restart) stores nothing and gets the first answer, or waits for it while
the body has not answered yet. The ids are the journal's, rebuilt on replay, so the rule
holds across restarts, and after the instance ended too (its journal keeps the answers). An
instance that ends with updates it has not answered answers their callers ``ended``, and every
update it had not answered before its end ``ended``.

Pure: no I/O. The step handlers are part of ``WorkflowInstance`` (they use its private
methods), as those of ``steps.py`` are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from tidings.core.workflow.failures import ErrorKind, StepError
from tidings.core.workflow.fibers import Fiber, Pending
from tidings.core.workflow.journal import (
    JournalRecord,
    StepCompleted,
    StepFailed,
    StepKind,
    StepStarted,
    UpdateAnswered,
    UpdateReceived,
)
from tidings.core.workflow.outcomes import WorkflowStatus
from tidings.core.workflow.requests import StepRequest
from tidings.errors import WorkflowStepFailed

if TYPE_CHECKING:
    from tidings.core.workflow.interpreter import WorkflowInstance

UpdateValidator = Callable[[Any], object]
"""``validate(payload)``: raise to reject the update (its message is the caller's error)."""


@dataclass(frozen=True, slots=True)
class UpdateDeclaration:
    """An update a workflow takes: its ``name``, the ``type`` its payload is read as (None:
    plain JSON), and a ``validator`` run on arrival (None: every readable payload is accepted).

    The validator runs in the worker before anything is stored; it must depend on the payload
    alone (it sees no instance state) and be quick: a rejection journals nothing."""

    name: str
    type: Any = None
    validator: UpdateValidator | None = None


@dataclass(frozen=True, slots=True)
class ReplyAddress:
    """Where the caller of an update waits for its answer: a topic and its request id."""

    reply_to: str
    request_id: str
    as_json: bool = False


@dataclass(frozen=True, slots=True)
class Update:
    """An update request fed to ``advance``: ``name`` with ``payload`` (a JSON value), named ``id``.

    ``reply``: where its caller waits for the completion (None: nobody does, or it waited only
    for the acceptance, which the inbox rules answer)."""

    name: str
    payload: Any
    id: str
    reply: ReplyAddress | None = None


@dataclass(frozen=True, slots=True)
class AnswerUpdate:
    """Answer the update ``update_id``'s callers: ``completed`` (``result``, JSON text),
    ``failed`` (``error``) or ``ended`` (the instance ended before its body answered).

    ``reply``: the address journaled with the update (the shell adds callers of repeats it
    holds in memory)."""

    update_id: str
    answer: str
    reply: ReplyAddress | None
    result: str | None = None
    error: StepError | None = None


PENDING: Final = "pending"
"""``UpdateBook.state``: accepted, not answered yet."""


class UpdateBook:
    """An instance's updates: stored ones not taken yet (by name), waiting steps (by name),
    the ids accepted and not answered (with their caller's address) and the answers given."""

    __slots__ = ("queues", "waiters", "pending", "answered")

    def __init__(self) -> None:
        self.queues: dict[str, list[UpdateReceived]] = {}
        self.waiters: dict[str, list[Pending]] = {}
        self.pending: dict[str, ReplyAddress | None] = {}
        self.answered: dict[str, UpdateAnswered] = {}

    def state(self, update_id: str) -> str | UpdateAnswered | None:
        """``UpdateAnswered`` (answered), ``PENDING`` (accepted), or None (never accepted)."""
        answered = self.answered.get(update_id)
        if answered is not None:
            return answered
        return PENDING if update_id in self.pending else None


def answers_of(book: UpdateBook | None) -> UpdateBook | None:
    """What an ended instance keeps of its updates: the answers given (None: there was none),
    so a repeat of an answered update still gets its first answer after the end."""
    if book is None or not book.answered:
        return None
    kept = UpdateBook()
    kept.answered = book.answered
    return kept


def answer_in(records: Iterable[JournalRecord], update_id: str) -> UpdateAnswered | None:
    """The stored answer to update ``update_id`` in a journal, if it holds one."""
    for record in records:
        if type(record) is UpdateAnswered and record.update_id == update_id:  # type: ignore[union-attr]
            return record  # type: ignore[return-value]
    return None


def address_of(record: UpdateReceived) -> ReplyAddress | None:
    """Where the caller of a stored update waits, if one does."""
    if record.reply_to is None or record.request_id is None:
        return None
    return ReplyAddress(record.reply_to, record.request_id, bool(record.reply_json))


def book_of(records: Iterable[JournalRecord]) -> UpdateBook | None:
    """The ids and answers of every update in ``records`` (None: there is none, no book kept).

    From the whole journal, also after a point where the body parks: a repeat of any stored
    update must store nothing."""
    book: UpdateBook | None = None
    for record in records:
        kind = type(record)
        if kind is UpdateReceived:
            book = book or UpdateBook()
            if record.update_id not in book.answered:  # type: ignore[union-attr]
                book.pending[record.update_id] = address_of(record)  # type: ignore[union-attr, arg-type]
        elif kind is UpdateAnswered:
            book = book or UpdateBook()
            book.pending.pop(record.update_id, None)  # type: ignore[union-attr]
            book.answered[record.update_id] = record  # type: ignore[union-attr, index, assignment]
    return book


class UpdateCall:
    """What ``await ctx.wait_update(name)`` gives: the update's ``name``, ``id`` and ``payload``
    (read as the type asked for), and the two ways to answer it, each a journaled step."""

    __slots__ = ("name", "id", "payload")

    def __init__(self, name: str, update_id: str, payload: Any) -> None:
        self.name = name
        self.id = update_id
        self.payload = payload

    def reply(self, value: Any = None) -> StepRequest[None]:
        """Answer the caller with ``value`` (stored as JSON): ``await call.reply(value)``.

        *Journaled:* ``UpdateAnswered`` with the value. The caller gets it once it is stored.

        Raises:
            ValueError: The update was answered already.
            WorkflowStepFailed: NOT_RETRYABLE when ``value`` cannot be stored as JSON (the
                caller gets that failure as the update's answer).
        """
        return UpdateReplyRequest(self.id, value, None)

    def fail(self, message: str) -> StepRequest[None]:
        """Answer the caller with a failure: its ``handle.update`` raises ``WorkflowUpdateFailed``.

        *Journaled:* ``UpdateAnswered`` with the error (kind NOT_RETRYABLE, ``message``).

        Raises:
            ValueError: The update was answered already.
        """
        return UpdateReplyRequest(self.id, None, str(message))

    def __repr__(self) -> str:
        return f"UpdateCall({self.name!r}, id={self.id!r})"


class UpdateWaitRequest(StepRequest[UpdateCall]):
    """``ctx.wait_update``."""

    __slots__ = ("name", "type")

    def __init__(self, name: str, type: Any) -> None:
        self.name = name
        self.type = type


class UpdateReplyRequest(StepRequest[None]):
    """``UpdateCall.reply`` (``failure`` None) or ``UpdateCall.fail``."""

    __slots__ = ("update_id", "value", "failure")

    def __init__(self, update_id: str, value: Any, failure: str | None) -> None:
        self.update_id = update_id
        self.value = value
        self.failure = failure


# ----------------------------------------------------------------------------- arrival


def check_update(definition: Any, message: Update) -> str | tuple[str, None]:
    """Check an update before anything is stored: ``(payload JSON text, None)``, or why it is refused.

    ``definition`` is the ``WorkflowDefinition`` (its ``updates`` and ``codec``). Runs the
    validator, which is user code: whatever it raises rejects the update.
    """
    updates: Mapping[str, UpdateDeclaration] = definition.updates
    declared = updates.get(message.name)
    if declared is None:
        known = ", ".join(sorted(updates)) or "none"
        return (f"workflow {definition.name!r} declares no update {message.name[:100]!r} "
                f"(declared: {known}); declare it with updates=... on @app.workflow")
    codec = definition.codec
    try:
        text, value = codec.convert(message.payload, declared.type)
    except Exception as exc:  # noqa: BLE001 - a pydantic validator of the type is user code
        return f"the payload of update {message.name!r} does not read as its type: {type(exc).__name__}: {exc}"
    if declared.validator is not None:
        try:
            declared.validator(value)
        except Exception as exc:  # noqa: BLE001 - the validator's rejection, whatever it raised
            return f"the validator of update {message.name!r} refused it: {type(exc).__name__}: {exc}"
    return text, None


def receive(instance: WorkflowInstance, message: Update) -> str | None:
    """Store an accepted update (``advance``'s ``Update``); return why it was refused, or None.

    A repeat of a stored id stores nothing (the inbox rules answer it from the book)."""
    book = instance._updates
    if book is not None and book.state(message.id) is not None:
        return None
    checked = check_update(instance.definition, message)
    if isinstance(checked, str):
        return checked
    store(instance, message, checked[0])
    return None


def store(instance: WorkflowInstance, message: Update, text: str) -> None:
    """Journal a checked update and hand it to a waiting step (a parked instance only keeps it)."""
    reply = message.reply
    record = instance._record(UpdateReceived(
        instance._next_seq, message.name, text, instance._now, message.id,
        None if reply is None else reply.reply_to, None if reply is None else reply.request_id,
        True if reply is not None and reply.as_json else None,
    ))
    book = _book(instance)
    book.pending[message.id] = reply
    if instance._status is WorkflowStatus.RUNNING:
        apply_received(instance, record)  # type: ignore[arg-type]


def apply_received(instance: WorkflowInstance, record: UpdateReceived) -> None:
    """Apply a stored update (live: just journaled; replay: an input): queue it, deliver it."""
    book = _book(instance)
    if record.update_id not in book.answered:
        book.pending.setdefault(record.update_id, address_of(record))
    book.queues.setdefault(record.name, []).append(record)
    deliver(instance, record.name)


def deliver(instance: WorkflowInstance, name: str) -> None:
    """Give stored updates named ``name`` to waiting steps, oldest to oldest."""
    book = instance._updates
    if book is None:
        return
    waiters, queue = book.waiters.get(name), book.queues.get(name)
    while waiters and queue:
        pending = waiters.pop(0)
        value, exc = consume(instance, pending, queue.pop(0))
        instance._resolve(pending, value, exc, stop_work=False)


def consume(instance: WorkflowInstance, pending: Pending, record: UpdateReceived) -> tuple[Any, BaseException | None]:
    """End a wait with ``record``: the ``UpdateCall``, or BAD_PAYLOAD when it does not read as
    the type the wait asked for (the update is consumed; its caller is answered that failure)."""
    declared = pending.request.type  # type: ignore[attr-defined]
    if declared is None:
        known = instance.definition.updates.get(record.name)
        declared = None if known is None else known.type
    try:
        value = instance.definition.codec.decode(record.payload, declared)
    except ValueError as exc:
        error = StepError(ErrorKind.BAD_PAYLOAD, f"update {record.name!r} #{record.seq} cannot be read: {exc}")
        instance._record(StepFailed(instance._next_seq, pending.path, error, record.seq, at=instance._now))
        _answer(instance, record.update_id, None, error)
        return None, WorkflowStepFailed(error)
    instance._record(StepCompleted(instance._next_seq, pending.path, record.payload, record.seq, at=instance._now))
    return UpdateCall(record.name, record.update_id, value), None


# ------------------------------------------------------------------------------ steps


def wait_step(instance: WorkflowInstance, fiber: Fiber, request: UpdateWaitRequest) -> Any:
    """``ctx.wait_update``: take the oldest stored update of the name, or wait for one."""
    path = fiber.next_path()
    started = instance._record(StepStarted(instance._next_seq, path, StepKind.UPDATE, request.name, instance._now))
    pending = Pending(path, StepKind.UPDATE, fiber, request, started.at, None)  # type: ignore[union-attr, arg-type]
    book = _book(instance)
    queue = book.queues.get(request.name)
    if queue:
        return consume(instance, pending, queue.pop(0))
    book.waiters.setdefault(request.name, []).append(pending)
    return instance._wait(fiber, pending)


def reply_step(instance: WorkflowInstance, fiber: Fiber, request: UpdateReplyRequest) -> Any:
    """``call.reply`` / ``call.fail``: journal the answer; the caller gets it once stored."""
    book = instance._updates
    state = None if book is None else book.state(request.update_id)
    if instance._replay is None and not isinstance(state, str):
        # Replaying, the book holds every answer of the journal already; the stored record is checked.
        what = "was answered already" if state is not None else "is no update this instance took"
        return None, ValueError(f"update {request.update_id!r} {what}; answer each update once")
    if request.failure is not None:
        _answer(instance, request.update_id, None, StepError(ErrorKind.NOT_RETRYABLE, request.failure[:4096]))
        return None, None
    try:
        text = instance.definition.codec.encode(request.value)
    except ValueError as exc:
        error = StepError.of_exception(ErrorKind.NOT_RETRYABLE, exc, "the update's result cannot be stored: ")
        _answer(instance, request.update_id, None, error)
        return None, WorkflowStepFailed(error)
    _answer(instance, request.update_id, text, None)
    return None, None


def _answer(instance: WorkflowInstance, update_id: str, result: str | None, error: StepError | None) -> None:
    record = instance._record(UpdateAnswered(instance._next_seq, update_id, instance._now, result, error))
    book = _book(instance)
    reply = book.pending.pop(update_id, None)
    book.answered[update_id] = record  # type: ignore[assignment]
    if instance._replay is None:  # live: the caller is answered once this is stored
        instance._effects.append(AnswerUpdate(
            update_id, "completed" if record.error is None else "failed", reply,  # type: ignore[union-attr]
            record.result, record.error))  # type: ignore[union-attr]


def forget_waiter(instance: WorkflowInstance, pending: Pending) -> None:
    """An update wait ended or was abandoned (a race's branch): it waits no more."""
    book = instance._updates
    if book is None:
        return
    waiters = book.waiters.get(pending.request.name)  # type: ignore[attr-defined]
    if waiters is not None and pending in waiters:
        waiters.remove(pending)


def ended(instance: WorkflowInstance) -> list[AnswerUpdate]:
    """The instance ended (live): its accepted updates the body never answered are answered ``ended``."""
    book = instance._updates
    if book is None:
        return []
    return [AnswerUpdate(update_id, "ended", reply) for update_id, reply in book.pending.items()]


def _book(instance: WorkflowInstance) -> UpdateBook:
    book = instance._updates
    if book is None:
        book = instance._updates = UpdateBook()
    return book
