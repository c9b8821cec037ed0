"""The documented limits on what may arrive from outside, and the pure checks that apply them.

Every input topic is open to any producer (SPEC §11), so a record is checked at the edge,
when it is decoded, before anything copies its ids into keys, replies, events or hashes:

- an id (instance, aggregate, command, correlation, causation, request id, a type name,
  a signal name) is a non-empty ``str`` of valid UTF-8 (no lone surrogate, which Python
  strings can hold and UTF-8 cannot) of at most ``MAX_ID_BYTES`` bytes;
- a payload is at most ``MAX_PAYLOAD_BYTES`` and metadata at most ``MAX_METADATA_BYTES``;
- JSON from outside is at most ``MAX_JSON_BYTES`` and nested at most ``MAX_JSON_DEPTH``
  deep, checked by a linear scan *before* a recursive parser sees it (``load_json``);
- a ``reply_to`` is a valid Kafka topic name (``check_topic_name``) and, where the app's
  own topics are known, none of them (``check_reply_to``).

Each check raises ``LimitError``, a ``SchemaError`` (agents dead-letter the record) that is
also a ``ValueError`` (the client raises it before producing). ``docs/limits.md`` lists
every limit, where it is checked and what happens to a record that breaks it.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Collection, Mapping
from itertools import accumulate, count
from typing import TYPE_CHECKING, Any, Final

from tidings.core.records import CommandEnvelope, EventEnvelope
from tidings.errors import LimitError

if TYPE_CHECKING:
    # Only for the annotation: workflow_records imports load_json from here.
    from tidings.core.workflow_records import WorkflowInbox

MAX_ID_BYTES: Final = 255
"""Longest id, type name or signal name, in UTF-8 bytes. Ids become Kafka keys, RocksDB
keys and parts of every reply; 255 is the usual bound of a database key column."""

MAX_REQUEST_ID_BYTES: Final = MAX_ID_BYTES + 32
"""Longest request id: a JSON inbox envelope without one gets ``{kind}:{instance_id}:{ms}``,
which must fit whatever instance id within ``MAX_ID_BYTES`` it names."""

MAX_PAYLOAD_BYTES: Final = 512 * 1024
"""Largest payload (a command, a workflow input or signal), in bytes. Half the broker's
default ``max.message.bytes`` (1 MiB), so the envelope, the events decided from it and
the reply carrying them still fit in one record."""

#: Largest value tidings stores from user code in one record it writes itself: a
#: workflow step's or body's result, an orchestration's actions or outcome. The record
#: stays under the broker's 1 MiB default ``max.message.bytes``; a larger value fails its
#: step or instance instead of a write the broker refuses at every attempt.
MAX_VALUE_BYTES: Final = 768 * 1024

MAX_METADATA_BYTES: Final = 16 * 1024
"""Largest metadata map (the UTF-8 bytes of every key and value); it is copied onto every
event a command causes."""

MAX_JSON_BYTES: Final = 1024 * 1024
"""Largest JSON text parsed from outside (a JSON envelope with its inline payload): the
broker's default ``max.message.bytes``, so only a topic configured larger can carry more."""

MAX_JSON_DEPTH: Final = 64
"""Deepest nesting of arrays and objects in JSON from outside. Python's parser recurses
once per level and fails near 1,000; real payloads stay far below 64."""

MAX_REASON_BYTES: Final = 4 * 1024
"""Longest reason carried in a dead letter or a rejection reply, in UTF-8 bytes: a
validation error lists every invalid item and can echo megabytes of the input."""

MAX_TOPIC_NAME_LENGTH: Final = 249
"""Kafka's own limit on a topic name's length."""

_TOPIC_NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,%d}" % MAX_TOPIC_NAME_LENGTH)

# A string literal, up to its closing quote or, unterminated, to the end of the text. It
# matches wherever a quote is, so removing literals is one linear pass (a pattern that can
# fail would be retried at every quote of an unterminated literal: quadratic). UTF-8 never
# uses bytes below 0x80 inside a multi-byte character, so scanning bytes is exact.
_STRING_LITERAL: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.DOTALL)
# An opener becomes 2 and a closer 0 (every other byte is dropped), so the running sum
# minus the position is the depth.
_BRACKET_STEPS: Final = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_BRACKETS: Final = bytes(set(range(256)) - set(b"[]{}"))
_PREVIEW_CHARS: Final = 40


def _preview(value: str) -> str:
    # Errors end up in dead letters and logs: never echo a whole hostile value.
    if len(value) <= _PREVIEW_CHARS:
        return repr(value)
    return f"{value[:_PREVIEW_CHARS]!r}..."


def clip_text(text: str, max_bytes: int) -> str:
    """Return ``text`` cut to at most ``max_bytes`` bytes of valid UTF-8, saying it was cut.

    Lone surrogates become ``?``, so the result always encodes (an error message may
    quote a hostile string).
    """
    data = text.encode("utf-8", "replace")
    if len(data) <= max_bytes:
        return data.decode("utf-8")
    note = f"... ({len(data)} bytes in all)"
    # "ignore" drops a multi-byte character that the cut split in two.
    return data[: max(0, max_bytes - len(note))].decode("utf-8", "ignore") + note


def utf8_size(value: str, what: str) -> int:
    """Return the UTF-8 size of ``value``.

    Args:
        value: Any string.
        what: Names the value in the error message.

    Returns:
        Its length in UTF-8 bytes.

    Raises:
        LimitError: It holds a lone surrogate (e.g. ``"s-\\ud800"`` from a JSON ``\\ud800``
            escape), which has no UTF-8 form.
    """
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise LimitError(
            f"{what} {_preview(value)} is not valid UTF-8: a lone surrogate at index {exc.start}"
        ) from None


def check_id(value: object, what: str, *, max_bytes: int = MAX_ID_BYTES) -> str:
    """Check one id: a non-empty string of valid UTF-8, at most ``max_bytes`` bytes.

    Args:
        value: The id as received.
        what: Its name in the error message, e.g. ``"command_id"``.
        max_bytes: The limit; ``MAX_ID_BYTES`` unless the id is derived (request ids).

    Returns:
        ``value``, typed as ``str``.

    Raises:
        LimitError: It is not a string, is empty, is not valid UTF-8, or is too long.
    """
    if not isinstance(value, str):
        raise LimitError(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise LimitError(f"{what} must not be empty")
    size = utf8_size(value, what)
    if size > max_bytes:
        raise LimitError(f"{what} {_preview(value)} is {size} bytes of UTF-8; the limit is {max_bytes}")
    return value


def check_optional_id(value: object, what: str, *, max_bytes: int = MAX_ID_BYTES) -> str | None:
    """Check an id that may be absent: None, or as ``check_id``.

    Raises:
        LimitError: As for ``check_id``.
    """
    return None if value is None else check_id(value, what, max_bytes=max_bytes)


def check_payload_size(data: bytes | None, what: str = "payload", *, max_bytes: int = MAX_PAYLOAD_BYTES) -> None:
    """Check that a payload (None for none) is at most ``max_bytes`` bytes.

    Raises:
        LimitError: It is larger.
    """
    if data is not None and len(data) > max_bytes:
        raise LimitError(f"{what} is {len(data)} bytes; the limit is {max_bytes}")


def check_metadata(metadata: Mapping[str, str], what: str = "metadata") -> None:
    """Check a metadata map: valid UTF-8, at most ``MAX_METADATA_BYTES`` in all.

    Raises:
        LimitError: A key or value is not a valid UTF-8 string, or the map is too large.
    """
    total = 0
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise LimitError(f"{what} must map strings to strings")
        total += utf8_size(key, f"{what} key") + utf8_size(value, f"{what} value")
        if total > MAX_METADATA_BYTES:
            raise LimitError(f"{what} is more than {MAX_METADATA_BYTES} bytes of UTF-8")


def check_topic_name(topic: object, what: str = "reply_to") -> str:
    """Check that ``topic`` is a name Kafka accepts: ``[A-Za-z0-9._-]{1,249}``, not ``.``/``..``.

    Args:
        topic: The name as received.
        what: Its name in the error message.

    Returns:
        ``topic``, typed as ``str``.

    Raises:
        LimitError: It is not a valid topic name.
    """
    if not isinstance(topic, str):
        raise LimitError(f"{what} must be a topic name (a string), not {type(topic).__name__}")
    if _TOPIC_NAME.fullmatch(topic) is None or topic in (".", ".."):
        raise LimitError(
            f"{what} {_preview(topic)} is not a Kafka topic name: 1 to {MAX_TOPIC_NAME_LENGTH} "
            "of A-Z a-z 0-9 . _ -, and not '.' or '..'"
        )
    return topic


def check_reply_to(topic: object, forbidden: Collection[str]) -> str:
    """Check a ``reply_to``: a valid topic name that is none of the app's own topics.

    A reply written into a journal, inbox, commands, outcomes, status or dead-letter topic
    would be read there as a record of that topic (SPEC §11), so those are refused.

    Args:
        topic: The ``reply_to`` as received.
        forbidden: The app's own topics that no reply may go to.

    Returns:
        ``topic``, typed as ``str``.

    Raises:
        LimitError: It is no valid topic name, or it is in ``forbidden``.
    """
    name = check_topic_name(topic, "reply_to")
    if name in forbidden:
        raise LimitError(f"reply_to {name!r} is one of the app's own topics; replies may not go there")
    return name


def check_json_text(text: bytes | str, what: str = "JSON", *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON text nested deeper than ``max_depth``, without recursing.

    A linear scan of the brackets outside string literals. It finds the deepest nesting
    of any prefix of the text, which is as deep as ``json.loads`` can recurse on it before
    it succeeds or fails; so for text that ``json.loads`` accepts it is the exact depth.

    Args:
        text: UTF-8 JSON bytes (or text).
        what: Names the text in the error message.
        max_depth: Deepest accepted nesting of arrays and objects.

    Raises:
        LimitError: Arrays and objects nest deeper than ``max_depth``.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    # Fewer brackets in all than the limit (the common case): no scan needed.
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return
    # Everything below runs in C (split, regex, translate, itertools), not per byte in Python.
    if b'"' not in data:
        outside = data
    elif b"\\" not in data:
        # Without escapes every other quote-separated part is inside a literal.
        outside = b"".join(data.split(b'"')[::2])
    else:
        outside = _STRING_LITERAL.sub(b"", data)
    steps = outside.translate(_BRACKET_STEPS, _NOT_BRACKETS)
    deepest = max(map(operator.sub, accumulate(steps), count(1)), default=0)
    if deepest > max_depth:
        raise LimitError(f"{what} nests arrays and objects deeper than {max_depth} levels")


def load_json(
    data: bytes | str,
    what: str = "JSON",
    *,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """Parse JSON from outside, refusing text too large or too deep before parsing it.

    A drop-in for ``json.loads`` on untrusted input: like it, every failure is a
    ``ValueError``, so callers keep their one ``except ValueError``.

    Args:
        data: UTF-8 JSON bytes (or text).
        what: Names the text in error messages, e.g. ``"JSON envelope"``.
        max_bytes: Largest accepted size in bytes.
        max_depth: Deepest accepted nesting of arrays and objects.

    Returns:
        The parsed value.

    Raises:
        LimitError: Larger than ``max_bytes`` or deeper than ``max_depth`` (also a
            ``ValueError``).
        ValueError: Not UTF-8 (``UnicodeDecodeError``) or not JSON
            (``json.JSONDecodeError``).
    """
    if isinstance(data, str):
        size = len(data) if data.isascii() else len(data.encode("utf-8", "surrogatepass"))
    else:
        size = len(data)
    if size > max_bytes:
        raise LimitError(f"{what} is {size} bytes; the limit is {max_bytes}")
    # Decoded first, strictly: json.loads(bytes) would also guess UTF-16 or UTF-32, which the
    # byte scan below does not read. A leading byte-order mark is tolerated, as it does.
    text = data if isinstance(data, str) else data.decode("utf-8-sig")
    check_json_text(data, what, max_depth=max_depth)
    try:
        return json.loads(text)
    except RecursionError:
        # Unreachable after the scan with any sane max_depth; kept so that no input can
        # ever take the worker down through the parser's recursion.
        raise LimitError(f"{what} nests too deeply to parse") from None


def check_command(command: CommandEnvelope) -> CommandEnvelope:
    """Check every limit of a command envelope (Avro or JSON, worker or client).

    Args:
        command: A decoded or freshly built command.

    Returns:
        ``command``.

    Raises:
        LimitError: An id, the type name, ``reply_to`` (a topic name), the payload or the
            metadata breaks its limit.
    """
    check_id(command.command_id, "command_id")
    check_id(command.correlation_id, "correlation_id")
    check_id(command.aggregate_id, "aggregate_id")
    check_id(command.type, "type")
    check_optional_id(command.causation_id, "causation_id")
    check_optional_id(command.reply_key, "reply_key")
    if command.reply_to is not None:
        check_topic_name(command.reply_to, "reply_to")
    check_payload_size(command.payload)
    check_metadata(command.metadata)
    return command


def check_event(event: EventEnvelope) -> EventEnvelope:
    """Check the ids of an event read as the input of a projection or an orchestration.

    Any producer can write to an events topic. The aggregate that owns it only ever writes
    ids within the limits; a record whose ids break them is no event it stored.

    Raises:
        LimitError: An id or the type name breaks its limit.
    """
    check_id(event.event_id, "event_id")
    check_id(event.command_id, "command_id")
    check_id(event.correlation_id, "correlation_id")
    check_id(event.aggregate_id, "aggregate_id")
    check_id(event.type, "type")
    return event


def check_inbox(inbox: WorkflowInbox) -> WorkflowInbox:
    """Check every limit of a workflow inbox record (Avro or JSON).

    Args:
        inbox: A decoded or freshly built request.

    Returns:
        ``inbox``.

    Raises:
        LimitError: An id, the signal name (required for a signal and a signal-with-start), the
            signal id, ``reply_to``, the payload, the input or the metadata breaks its limit.
    """
    check_id(inbox.instance_id, "instance_id")
    check_id(inbox.request_id, "request_id", max_bytes=MAX_REQUEST_ID_BYTES)
    if inbox.kind in ("signal", "signal_with_start") and not inbox.signal:
        raise LimitError(f"a {inbox.kind} request needs the signal's name")
    check_optional_id(inbox.signal, "signal name")
    check_optional_id(inbox.signal_id, "signal_id")
    if inbox.kind in ("update", "update_with_start") and not (inbox.update and inbox.update_id):
        raise LimitError(f"an {inbox.kind} request needs the update's name and an update_id")
    check_optional_id(inbox.update, "update name")
    check_optional_id(inbox.update_id, "update_id")
    check_optional_id(inbox.wait_for, "wait_for")
    if inbox.kind == "query_handler" and not inbox.query:
        raise LimitError("a query_handler request needs the query's name (field 'query')")
    check_optional_id(inbox.query, "query name")
    if inbox.reply_to is not None:
        check_topic_name(inbox.reply_to, "reply_to")
    # A child's result may be as large as any stored value; an input or signal may not.
    check_payload_size(inbox.payload, max_bytes=MAX_VALUE_BYTES if inbox.kind == "child_ended" else MAX_PAYLOAD_BYTES)
    check_payload_size(inbox.input, "the input", max_bytes=MAX_PAYLOAD_BYTES)  # a signal-with-start's
    check_metadata(inbox.metadata)
    for value, what in (
        (inbox.parent_workflow, "parent_workflow"), (inbox.parent_id, "parent_id"),
        (inbox.parent_path, "parent_path"), (inbox.child_workflow, "child_workflow"), (inbox.outcome, "outcome"),
    ):
        check_optional_id(value, what)
    if inbox.error is not None:
        check_payload_size(inbox.error.message.encode(), "the child's error", max_bytes=MAX_VALUE_BYTES)
    return inbox


__all__ = [
    "MAX_ID_BYTES",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_METADATA_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_REASON_BYTES",
    "MAX_REQUEST_ID_BYTES",
    "MAX_TOPIC_NAME_LENGTH",
    "MAX_VALUE_BYTES",
    "check_command",
    "check_event",
    "check_id",
    "check_inbox",
    "check_json_text",
    "check_metadata",
    "check_optional_id",
    "check_payload_size",
    "check_reply_to",
    "check_topic_name",
    "clip_text",
    "load_json",
    "utf8_size",
]
