"""JSON envelopes and the content-type switch between JSON and Avro."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.codec import decode_json, decode_record, encode, encode_json
from tidings.core.records import CommandEnvelope, DeadLetter, EventEnvelope, ReplyEnvelope
from tidings.errors import DecodeError, SchemaError

JSON_HEADERS = [("content-type", b"application/json")]


def command_json(**fields: Any) -> bytes:
    base: dict[str, Any] = {
        "command_id": "c-1",
        "aggregate_id": "acct-7",
        "type": "Deposit",
        "payload": {"amount": 10, "note": "ünï"},
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


def test_a_json_command_gets_its_payload_as_compact_json_bytes() -> None:
    record = decode_json(command_json(), CommandEnvelope, timestamp_ms=1_700)
    assert record == CommandEnvelope(
        command_id="c-1",
        correlation_id="c-1",
        aggregate_id="acct-7",
        type="Deposit",
        payload='{"amount":10,"note":"ünï"}'.encode(),
        timestamp_ms=1_700,
    )


def test_every_optional_field_of_a_json_command_is_read() -> None:
    record = decode_json(
        command_json(
            correlation_id="corr", timestamp_ms=5, expected_version=3, reply_to="r",
            causation_id="cause", metadata={"traceparent": "00-x"},
        ),
        CommandEnvelope,
        timestamp_ms=1_700,
    )
    assert (record.correlation_id, record.timestamp_ms, record.expected_version) == ("corr", 5, 3)
    assert (record.reply_to, record.causation_id, record.metadata) == ("r", "cause", {"traceparent": "00-x"})


def test_explicit_nulls_count_as_absent() -> None:
    record = decode_json(command_json(correlation_id=None, metadata=None), CommandEnvelope, timestamp_ms=1)
    assert (record.correlation_id, record.metadata) == ("c-1", {})


def test_a_json_command_without_command_id_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="'command_id' must be a non-empty string"):
        decode_json(command_json(command_id=...), CommandEnvelope, timestamp_ms=1)


def test_a_json_command_without_any_timestamp_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="timestamp_ms"):
        decode_json(command_json(), CommandEnvelope)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"aggregate_id": ...}, "aggregate_id"),
        ({"payload": ...}, "payload"),
        ({"expected_version": "3"}, "expected_version"),
        ({"expected_version": True}, "expected_version"),
        ({"metadata": {"a": 1}}, "metadata"),
        ({"type": 7}, "type"),
        ({"payload": float("nan")}, "CommandEnvelope"),
    ],
)
def test_missing_or_mistyped_fields_are_schema_errors(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(SchemaError, match=reason):
        decode_json(command_json(**fields), CommandEnvelope, timestamp_ms=1)


@pytest.mark.parametrize("data", [b"", b"{not json", b"[1, 2]", b'"text"', b"\xff\xfe"])
def test_bytes_that_are_no_json_object_are_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError, match="not a JSON envelope"):
        decode_json(data, CommandEnvelope, timestamp_ms=1)


def test_a_json_reply_with_events_round_trips_through_encode_json() -> None:
    reply = ReplyEnvelope(
        "c", "k", "a", "accepted", 2, 9,
        events=(EventEnvelope("e", "c", "k", "a", 2, "Deposited", b'{"amount":10}', 9, deferred=True),),
    )
    assert json.loads(encode_json(reply))["events"][0]["payload"] == {"amount": 10}
    assert decode_json(encode_json(reply), ReplyEnvelope) == reply


def test_a_json_reply_with_an_unknown_status_is_a_schema_error() -> None:
    data = json.dumps({"command_id": "c", "aggregate_id": "a", "status": "maybe", "version": 1, "timestamp_ms": 1})
    with pytest.raises(SchemaError, match="status"):
        decode_json(data.encode(), ReplyEnvelope)


@given(
    key=st.none() | st.binary(max_size=10),
    value=st.none() | st.binary(max_size=10),
    headers=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
)
def test_a_dead_letter_round_trips_through_json_with_base64_bytes(
    key: bytes | None, value: bytes | None, headers: dict[str, str]
) -> None:
    letter = DeadLetter("t", 0, 7, key, value, "bad", "DecodeError", 3, headers)
    assert decode_json(encode_json(letter), DeadLetter) == letter


def test_decode_record_reads_json_when_the_header_says_so() -> None:
    record = decode_record(
        command_json(), CommandEnvelope,
        headers=[("Content-Type", b"application/json; charset=utf-8")], timestamp_ms=4,
    )
    assert record.command_id == "c-1" and record.timestamp_ms == 4


def test_decode_record_reads_avro_without_a_header_and_with_a_mapping_of_headers() -> None:
    command = CommandEnvelope("c", "k", "a", "T", b"{}", 1)
    assert decode_record(encode(command), CommandEnvelope) == command
    assert decode_record(encode(command), CommandEnvelope, headers={"trace": "x"}) == command


def test_decode_record_refuses_tombstones_and_unknown_content_types() -> None:
    with pytest.raises(DecodeError, match="tombstone"):
        decode_record(None, CommandEnvelope, headers=JSON_HEADERS)
    with pytest.raises(DecodeError, match="unsupported content-type 'text/plain'"):
        decode_record(b"x", CommandEnvelope, headers=[("content-type", b"text/plain")])
