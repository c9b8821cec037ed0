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

The ``AVRO_*`` mappings register them in ``tidings.codec.avro``'s catalogue. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

from tidings.core.limits import load_json
from tidings.core.workflow.failures import StepError
from tidings.core.workflow.journal import (
    CancelRequested,
    Ended,
    JournalRecord,
    SignalReceived,
    Started,
    StepCompleted,
    StepFailed,
    StepStarted,
    VersionMarker,
    record_from_json,
    record_to_json,
)
from tidings.errors import DecodeError, SchemaError

InboxKind = Literal["start", "signal", "cancel", "query"]
INBOX_KINDS: Final = frozenset(get_args(InboxKind))

ReplyAnswer = Literal["accepted", "not_found", "ended", "rejected", "status"]
"""``accepted``: stored (or a repeat that changes nothing); ``not_found``: never started;
``ended``: a signal to an ended instance; ``rejected``: unusable (``reason``); ``status``:
the answer to a query (``status``, and ``outcome`` once ended)."""


@dataclass(frozen=True, slots=True)
class WorkflowInbox:
    """One request to one workflow instance.

    Attributes:
        request_id: Names the request; replies carry it back.
        instance_id: The instance (also the Kafka key).
        kind: ``start``, ``signal``, ``cancel`` or ``query``.
        timestamp_ms: When it was sent.
        payload: JSON bytes: the input of a start, the payload of a signal.
        signal: The signal's name (``kind == "signal"``).
        reply_to: Where to answer; None asks for no answer.
        wait: For a query: answer once the instance has ended, not before.
        metadata: Free-form strings (trace context).
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
    """An instance's status changed to ``status`` at ``at``; ``reason`` for PARKED."""

    instance_id: str
    workflow: str
    status: str
    at: int
    reason: str | None = None


# -- Avro field mappings ------------------------------------------------------------------

_JOURNAL_TYPES: Final[Mapping[str, type]] = MappingProxyType(
    {
        "started": Started,
        "step_started": StepStarted,
        "step_completed": StepCompleted,
        "step_failed": StepFailed,
        "signal_received": SignalReceived,
        "version_marker": VersionMarker,
        "cancel_requested": CancelRequested,
        "ended": Ended,
    }
)
# Every optional field of the flat Avro journal record; each record type fills its own.
_JOURNAL_FIELDS: Final = (
    "at", "path", "kind", "name", "due", "input", "result", "payload", "signal", "error",
    "position", "change_id", "version", "outcome",
)


def _error_fields(error: StepError | None) -> dict[str, Any] | None:
    return None if error is None else error.to_json()


def _error_from(data: dict[str, Any] | None) -> StepError | None:
    if data is None:
        return None
    try:
        return StepError.from_json(data)
    except ValueError as exc:  # an unknown ErrorKind
        raise SchemaError(f"invalid step error {data!r}: {exc}") from exc


def _journal_fields(entry: WorkflowJournalEntry) -> dict[str, Any]:
    data = record_to_json(entry.record)
    fields: dict[str, Any] = dict.fromkeys(_JOURNAL_FIELDS)
    fields.update(data)
    fields["instance_id"] = entry.instance_id
    return fields


def _journal_from(fields: dict[str, Any]) -> WorkflowJournalEntry:
    name = fields["type"]
    cls = _JOURNAL_TYPES.get(name)
    if cls is None:
        raise SchemaError(f"unknown workflow journal record type {name!r}")
    data = {"type": name, **{slot: fields.get(slot) for slot in getattr(cls, "__slots__")}}
    if data.get("error") is not None:
        data["error"] = _error_from(data["error"])
    try:
        record = record_from_json(data)
    except ValueError as exc:
        raise SchemaError(str(exc)) from exc
    return WorkflowJournalEntry(fields["instance_id"], record)


def _plain_fields(record: Any) -> dict[str, Any]:
    fields = {name: getattr(record, name) for name in record.__slots__}
    if "error" in fields:
        fields["error"] = _error_fields(fields["error"])
    return fields


def _inbox_from(fields: dict[str, Any]) -> WorkflowInbox:
    if fields["kind"] not in INBOX_KINDS:
        raise SchemaError(f"inbox kind {fields['kind']!r} is not one of {sorted(INBOX_KINDS)}")
    return WorkflowInbox(**fields)


def _with_error(cls: type) -> Callable[[dict[str, Any]], Any]:
    def build(fields: dict[str, Any]) -> Any:
        if "error" in fields:
            fields["error"] = _error_from(fields["error"])
        return cls(**fields)

    return build


AVRO_RECORD_NAMES: Final[Mapping[type, str]] = MappingProxyType(
    {
        WorkflowInbox: "tidings.WorkflowInbox",
        WorkflowJournalEntry: "tidings.WorkflowJournalEntry",
        WorkflowReply: "tidings.WorkflowReply",
        WorkflowOutcomeRecord: "tidings.WorkflowOutcome",
        WorkflowStatusRecord: "tidings.WorkflowStatus",
    }
)
"""The Avro record name of each workflow record (``schemas/workflow*.avsc``)."""

AVRO_TO_FIELDS: Final[Mapping[type, Callable[[Any], dict[str, Any]]]] = MappingProxyType(
    {
        WorkflowInbox: _plain_fields,
        WorkflowJournalEntry: _journal_fields,
        WorkflowReply: _plain_fields,
        WorkflowOutcomeRecord: _plain_fields,
        WorkflowStatusRecord: _plain_fields,
    }
)
"""Record -> Avro fields, for ``tidings.codec.avro.encode``."""

AVRO_FROM_FIELDS: Final[Mapping[type, Callable[[dict[str, Any]], Any]]] = MappingProxyType(
    {
        WorkflowInbox: _inbox_from,
        WorkflowJournalEntry: _journal_from,
        WorkflowReply: _with_error(WorkflowReply),
        WorkflowOutcomeRecord: _with_error(WorkflowOutcomeRecord),
        WorkflowStatusRecord: lambda fields: WorkflowStatusRecord(**fields),
    }
)
"""Avro fields -> record, for ``tidings.codec.avro.decode``."""


# -- JSON inbox envelopes (SPEC §9) ---------------------------------------------------------


def inbox_from_json(data: bytes, *, timestamp_ms: int | None = None) -> WorkflowInbox:
    """Read a JSON inbox envelope, as any producer may send it.

    ``{"kind": "start", "instance_id": "order-17", "payload": "ABC"}``;
    ``{"kind": "signal", "instance_id": "o-1", "signal": "approval", "payload": true}``;
    ``{"kind": "cancel", "instance_id": "o-1"}``. ``payload`` is an inline JSON value.
    ``request_id`` defaults to ``{kind}:{instance_id}:{timestamp_ms}``; ``reply_to``,
    ``wait`` and ``metadata`` are optional.

    Args:
        data: The record value, UTF-8 JSON.
        timestamp_ms: The Kafka record's timestamp, used when the envelope has none.

    Raises:
        DecodeError: The bytes are not a JSON object.
        SchemaError: A field is missing or has the wrong type.
    """
    try:
        obj = load_json(data, "JSON inbox envelope")
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not a JSON inbox envelope: {exc}") from exc
    if not isinstance(obj, dict):
        raise DecodeError("a JSON inbox envelope must be an object")

    def text(name: str, *, required: bool = False) -> str | None:
        value = obj.get(name)
        if value is None:
            if required:
                raise SchemaError(f"JSON workflow inbox: {name!r} is required")
            return None
        if not isinstance(value, str) or (required and not value):
            raise SchemaError(f"JSON workflow inbox: {name!r} must be a non-empty string")
        return value

    kind = text("kind", required=True)
    if kind not in INBOX_KINDS:
        raise SchemaError(f"JSON workflow inbox: kind {kind!r} is not one of {sorted(INBOX_KINDS)}")
    instance_id = text("instance_id", required=True)
    signal = text("signal", required=kind == "signal")
    stamp = obj.get("timestamp_ms", timestamp_ms)
    if stamp is None:
        stamp = 0
    if not isinstance(stamp, int) or isinstance(stamp, bool):
        raise SchemaError("JSON workflow inbox: 'timestamp_ms' must be an integer")
    wait = obj.get("wait", False)
    if not isinstance(wait, bool):
        raise SchemaError("JSON workflow inbox: 'wait' must be true or false")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SchemaError("JSON workflow inbox: 'metadata' must map strings to strings")
    payload = None
    if "payload" in obj:
        payload = json.dumps(obj["payload"], separators=(",", ":"), ensure_ascii=False).encode()
    return WorkflowInbox(
        request_id=text("request_id") or f"{kind}:{instance_id}:{stamp}",
        instance_id=instance_id,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        timestamp_ms=stamp,
        payload=payload,
        signal=signal,
        reply_to=text("reply_to"),
        wait=wait,
        metadata=dict(metadata),
    )
