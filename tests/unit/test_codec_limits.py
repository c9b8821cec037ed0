"""Hostile records at the decode edge: every one is a RecordError, never another exception.

Each case here crashed or could crash a worker before the limits (issue 8, "Hostile input"):
deep JSON raised RecursionError, a lone surrogate id raised UnicodeEncodeError later, a
300 KB command id made replies too large. Decoding now refuses them, so agents dead-letter.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tidings.codec import CATALOGUE, JSON_TYPE, decode, decode_json, decode_record, encode, load_payload, type_registry
from tidings.codec.avro import MAGIC
from tidings.core.limits import MAX_JSON_DEPTH, MAX_PAYLOAD_BYTES
from tidings.core.records import CommandEnvelope
from tidings.core.workflow_records import WorkflowInbox
from tidings.errors import DecodeError, LimitError, RecordError, SchemaError
from tidings.shell.kinds.workflow.codec import decode_inbox
from tidings.shell.runtime.io import Incoming

JSON_HEADERS = {"content-type": b"application/json"}
LONE_SURROGATE = "s-\ud800"
DEEP = 3_000


def deep_json(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def json_command(**fields: Any) -> bytes:
    base: dict[str, Any] = {"command_id": "c-1", "aggregate_id": "a-1", "type": "Deposit", "payload": {"amount": 1}}
    base.update(fields)
    # ensure_ascii: a lone surrogate travels as the \ud800 escape, as a hostile producer sends it.
    return json.dumps(base).encode()


def command_record(value: bytes | None, headers: dict[str, bytes] | None = None) -> CommandEnvelope:
    return decode_record(value, CommandEnvelope, headers=headers, timestamp_ms=7)


def avro_command(**fields: Any) -> bytes:
    base: dict[str, Any] = {
        "command_id": "c-1", "correlation_id": "c-1", "aggregate_id": "a-1",
        "type": "Deposit", "payload": b'{"amount":1}', "timestamp_ms": 7,
    }
    base.update(fields)
    # encode() checks nothing: any producer can write these bytes.
    return encode(CommandEnvelope(**base))


# -- commands: bytes that are no command --------------------------------------------------


@pytest.mark.parametrize("headers", [None, JSON_HEADERS])
def test_a_tombstone_and_an_empty_value_are_decode_errors(headers: dict[str, bytes] | None) -> None:
    with pytest.raises(DecodeError, match="tombstone"):
        command_record(None, headers)
    with pytest.raises(DecodeError):
        command_record(b"", headers)


def test_avro_decode_of_a_tombstone_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="tombstone"):
        decode(None)


@given(st.binary(max_size=200))
def test_random_bytes_are_decode_errors(data: bytes) -> None:
    with pytest.raises(DecodeError):
        command_record(data)
    with pytest.raises(DecodeError):
        command_record(b"\xff" + data, JSON_HEADERS)


@pytest.mark.parametrize("fingerprint", sorted(CATALOGUE.by_fingerprint))
@given(body=st.binary(max_size=120))
def test_random_bodies_after_any_known_header_are_only_record_errors(fingerprint: bytes, body: bytes) -> None:
    try:
        decode(MAGIC + fingerprint + body)
    except RecordError:
        pass


def test_an_avro_string_that_is_not_utf8_is_a_decode_error() -> None:
    data = avro_command(command_id="c-1-marker")
    with pytest.raises(DecodeError, match="corrupt command"):
        decode(data.replace(b"c-1-marker", b"c-1-marke\xff"))


def test_json_nested_thousands_deep_is_a_decode_error_not_a_recursion_error() -> None:
    with pytest.raises(DecodeError, match=f"deeper than {MAX_JSON_DEPTH} levels"):
        command_record(deep_json().encode(), JSON_HEADERS)
    # The same depth inside the payload of an otherwise valid envelope.
    value = b'{"command_id": "c", "aggregate_id": "a", "type": "T", "payload": ' + deep_json().encode() + b"}"
    with pytest.raises(DecodeError, match="deeper than"):
        command_record(value, JSON_HEADERS)


# -- commands: ids and sizes --------------------------------------------------------------


@pytest.mark.parametrize(
    "field", ["command_id", "aggregate_id", "correlation_id", "causation_id", "type"]
)
def test_a_lone_surrogate_in_an_id_is_refused_in_json_and_avro(field: str) -> None:
    with pytest.raises(LimitError, match=rf"{field} 's-\\ud800' is not valid UTF-8"):
        command_record(json_command(**{field: LONE_SURROGATE}), JSON_HEADERS)
    # Python's Avro writer cannot even encode it: only a JSON producer can send one.
    with pytest.raises(SchemaError, match="cannot encode"):
        avro_command(**{field: LONE_SURROGATE})


@pytest.mark.parametrize("field", ["command_id", "aggregate_id", "correlation_id", "causation_id"])
def test_a_300_kb_id_is_refused_in_json_and_avro(field: str) -> None:
    huge = "c" * 300_000
    with pytest.raises(LimitError, match=rf"{field} 'c{{40}}'\.\.\. is 300000 bytes of UTF-8; the limit is 255"):
        command_record(json_command(**{field: huge}), JSON_HEADERS)
    with pytest.raises(LimitError, match=f"{field} .* is 300000 bytes"):
        command_record(avro_command(**{field: huge}))


@pytest.mark.parametrize("field", ["command_id", "aggregate_id", "correlation_id", "type"])
def test_an_empty_id_in_avro_is_refused(field: str) -> None:
    with pytest.raises(LimitError, match=f"{field} must not be empty"):
        command_record(avro_command(**{field: ""}))


@pytest.mark.parametrize("reply_to", ["not a topic!", "..", "", "x" * 250])
def test_a_reply_to_that_is_no_topic_name_is_refused(reply_to: str) -> None:
    with pytest.raises(LimitError, match="is not a Kafka topic name"):
        command_record(avro_command(reply_to=reply_to))
    with pytest.raises(LimitError, match="is not a Kafka topic name"):
        command_record(json_command(reply_to=reply_to), JSON_HEADERS)


def test_a_payload_over_the_limit_is_refused_in_json_and_avro() -> None:
    with pytest.raises(LimitError, match=f"the limit is {MAX_PAYLOAD_BYTES}"):
        command_record(avro_command(payload=b'"' + b"x" * MAX_PAYLOAD_BYTES + b'"'))
    with pytest.raises(LimitError, match=f"the limit is {MAX_PAYLOAD_BYTES}"):
        command_record(json_command(payload="x" * MAX_PAYLOAD_BYTES), JSON_HEADERS)


def test_metadata_with_a_lone_surrogate_or_over_the_limit_is_refused() -> None:
    with pytest.raises(LimitError, match="metadata value"):
        command_record(json_command(metadata={"k": LONE_SURROGATE}), JSON_HEADERS)
    with pytest.raises(LimitError, match="metadata is more than"):
        command_record(avro_command(metadata={f"k{i}": "v" * 1_000 for i in range(20)}))


def test_a_valid_command_at_the_limits_decodes() -> None:
    longest = "é" * 127  # 254 bytes
    command = command_record(avro_command(command_id=longest, aggregate_id=longest, reply_to="x" * 249))
    assert (command.command_id, command.reply_to) == (longest, "x" * 249)


# -- payloads ---------------------------------------------------------------------------------


class Note(BaseModel):
    body: Any


REGISTRY = type_registry([Note])


@pytest.mark.parametrize("type_name", [JSON_TYPE, "Note"])
def test_a_payload_nested_thousands_deep_is_a_limit_error(type_name: str) -> None:
    payload = deep_json() if type_name == JSON_TYPE else '{"body": ' + deep_json() + "}"
    with pytest.raises(LimitError, match=f"payload nests arrays and objects deeper than {MAX_JSON_DEPTH}"):
        load_payload(type_name, payload.encode(), REGISTRY)


def test_a_payload_at_the_depth_limit_validates_with_pydantic() -> None:
    # 63 levels inside the model's own object: 64 in all.
    note = load_payload("Note", ('{"body": ' + deep_json(MAX_JSON_DEPTH - 1) + "}").encode(), REGISTRY)
    depth, value = 0, note.body
    while isinstance(value, list):
        depth, value = depth + 1, value[0] if value else None
    assert depth == MAX_JSON_DEPTH - 1


@pytest.mark.parametrize("type_name", [JSON_TYPE, "Note"])
def test_a_payload_over_the_size_limit_is_a_limit_error(type_name: str) -> None:
    payload = json.dumps({"body": "x" * MAX_PAYLOAD_BYTES}).encode()
    with pytest.raises(LimitError, match=f"the limit is {MAX_PAYLOAD_BYTES}"):
        load_payload(type_name, payload, REGISTRY)


def test_a_validation_error_that_lists_thousands_of_items_is_cut() -> None:
    class Amounts(BaseModel):
        amounts: list[int]

    payload = json.dumps({"amounts": ["x" * 50] * 5_000}).encode()
    with pytest.raises(SchemaError) as caught:
        load_payload("Amounts", payload, type_registry([Amounts]))
    assert len(str(caught.value).encode()) <= 4096
    assert "5000 validation errors" in str(caught.value)


# -- workflow inbox ---------------------------------------------------------------------------


def inbox_record(value: bytes | None, headers: dict[str, bytes] | None = None) -> Incoming:
    return Incoming("app.workflow.w.inbox", 0, 9, b"k", value, headers or {}, 1_000)


def avro_inbox(**fields: Any) -> bytes:
    base: dict[str, Any] = {"request_id": "r-1", "instance_id": "i-1", "kind": "start", "timestamp_ms": 1}
    base.update(fields)
    return encode(WorkflowInbox(**base))


def json_inbox(**fields: Any) -> bytes:
    base: dict[str, Any] = {"kind": "signal", "instance_id": "i-1", "signal": "go", "payload": True}
    base.update(fields)
    return json.dumps(base).encode()


@pytest.mark.parametrize("headers", [None, JSON_HEADERS])
def test_an_inbox_tombstone_empty_value_or_random_bytes_are_decode_errors(headers: dict[str, bytes] | None) -> None:
    for value in (None, b"", b"\x00\x01random", b"\xff\xfe"):
        with pytest.raises(DecodeError):
            decode_inbox(inbox_record(value, headers))


def test_an_inbox_json_nested_thousands_deep_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="deeper than"):
        decode_inbox(inbox_record(deep_json().encode(), JSON_HEADERS))
    with pytest.raises(DecodeError, match="deeper than"):
        decode_inbox(inbox_record(json_inbox(payload=json.loads(deep_json(200))), JSON_HEADERS))


@pytest.mark.parametrize("field", ["instance_id", "request_id", "signal"])
def test_an_inbox_id_with_a_lone_surrogate_is_refused(field: str) -> None:
    with pytest.raises(LimitError, match="is not valid UTF-8"):
        decode_inbox(inbox_record(json_inbox(**{field: LONE_SURROGATE}), JSON_HEADERS))


@pytest.mark.parametrize("field", ["instance_id", "request_id", "signal"])
def test_a_300_kb_inbox_id_is_refused(field: str) -> None:
    with pytest.raises(LimitError, match="is 300000 bytes"):
        decode_inbox(inbox_record(avro_inbox(**{field: "i" * 300_000})))


def test_an_inbox_with_an_empty_instance_id_or_signal_name_is_refused() -> None:
    with pytest.raises(LimitError, match="instance_id must not be empty"):
        decode_inbox(inbox_record(avro_inbox(instance_id="")))
    with pytest.raises(LimitError, match="a signal request needs the signal's name"):
        decode_inbox(inbox_record(avro_inbox(kind="signal", signal=None)))


def test_an_inbox_reply_to_that_is_no_topic_name_or_a_huge_payload_is_refused() -> None:
    with pytest.raises(LimitError, match="reply_to 'not a topic!' is not a Kafka topic name"):
        decode_inbox(inbox_record(avro_inbox(reply_to="not a topic!")))
    with pytest.raises(LimitError, match=f"the limit is {MAX_PAYLOAD_BYTES}"):
        decode_inbox(inbox_record(avro_inbox(payload=b"1" * (MAX_PAYLOAD_BYTES + 1))))


def test_a_json_inbox_with_the_longest_instance_id_and_no_request_id_decodes() -> None:
    # The default request id adds "{kind}:" and ":{timestamp_ms}" to the instance id.
    longest = "i" * 255
    inbox = decode_inbox(inbox_record(json_inbox(instance_id=longest, timestamp_ms=2**63 - 1), JSON_HEADERS))
    assert inbox.request_id == f"signal:{longest}:{2**63 - 1}"


def test_a_valid_inbox_record_still_decodes() -> None:
    inbox = decode_inbox(inbox_record(avro_inbox(payload=b'"ABC"', reply_to="app.workflow.w.replies")))
    assert (inbox.instance_id, inbox.payload, inbox.reply_to) == ("i-1", b'"ABC"', "app.workflow.w.replies")
