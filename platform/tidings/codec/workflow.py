"""Avro field mappings and the JSON inbox envelope of the hosted-workflow records.

The records are plain values in ``tidings.core.workflow_records``; this module is all that
knows how they look on the wire. ``tidings.codec.avro`` merges ``RECORD_NAMES``,
``TO_FIELDS`` and ``FROM_FIELDS`` into its catalogue (as it does ``codec.orchestration``'s),
so the records are encoded with ``avro.encode`` and read back with ``avro.decode_as``.
``inbox_from_json`` reads the JSON inbox envelope any producer may send (SPEC §9).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from tidings.codec.fields import plain_fields, slotted_builder
from tidings.core.workflow.failures import StepError
from tidings.core.limits import load_json
from tidings.core.workflow.journal import JOURNAL_TYPES, record_to_json
from tidings.core.workflow_records import (
    INBOX_KINDS,
    WorkflowInbox,
    WorkflowJournalEntry,
    WorkflowOutcomeRecord,
    WorkflowReply,
    WorkflowStatusRecord,
)
from tidings.errors import DecodeError, SchemaError

# Every optional field of the flat Avro journal record; each record type fills its own.
_JOURNAL_FIELDS: Final = (
    "at", "path", "kind", "name", "due", "input", "result", "payload", "signal", "error",
    "position", "change_id", "version", "outcome", "signal_id", "parent_workflow", "parent_id", "parent_path",
    "outcome_json", "token", "parent_token", "attempt", "retry_at", "traceparent", "run", "carried",
    "update_id", "reply_to", "request_id", "reply_json",
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


# Each journal record class's slots and builder, by its stored type name: the flat Avro
# record has a field for every slot of every class (absent ones read as null), so the
# builder always gets exactly the class's fields (``record_from_json`` without its copies).
_JOURNAL_BUILDERS: Final[Mapping[str, tuple[tuple[str, ...], Callable[[dict[str, Any]], Any]]]] = MappingProxyType({
    name: (tuple(getattr(cls, "__slots__")), slotted_builder(cls)) for name, cls in JOURNAL_TYPES.items()
})
_build_entry: Final = slotted_builder(WorkflowJournalEntry)


def _journal_from(fields: dict[str, Any]) -> WorkflowJournalEntry:
    name = fields["type"]
    known = _JOURNAL_BUILDERS.get(name)
    if known is None:
        raise SchemaError(f"unknown workflow journal record type {name!r}")
    slots, build = known
    data = {slot: fields.get(slot) for slot in slots}
    if data.get("error") is not None:
        data["error"] = _error_from(data["error"])
    return _build_entry({"instance_id": fields["instance_id"], "record": build(data)})


def _fields_with_error(record: Any) -> dict[str, Any]:
    fields = plain_fields(record)
    if "error" in fields:
        fields["error"] = _error_fields(fields["error"])
    return fields


_build_inbox: Final = slotted_builder(WorkflowInbox)


def _inbox_from(fields: dict[str, Any]) -> WorkflowInbox:
    if fields["kind"] not in INBOX_KINDS:
        raise SchemaError(f"inbox kind {fields['kind']!r} is not one of {sorted(INBOX_KINDS)}")
    if fields.get("error") is not None:
        fields["error"] = _error_from(fields["error"])
    return _build_inbox(fields)


def _with_error(cls: type) -> Callable[[dict[str, Any]], Any]:
    build_record: Callable[[dict[str, Any]], Any] = slotted_builder(cls)

    def build(fields: dict[str, Any]) -> Any:
        if "error" in fields:
            fields["error"] = _error_from(fields["error"])
        return build_record(fields)

    return build


RECORD_NAMES: Final[Mapping[type, str]] = MappingProxyType(
    {
        WorkflowInbox: "tidings.WorkflowInbox",
        WorkflowJournalEntry: "tidings.WorkflowJournalEntry",
        WorkflowReply: "tidings.WorkflowReply",
        WorkflowOutcomeRecord: "tidings.WorkflowOutcome",
        WorkflowStatusRecord: "tidings.WorkflowStatus",
    }
)
"""The Avro record name of each workflow record (``schemas/workflow*.avsc``)."""

TO_FIELDS: Final[Mapping[type, Callable[[Any], dict[str, Any]]]] = MappingProxyType(
    {
        WorkflowInbox: _fields_with_error,
        WorkflowJournalEntry: _journal_fields,
        WorkflowReply: _fields_with_error,
        WorkflowOutcomeRecord: _fields_with_error,
        WorkflowStatusRecord: plain_fields,
    }
)
"""Record -> Avro fields, for ``tidings.codec.avro.encode``."""

FROM_FIELDS: Final[Mapping[type, Callable[[dict[str, Any]], Any]]] = MappingProxyType(
    {
        WorkflowInbox: _inbox_from,
        WorkflowJournalEntry: _journal_from,
        WorkflowReply: _with_error(WorkflowReply),
        WorkflowOutcomeRecord: _with_error(WorkflowOutcomeRecord),
        WorkflowStatusRecord: slotted_builder(WorkflowStatusRecord),
    }
)
"""Avro fields -> record, for ``tidings.codec.avro.decode``."""


def inbox_from_json(data: bytes, *, timestamp_ms: int | None = None) -> WorkflowInbox:
    """Read a JSON inbox envelope, as any producer may send it.

    ``{"kind": "start", "instance_id": "order-17", "payload": "ABC"}``;
    ``{"kind": "signal", "instance_id": "o-1", "signal": "approval", "payload": true}``;
    ``{"kind": "cancel", "instance_id": "o-1"}``;
    ``{"kind": "signal_with_start", "instance_id": "o-1", "input": "ABC", "signal": "approval",
    "payload": true}``; ``{"kind": "update", "instance_id": "o-1", "update": "add_item",
    "update_id": "u-1", "payload": {...}, "reply_to": "my.replies", "wait_for": "completed"}``;
    ``{"kind": "query_handler", "instance_id": "o-1", "query": "items", "payload": [2],
    "reply_to": "my.replies"}`` (``payload``: the handler's positional args, a JSON array).
    ``payload`` and ``input`` are inline JSON values.
    ``request_id`` defaults to ``{kind}:{instance_id}:{timestamp_ms}``; ``reply_to``,
    ``wait``, ``metadata`` and a signal's ``signal_id`` are optional.

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
    signal = text("signal", required=kind in ("signal", "signal_with_start"))
    updates = kind in ("update", "update_with_start")
    update = text("update", required=updates)
    update_id = text("update_id", required=updates)
    wait_for = text("wait_for")
    query = text("query", required=kind == "query_handler")
    if kind != "query_handler" and query is not None:
        raise SchemaError(f"JSON workflow inbox: 'query' names a query_handler's handler, not part of a {kind}")
    if not updates and (update is not None or update_id is not None or wait_for is not None):
        raise SchemaError(f"JSON workflow inbox: 'update', 'update_id' and 'wait_for' are for update and "
                          f"update_with_start, not a {kind}")
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
    start_input = None
    if "input" in obj:
        if kind not in ("signal_with_start", "update_with_start"):
            # A start's input is its payload: an "input" elsewhere would be silently dropped.
            raise SchemaError(f"JSON workflow inbox: 'input' is for signal_with_start and update_with_start; a {kind}'s "
                              f"input or payload goes in 'payload'")
        start_input = json.dumps(obj["input"], separators=(",", ":"), ensure_ascii=False).encode()
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
        signal_id=text("signal_id"),
        input=start_input,
        update=update,
        update_id=update_id,
        wait_for=wait_for,
        query=query,
    )
