"""Outcomes and replies in Avro or JSON: written either way, read either way by the first byte."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from tidings import App, Cancelled, ErrorKind, Faulted, Finished, StepCause, StepError
from tidings.codec import avro
from tidings.codec.answers import (
    JSON_HEADERS,
    decode_outcome_record,
    decode_reply,
    encode_answer,
    is_json,
    reply_as_json,
)
from tidings.core.records import EventEnvelope, ReplyEnvelope
from tidings.core.workflow import Outcome, WorkflowContext
from tidings.core.workflow_records import WorkflowOutcomeRecord, WorkflowReply, WorkflowStatusRecord
from tidings.errors import DecodeError, SchemaError
from tidings.shell.kinds.workflow.codec import decode_outcome, outcome_fields_of, outcome_record, reply_record
from tidings.shell.runtime.requester import _decode_answer

AT = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
BOOM = StepError(ErrorKind.ATTEMPTS_EXHAUSTED, "RuntimeError: boom", "RuntimeError")

COMMAND_REPLY = ReplyEnvelope(
    command_id="c-1",
    correlation_id="corr-1",
    aggregate_id="acct-7",
    status="accepted",
    version=3,
    timestamp_ms=1_700,
    events=(
        EventEnvelope(
            event_id="e-1", command_id="c-1", correlation_id="corr-1", aggregate_id="acct-7",
            version=3, type="Deposited", payload=b'{"amount":10}', timestamp_ms=1_700,
        ),
    ),
)
WORKFLOW_REPLY = WorkflowReply(
    request_id="r-1", instance_id="order-17", answer="status", timestamp_ms=1_700,
    status="FAULTED", outcome="faulted", error=BOOM,
)


def enrich_handle() -> Any:
    app = App("answers", partitions=2)

    @app.workflow("enrich")
    async def enrich(ctx: WorkflowContext, order: str) -> tuple[int, datetime]:
        return 42, await ctx.now()

    return enrich


@pytest.mark.parametrize("outcome", [Finished((42, AT)), Faulted(BOOM), Cancelled()])
def test_a_json_outcome_record_is_plain_json_and_reads_back_as_the_same_outcome(outcome: Outcome) -> None:
    enrich = enrich_handle()
    fields = outcome_fields_of(outcome, enrich.definition)
    record = outcome_record("t", 1, "enrich", "order-17", fields, 1_700_000_000_000, as_json=True)
    assert record.headers == JSON_HEADERS and record.partition == 1 and record.key == b"order-17"
    assert record.value is not None
    shown = json.loads(record.value)  # what kcat prints: no Avro, nothing base64
    assert shown["instance_id"] == "order-17" and shown["workflow"] == "enrich"
    assert shown["outcome"] == outcome_fields_of(outcome, enrich.definition)["outcome"]
    assert shown["at"] == 1_700_000_000_000
    if isinstance(outcome, Finished):
        assert shown["result"] == [42, "2024-05-01T12:30:00Z"] and shown["error"] is None
    if isinstance(outcome, Faulted):
        assert shown["error"] == {"kind": "attempts_exhausted", "message": "RuntimeError: boom",
                                  "type": "RuntimeError"}
    assert decode_outcome(record.value, enrich.definition) == ("order-17", outcome)


@pytest.mark.parametrize("outcome", [Finished((42, AT)), Faulted(BOOM), Cancelled()])
def test_both_forms_of_an_outcome_record_read_back_as_the_same_record(outcome: Outcome) -> None:
    enrich = enrich_handle()
    fields = outcome_fields_of(outcome, enrich.definition)
    avro_value = outcome_record("t", 0, "enrich", "o-1", fields, 5, as_json=False).value
    json_value = outcome_record("t", 0, "enrich", "o-1", fields, 5, as_json=True).value
    assert avro_value is not None and json_value is not None
    assert avro_value[:2] == b"\xc3\x01" and not is_json(avro_value) and is_json(json_value)
    assert decode_outcome_record(avro_value) == decode_outcome_record(json_value)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_faulted_outcome_keeps_its_causes_in_either_form(as_json: bool) -> None:
    caused = StepError(ErrorKind.NOT_RETRYABLE, "RuntimeError: boom", "RuntimeError",
                       (StepCause("ValueError", "bad"), StepCause("KeyError", "'k'")))
    enrich = enrich_handle()
    fields = outcome_fields_of(Faulted(caused), enrich.definition)
    record = outcome_record("t", 0, "enrich", "o-1", fields, 5, as_json=as_json)
    assert record.value is not None
    if as_json:
        assert json.loads(record.value)["error"]["causes"] == [
            {"type": "ValueError", "message": "bad"}, {"type": "KeyError", "message": "'k'"}]
    assert decode_outcome(record.value, enrich.definition) == ("o-1", Faulted(caused))


def test_a_finished_null_result_reads_back_from_json() -> None:
    record = WorkflowOutcomeRecord("o-1", "enrich", "finished", 5, result="null")
    back = decode_outcome_record(encode_answer(record, as_json=True))
    # null inline reads back as "no result", which a finished outcome reads as null.
    assert back.outcome == "finished" and back.result in (None, "null")


def test_a_hand_written_json_outcome_with_leading_whitespace_is_read() -> None:
    value = b'\n  {"instance_id": "o-2", "workflow": "enrich", "outcome": "cancelled", "at": 9}'
    assert decode_outcome_record(value) == WorkflowOutcomeRecord("o-2", "enrich", "cancelled", 9)


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (b"{not json", DecodeError),
        (b"[1, 2]", DecodeError),
        (b'{"instance_id": "o", "workflow": "w", "outcome": "exploded", "at": 1}', SchemaError),
        (b'{"instance_id": 7, "workflow": "w", "outcome": "finished", "at": 1}', SchemaError),
        (b'{"instance_id": "o", "workflow": "w", "outcome": "faulted", "at": 1, "error": "boom"}', SchemaError),
        (b'{"instance_id": "o", "workflow": "w", "outcome": "faulted", "at": 1, "error": {"kind": "nope"}}',
         SchemaError),
        (b'{"instance_id": "o", "workflow": "w", "outcome": "finished", "at": 1, "result": NaN}', SchemaError),
        (b'{"instance_id": "o", "workflow": "w", "outcome": "faulted", "at": 1, '
         b'"error": {"message": "m", "causes": "boom"}}', SchemaError),
        (b'{"instance_id": "o", "workflow": "w", "outcome": "faulted", "at": 1, '
         b'"error": {"message": "m", "causes": [{"type": 7}]}}', SchemaError),
        (b"{" + b'"a":[' * 200 + b"]" * 200 + b"}", DecodeError),
        (b"plain bytes", DecodeError),
    ],
)
def test_a_bad_outcome_record_of_either_form_is_a_record_error(value: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode_outcome_record(value)


def test_an_avro_outcome_is_still_read_when_it_is_avro_of_another_type() -> None:
    with pytest.raises(SchemaError):
        decode_outcome_record(avro.encode(WorkflowStatusRecord("o", "w", "RUNNING", 1)))


def test_a_json_command_reply_and_a_json_workflow_reply_each_read_back_from_one_replies_topic() -> None:
    for reply in (COMMAND_REPLY, WORKFLOW_REPLY):
        value = encode_answer(reply, as_json=True)
        assert value.startswith(b"{")
        assert decode_reply(value) == reply
        assert decode_reply(encode_answer(reply, as_json=False)) == reply
    shown = json.loads(encode_answer(COMMAND_REPLY, as_json=True))
    assert shown["events"][0]["payload"] == {"amount": 10}  # inline, not base64
    shown = json.loads(encode_answer(WORKFLOW_REPLY, as_json=True))
    assert shown["answer"] == "status" and shown["error"]["kind"] == "attempts_exhausted"


def test_the_clients_reply_reader_keys_json_replies_like_avro_ones() -> None:
    assert _decode_answer(encode_answer(COMMAND_REPLY, as_json=True)) == ("command/c-1", COMMAND_REPLY)
    assert _decode_answer(encode_answer(WORKFLOW_REPLY, as_json=True)) == ("workflow/r-1", WORKFLOW_REPLY)
    # Another Avro record on a replies topic concerns nobody; a JSON one that is no reply is bad.
    assert _decode_answer(avro.encode(WorkflowStatusRecord("o", "w", "RUNNING", 1))) is None
    with pytest.raises(SchemaError, match="neither"):
        decode_reply(b'{"instance_id": "o-1"}')


def test_a_workflow_reply_record_is_json_with_its_header_only_for_a_json_request() -> None:
    as_avro = reply_record("app.replies", "r-1", "o-1", "accepted", 5)
    as_json = reply_record("app.replies", "r-1", "o-1", "accepted", 5, as_json=True)
    assert as_avro.headers == () and as_avro.value is not None and as_avro.value[:2] == b"\xc3\x01"
    assert as_json.headers == JSON_HEADERS and as_json.key == b"r-1" and as_json.value is not None
    assert json.loads(as_json.value) == {
        "request_id": "r-1", "instance_id": "o-1", "answer": "accepted", "timestamp_ms": 5,
        "status": None, "outcome": None, "result": None, "error": None, "reason": None,
    }


def test_a_stored_avro_verdict_is_given_to_a_json_repeat_as_json() -> None:
    stored = avro.encode(COMMAND_REPLY)
    assert decode_reply(reply_as_json(stored)) == COMMAND_REPLY
    assert reply_as_json(stored).startswith(b"{")


def test_a_json_command_may_name_the_key_of_its_reply() -> None:
    from tidings.codec import decode_json
    from tidings.core.records import CommandEnvelope

    value = json.dumps({"command_id": "c-9", "aggregate_id": "a", "type": "Add", "payload": {},
                        "reply_to": "mine.replies", "reply_key": "caller-7"}).encode()
    command = decode_json(value, CommandEnvelope, timestamp_ms=1)
    assert command.reply_key == "caller-7" and command.reply_record_key == "caller-7"
    with pytest.raises(SchemaError, match="reply_key"):
        decode_json(value.replace(b'"caller-7"', b"7"), CommandEnvelope, timestamp_ms=1)


def test_a_json_start_is_journaled_and_replayed_so_its_outcome_is_json_after_a_restart() -> None:
    from tidings.core.workflow import Start, Started, WorkflowInstance, define_workflow

    async def body(ctx: WorkflowContext, name: str) -> str:
        return await ctx.wait_signal("go", type=str)

    definition = define_workflow("w", body)
    json_started = WorkflowInstance(definition, "j")
    started = json_started.advance(Start("Ada", outcome_json=True), 1).records[0]
    assert isinstance(started, Started) and started.outcome_json is True and json_started.outcome_json
    # An Avro start stores null (its journal record's bytes are what they were before v3).
    avro_started = WorkflowInstance(definition, "a")
    plain = avro_started.advance(Start("Ada"), 1).records[0]
    assert isinstance(plain, Started) and plain.outcome_json is None and not avro_started.outcome_json
    # Another worker replays the journal: the flag comes back with the Started record.
    replayed, _ = WorkflowInstance.replay(definition, "j", [started], 2)
    assert replayed.outcome_json
    assert not WorkflowInstance.replay(definition, "a", [plain], 2)[0].outcome_json
