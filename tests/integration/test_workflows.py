"""Workflows hosted on Kafka: the seeds' examples end to end through a real worker process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime
from typing import Any

import pytest

from tidings import App
from tidings.codec import avro
from tidings.core.records import DeadLetter
from tidings.core.workflow import Cancelled, Faulted, Finished, StepCause, WorkflowStatus
from tidings.core.workflow.journal import Ended, StepFailed
from tidings.core.workflow_records import WorkflowJournalEntry, WorkflowOutcomeRecord
from tidings.errors import WorkflowCancelled, WorkflowEnded, WorkflowFaulted, WorkflowNotFound
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.workflow_apps import Calls
from tests.workflow_workers import ROOT, WorkflowWorkers, calls, workflow_app, workflow_cli, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_enrich_scores_once_sleeps_and_finishes_with_the_stored_time(
    workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    enrich = workflow_app.workflow_handle("enrich")

    async def scenario() -> Any:
        await enrich.start("order-17", "ABC")
        await enrich.start("order-17", "XYZ")  # a second start stores nothing
        return await enrich.result("order-17", timeout=60)

    outcome = run(scenario())
    assert isinstance(outcome, Finished), workflow_workers.log_tail()
    points, at = outcome.value
    assert points == 42 and isinstance(at, datetime)
    assert calls.lines("score") == ["enrich/order-17/1 1 ABC"]
    assert run(enrich.status("order-17")) is WorkflowStatus.FINISHED


def test_approve_takes_the_signal_or_gives_false_when_the_window_closes(
    workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    approve = workflow_app.workflow_handle("approve")

    async def scenario() -> tuple[Any, Any]:
        await approve.start("yes")
        await approve.start("late")
        await approve.signal("yes", "approval", True)
        return await approve.value("yes", 60), await approve.value("late", 60)

    assert run(scenario()) == (True, False)
    with pytest.raises(WorkflowEnded):
        run(approve.signal("yes", "approval", False))


def test_both_and_points_and_receipt_run_branches_together(
    workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    both, par = workflow_app.workflow_handle("both"), workflow_app.workflow_handle("points-and-receipt")

    async def scenario() -> tuple[Any, Any]:
        await both.start("b-1")
        await par.start("p-1")
        return await both.value("b-1", 60), await par.value("p-1", 60)

    assert run(scenario()) == (([42, 42, 42], "paid"), (42, "paid"))
    assert sorted(calls.keys("score")) == ["both/b-1/1.1.1", "both/b-1/1.2.1", "both/b-1/1.3.1",
                                          "points-and-receipt/p-1/1.1.1"]


def test_wait_until_shipped_recurses_until_the_check_passes(
    workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    shipping = workflow_app.workflow_handle("shipping")

    async def scenario() -> Any:
        await shipping.start("s-1")
        return await shipping.value("s-1", 60)

    assert run(scenario()) == 2
    assert len(calls.lines("check")) == 3


def test_a_cancelled_booking_refunds_and_ends_cancelled(
    workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    booking = workflow_app.workflow_handle("booking")

    async def scenario() -> Any:
        await booking.start("bk-1")
        # Wait until the charge is running, so the cancel finds it pending.
        while await booking.status("bk-1") is None:
            await asyncio.sleep(0.05)
        await booking.cancel("bk-1")
        await booking.cancel("bk-1")  # a second cancel changes nothing
        return await booking.result("bk-1", 60)

    assert run(scenario()) == Cancelled()
    assert [line.split()[2] for line in calls.lines("charge")] == ["-30"]
    with pytest.raises(WorkflowCancelled):
        run(booking.value("bk-1", 10))


def test_a_faulted_body_surfaces_as_faulted_and_value_raises(
    workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    faulty = workflow_app.workflow_handle("faulty")
    run(faulty.start("f-1", "boom"))
    outcome = run(faulty.result("f-1", 60))
    assert isinstance(outcome, Faulted) and "boom" in outcome.error.message
    with pytest.raises(WorkflowFaulted, match="boom"):
        run(faulty.value("f-1", 10))


def test_an_activity_raising_x_from_y_keeps_both_in_the_journal_the_outcome_and_the_client_error(
    kafka_bootstrap: str, app_id: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    caused = workflow_app.workflow_handle("caused")
    expected = (StepCause("ValueError", "card 4242 declined: '4242'"),)
    run(caused.start("k-1", False))
    outcome = run(caused.result("k-1", 60))
    assert isinstance(outcome, Faulted), workflow_workers.log_tail()
    assert outcome.error.type == "RuntimeError" and "the charge failed" in outcome.error.message
    assert outcome.error.causes == expected
    with pytest.raises(WorkflowFaulted, match="caused by ValueError: card 4242 declined") as raised:
        run(caused.value("k-1", 10))
    assert raised.value.error is not None and raised.value.error.causes == expected
    # In the body, the caught WorkflowStepFailed.error carries them too.
    run(caused.start("k-2", True))
    assert run(caused.value("k-2", 60)) == ["ValueError: card 4242 declined: '4242'"]

    entries = [avro.decode(r.value) for r in read_topic(kafka_bootstrap, caused.topics.journal)]
    failed = [e.record for e in entries if e.instance_id == "k-1" and isinstance(e.record, StepFailed)]
    ended = [e.record for e in entries if e.instance_id == "k-1" and isinstance(e.record, Ended)]
    assert [f.error.causes for f in failed] == [expected] and [e.error.causes for e in ended] == [expected]  # type: ignore[union-attr]

    def published() -> WorkflowOutcomeRecord:
        records = [avro.decode(r.value) for r in read_topic(kafka_bootstrap, caused.topics.outcomes)]
        # None yet is "not yet": the worker publishes the outcome after the journal commit, and
        # result() may have had its answer from the worker before.
        mine = [r for r in records if r.instance_id == "k-1"]
        assert len(mine) == 1, mine
        return mine[0]  # type: ignore[no-any-return]

    assert assert_eventually(published, timeout=30).error.causes == expected  # type: ignore[union-attr]
    assert len(calls.lines("declined")) == 2  # Retry.none: one attempt each
    # tidings journal and describe say it to a person.
    env = {**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap, "TEST_APP_ID": app_id,
           "TEST_CALLS_DIR": str(calls.directory)}
    for command in (["journal", "tests.integration.workflow_apps:app", "caused", "k-1"],
                    ["describe", "tests.integration.workflow_apps:app", "workflow", "caused", "k-1"]):
        done = subprocess.run([sys.executable, "-m", "tidings.cli.main", *command],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "caused by ValueError: card 4242 declined" in done.stdout, done.stdout


def test_signal_cancel_result_and_status_of_an_unknown_id(
    workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    approve = workflow_app.workflow_handle("approve")
    with pytest.raises(WorkflowNotFound):
        run(approve.signal("nobody", "approval", True))
    with pytest.raises(WorkflowNotFound):
        run(approve.cancel("nobody"))
    with pytest.raises(WorkflowNotFound):
        run(approve.result("nobody", 30))
    assert run(approve.status("nobody")) is None


def test_json_envelopes_start_and_signal_and_malformed_records_are_dead_lettered(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    collector = workflow_app.workflow_handle("collector")
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    json_header = [("content-type", b"application/json")]

    def send(value: bytes, headers: list[tuple[str, bytes]] | None = None, key: bytes = b"c-1") -> None:
        producer.produce(collector.topics.inbox, value, key, headers=headers)

    send(json.dumps({"kind": "start", "instance_id": "c-1", "payload": 2}).encode(), json_header)
    send(b"not avro at all")
    send(b"{broken json", json_header)
    send(json.dumps({"kind": "launch", "instance_id": "c-1"}).encode(), json_header)
    send(json.dumps({"kind": "signal", "instance_id": "c-1", "signal": "item", "payload": 7}).encode(), json_header)
    # Sent to another partition than the instance's: forwarded, not lost.
    send(json.dumps({"kind": "signal", "instance_id": "c-1", "signal": "item", "payload": 8}).encode(),
         json_header, key=b"somewhere-else")
    producer.flush(10)

    assert run(collector.value("c-1", 60)) == [7, 8]

    def dead_letters() -> list[DeadLetter]:
        letters = [avro.decode(r.value) for r in read_topic(kafka_bootstrap, f"{workflow_app.name}.deadletter")]
        assert len(letters) == 3
        return letters

    letters = assert_eventually(dead_letters, timeout=30)
    assert {letter.error_type for letter in letters} == {"DecodeError", "SchemaError"}
    assert all(letter.source_topic == collector.topics.inbox for letter in letters)


def test_the_journal_is_keyed_by_instance_and_seq_and_the_outcome_is_published(
    kafka_bootstrap: str, workflow_app: App, workflow_workers: WorkflowWorkers
) -> None:
    workflow_workers.start()
    one = workflow_app.workflow_handle("one-activity")
    assert run(_start_and_value(one, "o-1", 1)) == 2
    journal = read_topic(kafka_bootstrap, one.topics.journal)
    keys = [record.key.decode() for record in journal]
    assert keys == ["o-1/1", "o-1/2", "o-1/3", "o-1/4"]
    entries = [avro.decode(record.value) for record in journal]
    assert all(isinstance(e, WorkflowJournalEntry) and e.instance_id == "o-1" for e in entries)
    outcomes = assert_eventually(lambda: read_topic(kafka_bootstrap, one.topics.outcomes), timeout=30)
    assert outcomes[-1].key == b"o-1"


async def _start_and_value(handle_: Any, instance_id: str, value: Any) -> Any:
    await handle_.start(instance_id, value)
    return await handle_.value(instance_id, 60)


def test_the_cli_starts_signals_and_reads_the_status_and_result(
    kafka_bootstrap: str, app_id: str, workflow_app: App, workflow_workers: WorkflowWorkers, calls: Calls
) -> None:
    workflow_workers.start()
    tidings = workflow_cli(kafka_bootstrap, app_id, calls)

    assert tidings("start", "approve", "cli-1") == (0, {"started": "cli-1", "workflow": "approve"})
    assert tidings("signal", "approve", "cli-1", "approval", "true", "--timeout", "60") == (
        0, {"signalled": "cli-1", "signal": "approval"})
    assert tidings("result", "approve", "cli-1", "--timeout", "60") == (0, {"outcome": "finished", "value": True})
    assert tidings("status", "approve", "cli-1") == (0, {"status": "FINISHED"})
    code, error = tidings("cancel", "approve", "nobody")
    assert code == 1 and "no approve instance 'nobody'" in error
