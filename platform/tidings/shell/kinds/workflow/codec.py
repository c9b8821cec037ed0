"""Bytes <-> workflow records for the shell: Avro, or JSON inbox envelopes by header.

Also the small conversions between the core's values and what the records carry
(an ``Ended`` record or an ``Outcome`` as reply/outcome fields).
"""

from __future__ import annotations

from typing import Any

from ....codec import avro
from ....codec.answers import JSON_HEADERS, decode_outcome_record, encode_answer
from ....codec.content import content_type
from ....codec.json import CONTENT_TYPE
from ....core.workflow import Ended, Outcome, StepError, WorkflowDefinition
from ....core.workflow.inbox_rules import outcome_fields_of as outcome_fields_of  # pure: the inbox rules use them too
from ....core.workflow.inbox_rules import outcome_from as outcome_from
from ....codec.workflow import inbox_from_json
from ....core.limits import check_inbox
from ....core.workflow_records import WorkflowInbox, WorkflowOutcomeRecord, WorkflowReply
from ....errors import DecodeError, SchemaError
from ...runtime.io import Incoming, Outgoing

#: Header on journal records written for an inbox record: that record's offset. After a
#: crash it tells which inbox records are already journaled, so none is applied twice.
INBOX_OFFSET_HEADER = "tidings-inbox-offset"


def is_json_request(record: Incoming) -> bool:
    """Return whether an inbox record was sent as JSON: its answers are JSON too."""
    return content_type(record.headers) == CONTENT_TYPE


def decode_inbox(record: Incoming) -> WorkflowInbox:
    """Decode an inbox record: Avro, or JSON when ``content-type: application/json``.

    Raises:
        DecodeError: A tombstone, an unknown content type, or bytes that do not decode.
        SchemaError: A decodable record that is not a usable inbox request;
            ``LimitError`` when an id, the signal name, ``reply_to``, the payload or the
            metadata breaks a limit of ``tidings.core.limits``.
    """
    if record.value is None:
        raise DecodeError("a tombstone (null value) is not a workflow request")
    media_type = content_type(record.headers)
    if media_type == CONTENT_TYPE:
        inbox = inbox_from_json(record.value, timestamp_ms=record.timestamp_ms)
    elif media_type is not None and media_type not in ("avro/binary", "application/avro"):
        raise DecodeError(f"unsupported content-type {media_type!r}")
    else:
        decoded = avro.decode(record.value)
        if not isinstance(decoded, WorkflowInbox):
            raise SchemaError(f"expected a WorkflowInbox, got a {type(decoded).__name__}")
        inbox = decoded
    return check_inbox(inbox)


def outcome_fields(ended: Ended) -> dict[str, Any]:
    """Return the stored form of an ``Ended`` record's outcome (RocksDB and replies)."""
    return {
        "outcome": ended.outcome,
        "result": ended.result,
        "error": None if ended.error is None else ended.error.to_json(),
    }


def decode_outcome(value: bytes | None, definition: WorkflowDefinition) -> tuple[str, Outcome]:
    """Read an outcomes-topic record back as ``(instance_id, Outcome)``, the inverse of ``outcome_record``.

    The result is read as the workflow's declared result type, so a reader of the topic
    gets the same ``Outcome`` that ``handle.result`` returns.

    Reads both forms a worker writes (Avro, or JSON under ``App(json_outcomes=True)``).

    Raises:
        DecodeError: A tombstone, or bytes that are neither an Avro record nor a JSON object.
        SchemaError: Another record type, or a result that does not read as the result type.
    """
    if value is None:
        raise DecodeError("a tombstone (null value) is not a workflow outcome")
    record = decode_outcome_record(value)
    if record.workflow != definition.name:
        raise SchemaError(f"an outcome of workflow {record.workflow!r}, not {definition.name!r}")
    try:
        outcome = outcome_from(record.outcome, record.result, record.error, definition)
    except ValueError as exc:
        raise SchemaError(f"the result of {record.instance_id!r} does not read as the result type: {exc}") from exc
    return record.instance_id, outcome


def answer_of(stored: dict[str, Any] | None) -> dict[str, Any]:
    """Return the reply fields for an instance's stored status (``s/{id}`` in RocksDB)."""
    if stored is None:
        return {}
    answer: dict[str, Any] = {"status": stored["status"], "reason": stored.get("reason")}
    answer.update(stored.get("outcome") or {})
    return answer


def reply_record(
    reply_to: str, request_id: str, instance_id: str, answer: str, now_ms: int, *, as_json: bool = False,
    **fields: Any,
) -> Outgoing:
    """Return the reply to ``request_id`` (keyed by it) on ``reply_to``; JSON for a JSON request."""
    error = fields.get("error")
    reply = WorkflowReply(
        request_id=request_id,
        instance_id=instance_id,
        answer=answer,
        timestamp_ms=now_ms,
        status=fields.get("status"),
        outcome=fields.get("outcome"),
        result=fields.get("result"),
        error=StepError.from_json(error) if isinstance(error, dict) else error,
        reason=fields.get("reason"),
    )
    headers = JSON_HEADERS if as_json else ()
    return Outgoing(reply_to, request_id.encode(), encode_answer(reply, as_json=as_json), None, headers)


def outcome_record(
    topic: str, partition: int, workflow: str, instance_id: str, fields: dict[str, Any], at: int,
    *, as_json: bool = False,
) -> Outgoing:
    """Return the outcome record of ``instance_id`` (keyed by it) from stored outcome fields.

    ``as_json``: the JSON form, for apps whose outcomes non-Python clients read.
    """
    error = fields.get("error")
    record = WorkflowOutcomeRecord(
        instance_id=instance_id,
        workflow=workflow,
        outcome=fields["outcome"],
        at=at,
        result=fields.get("result"),
        error=None if error is None else StepError.from_json(error),
    )
    headers = JSON_HEADERS if as_json else ()
    return Outgoing(topic, instance_id.encode(), encode_answer(record, as_json=as_json), partition, headers)
