"""Pick the codec of a Kafka record from its ``content-type`` header.

Avro single-object encoding is the default; a record whose ``content-type`` header is
``application/json`` (any parameters after ``;`` ignored) is a JSON envelope.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

from tidings.codec.avro import R, decode_as
from tidings.codec.json import CONTENT_TYPE, decode_json
from tidings.errors import DecodeError

HeaderValue: TypeAlias = bytes | str | None
Headers: TypeAlias = Mapping[str, HeaderValue] | Sequence[tuple[str, HeaderValue]] | None
"""Headers as confluent-kafka (list of pairs) or Faust (mapping) hands them over."""

CONTENT_TYPE_HEADER = "content-type"


def content_type(headers: Headers) -> str | None:
    """Return the media type of the ``content-type`` header, lower-cased, or None.

    Args:
        headers: The record's headers; the header name is matched case-insensitively.

    Returns:
        e.g. ``application/json``, without parameters.
    """
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for name, value in pairs:
        if name.lower() == CONTENT_TYPE_HEADER and value is not None:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            return text.split(";", 1)[0].strip().lower()
    return None


def decode_record(
    value: bytes | None,
    record_type: type[R],
    *,
    headers: Headers = None,
    timestamp_ms: int | None = None,
) -> R:
    """Decode one Kafka record value as Avro or, by its header, as a JSON envelope.

    Args:
        value: The record value (None for a tombstone).
        record_type: The envelope class the topic carries.
        headers: The record's headers.
        timestamp_ms: The record's Kafka timestamp; a JSON envelope without
            ``timestamp_ms`` gets it.

    Returns:
        The envelope.

    Raises:
        DecodeError: A tombstone, an unsupported content type, or bytes that do not decode.
        SchemaError: A decodable envelope whose fields are missing or invalid.
    """
    if value is None:
        raise DecodeError(f"a tombstone (null value) is not a {record_type.__name__}")
    media_type = content_type(headers)
    if media_type == CONTENT_TYPE:
        # decode_json knows the envelopes that have a JSON form and refuses the others.
        return decode_json(value, record_type, timestamp_ms=timestamp_ms)  # type: ignore[type-var]
    if media_type is not None and media_type not in ("avro/binary", "application/avro"):
        raise DecodeError(f"unsupported content-type {media_type!r}")
    return decode_as(value, record_type)
