"""Avro single-object envelopes: round trips, old schema versions, garbage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.codec import CATALOGUE, decode, decode_as, encode
from tidings.codec.avro import MAGIC, load_catalogue, schema_fingerprint
from tidings.core.records import CommandEnvelope, DeadLetter, EventEnvelope, ReplyEnvelope
from tidings.core.limits import check_command
from tidings.errors import DecodeError, LimitError, SchemaError

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "avro"

longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
texts = st.text(max_size=20)
string_maps = st.dictionaries(texts, texts, max_size=3)

commands = st.builds(
    CommandEnvelope,
    command_id=texts, correlation_id=texts, aggregate_id=texts, type=texts,
    payload=st.binary(max_size=40), timestamp_ms=longs,
    expected_version=st.none() | longs, reply_to=st.none() | texts,
    causation_id=st.none() | texts, metadata=string_maps,
)
events = st.builds(
    EventEnvelope,
    event_id=texts, command_id=texts, correlation_id=texts, aggregate_id=texts,
    version=longs, type=texts, payload=st.binary(max_size=40), timestamp_ms=longs,
    deferred=st.booleans(), metadata=string_maps,
)
replies = st.builds(
    ReplyEnvelope,
    command_id=texts, correlation_id=texts, aggregate_id=texts,
    status=st.sampled_from(["accepted", "ignored", "conflict", "rejected"]),
    version=longs, timestamp_ms=longs,
    events=st.lists(events, max_size=3).map(tuple),
    expected_version=st.none() | longs, reason=st.none() | texts,
)
dead_letters = st.builds(
    DeadLetter,
    source_topic=texts, partition=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    offset=longs, key=st.none() | st.binary(max_size=20), value=st.none() | st.binary(max_size=40),
    reason=texts, error_type=texts, timestamp_ms=longs, headers=string_maps,
    original_size=st.none() | longs, truncated=st.booleans(),
)


def _breaks_a_limit(record: object) -> bool:
    if not isinstance(record, CommandEnvelope):
        return False
    try:
        check_command(record)
    except LimitError:
        return True
    return False


@given(st.one_of(commands, events, replies, dead_letters))
def test_every_envelope_round_trips(record: object) -> None:
    data = encode(record)  # type: ignore[arg-type]
    assert data[:2] == MAGIC
    if _breaks_a_limit(record):
        # Any producer writes commands, so decoding checks their limits (an empty id, a
        # reply_to that is no topic name, ...); test_codec_limits.py has each case.
        with pytest.raises(LimitError):
            decode(data)
    else:
        assert decode(data) == record


def test_header_carries_the_newest_schema_fingerprint() -> None:
    record = EventEnvelope("e", "c", "k", "a", 1, "T", b"{}", 0)
    assert encode(record)[2:10] == CATALOGUE.newest[EventEnvelope].fingerprint


def test_fingerprint_is_the_little_endian_crc_64_avro_of_the_specification() -> None:
    # Avro specification test vector: fingerprint64('"int"') == 0x7275d51a3f395c8f.
    assert schema_fingerprint("int") == (0x7275D51A3F395C8F).to_bytes(8, "little")


def test_golden_command_written_with_v1_reads_with_the_new_default() -> None:
    # Written with schemas/command.v1.avsc, before causation_id existed; never regenerate.
    record = decode((GOLDEN / "command.v1.bin").read_bytes())
    assert record == CommandEnvelope(
        command_id="cmd-0001",
        correlation_id="corr-0001",
        aggregate_id="account-42",
        type="Deposit",
        payload=b'{"amount":125}',
        timestamp_ms=1767225600000,
        expected_version=3,
        reply_to="bank.aggregate.account.replies",
        causation_id=None,
        metadata={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )


def test_golden_dead_letter_written_with_v1_reads_as_not_truncated_of_unknown_size() -> None:
    # Written with schemas/deadletter.v1.avsc, before letters were bounded; never regenerate.
    record = decode((GOLDEN / "deadletter.v1.bin").read_bytes())
    assert record == DeadLetter(
        source_topic="bank.aggregate.account.commands",
        partition=3,
        offset=1207,
        key=b"account-42",
        value=b'{"command_id": "c-1", "aggregate_id": [',
        reason="not a JSON envelope: Expecting value: line 1 column 42 (char 41)",
        error_type="DecodeError",
        timestamp_ms=1767225600000,
        headers={"content-type": "application/json"},
        original_size=None,
        truncated=False,
    )


def test_every_shipped_schema_version_is_in_the_catalogue() -> None:
    schemas = Path(__file__).resolve().parents[2] / "schemas"
    prints = {schema_fingerprint(json.loads(p.read_text())) for p in schemas.glob("*.avsc")}
    assert prints == set(CATALOGUE.by_fingerprint)
    assert {(v.kind, v.version) for v in CATALOGUE.newest.values()} == {
        ("command", 3), ("event", 1), ("reply", 1), ("deadletter", 2),
        ("orchestrationevent", 1), ("orchestrationactions", 1), ("orchestrationoutcome", 1),
        ("workflowinbox", 6), ("workflowjournal", 8), ("workflowoutcome", 2),
        ("workflowreply", 2), ("workflowstatus", 2),
        ("sagajournal", 1), ("sagainbox", 1),
    }


def test_loading_the_catalogue_again_gives_the_same_fingerprints() -> None:
    assert set(load_catalogue().by_fingerprint) == set(CATALOGUE.by_fingerprint)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "magic"),
        (b"hello world, not avro", "magic"),
        (b'{"command_id": "x"}', "content-type: application/json"),
        (MAGIC + b"\x00" * 8 + b"body", "unknown writer schema fingerprint"),
    ],
)
def test_bytes_that_are_no_known_envelope_raise_decode_error(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        decode(data)


def test_a_truncated_body_raises_decode_error() -> None:
    data = encode(CommandEnvelope("c", "k", "a", "T", b'{"x":1}', 1, metadata={"a": "b"}))
    with pytest.raises(DecodeError, match="corrupt command"):
        decode(data[:-5])


def test_trailing_bytes_raise_decode_error() -> None:
    data = encode(CommandEnvelope("c", "k", "a", "T", b"{}", 1))
    with pytest.raises(DecodeError, match="trailing"):
        decode(data + b"\x00")


@given(st.binary(max_size=60))
def test_arbitrary_bytes_after_a_valid_header_never_raise_anything_but_record_errors(body: bytes) -> None:
    header = MAGIC + CATALOGUE.newest[ReplyEnvelope].fingerprint
    try:
        decode(header + body)
    except (DecodeError, SchemaError):
        pass


def test_decode_as_refuses_an_envelope_of_another_type() -> None:
    data = encode(EventEnvelope("e", "c", "k", "a", 1, "T", b"{}", 0))
    with pytest.raises(SchemaError, match="expected a CommandEnvelope, got a EventEnvelope"):
        decode_as(data, CommandEnvelope)
    assert isinstance(decode_as(data, EventEnvelope), EventEnvelope)


def test_an_unknown_reply_status_is_a_schema_error() -> None:
    data = encode(ReplyEnvelope("c", "k", "a", "accepted", 1, 0))
    # Same length as "accepted", so the body stays well-formed.
    tampered = data.replace(b"accepted", b"accepteX")
    with pytest.raises(SchemaError, match="reply status"):
        decode(tampered)


def test_a_field_that_does_not_fit_the_schema_is_a_schema_error_on_encode() -> None:
    with pytest.raises(SchemaError, match="cannot encode CommandEnvelope"):
        encode(CommandEnvelope("c", "k", "a", "T", b"{}", 1, metadata={"n": 1}))  # type: ignore[dict-item]


def test_encoding_something_else_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a tidings envelope"):
        encode({"command_id": "c"})  # type: ignore[arg-type]


@pytest.mark.parametrize("record_type", [CommandEnvelope, EventEnvelope, ReplyEnvelope, DeadLetter])
def test_the_newest_schema_has_exactly_the_record_fields(record_type: type) -> None:
    schema = CATALOGUE.newest[record_type].parsed
    assert [f["name"] for f in schema["fields"]] == list(record_type.__slots__)


def test_golden_command_written_with_v2_reads_without_a_reply_key() -> None:
    # Written with schemas/command.v2.avsc, before reply_key existed; never regenerate.
    record = decode((GOLDEN / "command.v2.bin").read_bytes())
    assert isinstance(record, CommandEnvelope)
    assert record.reply_key is None
    assert record.reply_record_key == "cmd-0002"
    assert (record.command_id, record.causation_id, record.reply_to) == ("cmd-0002", "evt-1", "bank.replies")


def test_a_command_keeps_its_reply_key_and_its_reply_is_keyed_by_it() -> None:
    command = CommandEnvelope(
        command_id="wf/o-1/3", correlation_id="wf/o-1/3", aggregate_id="alice", type="Withdraw",
        payload=b"{}", timestamp_ms=1, reply_to="bank.workflow.pay.replies", reply_key="o-1",
    )
    assert decode(encode(command)) == command
    assert command.reply_record_key == "o-1"
