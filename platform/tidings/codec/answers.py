"""Outcomes and replies as Avro or JSON: written in the form the asker reads, read in either.

Requests may come from producers that cannot read Avro (kcat, services in other
languages, SPEC §9), so what answers them has a JSON form too:

- a command's reply (``ReplyEnvelope``) and a workflow request's reply (``WorkflowReply``)
  are JSON when the request was (``content-type: application/json``), Avro otherwise;
- a workflow's outcome records (``WorkflowOutcomeRecord`` on ``.outcomes``) are JSON when
  the start was (the ``Started`` journal record keeps ``outcome_json``, so whichever worker
  writes the outcome, long after the start, writes it so), or when the app says so for
  every outcome (``App(json_outcomes=True)``).

A JSON answer is a UTF-8 JSON object with the record's field names, written with the
header ``content-type: application/json``; a workflow's ``result`` and an event's
``payload`` are inline JSON values, an ``error`` an object ``{"kind", "message",
"type"}`` (every field is listed in ``docs/envelopes.md``).

Readers cannot rely on a header (the same topics carry both forms, and a record copied by
a tool may lose it), so they look at the first byte: an Avro single-object record starts
with ``C3 01``, a JSON object with ``{``. The Avro path costs that one comparison more.
"""

from __future__ import annotations

from typing import Any, Final

from tidings.codec import avro
from tidings.codec.json import CONTENT_TYPE, JsonFields, decode_json, encode_json, payload_json
from tidings.core.limits import load_json
from tidings.core.records import ReplyEnvelope
from tidings.core.workflow.failures import StepError
from tidings.core.workflow_records import WorkflowOutcomeRecord, WorkflowReply
from tidings.errors import DecodeError, SchemaError

JSON_HEADERS: Final[tuple[tuple[str, bytes], ...]] = (("content-type", CONTENT_TYPE.encode()),)
"""The headers of a JSON answer (an Avro answer has none)."""

_JSON_START: Final = 0x7B  # "{": every JSON answer is an object
# Insignificant whitespace a hand-written JSON record may start with (RFC 8259).
_WHITESPACE: Final = b" \t\r\n"

Answer = ReplyEnvelope | WorkflowReply | WorkflowOutcomeRecord


def is_json(value: bytes) -> bool:
    """Return whether a record value is a JSON answer rather than an Avro single-object one.

    Args:
        value: A record value from an outcomes or replies topic.
    """
    if not value:
        return False
    if value[0] == _JSON_START:
        return True
    # Avro starts with C3; only JSON may start with whitespace.
    return value[0] in _WHITESPACE and value.lstrip(_WHITESPACE)[:1] == b"{"


# -- writing ---------------------------------------------------------------------------


def _error_json(error: StepError | None) -> dict[str, Any] | None:
    return None if error is None else error.to_json()


def _result_json(result: str | None) -> Any:
    # Our own stored JSON text: inline it, so a JSON reader gets a value, not a string.
    return None if result is None else load_json(result, "a stored result")


def encode_answer(record: Answer, *, as_json: bool) -> bytes:
    """Encode an outcome or a reply as Avro, or as its JSON form.

    Args:
        record: A command reply, a workflow reply or a workflow outcome record.
        as_json: Write the JSON form (send it with ``JSON_HEADERS``).

    Returns:
        The record value.
    """
    if not as_json:
        return avro.encode(record)
    if isinstance(record, ReplyEnvelope):
        return encode_json(record)
    fields = {name: getattr(record, name) for name in record.__slots__}
    fields["result"] = _result_json(record.result)
    fields["error"] = _error_json(record.error)
    return payload_json(fields)


def reply_as_json(value: bytes) -> bytes:
    """Return a stored Avro command reply (an aggregate's first verdict) in JSON form.

    Raises:
        DecodeError, SchemaError: ``value`` is no command reply.
    """
    if is_json(value):
        return value
    return encode_json(avro.decode_as(value, ReplyEnvelope))


# -- reading ---------------------------------------------------------------------------


def _object(value: bytes, what: str) -> dict[str, Any]:
    try:
        obj = load_json(value, f"a JSON {what}")
    except ValueError as exc:
        raise DecodeError(f"not a JSON {what}: {exc}") from exc
    if not isinstance(obj, dict):
        raise DecodeError(f"not a JSON {what}: expected an object, got {type(obj).__name__}")
    return obj


def _result(obj: dict[str, Any], what: str) -> str | None:
    # Absent or null is "no result"; a finished instance's null result reads back the same.
    if obj.get("result") is None:
        return None
    try:
        return payload_json(obj["result"]).decode()
    except ValueError as exc:  # NaN or infinity, which the parser lets through
        raise SchemaError(f"JSON {what}: 'result' is not a JSON value: {exc}") from exc


def _error(obj: dict[str, Any], what: str) -> StepError | None:
    error = obj.get("error")
    if error is None:
        return None
    if not isinstance(error, dict) or not isinstance(error.get("message", ""), str) \
            or not isinstance(error.get("type"), (str, type(None))):
        raise SchemaError(f"JSON {what}: 'error' must be an object with a string 'message'")
    try:
        return StepError.from_json(error)
    except ValueError as exc:  # an unknown ErrorKind
        raise SchemaError(f"JSON {what}: 'error' is not a stored failure (an unknown kind or bad causes): {exc}") from exc


def _workflow_reply(obj: dict[str, Any]) -> WorkflowReply:
    fields = JsonFields(obj, "WorkflowReply")
    return WorkflowReply(
        request_id=fields.text("request_id"),
        instance_id=fields.text("instance_id"),
        answer=fields.text("answer"),
        timestamp_ms=fields.integer("timestamp_ms", 0),
        status=fields.optional_text("status"),
        outcome=fields.optional_text("outcome"),
        result=_result(obj, "WorkflowReply"),
        error=_error(obj, "WorkflowReply"),
        reason=fields.optional_text("reason"),
    )


def decode_reply(value: bytes) -> ReplyEnvelope | WorkflowReply | None:
    """Read a record of a replies topic, Avro or JSON: a command's or a workflow request's reply.

    A JSON command reply has ``command_id``; a JSON workflow reply has ``request_id``.

    Returns:
        The reply, or None for another Avro record (nobody waits for it).

    Raises:
        DecodeError, SchemaError: The bytes are no reply of either form.
    """
    if not is_json(value):
        answer = avro.decode(value)
        return answer if isinstance(answer, (ReplyEnvelope, WorkflowReply)) else None
    obj = _object(value, "reply")
    if "request_id" in obj:
        return _workflow_reply(obj)
    if "command_id" in obj:
        return decode_json(value, ReplyEnvelope)
    raise SchemaError("JSON reply: neither 'command_id' (a command's) nor 'request_id' (a workflow's)")


def decode_outcome_record(value: bytes) -> WorkflowOutcomeRecord:
    """Read a record of a workflow's outcomes topic, Avro or JSON.

    Raises:
        DecodeError, SchemaError: The bytes are no outcome record of either form.
    """
    if not is_json(value):
        return avro.decode_as(value, WorkflowOutcomeRecord)
    obj = _object(value, "outcome")
    fields = JsonFields(obj, "WorkflowOutcome")
    outcome = fields.text("outcome")
    if outcome not in ("finished", "faulted", "cancelled"):
        raise SchemaError(f"JSON WorkflowOutcome: 'outcome' {outcome[:40]!r} is not finished, faulted or cancelled")
    return WorkflowOutcomeRecord(
        instance_id=fields.text("instance_id"),
        workflow=fields.text("workflow"),
        outcome=outcome,
        at=fields.integer("at", 0),
        result=_result(obj, "WorkflowOutcome"),
        error=_error(obj, "WorkflowOutcome"),
    )
