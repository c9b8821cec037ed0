"""Dead letters: records an agent cannot use, kept with where they came from and why.

Every agent turns a ``RecordError`` into a dead letter on ``{app}.deadletter`` and goes on
with the next record; the original bytes and headers are kept so the record can be
inspected and replayed by hand.
"""

from __future__ import annotations

from ..codec import avro
from ..core.records import DeadLetter
from ..errors import RecordError
from .io import Incoming, Outgoing


def dead_letter(record: Incoming, error: RecordError, topic: str, now_ms: int) -> Outgoing:
    """Return the dead-letter record for ``record``, which failed with ``error``."""
    letter = DeadLetter(
        source_topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        key=record.key,
        value=record.value,
        reason=str(error),
        error_type=type(error).__name__,
        timestamp_ms=now_ms,
        headers={name: value.decode("utf-8", "replace") for name, value in record.headers.items()},
    )
    # Keyed by source position, so a re-delivered bad record overwrites its own letter.
    key = f"{record.topic}/{record.partition}/{record.offset}".encode()
    return Outgoing(topic, key, avro.encode(letter))
