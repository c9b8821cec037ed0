"""The records a hosted workflow moves through Kafka, as plain immutable values.

``tidings.core.workflow`` decides; these records carry its inputs and outputs between
processes (see ``docs/workflows-hosted.md``):

- ``WorkflowInbox`` on ``{app}.workflow.{name}.inbox``: start, signal, cancel, and
  ``query`` (status or outcome, answered on ``reply_to``). Any producer may write one, as
  Avro or as a JSON object with header ``content-type: application/json``.
- ``WorkflowJournalEntry`` on ``.journal``: one journal record of one instance, key
  ``{instance_id}/{seq}``.
- ``WorkflowReply`` on ``.replies``: the worker's answer to a request with ``reply_to``.
- ``WorkflowOutcomeRecord`` on ``.outcomes`` and ``WorkflowStatusRecord`` on ``.status``,
  keyed by instance id (latest wins).

Their Avro mapping and the JSON inbox envelope live in ``tidings.codec.workflow``; here
they are plain values. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from tidings.core.workflow.failures import StepError
from tidings.core.workflow.journal import JournalRecord

InboxKind = Literal[
    "start", "signal", "cancel", "query", "child_started", "child_ended", "signal_with_start", "update",
    "update_with_start", "query_handler",
]
INBOX_KINDS: Final = frozenset(get_args(InboxKind))

ReplyAnswer = Literal[
    "accepted", "not_found", "ended", "rejected", "status", "started", "signalled", "completed", "failed",
    "answered",
]
"""``accepted``: stored (or a repeat that changes nothing); ``not_found``: never started;
``ended``: a signal (or a signal-with-start) to an ended instance; ``rejected``: unusable
(``reason``); ``status``: the answer to a query (``status``, and ``outcome`` once ended);
``started``: a signal-with-start started the instance with its signal; ``signalled``: it
found the instance running and signalled it (or its signal id was stored already);
``completed``: an update's answer (``result``); ``failed``: the body failed the update
(``error``, ``reason``). An update the checks refused is ``rejected`` (``reason``), one the body
never answered before its instance ended is ``ended``; ``accepted`` answers an update whose
caller waits only for its acceptance. A ``query_handler`` is answered ``answered`` (``result``:
the handler's value), ``failed`` (the handler raised or overran: ``error``, ``reason``) or
``rejected`` (no such handler, unusable args: ``reason``), each with ``status``."""


@dataclass(frozen=True, slots=True)
class WorkflowInbox:
    """One request to one workflow instance.

    Attributes:
        request_id: Names the request; replies carry it back.
        instance_id: The instance (also the Kafka key).
        kind: ``start``, ``signal``, ``cancel``, ``query`` or ``signal_with_start``.
        timestamp_ms: When it was sent.
        payload: JSON bytes: the input of a start, the payload of a signal (also of a
            signal-with-start's signal).
        signal: The signal's name (``kind`` ``signal`` or ``signal_with_start``).
        reply_to: Where to answer; None asks for no answer.
        wait: For a query: answer once the instance has ended, not before. For a start:
            answer only if it stores nothing (the instance existed, or the input was refused).
        metadata: Free-form strings (trace context).
        signal_id: The sender's id of a signal (``kind == "signal"``): an instance stores
            a signal id once, so a repeat is accepted and stores nothing (since
            ``workflowinbox.v2``; None: never de-duplicated).
        parent_workflow: A child's start: the parent's workflow name.
        parent_id: A child's start: the parent's instance id.
        parent_path: A child's start, ``child_started``, ``child_ended``: the path of
            the parent's step that started the child.
        child_workflow: ``child_started``, ``child_ended``: the child's workflow name
            (the record goes to the parent: ``instance_id`` is the parent's id).
        outcome: ``child_ended``: ``finished`` (``payload`` is the result), ``faulted``
            (``error``) or ``cancelled``.
        error: ``child_ended``: the faulted child's stored error.
        parent_token: A child's start, ``child_started``, ``child_ended``: the token the
            parent drew for that child (``StepStarted.token``). The parent accepts a
            report only with it, so a producer that cannot read an inbox or a journal
            cannot end a parent's step with a made-up child outcome (since
            ``workflowinbox.v3``; None from older parents and children).
        input: A ``signal_with_start`` or ``update_with_start``: the JSON bytes of the input
            it starts the instance with when it was never started (since ``workflowinbox.v4``).
        update: ``update``, ``update_with_start``: the update's name (since ``workflowinbox.v5``).
        update_id: The update's id: an instance stores an update id once, and a repeat gets
            the first answer (required for an update).
        wait_for: ``completed`` (None: the default) answers once the body answered the
            update; ``accepted`` once it is journaled.
        query: ``query_handler``: the name of the query handler to call; ``payload`` holds
            its args, a JSON array (since ``workflowinbox.v6``).
    """

    request_id: str
    instance_id: str
    kind: str
    timestamp_ms: int
    payload: bytes | None = None
    signal: str | None = None
    reply_to: str | None = None
    wait: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    signal_id: str | None = None
    parent_workflow: str | None = None
    parent_id: str | None = None
    parent_path: str | None = None
    child_workflow: str | None = None
    outcome: str | None = None
    error: StepError | None = None
    parent_token: str | None = None
    input: bytes | None = None
    update: str | None = None
    update_id: str | None = None
    wait_for: str | None = None
    query: str | None = None


@dataclass(frozen=True, slots=True)
class WorkflowJournalEntry:
    """One journal record of ``instance_id``."""

    instance_id: str
    record: JournalRecord


@dataclass(frozen=True, slots=True)
class WorkflowReply:
    """The worker's answer to one request (see ``ReplyAnswer``).

    Attributes:
        status: The instance's status (``RUNNING`` ... ``PARKED``) when known.
        outcome: ``finished``, ``faulted`` or ``cancelled`` once ended.
        result: The stored result (JSON text) of a finished instance.
        error: The stored failure of a faulted instance.
        reason: Why a request was rejected, or why the instance is parked.
    """

    request_id: str
    instance_id: str
    answer: str
    timestamp_ms: int
    status: str | None = None
    outcome: str | None = None
    result: str | None = None
    error: StepError | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class WorkflowOutcomeRecord:
    """How an instance ended: ``outcome`` with ``result`` (JSON text) or ``error``."""

    instance_id: str
    workflow: str
    outcome: str
    at: int
    result: str | None = None
    error: StepError | None = None


@dataclass(frozen=True, slots=True)
class WorkflowStatusRecord:
    """An instance's status changed to ``status`` at ``at``; ``reason`` for PARKED.

    ``started_at``: when the instance started (ms), so ``tidings list`` filters by start
    time from this topic alone (since ``workflowstatus.v2``; None in older records).
    """

    instance_id: str
    workflow: str
    status: str
    at: int
    reason: str | None = None
    started_at: int | None = None
