"""No record can stop a worker: hostile records sent to every input topic (issue 8, SPEC §11).

A worker runs ``tests.integration.hostile_apps`` (an aggregate with a projection, another
with a hosted orchestration, a workflow). A plain confluent-kafka producer, as a service in
any language could, sends each record of the table in ``hostile_records`` to each input
topic of every kind: the aggregates' commands topics, the workflow's inbox, the
orchestration's inbox, and the events topics the projection and the orchestration read
(any producer can write there too). After each record it sends a canary, a valid command or
workflow start whose effect lands on the same partition after it, so a partition stuck
behind a record shows.

Then, whatever the table held:

- the worker process never exited, and its log has no "failed; stopping the worker";
- every record that is not a valid input is in ``{app}.deadletter`` exactly once (matched by
  the topic, partition and offset the dead letter carries), with a reason; no dead letter
  is larger than 256 KiB; a dead-lettered command stored no event, a dead-lettered start
  started no instance, a dead-lettered orchestration record was not journaled;
- every valid record, also under a wrong key, no key or on a wrong partition, reached its
  instance exactly once and was not dead-lettered; so did every canary;
- nothing else was dead-lettered (for instance a reply written into a journal or a commands
  topic, then dead-lettered by the agent reading it).

Records go out in rounds (one per topic, then their canaries), and one worker reads the
whole table, so the test takes well under a minute when nothing is wrong.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message

from tidings import App, RecordError
from tidings.codec import avro
from tidings.codec.answers import decode_outcome_record, decode_reply
from tidings.core.orchestration_records import OrchestrationEvent, OrchestrationOutcome
from tidings.core.records import DeadLetter, EventEnvelope, ReplyEnvelope
from tidings.core.workflow.journal import Started
from tidings.core.workflow_records import WorkflowJournalEntry, WorkflowOutcomeRecord
from tidings.shell.runtime.topics import apply_topics
from tidings.testing import WorkerProcess, assert_eventually, read_topic
from tests.integration.hostile_apps import build, projected
from tests.integration.hostile_records import AvroWriter, Expect, Observed, Sent, Table, Topics
from tests.workers import ROOT, Workers
from tests.kafka_clients import kafka

#: No dead letter may be larger than this: the broker refuses records near 1 MB, and a dead
#: letter keeps the original value only up to a bounded size.
MAX_DEAD_LETTER = 256 * 1024
#: How long the worker gets to go through the table (it needs a few seconds when healthy).
SETTLE_S = 60.0
CRASHED = "failed; stopping the worker"
#: Problems listed in the failure message (a worker that died early leaves hundreds).
SHOWN = 80


class WorkerExited(Exception):
    """The worker process ended: no point waiting for the rest (not an AssertionError, so
    ``assert_eventually`` stops at once)."""


@pytest.fixture
def calls_dir(tmp_path: Path) -> Path:
    return tmp_path / "calls"


@pytest.fixture
def hostile_app(kafka_bootstrap: str, app_id: str, calls_dir: Path) -> Iterator[App]:
    """The hostile-input App named for this test, its topics created before anything is sent.

    Its topics are deleted afterwards: a broker keeps files open for every partition, and
    this test's ~16 MB in 60 partitions have nothing left to tell once it is over.
    """
    app = build(app_id, calls_dir)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    admin = kafka(kafka_bootstrap).admin()
    topics = admin.list_topics(timeout=30).topics
    ours = [name for name in topics if name.startswith((f"{app_id}.", f"{app_id}-"))]  # Faust's too
    if ours:
        for future in admin.delete_topics(ours, operation_timeout=30).values():
            future.result()


@pytest.fixture
def hostile_worker(
    kafka_bootstrap: str, hostile_app: App, tmp_path: Path, calls_dir: Path
) -> Iterator[WorkerProcess]:
    """One worker of the hostile App; killed at the end of the test."""
    workers = Workers(kafka_bootstrap, hostile_app.name, tmp_path,
                      app_spec="tests.integration.hostile_apps:app",
                      env={"TEST_CALLS_DIR": str(calls_dir)})
    yield workers.start()
    workers.kill_all()


def produce(bootstrap: str, table: Table) -> list[Sent]:
    """Send the table in rounds: each round's records, acknowledged, then their canaries.

    Waiting for the records before sending the canaries puts a canary's effect after its
    record even where the canary goes to another topic (an events topic gets the event the
    aggregate writes for a canary command).
    """
    producer = kafka(bootstrap).producer(**{
        "partitioner": "murmur2_random",  # Java's partitioner, as SPEC §2 asks of producers
        "enable.idempotence": True,  # keeps each partition's records in the order sent
        "linger.ms": 2,
        "message.max.bytes": 1_048_576,  # the records near 1 MB
    })
    failures: list[str] = []
    sent: list[Sent] = []

    def send(record: Sent) -> None:
        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                failures.append(f"{record.label()}: {error}")
            elif message.partition() != record.partition:
                failures.append(f"{record.label()}: landed on partition {message.partition()}")
            else:
                offset = message.offset()
                record.offset = -1 if offset is None else offset

        headers: list[tuple[str, str | bytes | None]] = list(record.headers)
        if record.explicit:
            producer.produce(record.topic, record.value, record.key, partition=record.partition,
                             headers=headers, on_delivery=delivered)
        else:
            producer.produce(record.topic, record.value, record.key, headers=headers, on_delivery=delivered)
        sent.append(record)

    for pairs in table.rounds():
        for record, _ in pairs:
            send(record)
        assert producer.flush(30) == 0
        for _, canary in pairs:
            send(canary)
    assert producer.flush(30) == 0
    assert failures == [], "the test could not send its records:\n" + "\n".join(failures)
    return sent


def _decoded(value: bytes | None, record_type: type) -> object | None:
    try:
        # A JSON request's reply and a JSON start's outcome are JSON (codec/answers.py).
        if record_type is ReplyEnvelope:
            return decode_reply(value or b"")
        if record_type is WorkflowOutcomeRecord:
            return decode_outcome_record(value or b"")
        return avro.decode_as(value or b"", record_type)
    except RecordError:
        return None  # a hostile record the test wrote there, or a reply that should not be there


def observe(bootstrap: str, topics: Topics, calls_dir: Path) -> Observed:
    """Read back everything the worker wrote."""
    dead: dict[tuple[str, int, int], list[tuple[str, int]]] = defaultdict(list)
    undecodable: list[int] = []
    for record in read_topic(bootstrap, topics.deadletter):
        letter = _decoded(record.value, DeadLetter)
        if isinstance(letter, DeadLetter):
            dead[(letter.source_topic, letter.partition, letter.offset)].append(
                (letter.reason, len(record.value or b"")))
        else:
            undecodable.append(len(record.value or b""))
    replies: dict[str, list[str]] = defaultdict(list)
    for record in read_topic(bootstrap, topics.replies):
        reply = _decoded(record.value, ReplyEnvelope)
        if isinstance(reply, ReplyEnvelope):
            replies[reply.command_id].append(reply.status)
    events: dict[str, Counter[str]] = {}
    for aggregate in ("vault", "ledger"):
        topic = topics.aggregate(aggregate, "events")
        stored = (_decoded(r.value, EventEnvelope) for r in read_topic(bootstrap, topic))
        events[topic] = Counter(e.command_id for e in stored if isinstance(e, EventEnvelope))
    tracked = Counter(
        o.instance for r in read_topic(bootstrap, topics.orchestration("outcomes"))
        if isinstance(o := _decoded(r.value, OrchestrationOutcome), OrchestrationOutcome)
    )
    track_journal = Counter(
        e.instance for r in read_topic(bootstrap, topics.orchestration("journal"))
        if isinstance(e := _decoded(r.value, OrchestrationEvent), OrchestrationEvent)
    )
    greeted: dict[str, list[str]] = defaultdict(list)
    for record in read_topic(bootstrap, topics.workflow("outcomes")):
        outcome = _decoded(record.value, WorkflowOutcomeRecord)
        if isinstance(outcome, WorkflowOutcomeRecord):
            greeted[outcome.instance_id].append(outcome.outcome)
    started = Counter(
        e.instance_id for r in read_topic(bootstrap, topics.workflow("journal"))
        if isinstance(e := _decoded(r.value, WorkflowJournalEntry), WorkflowJournalEntry)
        and isinstance(e.record, Started)
    )
    return Observed(dict(dead), undecodable, dict(replies), events, Counter(projected(calls_dir)),
                    tracked, track_journal, dict(greeted), started)


def settled(sent: list[Sent], seen: Observed) -> bool:
    """Whether every valid record and canary had its effect and every bad one a dead letter."""
    for record in sent:
        if record.expect is Expect.DEAD:
            if record.position not in seen.dead:
                return False
        elif record.expect is not Expect.TOLERATED and record.check(seen):
            return False
    return True


def judge(sent: list[Sent], seen: Observed) -> list[str]:
    """Return every way the worker's output differs from what the table says must come of it."""
    problems: list[str] = []
    for record in sent:
        letters = seen.dead.get(record.position, [])
        found: list[str] = []
        if record.expect is Expect.DEAD:
            if not letters:
                found.append("not dead-lettered")
            elif len(letters) > 1:
                found.append(f"dead-lettered {len(letters)} times")
        elif record.expect is Expect.TOLERATED:
            if len(letters) > 1:
                found.append(f"dead-lettered {len(letters)} times")
        elif letters:
            found.append(f"dead-lettered, but it is a valid input ({_short(letters[0][0])})")
        found += record.check(seen)
        problems += [f"{record.label()}: {problem}" for problem in found]
    known = {record.position for record in sent}
    for position, letters in seen.dead.items():
        for reason, size in letters:
            if not reason.strip():
                problems.append(f"the dead letter of {position} has no reason")
            if size > MAX_DEAD_LETTER:
                problems.append(f"the dead letter of {position} is {size} bytes")
            if position not in known:
                problems.append(f"a record the test did not send was dead-lettered: {position}: {_short(reason)}")
    problems += [f"a dead letter of {size} bytes does not decode" for size in seen.undecodable_dead]
    return problems


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def test_no_record_stops_the_worker_and_each_bad_one_is_dead_lettered_once(
    kafka_bootstrap: str, hostile_app: App, hostile_worker: WorkerProcess, calls_dir: Path
) -> None:
    topics = Topics(hostile_app.name)
    table = Table(topics, AvroWriter(ROOT / "schemas"))
    sent = produce(kafka_bootstrap, table)

    def done() -> bool:
        if not hostile_worker.running:
            raise WorkerExited()
        return settled(sent, observe(kafka_bootstrap, topics, calls_dir))

    try:
        assert_eventually(done, timeout=SETTLE_S, interval=1.0, message="every record handled")
    except (AssertionError, WorkerExited):
        pass  # what is missing, doubled or dead is listed below, record by record

    problems = judge(sent, observe(kafka_bootstrap, topics, calls_dir))
    log = hostile_worker.log_path.read_text(errors="replace") if hostile_worker.log_path.exists() else ""
    if not hostile_worker.running:
        problems.insert(0, "the worker exited")
    if CRASHED in log:
        problems.insert(0, f"the worker logged {CRASHED!r}")
    shown = problems[:SHOWN]
    if len(problems) > SHOWN:
        shown.append(f"... and {len(problems) - SHOWN} more")
    assert problems == [], (
        f"{len(problems)} problems with {len(sent)} records:\n" + "\n".join(shown)
        + "\n--- worker log (tail)\n" + hostile_worker.log_tail(60)
    )
