"""Dead letters: records an agent cannot use, kept with where they came from and why.

Every agent turns a ``RecordError`` into a dead letter on ``{app}.deadletter`` and goes on
with the next record. The original bytes and headers are kept so the record can be
inspected and replayed by hand, up to bounds: a dead letter must always fit the topic
(the broker refuses records over ``max.message.bytes``, 1 MiB by default), or the bad
record would stop its partition. Beyond ``value_limit`` the value is cut and its original
size recorded; the key, the headers and the reason have fixed bounds. The largest dead
letter is about ``value_limit`` + 25 KiB.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ...codec import avro
from ...core.limits import MAX_REASON_BYTES, clip_text
from ...core.records import DeadLetter
from .io import Incoming, Outgoing

DEAD_LETTER_VALUE_BYTES: Final = 64 * 1024
"""Default bound of the value kept in a dead letter (``value_limit``)."""

MAX_DEAD_LETTER_VALUE_BYTES: Final = 512 * 1024
"""Largest ``value_limit`` accepted: half the broker's default ``max.message.bytes``."""

DEAD_LETTER_KEY_BYTES: Final = 1024
"""Bound of the key kept: keys are instance ids of at most 255 bytes when valid."""

DEAD_LETTER_HEADER_BYTES: Final = 16 * 1024
"""Bound of all headers kept (names and values, UTF-8); later headers are dropped."""

_HEADER_NAME_BYTES: Final = 256
_HEADER_VALUE_BYTES: Final = 2048


def _clip(data: bytes | None, limit: int) -> tuple[bytes | None, bool]:
    if data is None or len(data) <= limit:
        return data, False
    return data[:limit], True


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "replace"))


def _headers(headers: Mapping[str, bytes | None]) -> tuple[dict[str, str], bool]:
    kept: dict[str, str] = {}
    cut = False
    total = 0
    for name, value in headers.items():
        # Values are bytes from any producer; a name may hold lone surrogates: clip_text
        # makes both valid UTF-8 that Avro can write.
        raw = b"" if value is None else value
        text_name = clip_text(name, _HEADER_NAME_BYTES)
        # Only what can survive the clip is decoded: a header may be near 1 MiB.
        text_value = clip_text(raw[: 2 * _HEADER_VALUE_BYTES].decode("utf-8", "replace"), _HEADER_VALUE_BYTES)
        size = len(text_name.encode()) + len(text_value.encode())
        if total + size > DEAD_LETTER_HEADER_BYTES:
            return kept, True
        cut = cut or _utf8_size(name) > _HEADER_NAME_BYTES or len(raw) > _HEADER_VALUE_BYTES
        kept[text_name] = text_value
        total += size
    return kept, cut


def _reason(error: BaseException) -> tuple[str, bool]:
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - a user exception's __str__ must not stop the worker
        text = f"{type(error).__name__} (its message could not be rendered)"
    # A message can quote the hostile input (a pydantic error lists every invalid item).
    return clip_text(text, MAX_REASON_BYTES), _utf8_size(text) > MAX_REASON_BYTES


def dead_letter(
    record: Incoming,
    error: BaseException,
    topic: str,
    now_ms: int,
    *,
    value_limit: int = DEAD_LETTER_VALUE_BYTES,
) -> Outgoing:
    """Return the dead-letter record for ``record``, which failed with ``error``.

    Args:
        record: The record as consumed.
        error: Why it cannot be used (a ``RecordError``, or what user code raised on it).
        topic: The app's dead-letter topic.
        now_ms: When it was dead-lettered.
        value_limit: Most bytes of the value kept; beyond it the value is cut,
            ``truncated`` is set and ``original_size`` says how large it was.

    Returns:
        The dead letter, keyed ``{topic}/{partition}/{offset}`` of the record, well under
        the broker's default ``max.message.bytes`` whatever the record held.

    Raises:
        ValueError: ``value_limit`` is negative or above ``MAX_DEAD_LETTER_VALUE_BYTES``
            (a configuration error, raised on the first dead letter).
    """
    if not 0 <= value_limit <= MAX_DEAD_LETTER_VALUE_BYTES:
        raise ValueError(f"value_limit must be within 0..{MAX_DEAD_LETTER_VALUE_BYTES}, not {value_limit}")
    value, value_cut = _clip(record.value, value_limit)
    key, key_cut = _clip(record.key, DEAD_LETTER_KEY_BYTES)
    headers, headers_cut = _headers(record.headers)
    reason, reason_cut = _reason(error)
    letter = DeadLetter(
        source_topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=key,
        value=value,
        reason=reason,
        error_type=type(error).__name__,
        timestamp_ms=now_ms,
        headers=headers,
        original_size=None if record.value is None else len(record.value),
        truncated=value_cut or key_cut or headers_cut or reason_cut,
    )
    # Keyed by source position, so a re-delivered bad record overwrites its own letter.
    key_text = f"{record.topic}/{record.partition}/{record.offset}"
    return Outgoing(topic, key_text.encode(), avro.encode(letter))
