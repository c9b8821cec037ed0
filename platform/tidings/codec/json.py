"""JSON envelopes, for producers that do not speak Avro (kcat, services in other languages).

A JSON envelope is a UTF-8 JSON object with the record's field names (SPEC §9). It is
sent with the Kafka header ``content-type: application/json``. ``payload`` is an inline
JSON value, stored re-serialised as compact JSON bytes, so the rest of tidings never sees
the difference from an Avro envelope. Rules for a command::

    {"command_id": "c-1", "aggregate_id": "acct-7", "type": "Deposit",
     "payload": {"amount": 10}, "correlation_id": "...", "timestamp_ms": 1700000000000,
     "expected_version": 3, "reply_to": "...", "causation_id": "...", "metadata": {},
     "reply_key": "..."}

- ``command_id`` (and ``event_id`` for events) is required: it is the idempotency key,
  and inventing one would make a resent JSON command run twice.
- ``correlation_id`` defaults to the command id (a command that starts a conversation).
- ``timestamp_ms`` defaults to the Kafka record's timestamp, passed by the caller.
- Every other field without a default in ``tidings.core.records`` is required.

``encode_json`` renders any envelope this way too (bytes fields other than ``payload``
become base64 strings), for reading outcome or reply topics as JSON in the CLI.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeVar, cast, get_args

from tidings.core.limits import check_command, load_json
from tidings.core.records import (
    CommandEnvelope,
    DeadLetter,
    EventEnvelope,
    ReplyEnvelope,
    ReplyStatus,
)
from tidings.errors import DecodeError, SchemaError

Record = CommandEnvelope | EventEnvelope | ReplyEnvelope | DeadLetter
R = TypeVar("R", CommandEnvelope, EventEnvelope, ReplyEnvelope, DeadLetter)

CONTENT_TYPE: Final = "application/json"
_REPLY_STATUSES: Final = frozenset(get_args(ReplyStatus))


def payload_json(value: Any) -> bytes:
    """Serialise a JSON value compactly, the one form payload bytes take.

    Args:
        value: A JSON-compatible value.

    Returns:
        UTF-8 JSON without insignificant whitespace.

    Raises:
        TypeError: ``value`` is not JSON-compatible.
        ValueError: ``value`` holds NaN or infinity, which JSON cannot express.
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


class JsonFields:
    """Typed, required-or-default access to one JSON object, naming the envelope in errors."""

    __slots__ = ("_object", "_what")

    def __init__(self, obj: Mapping[str, Any], what: str) -> None:
        self._object = obj
        self._what = what

    def _fail(self, name: str, expected: str) -> SchemaError:
        return SchemaError(f"JSON {self._what}: {name!r} must be {expected}")

    def has(self, name: str) -> bool:
        return self._object.get(name) is not None

    def _get(self, name: str, default: Any) -> Any:
        # An explicit null means "absent": producers in other languages often send one.
        value = self._object.get(name)
        return default if value is None else value

    def text(self, name: str, default: str | None = None) -> str:
        value = self._get(name, default)
        if not isinstance(value, str) or (value == "" and default is None):
            raise self._fail(name, "a non-empty string" if default is None else "a string")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self._object.get(name)
        if value is not None and not isinstance(value, str):
            raise self._fail(name, "a string or null")
        return value

    def integer(self, name: str, default: int | None = None) -> int:
        value = self._get(name, default)
        # bool is an int in Python but never a valid number in an envelope.
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._fail(name, "an integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        value = self._object.get(name)
        if value is None:
            return None
        return self.integer(name)

    def boolean(self, name: str, default: bool) -> bool:
        value = self._get(name, default)
        if not isinstance(value, bool):
            raise self._fail(name, "true or false")
        return value

    def strings(self, name: str) -> dict[str, str]:
        value = self._get(name, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._fail(name, "an object of strings")
        return cast(dict[str, str], value)

    def objects(self, name: str) -> list[Mapping[str, Any]]:
        value = self._get(name, [])
        if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
            raise self._fail(name, "a list of objects")
        return value

    def payload(self, name: str = "payload") -> bytes:
        if name not in self._object:
            raise self._fail(name, "present (any JSON value)")
        return payload_json(self._object[name])

    def base64(self, name: str) -> bytes | None:
        value = self._object.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._fail(name, "a base64 string or null")
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise self._fail(name, "a base64 string or null") from exc


def _timestamp(fields: JsonFields, default: int | None) -> int:
    if fields.has("timestamp_ms") or default is None:
        return fields.integer("timestamp_ms")
    return default


def _command(fields: JsonFields, timestamp_ms: int | None) -> CommandEnvelope:
    command_id = fields.text("command_id")
    return check_command(CommandEnvelope(
        command_id=command_id,
        correlation_id=fields.text("correlation_id", command_id),
        aggregate_id=fields.text("aggregate_id"),
        type=fields.text("type"),
        payload=fields.payload(),
        timestamp_ms=_timestamp(fields, timestamp_ms),
        expected_version=fields.optional_integer("expected_version"),
        reply_to=fields.optional_text("reply_to"),
        causation_id=fields.optional_text("causation_id"),
        metadata=fields.strings("metadata"),
        reply_key=fields.optional_text("reply_key"),
    ))


def _event(fields: JsonFields, timestamp_ms: int | None) -> EventEnvelope:
    command_id = fields.text("command_id")
    return EventEnvelope(
        event_id=fields.text("event_id"),
        command_id=command_id,
        correlation_id=fields.text("correlation_id", command_id),
        aggregate_id=fields.text("aggregate_id"),
        version=fields.integer("version"),
        type=fields.text("type"),
        payload=fields.payload(),
        timestamp_ms=_timestamp(fields, timestamp_ms),
        deferred=fields.boolean("deferred", False),
        metadata=fields.strings("metadata"),
    )


def _reply(fields: JsonFields, timestamp_ms: int | None) -> ReplyEnvelope:
    command_id = fields.text("command_id")
    status = fields.text("status")
    if status not in _REPLY_STATUSES:
        raise SchemaError(f"JSON ReplyEnvelope: 'status' must be one of {sorted(_REPLY_STATUSES)}")
    events = fields.objects("events")
    return ReplyEnvelope(
        command_id=command_id,
        correlation_id=fields.text("correlation_id", command_id),
        aggregate_id=fields.text("aggregate_id"),
        status=cast(ReplyStatus, status),
        version=fields.integer("version"),
        timestamp_ms=_timestamp(fields, timestamp_ms),
        events=tuple(_event(JsonFields(e, "EventEnvelope"), timestamp_ms) for e in events),
        expected_version=fields.optional_integer("expected_version"),
        reason=fields.optional_text("reason"),
    )


def _dead_letter(fields: JsonFields, timestamp_ms: int | None) -> DeadLetter:
    return DeadLetter(
        source_topic=fields.text("source_topic"),
        partition=fields.integer("partition"),
        offset=fields.integer("offset"),
        key=fields.base64("key"),
        value=fields.base64("value"),
        reason=fields.text("reason", ""),
        error_type=fields.text("error_type"),
        timestamp_ms=_timestamp(fields, timestamp_ms),
        headers=fields.strings("headers"),
        original_size=fields.optional_integer("original_size"),
        truncated=fields.boolean("truncated", False),
    )


_READERS: Final[Mapping[type, Callable[[JsonFields, int | None], Any]]] = MappingProxyType(
    {
        CommandEnvelope: _command,
        EventEnvelope: _event,
        ReplyEnvelope: _reply,
        DeadLetter: _dead_letter,
    }
)


def decode_json(data: bytes, record_type: type[R], *, timestamp_ms: int | None = None) -> R:
    """Decode a JSON envelope into ``record_type``.

    Args:
        data: UTF-8 JSON bytes of one object.
        record_type: The envelope class the topic carries (JSON does not say).
        timestamp_ms: The Kafka record's timestamp, used when the object has none.

    Returns:
        The envelope, its payload as compact JSON bytes.

    Raises:
        DecodeError: The bytes are not UTF-8 JSON of an object, or are larger or nested
            deeper than ``tidings.core.limits`` allows (refused before parsing).
        SchemaError: A required field is missing or a field has the wrong type;
            ``LimitError`` when a command's id, payload or metadata breaks a limit.
    """
    reader = _READERS.get(record_type)
    if reader is None:
        raise TypeError(f"cannot decode {record_type.__name__}: not a tidings envelope")
    try:
        obj = load_json(data, "JSON envelope")
    except ValueError as exc:
        raise DecodeError(f"not a JSON envelope: {exc}") from exc
    if not isinstance(obj, dict):
        raise DecodeError(f"not a JSON envelope: expected an object, got {type(obj).__name__}")
    try:
        return cast(R, reader(JsonFields(obj, record_type.__name__), timestamp_ms))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SchemaError):
            raise
        raise SchemaError(f"JSON {record_type.__name__}: {exc}") from exc


def _jsonable(name: str, value: Any) -> Any:
    if isinstance(value, bytes):
        if name == "payload":
            try:
                return load_json(value)
            except ValueError:
                pass  # not JSON after all: fall through and show it losslessly
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, tuple):
        return [_as_object(item) for item in value]
    return value


def _as_object(record: Any) -> dict[str, Any]:
    return {name: _jsonable(name, getattr(record, name)) for name in record.__slots__}


def encode_json(record: Record) -> bytes:
    """Render an envelope as a JSON envelope (the payload inline when it is JSON).

    Args:
        record: Any tidings envelope.

    Returns:
        Compact UTF-8 JSON that ``decode_json`` reads back to an equal record when the
        payload is compact JSON.
    """
    return payload_json(_as_object(record))
