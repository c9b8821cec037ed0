"""A dead-letter topic's records as JSON objects an operator (and the console) can read.

The dead-letter topic holds Avro ``DeadLetter`` records (``core/records.py``): the bytes a
worker could not use, where they came from and why. Any producer can write to the topic, so
a record there that is not a dead letter becomes an ``unreadable`` object, never an error.
"""

from __future__ import annotations

import base64
import codecs
from datetime import UTC, datetime
from typing import Any

from ..codec import avro
from ..core.records import DeadLetter
from ..shell.runtime.io import Incoming


def dead_letter_line(record: Incoming) -> tuple[dict[str, Any], int | None]:
    """Return the JSON object for one record of a dead-letter topic, and when it was written (ms)."""
    where = {"partition": record.partition, "offset": record.offset}
    try:
        if record.value is None:
            raise ValueError("a tombstone (no value), not a dead letter")
        letter = avro.decode_as(record.value, DeadLetter)
    except Exception as exc:  # noqa: BLE001 - any producer may write any bytes here: a line, never a crash
        unreadable = {
            "unreadable": str(exc),
            "letter": where,
            "timestamp": _iso(record.timestamp_ms),
            **bytes_field("key", record.key),
            **bytes_field("value", record.value),
            "headers": {name: value.decode("utf-8", "replace") for name, value in record.headers.items()},
        }
        return unreadable, record.timestamp_ms
    kept = len(letter.value) if letter.value is not None else 0
    # Letters written before the worker recorded sizes kept the whole value.
    original_size = getattr(letter, "original_size", None)
    if original_size is None or original_size < 0:
        original_size = kept
    truncated = getattr(letter, "truncated", None)
    if truncated is None:
        truncated = original_size > kept
    line = {
        "reason": letter.reason,
        "error_type": letter.error_type,
        "origin": {"topic": letter.source_topic, "partition": letter.partition, "offset": letter.offset},
        "timestamp": _iso(letter.timestamp_ms),
        **bytes_field("key", letter.key),
        **bytes_field("value", letter.value, partial=bool(truncated)),
        "original_size": original_size,
        "truncated": bool(truncated),
        "headers": dict(letter.headers),
        "letter": where,
    }
    return line, letter.timestamp_ms


def bytes_field(name: str, data: bytes | None, *, partial: bool = False) -> dict[str, Any]:
    """Return ``{name: text, name_encoding: "utf-8"}``, or base64 when ``data`` is not UTF-8.

    A truncated value may end inside a character: ``partial`` lets its text drop those
    last bytes (base64 keeps every byte).
    """
    if data is None:
        return {name: None, f"{name}_encoding": None}
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(data, final=not partial)
    except UnicodeDecodeError:
        return {name: base64.b64encode(data).decode("ascii"), f"{name}_encoding": "base64"}
    return {name: text, f"{name}_encoding": "utf-8"}


def _iso(ms: int | None) -> str | None:
    if ms is None or ms < 0:
        return None
    try:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):  # a producer's timestamp can be anything
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
