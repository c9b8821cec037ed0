"""Outcome records read back as the ``Outcome`` objects ``result`` returns, and as CLI JSON."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import pytest

from tidings import App, Cancelled, Client, ErrorKind, Faulted, Finished, StepError
from tidings.cli.result import outcome_json
from tidings.codec import avro
from tidings.core.workflow import Outcome, WorkflowContext
from tidings.core.workflow_records import WorkflowStatusRecord
from tidings.errors import DecodeError, SchemaError
from tidings.shell.kinds.workflow.codec import decode_outcome, outcome_fields_of, outcome_record
from tidings.shell.kinds.workflow.handle import WorkflowHandle

AT = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)
BOOM = StepError(ErrorKind.ATTEMPTS_EXHAUSTED, "RuntimeError: boom", "RuntimeError")


def workflows() -> tuple[App, WorkflowHandle, WorkflowHandle]:
    app = App("outcomes", partitions=2)

    @app.workflow("enrich")
    async def enrich(ctx: WorkflowContext, order: str) -> tuple[int, datetime]:
        return 42, await ctx.now()

    @app.workflow("approve")
    async def approve(ctx: WorkflowContext, _: None) -> bool:
        return True

    return app, enrich, approve


def stored(handle: WorkflowHandle, instance_id: str, outcome: Outcome, workflow: str | None = None) -> bytes:
    """The bytes a worker writes to the outcomes topic for ``outcome``."""
    fields = outcome_fields_of(outcome, handle.definition)
    record = outcome_record("t", 0, workflow or handle.name, instance_id, fields, 1_700_000_000_000)
    assert record.value is not None
    return record.value


@pytest.mark.parametrize("outcome", [Finished((42, AT)), Faulted(BOOM), Cancelled()])
def test_an_outcome_record_reads_back_as_the_same_outcome_with_the_declared_result_type(outcome: Outcome) -> None:
    _, enrich, _ = workflows()
    assert decode_outcome(stored(enrich, "order-17", outcome), enrich.definition) == ("order-17", outcome)


def test_a_tombstone_or_foreign_bytes_do_not_decode() -> None:
    _, enrich, _ = workflows()
    with pytest.raises(DecodeError, match="tombstone"):
        decode_outcome(None, enrich.definition)
    with pytest.raises(DecodeError, match="no C3 01 magic"):
        decode_outcome(b"not avro", enrich.definition)


def test_another_record_type_or_another_workflows_outcome_is_a_schema_error() -> None:
    _, enrich, approve = workflows()
    status = avro.encode(WorkflowStatusRecord("order-17", "enrich", "RUNNING", 1))
    with pytest.raises(SchemaError, match="expected a WorkflowOutcomeRecord, got a WorkflowStatusRecord"):
        decode_outcome(status, enrich.definition)
    with pytest.raises(SchemaError, match="an outcome of workflow 'approve', not 'enrich'"):
        decode_outcome(stored(approve, "a-1", Finished(True)), enrich.definition)


def test_a_result_that_does_not_read_as_the_result_type_is_a_schema_error() -> None:
    _, enrich, approve = workflows()
    # approve's stored result (true) is no tuple[int, datetime].
    with pytest.raises(SchemaError, match="the result of 'a-1' does not read as the result type"):
        decode_outcome(stored(approve, "a-1", Finished(True), workflow="enrich"), enrich.definition)


@pytest.mark.parametrize(
    ("outcome", "printed"),
    [
        (Finished((42, AT)), {"outcome": "finished", "value": [42, "2024-05-01T12:30:00Z"]}),
        (Faulted(BOOM), {"outcome": "faulted", "error": {"kind": "attempts_exhausted",
                                                          "message": "RuntimeError: boom", "type": "RuntimeError"}}),
        (Cancelled(), {"outcome": "cancelled"}),
    ],
)
def test_the_cli_prints_an_outcome_as_the_workflow_stores_its_value(outcome: Outcome, printed: Any) -> None:
    _, enrich, _ = workflows()
    assert outcome_json(outcome, enrich.definition) == printed


def test_the_client_refuses_an_unknown_workflow_name_with_the_known_ones() -> None:
    app, _, _ = workflows()
    # Nothing listens on port 9: a call that tried Kafka would hang, not raise at once.
    client = Client("127.0.0.1:9", app=app)
    try:
        with pytest.raises(LookupError, match=r"^app 'outcomes' has no workflow 'nope'; known: approve, enrich$"):
            asyncio.run(client.start("nope", "x-1"))
        with pytest.raises(LookupError, match="known: approve, enrich"):
            asyncio.run(anext(client.outcomes("nope")))
    finally:
        client._producer.flush(0)
