"""The compiled Avro writers write exactly what ``fastavro.schemaless_writer`` writes.

``codec.avro.encode`` no longer calls fastavro on the hot path: each envelope type has a
writer compiled from its schema (``codec.writers``). The reference here is the path it
replaced: the record's field dict (``avro._TO_FIELDS``) written by plain
``fastavro.schemaless_writer`` with the newest parsed schema, after the same header.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any, cast

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.codec import avro, writers
from tidings.core.records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from tidings.core.workflow.journal import JOURNAL_TYPES
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.errors import SchemaError

_FASTAVRO_ERRORS = (TypeError, ValueError, AttributeError, OverflowError)


def _reference(record: Any) -> bytes:
    schema = avro.CATALOGUE.newest[type(record)]
    out = BytesIO()
    out.write(avro.MAGIC + schema.fingerprint)
    schemaless_writer(out, schema.parsed, avro._TO_FIELDS[type(record)](record))
    return out.getvalue()


def _same_as_fastavro(record: Any) -> None:
    try:
        expected = _reference(record)
    except _FASTAVRO_ERRORS:
        # What fastavro refuses (a long beyond 64 bits, an int in a nullable int field
        # beyond 32 bits, ...) encode refuses as well.
        with pytest.raises(SchemaError, match=f"cannot encode {type(record).__name__}"):
            avro.encode(record)
        return
    assert avro.encode(record) == expected


def test_every_envelope_type_has_a_compiled_writer() -> None:
    # A schema change that falls back to schemaless_writer would silently lose the speed.
    for record_type, encoder in avro._ENCODERS.items():
        assert encoder.__name__ in ("encode_attributes", "encode_fields", "encode_journal_entry"), record_type


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(), st.sampled_from(sorted(JOURNAL_TYPES.values(), key=lambda t: t.__name__)).flatmap(st.from_type))
def test_a_journal_entry_of_every_record_type_encodes_to_the_bytes_of_plain_fastavro(
        instance_id: str, record: Any) -> None:
    _same_as_fastavro(WorkflowJournalEntry(instance_id, record))


def test_every_journal_record_type_has_a_writer_of_its_own() -> None:
    # A journal entry of a type without one is written from the dict of all 32 fields.
    journal = avro.CATALOGUE.newest[WorkflowJournalEntry]
    assert set(avro._journal_writers(journal)) == set(JOURNAL_TYPES.values())


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(avro.CATALOGUE.newest, key=lambda t: t.__name__)).flatmap(st.from_type))
def test_every_envelope_encodes_to_the_bytes_of_plain_fastavro(record: Any) -> None:
    _same_as_fastavro(record)


small_longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=300)
@given(
    st.builds(
        CommandEnvelope,
        command_id=st.text(), correlation_id=st.text(), aggregate_id=st.text(), type=st.text(),
        payload=st.binary(max_size=300), timestamp_ms=small_longs,
        expected_version=st.none() | small_longs, reply_to=st.none() | st.text(max_size=200),
        causation_id=st.none() | st.text(), metadata=st.dictionaries(st.text(), st.text(max_size=100), max_size=70),
        reply_key=st.none() | st.text(),
    )
)
def test_long_strings_maps_and_payloads_have_multi_byte_lengths_like_fastavro(record: CommandEnvelope) -> None:
    # Lengths and counts of 64 and more take two varint bytes; text beyond ASCII is longer in UTF-8.
    _same_as_fastavro(record)


@pytest.mark.parametrize(
    "value",
    [None, 1.5, "7", b"7", 2**63, -(2**63) - 1, True, float("nan")],
)
def test_a_long_field_of_a_wrong_type_is_refused_or_written_like_fastavro(value: Any) -> None:
    # fastavro truncates what has __int__ (a float) and refuses the rest; so does encode.
    event = EventEnvelope("e", "c", "k", "a", value, "T", b"{}", 0)
    _same_as_fastavro(event)


@pytest.mark.parametrize("value", [1, b"x", 2**63, True, 1.0])
def test_a_nullable_long_of_a_wrong_type_is_refused_like_fastavro(value: Any) -> None:
    command = CommandEnvelope("c", "k", "a", "T", b"{}", 1, expected_version=value)
    _same_as_fastavro(command)


def test_a_reply_with_many_events_writes_one_block() -> None:
    event = EventEnvelope("e", "c", "k", "a", 1, "T", b"{}", 0)
    reply = ReplyEnvelope("c", "k", "a", "accepted", 70, 0, events=(event,) * 70)
    _same_as_fastavro(reply)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "x.F", "fields": [{"name": "f", "type": "double"}]},
        {"type": "record", "name": "x.U", "fields": [{"name": "u", "type": ["string", "long"]}]},
        {"type": "record", "name": "x.L", "fields": [{"name": "d", "type": {"type": "int", "logicalType": "date"}}]},
    ],
)
def test_a_schema_with_a_type_it_does_not_compile_is_left_to_fastavro(schema: dict[str, Any]) -> None:
    parsed = cast(dict[str, Any], parse_schema(schema, named_schemas={}))
    assert writers.compile_writer(parsed, {parsed["name"]: writers.ITEMS}) is None
