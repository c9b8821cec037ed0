"""A record's fields as the dict fastavro writes: one generic mapping for plain records.

The envelopes are slotted dataclasses whose field names are the Avro field names, so the
dict is derived from ``__slots__`` rather than spelled out per record type.
"""

from __future__ import annotations

from typing import Any


def plain_fields(record: Any) -> dict[str, Any]:
    """Return ``{field name: value}`` of a slotted dataclass record."""
    return {name: getattr(record, name) for name in record.__slots__}
