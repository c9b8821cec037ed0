"""The records tidings writes to Kafka, as plain immutable values.

These are what the codecs (``tidings.codec``) turn into Avro or JSON bytes and back.
User payloads stay opaque here: ``payload`` is the JSON bytes of the user's value and
``type`` its stable type name, so the core never depends on a serialisation library.
Timestamps are integer milliseconds since the Unix epoch (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True, slots=True)
class CommandEnvelope:
    """A command addressed to one aggregate instance.

    Idempotent by ``command_id``: a repeated id gets the first verdict again. The reply
    goes to ``reply_to`` keyed by ``reply_key`` (default ``command_id``), so a workflow or
    saga names its own instance id and the reply lands on the partition that owns it.
    """

    command_id: str
    correlation_id: str
    aggregate_id: str
    type: str
    payload: bytes
    timestamp_ms: int
    expected_version: int | None = None
    reply_to: str | None = None
    causation_id: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    reply_key: str | None = None

    @property
    def reply_record_key(self) -> str:
        """The key of this command's reply: ``reply_key`` when set, else ``command_id``."""
        return self.reply_key if self.reply_key is not None else self.command_id


@dataclass(frozen=True, slots=True)
class EventEnvelope:
    """An event of one aggregate instance, stored (``version`` >= 1) or deferred.

    A deferred event is published and folded live but never stored; it carries the
    persisted version it was folded on and ``deferred=True``.
    """

    event_id: str
    command_id: str
    correlation_id: str
    aggregate_id: str
    version: int
    type: str
    payload: bytes
    timestamp_ms: int
    deferred: bool = False
    metadata: dict[str, str] = field(default_factory=dict)


ReplyStatus = Literal["accepted", "ignored", "conflict", "rejected"]


@dataclass(frozen=True, slots=True)
class ReplyEnvelope:
    """The verdict on one command, sent to the command's ``reply_to`` topic.

    ``status`` is ``accepted`` (``events`` holds the stored or deferred events; the
    reply event is the last), ``ignored`` (decide returned Ignore), ``conflict``
    (``expected_version`` mismatch; ``actual_version`` says what it is) or ``rejected``
    (the command could not be used; ``reason`` says why).
    """

    command_id: str
    correlation_id: str
    aggregate_id: str
    status: ReplyStatus
    version: int
    timestamp_ms: int
    events: tuple[EventEnvelope, ...] = ()
    expected_version: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that could not be used, with where it came from and why.

    Bounded so that it always fits the dead-letter topic whatever the record held: the
    value, key, headers and reason are cut beyond their limits (``truncated`` says so) and
    ``original_size`` keeps the value's size in bytes (None for a tombstone, and in
    letters written before the field existed).
    """

    source_topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    error_type: str
    timestamp_ms: int
    headers: dict[str, str] = field(default_factory=dict)
    original_size: int | None = None
    truncated: bool = False
