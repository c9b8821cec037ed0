"""The workflow inbox rules: how a request to an instance is answered, whoever hosts it.

A request from an instance's inbox (``start``, ``signal``, ``cancel``, ``query``) goes in
with what the host knows of the instance; a verdict comes out. The Faust agent
(``tidings.shell.kinds.workflow.agent``) and the in-memory ``WorkflowTestRuntime``
(``tidings.testing.workflows``) both call ``decide_request`` and ``answer_fed``, so a
request gets the same answer from both:

============  ==============  ============================  ==========================
request       never started   live, not ended               ended
============  ==============  ============================  ==========================
``start``     feed ``Start``  ``accepted``, stores nothing  ``accepted``, stores nothing
``signal``    ``not_found``   feed ``Signal``               ``ended``
``cancel``    ``not_found``   feed ``Cancel``               ``accepted``, stores nothing
``query``     ``not_found``   ``status`` (``wait``: await   ``status`` with the outcome
                              the end)
``signal_``   feed ``Start``  feed ``Signal``, answer       ``ended``, stores nothing
``with_``     with the        ``signalled``
``start``     signal, answer
              ``started``
``update``    ``not_found``   a new id: feed ``Update``;    ``ended``, stores nothing (an
                                                            id it answered: that answer)
                              a stored one: its answer, or
                              ``AwaitUpdate`` until it
``update_``   feed ``Start``  as ``update``                 ``ended``, stores nothing
``with_``     with the
``start``     update
============  ==============  ============================  ==========================

A ``start`` with ``wait`` set (``WorkflowHandle.execute``, which watches the outcomes topic for
the instance's end) is answered only when it stores nothing: ``accepted`` then means the
instance existed, and a refused input is ``rejected`` as for any start. A start that starts
the instance gets no answer: its outcome comes by itself, so the caller never has to ask
(before, it asked after a second without the outcome: a second inbox record per run under
load).

An update's caller waits for its completion (``wait_for`` ``completed``, the default) or only
for its acceptance (``accepted``). A fed update the instance refused (an undeclared name, a
payload that does not read as the declared type, its validator) stored nothing and is
answered ``rejected`` with the reason; it is no unusable record, so it is not dead-lettered.
Accepted, it is answered ``accepted`` at once for an ``accepted`` caller; a ``completed``
caller is answered by the instance's ``AnswerUpdate`` effect once the body's answer is
stored (``core/workflow/updates.py``), so ``answer_fed`` gives no reply then (None).

A signal-with-start stores its start and its signal in one decision (the signal journaled
right after ``Started``, before the body runs), so a start and a signal racing each other
lose nothing: whichever comes first starts the instance, every one signals it. Both its
input and its signal payload are checked before anything is stored.

A signal with a ``signal_id`` its live instance has stored already is fed like any other:
the instance stores nothing and it is answered ``accepted`` (``core/workflow/signal_ids.py``).
A fed message is answered by the instance's decision (``answer_fed``): ``accepted``, or
``rejected`` when the instance refused it (an input that does not read as the input
type). A request whose payload is not JSON, or that is not a usable request at all, is
refused: the host dead-letters it and answers ``rejected`` with the reason. An ended
instance is known either live (still in the host's memory) or only by its stored end
(``StoredEnd``); both give the same answers, so an answer never depends on a cache.

Pure: no I/O; what is known of the instance comes in as an argument.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tidings.core.limits import load_json
from tidings.core.workflow.child_records import ChildEnded, ChildStarted
from tidings.core.workflow.children import CHILD_REPORTS, child_report, parent_of_request
from tidings.core.workflow.definition import WorkflowDefinition
from tidings.core.workflow.failures import StepError
from tidings.core.workflow.inbox import Cancel, Signal, Start
from tidings.core.workflow.interpreter import WorkflowInstance
from tidings.core.workflow.journal import JournalRecord, UpdateAnswered
from tidings.core.workflow.outcomes import Cancelled, Faulted, Finished, Outcome, WorkflowStatus
from tidings.core.workflow.queries import QueryAnswer
from tidings.core.workflow.updates import PENDING, ReplyAddress, Update

_ENDED: Final = frozenset({WorkflowStatus.FINISHED.value, WorkflowStatus.FAULTED.value, WorkflowStatus.CANCELLED.value})


class InboxRequest(Protocol):
    """What the rules read of a request (``WorkflowInbox`` has these fields)."""

    @property
    def kind(self) -> str:
        """``start``, ``signal``, ``cancel`` or ``query``."""
        ...

    @property
    def payload(self) -> bytes | None:
        """JSON bytes: the input of a start, the payload of a signal."""
        ...

    @property
    def signal(self) -> str | None:
        """The signal's name (``kind == "signal"``)."""
        ...

    @property
    def signal_id(self) -> str | None:
        """The sender's id of a signal: a repeat of a stored id stores nothing."""
        ...

    @property
    def input(self) -> bytes | None:
        """JSON bytes: the input of a signal-with-start (its ``payload`` is the signal's)."""
        ...

    @property
    def wait(self) -> bool:
        """For a query: answer once the instance has ended, not before. For a start: answer
        only if it stores nothing."""
        ...

    @property
    def request_id(self) -> str:
        """Names the request: its answers carry it."""
        ...

    @property
    def reply_to(self) -> str | None:
        """Where to answer; None asks for no answer."""
        ...

    @property
    def update(self) -> str | None:
        """An update's name."""
        ...

    @property
    def update_id(self) -> str | None:
        """An update's id: stored once per instance."""
        ...

    @property
    def wait_for(self) -> str | None:
        """An update's caller waits for ``completed`` (None too) or ``accepted``."""
        ...

    @property
    def query(self) -> str | None:
        """A ``query_handler`` request's query name."""
        ...


@dataclass(frozen=True, slots=True)
class InboxReply:
    """The answer to a request: a ``WorkflowReply`` without its addressing.

    Attributes:
        answer: ``accepted``, ``not_found``, ``ended``, ``rejected`` or ``status``; a
            signal-with-start's ``started`` or ``signalled`` (or ``ended``, ``rejected``).
        status: The instance's status (``RUNNING`` ... ``PARKED``) when known.
        outcome: ``finished``, ``faulted`` or ``cancelled`` once ended.
        result: The stored result (JSON text) of a finished instance.
        error: The stored failure of a faulted instance.
        reason: Why a request was rejected, or why the instance is parked.
    """

    answer: str
    status: str | None = None
    outcome: str | None = None
    result: str | None = None
    error: StepError | None = None
    reason: str | None = None

    def fields(self) -> dict[str, Any]:
        """Return every field but ``answer``, as keyword arguments for a reply record."""
        return {
            "status": self.status,
            "outcome": self.outcome,
            "result": self.result,
            "error": self.error,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class StoredEnd:
    """An ended instance known only by what was stored of its end (not held in memory)."""

    status: str
    outcome: str | None = None
    result: str | None = None
    error: StepError | None = None
    reason: str | None = None
    answered: UpdateAnswered | None = None
    """For an update request: the journal's answer to its update id, if the instance gave one
    (the host reads it from the stored journal; a repeat gets it after the end too)."""


Known = WorkflowInstance | StoredEnd | None
"""What the host knows of the instance: live, ended and stored, or nothing (never started)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer ``reply`` now; nothing is stored."""

    reply: InboxReply


@dataclass(frozen=True, slots=True)
class Feed:
    """Feed ``message`` to the live instance (to a new one for ``Start``); then ``answer_fed``."""

    message: Start | Signal | Cancel | ChildStarted | ChildEnded | Update


@dataclass(frozen=True, slots=True)
class AwaitEnd:
    """Remember the question; answer it with ``answer_status`` when the instance ends."""


@dataclass(frozen=True, slots=True)
class AwaitUpdate:
    """A repeat of an update the body has not answered yet: remember its caller (``request_id``,
    ``reply_to``) for update ``update_id``; it is answered with the first caller."""

    update_id: str


@dataclass(frozen=True, slots=True)
class Refuse:
    """The request is unusable: dead-letter it with ``reason`` and answer ``rejected``."""

    reason: str

    @property
    def reply(self) -> InboxReply:
        """The ``rejected`` answer."""
        return InboxReply("rejected", reason=self.reason)


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Call query ``name`` with ``args`` on the instance (``queried_instance``), store nothing,
    and answer ``query_reply``."""

    name: str
    args: list[Any]


InboxVerdict = Reply | Feed | AwaitEnd | AwaitUpdate | Refuse | RunQuery
"""What ``decide_request`` returns."""

ACCEPTED: Final = InboxReply("accepted")
NOT_FOUND: Final = InboxReply("not_found")
STARTED: Final = InboxReply("started")
SIGNALLED: Final = InboxReply("signalled")
SIGNAL_WITH_START: Final = "signal_with_start"
UPDATE: Final = "update"
UPDATE_WITH_START: Final = "update_with_start"
UPDATE_KINDS: Final = frozenset({UPDATE, UPDATE_WITH_START})
QUERY_HANDLER: Final = "query_handler"
"""A query to a handler the body registered (``query`` is the status query)."""
WAIT_FOR: Final = frozenset({"accepted", "completed"})


def decide_request(request: InboxRequest, known: Known) -> InboxVerdict:
    """Decide what a request to one instance gets, given what is known of the instance.

    Args:
        request: The request (a ``WorkflowInbox`` or anything with its fields).
        known: The live instance; its ``StoredEnd`` when it has ended and is not in
            memory; None when it was never started. A live instance that was never
            started (status None) counts as None.

    Returns:
        ``Reply`` (answer now, store nothing), ``Feed`` (advance the instance, then
        ``answer_fed``), ``AwaitEnd`` (a waiting query to a running instance) or
        ``Refuse`` (dead-letter and answer ``rejected``). Never raises.
    """
    if isinstance(known, WorkflowInstance) and known.status is None:
        known = None
    kind = request.kind
    if kind == "start":
        if known is not None:
            return Reply(ACCEPTED)  # a second start stores nothing, whatever its input
        payload = _payload(request)
        parent = parent_of_request(request)
        if isinstance(parent, str):
            return Refuse(parent)
        return payload if isinstance(payload, Refuse) else Feed(Start(payload.value, parent))
    if kind in CHILD_REPORTS:
        return _child_report(request, known)
    if kind == SIGNAL_WITH_START:
        return _signal_with_start(request, known)
    if kind in UPDATE_KINDS:
        return _update(request, known)
    if kind == QUERY_HANDLER:
        return _query(request, known)
    if kind not in ("signal", "cancel", "query"):
        return Refuse(f"unknown request kind {kind!r}")
    if kind == "signal" and not request.signal:
        return Refuse("a signal request needs the signal's name")
    if known is None:
        return Reply(NOT_FOUND)
    if kind == "query":
        status = answer_status(known)
        return AwaitEnd() if request.wait and status.outcome is None else Reply(status)
    if kind == "cancel":
        # A live instance is fed even when it has ended: the core refuses it and stores
        # nothing, which is what an ended instance known only by its stored end gets too.
        return Reply(ACCEPTED) if isinstance(known, StoredEnd) else Feed(Cancel())
    if _ended(known):
        # Before the payload is read: a stored and a live ended instance answer alike.
        return Reply(_with_answer("ended", answer_status(known)))
    payload = _payload(request)
    return payload if isinstance(payload, Refuse) else Feed(Signal(request.signal or "", payload.value, request.signal_id))


def answer_fed(
    request: InboxRequest, instance: WorkflowInstance, rejected: str | None, fed: object = None
) -> Reply | Refuse | None:
    """Answer a request whose message was fed to ``instance`` (``decide_request`` gave ``Feed``).

    Args:
        request: The request.
        instance: The instance it was fed to.
        rejected: ``Decision.rejected`` of that feed: why the instance refused it, or None.
        fed: The message fed (``Feed.message``): a signal-with-start answers ``started``
            when it was a ``Start``, ``signalled`` when it was a ``Signal``.

    Returns:
        ``accepted`` (a signal-with-start: ``started`` or ``signalled``); ``Refuse`` when the
        instance refused a start's input or a signal's payload; ``accepted`` for a cancel
        that an ended instance refused (it changes nothing). An update: ``rejected`` (a
        ``Reply``: nothing stored, nothing dead-lettered) when refused; ``accepted`` for a
        caller that waits for the acceptance; None for one that waits for the completion (the
        ``AnswerUpdate`` effect answers it once the body's answer is stored); None for a
        ``start`` with ``wait`` that started the instance (its outcome answers it).
    """
    if request.kind in UPDATE_KINDS:
        if rejected is not None:
            return Reply(InboxReply("rejected", reason=rejected))
        return Reply(ACCEPTED) if request.wait_for == "accepted" else None
    if request.kind == SIGNAL_WITH_START:
        if rejected is None:
            return Reply(STARTED if isinstance(fed, Start) else SIGNALLED)
        if isinstance(fed, Start):
            return Refuse(f"the workflow refused the signal-with-start: {rejected}")
    elif rejected is None or request.kind == "cancel":
        if request.kind == "start" and request.wait:
            return None  # it started the instance: the caller watches for its outcome
        return Reply(ACCEPTED)
    if request.kind == "start":
        return Refuse(f"the workflow refused the input: {rejected}")
    if request.kind in CHILD_REPORTS:
        return Refuse(f"the workflow refused the child's report: {rejected}")
    if _ended(instance):
        return Reply(_with_answer("ended", answer_status(instance)))
    return Refuse(f"the workflow refused the signal: {rejected}")


def answer_status(known: WorkflowInstance | StoredEnd) -> InboxReply:
    """Return the ``status`` answer for an instance: its status and, once ended, its outcome."""
    if isinstance(known, StoredEnd):
        return InboxReply("status", known.status, known.outcome, known.result, known.error, known.reason)
    status = None if known.status is None else known.status.value
    if known.outcome is None:
        return InboxReply("status", status)
    fields = outcome_fields_of(known.outcome, known.definition)
    error = fields["error"]
    return InboxReply(
        "status", status, fields["outcome"], fields["result"], None if error is None else StepError.from_json(error)
    )


def outcome_fields_of(outcome: Outcome, definition: WorkflowDefinition) -> dict[str, Any]:
    """Return the stored form of an ``Outcome``: ``outcome``, ``result`` (JSON text), ``error`` (JSON)."""
    if isinstance(outcome, Finished):
        return {"outcome": "finished", "result": definition.codec.encode(outcome.value), "error": None}
    if isinstance(outcome, Faulted):
        return {"outcome": "faulted", "result": None, "error": outcome.error.to_json()}
    return {"outcome": "cancelled", "result": None, "error": None}


def outcome_from(
    outcome: str, result: str | None, error: StepError | None, definition: WorkflowDefinition
) -> Outcome:
    """Rebuild an ``Outcome`` from answer fields, reading a result as the declared type.

    Raises:
        ValueError: ``result`` does not read as the workflow's result type.
    """
    if outcome == "finished":
        return Finished(definition.codec.decode(result or "null", definition.result_type))
    if outcome == "faulted":
        return Faulted(error or StepError(None, "faulted"))
    return Cancelled()


def _child_report(request: InboxRequest, known: Known) -> InboxVerdict:
    """A child's report to its parent (``known``): fed to a live parent, ignored by an ended one."""
    if known is None:
        return Refuse("a child's report to a workflow instance that was never started")
    if _ended(known):
        return Reply(ACCEPTED)  # a late or repeated report: the parent no longer needs it
    message = child_report(request)
    return Refuse(message) if isinstance(message, str) else Feed(message)


def _signal_with_start(request: InboxRequest, known: Known) -> InboxVerdict:
    """Start with the signal when never started; else a signal (``ended`` once ended)."""
    if not request.signal:
        return Refuse("a signal_with_start request needs the signal's name")
    if known is not None and _ended(known):
        return Reply(_with_answer("ended", answer_status(known)))
    payload = _payload(request)
    if isinstance(payload, Refuse):
        return payload
    signal = Signal(request.signal, payload.value, request.signal_id)
    if known is not None:
        return Feed(signal)  # a repeat of its signal id stores nothing (signal_ids.py)
    data = request.input
    try:
        # Bounded like a payload: untrusted JSON nested thousands deep would recurse out of the stack.
        start_input = None if data is None else load_json(data, "input")
    except ValueError as exc:
        return Refuse(f"the input is not JSON: {exc}")
    return Feed(Start(start_input, signal=signal))


def update_answer(answered: UpdateAnswered) -> InboxReply:
    """The answer to an update the body answered: ``completed`` with its result, or ``failed``."""
    if answered.error is None:
        return InboxReply("completed", result=answered.result)
    return InboxReply("failed", error=answered.error, reason=answered.error.message)


def _update(request: InboxRequest, known: Known) -> InboxVerdict:
    """An update (or an update-with-start): fed once per id; a repeat gets the first answer."""
    name, update_id = request.update, request.update_id
    if not name:
        return Refuse(f"an {request.kind} request needs the update's name")
    if not update_id:
        return Refuse(f"an {request.kind} request needs an update_id")
    if request.wait_for is not None and request.wait_for not in WAIT_FOR:
        return Refuse(f"wait_for must be 'accepted' or 'completed', got {request.wait_for[:40]!r}")
    starts = request.kind == UPDATE_WITH_START
    if known is None and not starts:
        return Reply(NOT_FOUND)
    if known is not None and _ended(known):
        stored = known.answered if isinstance(known, StoredEnd) else known.update_state(update_id)
        if isinstance(stored, UpdateAnswered) and stored.update_id == update_id:
            return Reply(update_answer(stored))  # answered before the end: its first answer
        return Reply(_with_answer("ended", answer_status(known)))
    if isinstance(known, WorkflowInstance):
        state = known.update_state(update_id)
        if isinstance(state, UpdateAnswered):
            return Reply(update_answer(state))
        if state == PENDING:
            return Reply(ACCEPTED) if request.wait_for == "accepted" else AwaitUpdate(update_id)
    payload = _payload(request)
    if isinstance(payload, Refuse):
        return payload
    reply = None
    if request.wait_for != "accepted" and request.reply_to:
        reply = ReplyAddress(request.reply_to, request.request_id)
    update = Update(name, payload.value, update_id, reply)
    if known is not None:
        return Feed(update)
    data = request.input
    try:
        start_input = None if data is None else load_json(data, "input")
    except ValueError as exc:
        return Refuse(f"the input is not JSON: {exc}")
    return Feed(Start(start_input, update=update))


def _query(request: InboxRequest, known: Known) -> InboxVerdict:
    """A query to a handler: unusable without a name or with args that are no JSON array."""
    if not request.query:
        return Refuse("a query_handler request needs the query's name (field 'query')")
    payload = _payload(request)
    if isinstance(payload, Refuse):
        return payload
    args = payload.value
    if args is None:
        args = []
    if not isinstance(args, list):
        return Refuse(f"a query's args are a JSON array of positional arguments (or null), not a "
                      f"{type(args).__name__}")
    if known is None:
        return Reply(NOT_FOUND)
    return RunQuery(request.query, args)


def queried_instance(
    definition: WorkflowDefinition, instance_id: str, known: WorkflowInstance | StoredEnd,
    journal: Callable[[], Sequence[JournalRecord]], now: int,
) -> WorkflowInstance:
    """The instance whose handlers answer a query: the live one while it holds the body's state
    (running, parked, or ended in memory with its handlers); else, for an ended instance, its
    journal (``journal()``) replayed with the body run through its end. Nothing is stored."""
    if isinstance(known, WorkflowInstance) and (not _ended(known) or known._queries is not None):
        return known
    instance, _ = WorkflowInstance.replay(definition, instance_id, journal(), now, through_end=True)
    return instance


def query_reply(answer: QueryAnswer, known: WorkflowInstance | StoredEnd) -> InboxReply:
    """The reply to a query: its ``answer`` (``answered``/``failed``/``rejected``), the handler's
    ``result`` or ``error``/``reason``, and the instance's ``status`` (and ``outcome``, ended)."""
    status = answer_status(known)
    return InboxReply(answer.answer, status.status, status.outcome, answer.result, answer.error, answer.reason)


@dataclass(frozen=True, slots=True)
class _Value:
    value: Any


def _payload(request: InboxRequest) -> _Value | Refuse:
    if request.payload is None:
        return _Value(None)
    try:
        # Bounded: untrusted JSON nested thousands deep would recurse out of the stack.
        return _Value(load_json(request.payload, "payload"))
    except ValueError as exc:  # also invalid UTF-8 (UnicodeDecodeError) and LimitError
        return Refuse(f"the payload is not JSON: {exc}")


def _ended(known: WorkflowInstance | StoredEnd) -> bool:
    if isinstance(known, StoredEnd):
        return True  # only an ended instance is known by its stored end
    return known.status is not None and known.status.value in _ENDED


def _with_answer(answer: str, reply: InboxReply) -> InboxReply:
    return InboxReply(answer, reply.status, reply.outcome, reply.result, reply.error, reply.reason)
