"""The real ``kcat`` binary drives a worker the way docs/kafka-clients.md says, and reads JSON back.

Every request here is produced by kcat (no tidings code on the way in), keyed by the
instance id with ``-X partitioner=murmur2_random``; every answer is read by kcat as text.
The Python client reads the same JSON outcomes, and a garbage record from kcat goes to the
dead-letter topic while the worker goes on.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from tidings import App, Finished
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter
from tidings.shell.runtime.acls import client_replies_topic
from tidings.shell.runtime.topics import apply_topics, deadletter_topic, spec_for
from tests.integration.kcat_apps import PARTITIONS, Greeting, build, sink_topic, source_topic
from tests.workers import Workers
from tests.kafka_clients import kafka

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(
    KCAT is None, reason="the kcat binary is not on PATH (Debian package kcat; .ci/run installs it)"
)

WAIT = 60.0  # seconds: a worker's first start joins the group and creates its stores


def kcat_produce(bootstrap: str, topic: str, key: str | None, value: str, *, json_header: bool = True) -> None:
    """Produce one record with kcat exactly as docs/kafka-clients.md shows."""
    assert KCAT is not None
    args = [KCAT, "-P", "-b", bootstrap, "-t", topic, "-X", "partitioner=murmur2_random"]
    if key is not None:
        args += ["-k", key]
    if json_header:
        args += ["-H", "content-type=application/json"]
    done = subprocess.run(args, input=value.encode(), timeout=30, capture_output=True)
    assert done.returncode == 0, f"kcat -P failed ({done.returncode}): {done.stderr.decode(errors='replace')}"


def kcat_read(bootstrap: str, topic: str, fmt: str = "%p\t%k\t%h\t%s\n") -> list[list[str]]:
    """Read a whole topic with kcat (``-e``: exit at its end); one tab-split line per record."""
    assert KCAT is not None
    for attempt in range(5):
        done = subprocess.run([KCAT, "-C", "-b", bootstrap, "-t", topic, "-e", "-q", "-o", "beginning", "-f", fmt],
                              timeout=60, capture_output=True)
        if done.returncode == 0:
            break
        # A topic made a moment ago may have no leader in kcat's first metadata: ask again.
        time.sleep(0.5)
    assert done.returncode == 0, f"kcat -C failed ({done.returncode}): {done.stderr.decode(errors='replace')}"
    # A topic may hold Avro records too (the Python client's answers): never valid text.
    return [line.split("\t") for line in done.stdout.decode(errors="replace").splitlines() if line]


def until(read: Callable[[], Any], found: Callable[[Any], Any], what: str, log: Callable[[], str]) -> Any:
    """Read until ``found(read())`` is truthy; return that."""
    deadline = time.monotonic() + WAIT
    while True:
        got = read()
        hit = found(got)
        if hit:
            return hit
        assert time.monotonic() < deadline, f"{what} within {WAIT} s; last read {got!r}\n{log()}"
        time.sleep(0.5)


def keyed_json(lines: list[list[str]], key: str) -> dict[str, Any] | None:
    """The JSON value of the last JSON record keyed ``key`` (after partition, key, headers)."""
    values = [json.loads(line[3]) for line in lines
              if len(line) == 4 and line[1] == key and line[2] == "content-type=application/json"]
    return values[-1] if values else None


@pytest.fixture
def kcat_app(kafka_bootstrap: str, app_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    admin = kafka(kafka_bootstrap).admin()
    # The flow's source is any producer's topic: the app does not declare it.
    for future in admin.create_topics([NewTopic(source_topic(app_id), PARTITIONS, 1)]).values():
        future.result(30)
    app = build(app_id)
    # kcat's own replies topic, as docs/kafka-clients.md asks for it (`tidings acls --client
    # User:kcat --apply` makes it on a secured cluster).
    own = spec_for("replies", kcat_replies(app_id), partitions=app.partitions)
    apply_topics(kafka(kafka_bootstrap), [*app.topic_specs(), own], out=lambda line: None)
    yield app
    for handle in app.workflows:
        handle.close()


def kcat_replies(app_id: str) -> str:
    """The replies topic of a client named kcat: ``{app}.replies.kcat`` (docs/kafka-clients.md)."""
    return client_replies_topic(app_id, "User:kcat")


def kcat_workers(bootstrap: str, app_id: str, tmp_path: Path, json_outcomes: bool = False) -> Workers:
    return Workers(bootstrap, app_id, tmp_path, app_spec="tests.integration.kcat_apps:app",
                   env={"TEST_JSON_OUTCOMES": "1" if json_outcomes else "0"})


@pytest.fixture
def worker(kafka_bootstrap: str, app_id: str, tmp_path: Path) -> Iterator[Workers]:
    started = kcat_workers(kafka_bootstrap, app_id, tmp_path)
    started.start()
    yield started
    started.kill_all()


def test_kcat_starts_signals_commands_and_reads_json_answers(
    kafka_bootstrap: str, app_id: str, kcat_app: App, worker: Workers
) -> None:
    replies = kcat_replies(app_id)
    inbox = f"{app_id}.workflow.greet.inbox"
    outcomes = f"{app_id}.workflow.greet.outcomes"

    # Start, asking for an answer; then signal. Keyed by the instance id.
    kcat_produce(kafka_bootstrap, inbox, "ada", json.dumps(
        {"kind": "start", "instance_id": "ada", "payload": "Ada", "request_id": "start-ada", "reply_to": replies}))
    kcat_produce(kafka_bootstrap, inbox, "ada", json.dumps(
        {"kind": "signal", "instance_id": "ada", "signal": "approve", "payload": True,
         "request_id": "signal-ada", "reply_to": replies}))
    # A waiting query: answered once the instance has ended, with its outcome.
    kcat_produce(kafka_bootstrap, inbox, "ada", json.dumps(
        {"kind": "query", "instance_id": "ada", "request_id": "query-ada", "reply_to": replies, "wait": True}))

    def read_replies() -> list[list[str]]:
        return kcat_read(kafka_bootstrap, replies)

    # Replies are keyed by request id, so on different partitions: wait for all three.
    lines = until(read_replies, lambda lines: all(keyed_json(lines, key) for key in
                                                  ("start-ada", "signal-ada", "query-ada")) and lines,
                  "the JSON answers to the start, the signal and the waiting query", worker.log_tail)
    started, signalled, queried = (keyed_json(lines, key) for key in ("start-ada", "signal-ada", "query-ada"))
    assert started is not None and started["answer"] == "accepted" and started["instance_id"] == "ada"
    assert signalled is not None and signalled["answer"] == "accepted"
    assert queried is not None and queried["answer"] == "status" and queried["status"] == "FINISHED"
    assert queried["outcome"] == "finished"
    assert queried["result"] == {"greeting": "hello Ada", "approved": True}  # inline JSON, not Avro
    assert all(line[2] == "content-type=application/json" for line in lines), lines

    # The outcome record: JSON, read by kcat, on the instance's murmur2 partition.
    outcome_lines = until(lambda: kcat_read(kafka_bootstrap, outcomes), lambda ls: keyed_json(ls, "ada") and ls,
                          "the JSON outcome record", worker.log_tail)
    outcome = keyed_json(outcome_lines, "ada")
    assert outcome is not None
    assert outcome["workflow"] == "greet" and outcome["outcome"] == "finished"
    assert outcome["result"] == {"greeting": "hello Ada", "approved": True}
    assert {int(line[0]) for line in outcome_lines if line[1] == "ada"} == {partition_for("ada", PARTITIONS)}

    # The Python client reads the same JSON outcome record.
    async def result() -> Any:
        return await kcat_app.workflows[0].result("ada", timeout=WAIT)

    assert asyncio.run(result()) == Finished(Greeting(greeting="hello Ada", approved=True))

    # A command to the aggregate, its reply read back as JSON with the stored event inline.
    commands = f"{app_id}.aggregate.tally.commands"
    kcat_produce(kafka_bootstrap, commands, "t-1", json.dumps(
        {"command_id": "c-1", "aggregate_id": "t-1", "type": "Add", "payload": {"amount": 5}, "reply_to": replies}))
    reply = until(lambda: keyed_json(read_replies(), "c-1"), lambda r: r,
                  "the JSON reply to the command", worker.log_tail)
    assert reply["status"] == "accepted" and reply["version"] == 1 and reply["aggregate_id"] == "t-1"
    assert [(e["type"], e["payload"]) for e in reply["events"]] == [("Added", {"amount": 5})]
    # The same command id again: the stored first verdict, still in JSON for a JSON repeat.
    kcat_produce(kafka_bootstrap, commands, "t-1", json.dumps(
        {"command_id": "c-1", "aggregate_id": "t-1", "type": "Add", "payload": {"amount": 5}, "reply_to": replies}))
    def c1_replies() -> list[list[str]]:
        return [line for line in read_replies() if len(line) == 4 and line[1] == "c-1"]

    until(c1_replies, lambda ls: len(ls) == 2 and ls, "the JSON reply to the repeated command", worker.log_tail)
    again = c1_replies()
    assert all(line[2] == "content-type=application/json" for line in again)
    assert json.loads(again[0][3]) == json.loads(again[1][3])

    # Sixteen starts in one kcat call (key|value per line): each lands on the partition
    # tidings computes for its id, and the worker forwards none (a forwarded record would
    # be on the inbox twice); every record keyed "ada" (kcat's and the client's) too.
    ids = [f"p-{n}" for n in range(16)]
    lines_in = "".join(f'{i}|{{"kind":"start","instance_id":"{i}","payload":"{i}"}}\n' for i in ids)
    assert KCAT is not None
    subprocess.run([KCAT, "-P", "-b", kafka_bootstrap, "-t", inbox, "-K", "|", "-X", "partitioner=murmur2_random",
                    "-H", "content-type=application/json"], input=lines_in.encode(), check=True, timeout=30)
    inbox_lines = kcat_read(kafka_bootstrap, inbox, "%p\t%k\n")
    assert all(int(p) == partition_for(k, PARTITIONS) for p, k in inbox_lines), inbox_lines
    assert sorted(k for _, k in inbox_lines if k != "ada") == sorted(ids)
    assert len({int(p) for p, _ in inbox_lines}) == PARTITIONS  # the ids spread over every partition
    command_lines = kcat_read(kafka_bootstrap, commands, "%p\t%k\n")
    assert [(int(p), k) for p, k in command_lines] == [(partition_for("t-1", PARTITIONS), "t-1")] * 2


def test_kcat_feeds_a_flow_and_reads_its_sink_and_json_outcomes(
    kafka_bootstrap: str, app_id: str, kcat_app: App, tmp_path: Path
) -> None:
    # App(json_outcomes=True): the stage's starts are the Python handle's (Avro), and
    # still every outcome record of the workflow is JSON.
    worker = kcat_workers(kafka_bootstrap, app_id, tmp_path, json_outcomes=True)
    try:
        worker.start()
        for name in ("ada", "bob"):
            kcat_produce(kafka_bootstrap, source_topic(app_id), name, json.dumps(name))
        sink = until(lambda: kcat_read(kafka_bootstrap, sink_topic(app_id)),
                     lambda ls: keyed_json(ls, "shout-ada") and keyed_json(ls, "shout-bob") and ls,
                     "both flow outcomes on the sink", worker.log_tail)
        outcomes = kcat_read(kafka_bootstrap, f"{app_id}.workflow.shout.outcomes")
    finally:
        worker.kill_all()
    assert sorted(line[1] for line in outcomes) == ["shout-ada", "shout-bob"]
    assert keyed_json(outcomes, "shout-ada") == {"instance_id": "shout-ada", "workflow": "shout",
                                                 "outcome": "finished", "at": ANY, "result": "ADA",
                                                 "error": None}
    assert keyed_json(outcomes, "shout-bob") is not None
    assert keyed_json(sink, "shout-ada") == {"id": "shout-ada", "workflow": "shout", "outcome": "finished",
                                             "value": "ADA"}
    assert keyed_json(sink, "shout-bob") == {"id": "shout-bob", "workflow": "shout", "outcome": "finished",
                                             "value": "BOB"}


def dead_letters(bootstrap: str, app_id: str) -> list[DeadLetter]:
    consumer = kafka(bootstrap).consumer(**{"group.id": f"{app_id}-dl-reader",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(deadletter_topic(app_id), p, 0) for p in range(PARTITIONS)])
        letters = []
        for message in consumer.consume(100, timeout=2):
            if message.error() is None and message.value():
                letters.append(avro.decode_as(message.value(), DeadLetter))
        return letters
    finally:
        consumer.close()


def test_kcat_garbage_on_an_inbox_is_dead_lettered_and_the_worker_goes_on(
    kafka_bootstrap: str, app_id: str, kcat_app: App, worker: Workers
) -> None:
    inbox = f"{app_id}.workflow.greet.inbox"
    replies = kcat_replies(app_id)
    kcat_produce(kafka_bootstrap, inbox, "bad-1", "this is not JSON")
    kcat_produce(kafka_bootstrap, inbox, "bad-2", json.dumps({"kind": "launch", "instance_id": "bad-2"}))
    kcat_produce(kafka_bootstrap, inbox, "bad-3", "\u00c3\u0001 no Avro either", json_header=False)
    letters = until(lambda: dead_letters(kafka_bootstrap, app_id), lambda ls: len(ls) >= 3 and ls,
                    "three dead letters", worker.log_tail)
    assert sorted((letter.key or b"").decode() for letter in letters) == ["bad-1", "bad-2", "bad-3"]
    assert {letter.source_topic for letter in letters} == {inbox}
    by_key = {(letter.key or b"").decode(): letter for letter in letters}
    assert by_key["bad-1"].value == b"this is not JSON" and by_key["bad-1"].error_type == "DecodeError"
    assert "launch" in by_key["bad-2"].reason

    # The worker goes on: a good start behind the garbage is answered.
    kcat_produce(kafka_bootstrap, inbox, "eve", json.dumps(
        {"kind": "start", "instance_id": "eve", "payload": "Eve", "request_id": "start-eve", "reply_to": replies}))
    answer = until(lambda: keyed_json(kcat_read(kafka_bootstrap, replies), "start-eve"), lambda r: r,
                   "the answer to the start behind the garbage", worker.log_tail)
    assert answer["answer"] == "accepted"


def raw_outcomes(bootstrap: str, topic: str) -> list[tuple[str, bytes, Any]]:
    """Every record of an outcomes topic as (key, value, headers), with a plain consumer."""
    consumer = kafka(bootstrap).consumer(**{"group.id": f"{topic}-reader", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        return [((m.key() or b"").decode(), m.value() or b"", list(m.headers() or []))
                for m in consumer.consume(100, timeout=2) if m.error() is None]
    finally:
        consumer.close()


def test_a_json_start_gets_a_json_outcome_and_keeps_it_when_another_worker_catches_up(
    kafka_bootstrap: str, app_id: str, kcat_app: App, tmp_path: Path
) -> None:
    inbox = f"{app_id}.workflow.greet.inbox"
    outcomes = f"{app_id}.workflow.greet.outcomes"
    greet = kcat_app.workflows[0]
    workers = kcat_workers(kafka_bootstrap, app_id, tmp_path)  # no json_outcomes: per request
    try:
        workers.start("w1")
        # "ada" is started and signalled by kcat in JSON, "bob" by the Python client in Avro.
        kcat_produce(kafka_bootstrap, inbox, "ada", json.dumps({"kind": "start", "instance_id": "ada", "payload": "Ada"}))
        kcat_produce(kafka_bootstrap, inbox, "ada", json.dumps(
            {"kind": "signal", "instance_id": "ada", "signal": "approve", "payload": False}))

        async def python_side() -> list[Any]:
            await greet.start("bob", "Bob")
            await greet.signal("bob", "approve", True)
            return [await greet.result(i, timeout=WAIT) for i in ("ada", "bob")]

        # The Python client reads both forms.
        assert asyncio.run(python_side()) == [Finished(Greeting(greeting="hello Ada", approved=False)),
                                              Finished(Greeting(greeting="hello Bob", approved=True))]
        first = until(lambda: raw_outcomes(kafka_bootstrap, outcomes),
                      lambda rs: {key for key, _, _ in rs} == {"ada", "bob"} and rs,
                      "the outcome records of both", workers.log_tail)
        by_key = {key: (value, headers) for key, value, headers in first}
        assert json.loads(by_key["ada"][0])["result"] == {"greeting": "hello Ada", "approved": False}
        assert by_key["ada"][1] == [("content-type", b"application/json")]
        assert by_key["bob"][0][:2] == b"\xc3\x01" and by_key["bob"][1] == []

        # A worker with empty RocksDB catches the partitions up from the journal and writes
        # each ended instance's outcome again: in the form its journaled start asked for.
        workers.kill_all()
        workers.start("w2")
        again = until(lambda: raw_outcomes(kafka_bootstrap, outcomes),
                      lambda rs: min(Counter(key for key, _, _ in rs).values(), default=0) >= 2 and rs,
                      "the outcome records written again on catch-up", workers.log_tail)
    finally:
        workers.kill_all()
    for key, value, headers in again:
        if key == "ada":
            assert json.loads(value)["outcome"] == "finished" and headers == [("content-type", b"application/json")]
        else:
            assert key == "bob" and value[:2] == b"\xc3\x01" and headers == []
