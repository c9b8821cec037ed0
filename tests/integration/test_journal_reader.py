"""``read_journal`` and ``tidings journal``: one instance's journal read back from a real worker's topic.

A worker runs the workflow test App; the tests read the journal it wrote, then add what a
journal may also hold (another instance on the same partition whose id starts the same,
a zombie's second record at a seq, an unreadable record) and check what is kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from tidings import App, Finished
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.workflow.journal import (
    Ended,
    JournalRecord,
    SignalReceived,
    Started,
    StepCompleted,
    StepStarted,
    record_from_json,
    record_to_json,
)
from tidings.core.workflow_records import WorkflowJournalEntry
from tidings.errors import BrokerError
from tidings.shell.kinds.workflow.journal import read_journal
from tidings.testing.topics import read_topic
from tests.integration.workflow_apps import SLEEP, Calls
from tests.workflow_workers import ROOT, WorkflowWorkers, calls, workflow_app, workflow_workers  # noqa: F401
from tests.kafka_clients import kafka


def finished_enrich(app: App, workers: WorkflowWorkers, instance_id: str) -> Any:
    """Run enrich for ``instance_id`` on a worker to its end; return the handle."""
    workers.start()
    enrich = app.workflow_handle("enrich")

    async def run() -> Any:
        await enrich.start(instance_id, "ABC")
        return await enrich.result(instance_id, timeout=60)

    outcome = asyncio.run(run())
    assert isinstance(outcome, Finished), workers.log_tail()
    return enrich


def produce(bootstrap: str, topic: str, partition: int, records: list[tuple[bytes, bytes]]) -> None:
    producer = kafka(bootstrap).producer()
    for key, value in records:
        producer.produce(topic, value, key, partition=partition)
    assert producer.flush(30) == 0


def test_the_journal_of_a_finished_instance_reads_oldest_first_as_the_worker_wrote_it(
    workflow_app: App, workflow_workers: WorkflowWorkers, kafka_bootstrap: str
) -> None:
    enrich = finished_enrich(workflow_app, workflow_workers, "order-17")

    journal = read_journal(kafka(kafka_bootstrap), enrich.topics.journal, workflow_app.partitions, "order-17")

    assert [record.seq for record in journal] == list(range(1, len(journal) + 1))
    started, score_started, score_done, sleep_started = journal[:4]
    assert isinstance(started, Started) and started.input == '"ABC"'
    assert isinstance(score_started, StepStarted) and (score_started.kind, score_started.name) == ("activity", "score")
    assert isinstance(score_done, StepCompleted) and (score_done.path, score_done.result) == (score_started.path, "42")
    assert isinstance(sleep_started, StepStarted) and sleep_started.kind == "timer"
    assert sleep_started.due is not None and sleep_started.due - sleep_started.at == SLEEP.total_seconds() * 1000
    ended = journal[-1]
    assert isinstance(ended, Ended) and ended.outcome == "finished"
    assert json.loads(ended.result or "")[0] == 42

    # The same records as a plain read of the whole topic, filtered by the value's instance id.
    everything = [avro.decode_as(r.value, WorkflowJournalEntry) for r in read_topic(kafka_bootstrap, enrich.topics.journal)]
    assert journal == sorted((e.record for e in everything if e.instance_id == "order-17"), key=lambda r: r.seq)
    # What the handle gives a test against a running system.
    assert asyncio.run(enrich.journal("order-17")) == journal


def test_a_never_started_instance_has_an_empty_journal(
    workflow_app: App, workflow_workers: WorkflowWorkers, kafka_bootstrap: str
) -> None:
    enrich = finished_enrich(workflow_app, workflow_workers, "order-17")
    assert read_journal(kafka(kafka_bootstrap), enrich.topics.journal, workflow_app.partitions, "order-18") == []


def test_only_records_keyed_for_the_instance_are_kept_and_the_first_of_a_seq_wins(
    workflow_app: App, workflow_workers: WorkflowWorkers, kafka_bootstrap: str
) -> None:
    enrich = finished_enrich(workflow_app, workflow_workers, "order-17")
    topic, partitions = enrich.topics.journal, workflow_app.partitions
    before = read_journal(kafka(kafka_bootstrap), topic, partitions, "order-17")
    partition = partition_for("order-17", partitions)
    # An instance whose id starts with "order-17/" and lives on the same partition.
    neighbour = next(f"order-17/{n}" for n in range(10_000) if partition_for(f"order-17/{n}", partitions) == partition)
    last = before[-1].seq
    zombie = SignalReceived(2, "late", '"zombie"', 0)
    later = SignalReceived(last + 1, "late", '"after the end"', 0)
    produce(kafka_bootstrap, topic, partition, [
        (f"{neighbour}/1".encode(), avro.encode(WorkflowJournalEntry(neighbour, Started(1, '"X"', 0)))),
        (b"order-17/2", avro.encode(WorkflowJournalEntry("order-17", zombie))),  # a second seq 2: not kept
        (f"order-17/{last + 2}".encode(), b"not avro"),  # unreadable: skipped
        (f"order-17/{last + 3}".encode(), avro.encode(WorkflowJournalEntry("order-99", later))),  # key and value disagree
        (f"order-17/{last + 1}".encode(), avro.encode(WorkflowJournalEntry("order-17", later))),
    ])

    after = read_journal(kafka(kafka_bootstrap), topic, partitions, "order-17")

    assert after == [*before, later]
    assert read_journal(kafka(kafka_bootstrap), topic, partitions, neighbour) == [Started(1, '"X"', 0)]


def test_a_partition_count_other_than_the_topics_is_refused(
    workflow_app: App, kafka_bootstrap: str
) -> None:
    topic = workflow_app.workflow_handle("enrich").topics.journal
    with pytest.raises(BrokerError, match="partitions"):
        read_journal(kafka(kafka_bootstrap), topic, workflow_app.partitions + 1, "order-17")
    with pytest.raises(BrokerError, match="not there"):
        read_journal(kafka(kafka_bootstrap), f"{topic}-missing", workflow_app.partitions, "order-17")


def test_tidings_journal_prints_one_json_line_per_record_that_reads_back(
    workflow_app: App, workflow_workers: WorkflowWorkers, kafka_bootstrap: str, calls: Calls
) -> None:
    enrich = finished_enrich(workflow_app, workflow_workers, "order-17")
    env = {**os.environ, "TIDINGS_BOOTSTRAP": kafka_bootstrap, "TEST_APP_ID": workflow_app.name,
           "TEST_CALLS_DIR": str(calls.directory)}

    def tidings(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidings.cli.main", "journal", *args],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)

    done = tidings("tests.integration.workflow_apps:app", "enrich", "order-17", "--json")

    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    journal: list[JournalRecord] = read_journal(kafka(kafka_bootstrap), enrich.topics.journal, workflow_app.partitions, "order-17")
    assert lines == [record_to_json(record) for record in journal] and len(lines) >= 5
    assert [record_from_json(line) for line in lines] == journal

    never = tidings("tests.integration.workflow_apps:app", "enrich", "order-18", "--json")
    assert (never.returncode, never.stdout) == (0, "")
    never = tidings("tests.integration.workflow_apps:app", "enrich", "order-18")
    assert (never.returncode, never.stdout) == (0, "enrich order-18: never started\n")

    # For people: a line that says how it stands, then a line per record, times in UTC.
    person = tidings("tests.integration.workflow_apps:app", "enrich", "order-17")
    assert person.returncode == 0, person.stderr
    head, *rows = person.stdout.splitlines()
    assert head.startswith("enrich order-17: finished after ") and head.endswith(f", {len(journal)} records")
    assert len(rows) == len(journal)
    assert rows[0].endswith(f"#{1:<{len(str(len(journal)))}}  started with {journal[0].input}")
    assert datetime.strptime(rows[0][:24], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC) == datetime.fromtimestamp(
        journal[0].at / 1000, UTC)
    assert any(" done: " in row and "(took " in row and "attempt 1)" in row for row in rows)
    assert "ended finished: " in rows[-1]
    unknown = tidings("tests.integration.workflow_apps:app", "nope", "order-17")
    assert unknown.returncode != 0 and "no workflow 'nope'" in unknown.stderr
