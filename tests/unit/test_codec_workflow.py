"""The workflow record family on the wire: golden Avro bytes, round trips, JSON inbox envelopes.

The records are plain values in ``tidings.core.workflow_records``; their mapping lives in
``tidings.codec.workflow``. The golden bytes were written before that mapping moved out of
core and must never be regenerated: a change here is a wire-format change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tidings.core
from tidings.codec import avro
from tidings.codec.workflow import RECORD_NAMES, inbox_from_json
from tidings.core.workflow import ErrorKind, StepCause, StepError
from tidings.core.workflow.child_records import ChildOutcome
from tidings.core.workflow.journal import (
    CancelRequested,
    ContinuedAsNew,
    Ended,
    SignalReceived,
    Started,
    StepAttemptFailed,
    StepCompleted,
    StepFailed,
    StepStarted,
    UpdateAnswered,
    UpdateReceived,
    VersionMarker,
)
from tidings.core.workflow_records import (
    WorkflowInbox,
    WorkflowJournalEntry,
    WorkflowOutcomeRecord,
    WorkflowReply,
    WorkflowStatusRecord,
)
from tidings.errors import DecodeError, SchemaError

GOLDEN_V1 = Path(__file__).resolve().parents[1] / "golden" / "avro" / "workflow_records.v1.json"
# v2: the inbox and journal schemas of child workflows (workflowinbox.v2, workflowjournal.v2).
GOLDEN_V2 = Path(__file__).resolve().parents[1] / "golden" / "avro" / "workflow_records.v2.json"
# v3: the journal remembers a JSON start, whose outcome record is JSON (workflowjournal.v3).
GOLDEN_V3 = Path(__file__).resolve().parents[1] / "golden" / "avro" / "workflow_records.v3.json"
# v4: a child's start and reports carry its parent's token (workflowinbox.v3, workflowjournal.v4),
# and a step's end its time and an activity's attempt (workflowjournal.v4).
GOLDEN_V4 = Path(__file__).resolve().parents[1] / "golden" / "avro" / "workflow_records.v4.json"
# v5: a run's start journals its trace context (Started.traceparent), a failed attempt that will
# be retried is journaled (StepAttemptFailed; workflowjournal.v5), an instance's start time is on
# its status records (workflowstatus.v2).
GOLDEN_V5 = Path(__file__).resolve().parents[1] / "golden" / "avro" / "workflow_records.v5.json"
# v6: a signal-with-start carries the input it starts the instance with (workflowinbox.v4); a
# failure keeps the chain of causes of its exception (workflowjournal.v6, workflowoutcome.v2,
# workflowreply.v2; the inbox's StepError is unchanged, so a child's report carries none).
GOLDEN_V6 = Path(__file__).resolve().parents[1] / "golden" / "avro" / "workflow_records.v6.json"
# v7: updates (workflowinbox.v5: update, update_id, wait_for; workflowjournal.v7: UpdateReceived
# with its caller's address, UpdateAnswered).
GOLDEN_V7 = Path(__file__).resolve().parents[1] / "golden" / "avro" / "workflow_records.v7.json"
# v8: queries (workflowinbox.v6: a query_handler's query name; workflowreply's "answered") and
# continue-as-new (workflowjournal.v8: a run's Started keeps its run number, ContinuedAsNew).
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "avro" / "workflow_records.v8.json"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TOKEN = "5f0c4a1e9b7d2c3a8e6f1b0d4c2a9e7f"
BOOM = StepError(ErrorKind.ATTEMPTS_EXHAUSTED, "RuntimeError: boom", "RuntimeError")
CAUSED = StepError(ErrorKind.NOT_RETRYABLE, "attempt 1: RuntimeError: boom", "RuntimeError",
                   (StepCause("ValueError", "bad input"), StepCause("KeyError", "")))

RECORDS: dict[str, object] = {
    "inbox start": WorkflowInbox(
        "r-1", "o-1", "start", 1_700_000_000_000, payload=b'"ABC"', reply_to="x.replies", metadata={"t": "1"}
    ),
    "inbox signal": WorkflowInbox("r-2", "o-1", "signal", 1_700_000_000_001, payload=b"true", signal="approval"),
    "inbox query": WorkflowInbox("r-3", "o-1", "query", 1_700_000_000_002, reply_to="x.replies", wait=True),
    "journal started": WorkflowJournalEntry("o-1", Started(1, '"ABC"', 10)),
    "journal activity": WorkflowJournalEntry("o-1", StepStarted(2, "1", "activity", "fetch", 11)),
    "journal timer": WorkflowJournalEntry("o-1", StepStarted(3, "2", "timer", "", 12, due=99)),
    "journal completed": WorkflowJournalEntry("o-1", StepCompleted(4, "1", "42")),
    "journal wait completed": WorkflowJournalEntry("o-1", StepCompleted(5, "3", "true", signal=6)),
    "journal failed": WorkflowJournalEntry("o-1", StepFailed(6, "2", BOOM)),
    "journal failed without kind": WorkflowJournalEntry("o-1", StepFailed(7, "4", StepError(None, "x"), signal=3)),
    "journal signal": WorkflowJournalEntry("o-1", SignalReceived(8, "approval", "true", 13)),
    "journal version": WorkflowJournalEntry("o-1", VersionMarker(9, "1", "chg", 2)),
    "journal cancel": WorkflowJournalEntry("o-1", CancelRequested(10, 14)),
    "journal finished": WorkflowJournalEntry("o-1", Ended(11, "finished", 15, result="7")),
    "journal faulted": WorkflowJournalEntry("o-1", Ended(12, "faulted", 16, error=BOOM)),
    "journal cancelled": WorkflowJournalEntry("o-1", Ended(13, "cancelled", 17)),
    "reply finished": WorkflowReply("r-3", "o-1", "status", 20, status="FINISHED", outcome="finished", result="7"),
    "reply faulted": WorkflowReply("r-4", "o-2", "status", 21, status="FAULTED", outcome="faulted", error=BOOM),
    "reply rejected": WorkflowReply("r-5", "o-3", "rejected", 22, reason="nope"),
    "outcome finished": WorkflowOutcomeRecord("o-1", "enrich", "finished", 30, result="7"),
    "outcome faulted": WorkflowOutcomeRecord("o-2", "enrich", "faulted", 31, error=BOOM),
    "status parked": WorkflowStatusRecord("o-1", "enrich", "PARKED", 40, reason="mismatch"),
    "status running": WorkflowStatusRecord("o-1", "enrich", "RUNNING", 41),
    "inbox child start": WorkflowInbox(
        "r-6", "o-1:3", "start", 1_700_000_000_003, payload=b'"ABC"',
        parent_workflow="parent", parent_id="o-1", parent_path="3",
    ),
    "inbox child started": WorkflowInbox(
        "r-7", "o-1", "child_started", 1_700_000_000_004, parent_path="3", child_workflow="enrich"
    ),
    "inbox child ended": WorkflowInbox(
        "r-8", "o-1", "child_ended", 1_700_000_000_005, parent_path="3", child_workflow="enrich",
        outcome="faulted", error=BOOM,
    ),
    "journal child started": WorkflowJournalEntry("o-1:3", Started(1, '"ABC"', 10, "parent", "o-1", "3")),
    "journal child ended": WorkflowJournalEntry("o-1", ChildOutcome(14, "3", "enrich", "finished", 18, result="7")),
    "journal child faulted": WorkflowJournalEntry("o-1", ChildOutcome(15, "4", "enrich", "faulted", 19, error=BOOM)),
    "journal json started": WorkflowJournalEntry("o-4", Started(1, '"ABC"', 10, outcome_json=True)),
    "inbox child start with token": WorkflowInbox(
        "r-9", "o-1:3", "start", 1_700_000_000_006, payload=b'"ABC"',
        parent_workflow="parent", parent_id="o-1", parent_path="3", parent_token=TOKEN,
    ),
    "inbox child ended with token": WorkflowInbox(
        "r-10", "o-1", "child_ended", 1_700_000_000_007, payload=b"7", parent_path="3", child_workflow="enrich",
        outcome="finished", parent_token=TOKEN,
    ),
    "journal child start with token": WorkflowJournalEntry(
        "o-1", StepStarted(3, "3", "child_start", "enrich", 12, token=TOKEN)),
    "journal child started with token": WorkflowJournalEntry(
        "o-1:3", Started(1, '"ABC"', 10, "parent", "o-1", "3", parent_token=TOKEN)),
    "journal completed at, attempt": WorkflowJournalEntry("o-1", StepCompleted(16, "1", "42", at=20, attempt=3)),
    "journal failed at, attempt": WorkflowJournalEntry("o-1", StepFailed(17, "2", BOOM, at=21, attempt=5)),
    "journal started traced": WorkflowJournalEntry("o-5", Started(1, '"ABC"', 10, traceparent=TRACEPARENT)),
    "journal attempt failed": WorkflowJournalEntry(
        "o-1", StepAttemptFailed(18, "1", 2, StepError(None, "RuntimeError: flaky", "RuntimeError"), 22, 1022)),
    "status finished with its start": WorkflowStatusRecord("o-1", "enrich", "FINISHED", 42, started_at=10),
    "inbox signal with start": WorkflowInbox(
        "r-11", "o-6", "signal_with_start", 1_700_000_000_008, payload=b"true", signal="approval",
        reply_to="x.replies", signal_id="s-1", input=b'"ABC"',
    ),
    "reply started": WorkflowReply("r-11", "o-6", "started", 23),
    "journal failed with causes": WorkflowJournalEntry("o-1", StepFailed(19, "2", CAUSED, at=23, attempt=1)),
    "journal faulted with causes": WorkflowJournalEntry("o-1", Ended(20, "faulted", 24, error=CAUSED)),
    "reply faulted with causes": WorkflowReply(
        "r-6", "o-2", "status", 25, status="FAULTED", outcome="faulted", error=CAUSED),
    "outcome faulted with causes": WorkflowOutcomeRecord("o-2", "enrich", "faulted", 32, error=CAUSED),
    "inbox update": WorkflowInbox(
        "r-12", "o-7", "update", 1_700_000_000_009, payload=b"3", reply_to="x.replies", update="add_item",
        update_id="u-1", wait_for="completed",
    ),
    "inbox update with start": WorkflowInbox(
        "r-13", "o-8", "update_with_start", 1_700_000_000_010, payload=b"3", reply_to="x.replies",
        input=b'"ann"', update="add_item", update_id="u-2", wait_for="accepted",
    ),
    "journal update received": WorkflowJournalEntry(
        "o-7", UpdateReceived(2, "add_item", "3", 26, "u-1", "x.replies", "r-12", True)),
    "journal update answered": WorkflowJournalEntry("o-7", UpdateAnswered(5, "u-1", 27, result="1")),
    "journal update failed": WorkflowJournalEntry(
        "o-7", UpdateAnswered(6, "u-3", 28, error=StepError(ErrorKind.NOT_RETRYABLE, "out of stock"))),
    "reply completed": WorkflowReply("r-12", "o-7", "completed", 29, result="1"),
    "inbox query handler": WorkflowInbox(
        "r-14", "o-7", "query_handler", 1_700_000_000_011, payload=b'["A-1"]', reply_to="x.replies", query="items"),
    "reply answered": WorkflowReply("r-14", "o-7", "answered", 30, status="RUNNING", result="[1]"),
    "journal continued as new": WorkflowJournalEntry("o-9", ContinuedAsNew(7, 30, '"ABD"', 2, 3)),
    "journal started run 2": WorkflowJournalEntry("o-9", Started(8, '"ABD"', 30, run=2)),
}
V4_ONLY = 6  # the records with a token, a completion time or an attempt: older goldens hold none
V5_ONLY = 3  # a traced start, a failed attempt's record, a status with its start: older goldens hold none
V6_ONLY = 6  # a signal-with-start and its answer, the failures with causes: older goldens hold none
V7_ONLY = 6  # the updates: older goldens hold none
V8_ONLY = 4  # a query to a handler and its answer, continue-as-new: older goldens hold none


def golden(path: Path = GOLDEN) -> dict[str, bytes]:
    return {name: bytes.fromhex(data) for name, data in json.loads(path.read_text()).items()}


def test_every_workflow_record_encodes_to_its_golden_bytes() -> None:
    # Written with workflowinbox.v6 / workflowjournal.v8 / workflowoutcome.v2 / workflowreply.v2 / workflowstatus.v2.
    stored = golden()
    assert stored.keys() == RECORDS.keys()
    for name, record in RECORDS.items():
        assert avro.encode(record) == stored[name], name  # type: ignore[arg-type]


def test_every_golden_workflow_record_decodes_to_its_record() -> None:
    for name, data in golden().items():
        assert avro.decode_as(data, type(RECORDS[name])) == RECORDS[name], name  # type: ignore[type-var]


def test_every_v7_golden_workflow_record_still_decodes_to_its_record() -> None:
    # Written with workflowinbox.v5 / workflowjournal.v7: every request reads with no query
    # name, every start as a first run (run None).
    stored = golden(GOLDEN_V7)
    assert len(stored) == len(RECORDS) - V8_ONLY
    for name, data in stored.items():
        assert avro.decode_as(data, type(RECORDS[name])) == RECORDS[name], name  # type: ignore[type-var]


def test_every_v6_golden_workflow_record_still_decodes_to_its_record() -> None:
    # Written with workflowinbox.v4 / workflowjournal.v6: every request reads with no update.
    stored = golden(GOLDEN_V6)
    assert len(stored) == len(RECORDS) - V7_ONLY - V8_ONLY
    for name, data in stored.items():
        assert avro.decode_as(data, type(RECORDS[name])) == RECORDS[name], name  # type: ignore[type-var]


def test_every_v5_golden_workflow_record_still_decodes_to_its_record() -> None:
    # Written with workflowinbox.v3 / workflowjournal.v5 / workflowoutcome.v1 / workflowreply.v1:
    # every request reads with no input, failures with no causes.
    stored = golden(GOLDEN_V5)
    assert len(stored) == len(RECORDS) - V6_ONLY - V7_ONLY - V8_ONLY
    for name, data in stored.items():
        assert avro.decode_as(data, type(RECORDS[name])) == RECORDS[name], name  # type: ignore[type-var]


def test_a_failure_with_causes_written_by_an_older_schema_reads_with_none() -> None:
    # A v6 record read back is equal; the same error under the old names has causes ().
    plain = StepError(CAUSED.kind, CAUSED.message, CAUSED.type)
    for name in ("journal failed", "outcome faulted", "reply faulted"):
        decoded: object = avro.decode_as(golden(GOLDEN_V5)[name], type(RECORDS[name]))  # type: ignore[type-var]
        error = getattr(getattr(decoded, "record", decoded), "error")
        assert error.causes == ()
    assert plain.causes == () and plain != CAUSED
    # The inbox keeps workflowinbox.v3 (no causes): a child's report of its fault drops them.
    report = WorkflowInbox("r-9", "o-1", "child_ended", 1, parent_path="3", child_workflow="enrich",
                           outcome="faulted", error=CAUSED)
    assert avro.decode_as(avro.encode(report), WorkflowInbox).error == plain


def test_every_v4_golden_workflow_record_still_decodes_to_its_record() -> None:
    # Written with workflowjournal.v4 / workflowstatus.v1: the same records, untraced, no retry_at or started_at.
    stored = golden(GOLDEN_V4)
    assert len(stored) == len(RECORDS) - V5_ONLY - V6_ONLY - V7_ONLY - V8_ONLY
    for name, data in stored.items():
        assert avro.decode_as(data, type(RECORDS[name])) == RECORDS[name], name  # type: ignore[type-var]


def test_every_v3_golden_workflow_record_still_decodes_to_its_record() -> None:
    # Written with workflowinbox.v2 / workflowjournal.v3, before parent tokens: a child's
    # records read with no token (its parent checks none).
    stored = golden(GOLDEN_V3)
    assert len(stored) == len(RECORDS) - V4_ONLY - V5_ONLY - V6_ONLY - V7_ONLY - V8_ONLY
    for name, data in stored.items():
        assert avro.decode_as(data, type(RECORDS[name])) == RECORDS[name], name  # type: ignore[type-var]


def test_every_v2_golden_workflow_record_still_decodes_to_its_record() -> None:
    # Written with workflowjournal.v2, before JSON starts were remembered: a start reads
    # with outcome_json null (its outcome record is Avro).
    stored = golden(GOLDEN_V2)
    assert len(stored) == len(RECORDS) - 1 - V4_ONLY - V5_ONLY - V6_ONLY - V7_ONLY - V8_ONLY
    for name, data in stored.items():
        assert avro.decode_as(data, type(RECORDS[name])) == RECORDS[name], name  # type: ignore[type-var]


def test_every_v1_golden_workflow_record_still_decodes_to_its_record() -> None:
    # Written with workflowinbox.v1 / workflowjournal.v1, before child workflows: they read
    # with the new fields at their defaults (no parent, no child report).
    stored = golden(GOLDEN_V1)
    assert len(stored) == 23
    for name, data in stored.items():
        assert avro.decode_as(data, type(RECORDS[name])) == RECORDS[name], name  # type: ignore[type-var]


def test_every_workflow_record_type_has_a_schema_in_the_catalogue() -> None:
    assert set(RECORD_NAMES) <= set(avro.CATALOGUE.newest)
    assert {type(record) for record in RECORDS.values()} == set(RECORD_NAMES)


def test_an_unknown_step_error_kind_is_a_schema_error() -> None:
    bad = WorkflowOutcomeRecord("o-2", "enrich", "faulted", 31, error=StepError(None, "x"))
    data = avro.encode(bad).replace(b"\x00\x02x", b"\x02\x06odd\x02x")  # kind: null -> "odd"
    with pytest.raises(SchemaError, match="invalid step error"):
        avro.decode(data)


def test_an_unknown_inbox_kind_is_a_schema_error() -> None:
    data = avro.encode(WorkflowInbox("r", "o", "start", 0)).replace(b"\nstart", b"\nstaRt")
    with pytest.raises(SchemaError, match="inbox kind 'staRt'"):
        avro.decode(data)


def test_no_core_module_names_an_avro_record() -> None:
    # The core holds records only; their Avro names live in tidings.codec.
    names = set(RECORD_NAMES.values()) | {"tidings.CommandEnvelope", "tidings.OrchestrationEvent"}
    core = Path(tidings.core.__file__).parent
    for source in core.rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        assert not any(f'"{name}"' in text for name in names), source
        assert "fastavro" not in text and "AVRO_" not in text, source


def test_a_json_inbox_envelope_reads_with_defaults() -> None:
    inbox = inbox_from_json(b'{"kind": "start", "instance_id": "order-17", "payload": {"n": "\xc3\xbc"}}', timestamp_ms=5)
    assert inbox == WorkflowInbox("start:order-17:5", "order-17", "start", 5, payload='{"n":"ü"}'.encode())


def test_a_json_signal_needs_its_name() -> None:
    with pytest.raises(SchemaError, match="'signal' is required"):
        inbox_from_json(b'{"kind": "signal", "instance_id": "o-1", "payload": true}')
    inbox = inbox_from_json(b'{"kind": "signal", "instance_id": "o-1", "signal": "ok", "wait": false, "request_id": "r"}')
    assert (inbox.request_id, inbox.signal, inbox.payload, inbox.timestamp_ms) == ("r", "ok", None, 0)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"[1]", DecodeError),
        (b"{nope", DecodeError),
        (b'{"kind": "stop", "instance_id": "o"}', SchemaError),
        (b'{"kind": "start", "instance_id": ""}', SchemaError),
        (b'{"kind": "start", "instance_id": "o", "timestamp_ms": true}', SchemaError),
        (b'{"kind": "start", "instance_id": "o", "wait": 1}', SchemaError),
        (b'{"kind": "start", "instance_id": "o", "metadata": {"a": 1}}', SchemaError),
    ],
)
def test_an_unusable_json_inbox_envelope_is_a_record_error(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        inbox_from_json(data)


def test_a_json_signal_with_start_reads_its_input_and_signal() -> None:
    inbox = inbox_from_json(
        b'{"kind": "signal_with_start", "instance_id": "o-1", "input": {"n": 1}, "signal": "ok",'
        b' "payload": [true], "signal_id": "s-1"}', timestamp_ms=7)
    assert inbox == WorkflowInbox("signal_with_start:o-1:7", "o-1", "signal_with_start", 7, payload=b"[true]",
                                  signal="ok", signal_id="s-1", input=b'{"n":1}')


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"kind": "signal_with_start", "instance_id": "o-1", "input": 1}', "'signal' is required"),
        (b'{"kind": "signal_with_start", "instance_id": "o-1", "signal": ""}', "non-empty string"),
        (b'{"kind": "signal_with_start", "instance_id": "o-1", "signal": 3}', "non-empty string"),
        (b'{"kind": "start", "instance_id": "o-1", "input": 1}', "'input' is for signal_with_start"),
        (b'{"kind": "signal", "instance_id": "o-1", "signal": "s", "input": 1}', "'input' is for signal_with_start"),
        (b'{"kind": "Signal_With_Start", "instance_id": "o-1", "signal": "s"}', "is not one of"),
    ],
)
def test_an_unusable_json_signal_with_start_is_a_schema_error(data: bytes, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        inbox_from_json(data)
