"""The compiled Avro readers read what ``fastavro.schemaless_reader`` reads, and refuse more.

``codec.avro.decode`` reads a body written with the newest schema of its type through a
reader compiled from that schema (``codec.readers``). The reference is the path it
replaced: plain ``fastavro.schemaless_reader`` with the writer's parsed schema. Every record
is hostile, so besides valid records of every family the readers get mutated and random
bodies: whatever a compiled reader reads, fastavro reads as the same fields and ends at
the same byte; what it refuses, ``decode`` refuses with a ``DecodeError``.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any, cast

import pytest
from fastavro import parse_schema, schemaless_reader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.codec import avro, readers
from tidings.core.records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from tidings.errors import DecodeError, SchemaError

_TYPES = sorted(avro.CATALOGUE.newest, key=lambda t: t.__name__)
_HEADER = avro._HEADER_LEN


def _fastavro(record_type: type, body: bytes) -> tuple[Any, int]:
    stream = BytesIO(body)
    fields = schemaless_reader(stream, avro.CATALOGUE.newest[record_type].parsed, None)
    return fields, stream.tell()


def _compiled(record_type: type) -> readers.Reader:
    reader = readers.compile_reader(avro.CATALOGUE.newest[record_type].parsed)
    assert reader is not None
    return reader


def _encoded(record: Any) -> bytes:
    try:
        return avro.encode(record)
    except SchemaError:  # a generated value no schema holds (a long beyond 64 bits, ...)
        return b""


def _reads_as_fastavro_or_refuses(record_type: type, body: bytes) -> bool:
    """Check the contract on one body; return whether the compiled reader read it."""
    try:
        fields, end = _compiled(record_type)(body, 0)
    except (EOFError, IndexError, ValueError, UnicodeDecodeError, OverflowError):
        return False
    assert (fields, end) == _fastavro(record_type, body)
    return True


def test_every_envelope_type_of_the_newest_schemas_has_a_compiled_reader() -> None:
    # A schema change that falls back to schemaless_reader would silently lose the speed.
    for fingerprint, reader in avro._READERS.items():
        if reader.newest is None:
            assert reader.compiled is not None, reader.writer


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_TYPES).flatmap(st.from_type))
def test_every_envelope_reads_as_plain_fastavro_reads_it(record: Any) -> None:
    data = _encoded(record)
    if not data:
        return
    body = data[_HEADER:]
    assert _reads_as_fastavro_or_refuses(type(record), body)
    # And decode gives what the fastavro path built from those fields.
    fields, _ = _fastavro(type(record), body)
    try:
        expected = avro._FROM_FIELDS[type(record)](fields)
    except SchemaError as refused:  # a command whose ids break a limit, checked at decode
        with pytest.raises(type(refused)):
            avro.decode(data)
        return
    assert avro.decode(data) == expected


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_TYPES).flatmap(st.from_type), st.data())
def test_a_mutated_body_reads_as_fastavro_reads_it_or_is_refused(record: Any, data: st.DataObject) -> None:
    encoded = _encoded(record)
    if not encoded:
        return
    body = bytearray(encoded[_HEADER:])
    for _ in range(data.draw(st.integers(1, 4))):
        how = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(0, max(len(body) - 1, 0)))
        if how == "flip" and body:
            body[at] = data.draw(st.integers(0, 255))
        elif how == "insert":
            body[at:at] = data.draw(st.binary(min_size=1, max_size=3))
        elif how == "delete" and body:
            del body[at]
        elif how == "truncate":
            del body[at:]
    _reads_as_fastavro_or_refuses(type(record), bytes(body))
    _decodes_or_refuses(encoded[:_HEADER] + bytes(body))


@settings(max_examples=300)
@given(st.sampled_from(_TYPES), st.binary(max_size=120))
def test_random_bytes_read_as_fastavro_reads_them_or_are_refused(record_type: type, body: bytes) -> None:
    _reads_as_fastavro_or_refuses(record_type, body)
    header = avro.MAGIC + avro.CATALOGUE.newest[record_type].fingerprint
    _decodes_or_refuses(header + body)


def _decodes_or_refuses(data: bytes) -> None:
    try:
        avro.decode(data)
    except (DecodeError, SchemaError):  # LimitError, an invalid field value: SchemaError
        pass


def _event_body(**changes: Any) -> bytes:
    fields = dict(event_id="e", command_id="c", correlation_id="k", aggregate_id="a", version=1, type="T",
                  payload=b"{}", timestamp_ms=5, deferred=False, metadata={})
    fields.update(changes)
    return avro.encode(EventEnvelope(**fields))[_HEADER:]


def test_a_valid_record_is_refused_with_trailing_bytes_and_when_cut_short() -> None:
    data = avro.encode(_command())
    with pytest.raises(DecodeError, match="2 trailing bytes"):
        avro.decode(data + b"\x00\x00")
    for end in range(_HEADER, len(data)):
        with pytest.raises(DecodeError, match="corrupt command"):
            avro.decode(data[:end])


def _command() -> CommandEnvelope:
    return CommandEnvelope("c1", "k1", "acct-1", "Deposit", b'{"amount": 5}', 1_700_000_000_000,
                           reply_to="r", metadata={"traceparent": "00-1-2-01"})


def test_what_no_avro_writer_writes_is_refused_though_fastavro_reads_it() -> None:
    reader = _compiled(EventEnvelope)
    good = _event_body()
    assert reader(good, 0)[1] == len(good)
    # The boolean ``deferred`` is the byte before the empty metadata map (the last byte).
    two = good[:-2] + b"\x02" + good[-1:]
    assert _fastavro(EventEnvelope, two)[0]["deferred"] is True  # fastavro: any byte but 0 is true
    with pytest.raises(ValueError, match="boolean byte of 2"):
        reader(two, 0)
    # A negative length of the first string (fastavro refuses it too).
    negative = b"\x01" + good[2:]
    with pytest.raises(ValueError, match="negative length"):
        reader(negative, 0)
    # A varint of more than 64 bits.
    with pytest.raises(OverflowError):
        readers.read_long(b"\xff" * 10 + b"\x01", 0)
    assert readers.read_long(b"\xfe" + b"\xff" * 8 + b"\x01", 0) == (2**63 - 1, 10)
    assert readers.read_long(b"\xff" + b"\xff" * 8 + b"\x01", 0) == (-(2**63), 10)


def _skip(body: bytes, sized: int, longs: int) -> int:
    """The position after ``sized`` leading strings or bytes values and then ``longs`` longs."""
    pos = 0
    for _ in range(sized):
        size, pos = readers.read_long(body, pos)
        pos += size
    for _ in range(longs):
        _, pos = readers.read_long(body, pos)
    return pos


def test_a_union_index_outside_the_union_is_refused() -> None:
    reader = _compiled(CommandEnvelope)
    body = avro.encode(_command())[_HEADER:]
    assert reader(body, 0)[0]["expected_version"] is None
    at = _skip(body, 5, 1)  # command_id .. payload, timestamp_ms: then the expected_version union
    assert body[at] == 0
    for index in (b"\x01", b"\x04", b"\x80\x00"):  # -1 (fastavro: the last branch), 2, a two-byte 0
        with pytest.raises(ValueError, match="no branch"):
            reader(body[:at] + index + body[at + 1:], 0)
    assert _fastavro(CommandEnvelope, body[:at] + b"\x01\x0a" + body[at + 1:])[0]["expected_version"] == 5


def test_arrays_and_maps_in_several_blocks_with_byte_sizes_read_as_fastavro_reads_them() -> None:
    event = EventEnvelope("e", "c", "k", "a", 1, "T", b"{}", 5, False, {})
    reply = ReplyEnvelope("c", "k", "a", "accepted", 2, 5, events=(event, event, event))
    body = avro.encode(reply)[_HEADER:]
    one_event = _event_body()
    at = _skip(body, 4, 2)  # four strings, version and timestamp_ms: then the events array
    assert body[at:at + 1 + 3 * len(one_event) + 1] == b"\x06" + one_event * 3 + b"\x00"
    # The array as a block of 1, then a block of -2 items with its size in bytes, then the end.
    blocks = b"\x02" + one_event + b"\x03" + bytes([(2 * len(one_event)) << 1]) + one_event * 2 + b"\x00"
    rewritten = body[:at] + blocks + body[at + 1 + 3 * len(one_event) + 1:]
    assert _reads_as_fastavro_or_refuses(ReplyEnvelope, rewritten)
    assert len(_compiled(ReplyEnvelope)(rewritten, 0)[0]["events"]) == 3
    # A map in two blocks.
    command = avro.encode(_command())[_HEADER:]
    at = _skip(command, 5, 1) + 3  # the three null unions before metadata
    entry = command[at + 1:-2]  # one key and value, between the count, the end block and reply_key
    two_blocks = command[:at] + b"\x02" + entry + b"\x02" + b"\x02k" + b"\x02v" + b"\x00" + command[-1:]
    fields, _ = _compiled(CommandEnvelope)(two_blocks, 0)
    assert fields["metadata"] == {"traceparent": "00-1-2-01", "k": "v"}
    assert _reads_as_fastavro_or_refuses(CommandEnvelope, two_blocks)


def test_a_block_counting_more_items_than_bytes_left_is_refused_at_once() -> None:
    body = avro.encode(ReplyEnvelope("c", "k", "a", "accepted", 2, 5, events=()))[_HEADER:]
    at = _skip(body, 4, 2)
    huge = body[:at] + b"\xfe\xff\xff\xff\x0f" + body[at + 1:]  # 2**31 - 1 events
    with pytest.raises(EOFError, match="more items than the bytes left"):
        _compiled(ReplyEnvelope)(huge, 0)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "x.F", "fields": [{"name": "f", "type": "double"}]},
        {"type": "record", "name": "x.U", "fields": [{"name": "u", "type": ["string", "long"]}]},
        {"type": "record", "name": "x.L", "fields": [{"name": "d", "type": {"type": "int", "logicalType": "date"}}]},
        {"type": "record", "name": "x.N", "fields": [{"name": "n", "type": {"type": "array", "items": "null"}}]},
        {"type": "record", "name": "x.E", "fields": []},
    ],
)
def test_a_schema_with_a_type_it_does_not_compile_is_left_to_fastavro(schema: dict[str, Any]) -> None:
    parsed = cast(dict[str, Any], parse_schema(schema, named_schemas={}))
    assert readers.compile_reader(parsed) is None
