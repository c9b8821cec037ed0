"""``app.workflow_flow`` on the real broker: a plain producer's topic to an outcomes topic, in a worker process."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from tidings import App, Finished
from tidings.codec import avro
from tidings.core.records import DeadLetter
from tidings.core.workflow.journal import Started
from tidings.shell.runtime.topics import apply_topics, deadletter_topic
from tests.integration.flow_apps import PARTITIONS, faults, waits
from tests.integration.flow_stage_apps import build, sink_topic, source_topic
from tests.workers import Workers
from tests.kafka_clients import kafka

#: The stage's timeout in the dead-letter test: the ``waits`` elements never end in it.
SHORT_TIMEOUT = 3.0


@pytest.fixture
def calls_dir(tmp_path: Path) -> Path:
    return tmp_path / "calls"


def make_source(bootstrap: str, topic: str) -> None:
    """Create the source topic as its owner would: the app does not declare it."""
    admin = kafka(bootstrap).admin()  # kept alive until the futures resolve
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
    for future in futures.values():
        future.result(30)


@pytest.fixture
def stage_app(kafka_bootstrap: str, app_id: str, calls_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    make_source(kafka_bootstrap, source_topic(app_id))
    app = build(app_id, calls_dir)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for handle in app.workflows:
        handle.close()


def stage_workers(bootstrap: str, app_id: str, tmp_path: Path, calls_dir: Path, timeout: float) -> Workers:
    return Workers(bootstrap, app_id, tmp_path, app_spec="tests.integration.flow_stage_apps:app",
                   env={"TEST_CALLS_DIR": str(calls_dir), "TEST_FLOW_TIMEOUT": str(timeout)})


def produce(bootstrap: str, topic: str, values: list[tuple[bytes, int | None]]) -> None:
    """Write raw values with a plain producer (no tidings code), in order per partition."""
    producer = kafka(bootstrap).producer(**{"enable.idempotence": True})
    for value, partition in values:
        if partition is None:
            producer.produce(topic, value=value, key=value)
        else:
            producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0


class Reader:
    """Reads every record of a topic from the start, across calls."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = kafka(bootstrap).consumer(**{"group.id": f"reader-{topic}",
                                  "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.records: list[tuple[bytes | None, bytes]] = []

    def until(self, done: Any, seconds: float, what: str, log: Any) -> None:
        deadline = time.monotonic() + seconds
        while not done(self.records):
            assert time.monotonic() < deadline, f"{what} within {seconds} s; got {self.records!r}\n{log()}"
            for message in self.consumer.consume(500, timeout=0.5):
                value = message.value()
                if message.error() is None and value is not None:
                    self.records.append((message.key(), value))

    def close(self) -> None:
        self.consumer.close()


def outcomes_by_id(records: list[tuple[bytes | None, bytes]]) -> dict[str, list[dict[str, Any]]]:
    got: dict[str, list[dict[str, Any]]] = {}
    for key, value in records:
        body = json.loads(value)
        assert key is not None and key.decode() == body["id"]
        got.setdefault(body["id"], []).append(body)
    return got


def expected(n: int) -> dict[str, Any]:
    if faults(n):
        return {"outcome": "faulted"}
    return {"outcome": "finished", "value": n * n}


def matches(n: int, body: dict[str, Any]) -> bool:
    want = expected(n)
    if body["outcome"] != want["outcome"] or body["workflow"] != "flow-score":
        return False
    if faults(n):
        return f"element {n} cannot be scored" in body["error"]["message"]
    return bool(body["value"] == want["value"])


def test_json_elements_flow_to_outcomes_and_bad_records_and_timeouts_are_dead_lettered(
    stage_app: App, kafka_bootstrap: str, app_id: str, tmp_path: Path, calls_dir: Path
) -> None:
    workers = stage_workers(kafka_bootstrap, app_id, tmp_path, calls_dir, SHORT_TIMEOUT)
    try:
        workers.start()
        source = source_topic(app_id)
        # Partition 0: bad records between good ones, so "the next element still flows" is
        # the element right after each bad one in the same partition.
        bad = [b"not json", b'"twelve"', b'{"n": 1}', b'[1, 2]']
        values: list[tuple[bytes, int | None]] = []
        for n in range(20):
            values.append((json.dumps(n).encode(), 0 if n < 4 else None))
            if n < 4:
                values.append((bad[n], 0))
        produce(kafka_bootstrap, source, values)

        sink = Reader(kafka_bootstrap, sink_topic(app_id))
        letters = Reader(kafka_bootstrap, deadletter_topic(app_id))
        flowing = [n for n in range(20) if not waits(n)]
        sink.until(lambda records: set(outcomes_by_id(records)) >= {f"score-{n}" for n in flowing},
                   90, "an outcome of every element that ends", workers.log_tail)
        got = outcomes_by_id(sink.records)
        for n in flowing:
            assert all(matches(n, body) for body in got[f"score-{n}"]), got[f"score-{n}"]
        assert not any(f"score-{n}" in got for n in range(20) if waits(n))

        def letters_of(records: list[tuple[bytes | None, bytes]]) -> list[DeadLetter]:
            decoded = [avro.decode(value) for _, value in records]
            return [letter for letter in decoded if isinstance(letter, DeadLetter) and letter.source_topic == source]

        timed_out = [n for n in range(20) if waits(n)]
        letters.until(lambda records: len(letters_of(records)) >= len(bad) + len(timed_out),
                      60, "dead letters of the bad records and the timed-out elements", workers.log_tail)
        dead = letters_of(letters.records)
        assert sorted(letter.value for letter in dead if letter.error_type != "TimeoutError") == sorted(bad)
        assert {letter.error_type for letter in dead if letter.value in bad} <= {"DecodeError", "SchemaError"}
        slow = [letter for letter in dead if letter.error_type == "TimeoutError"]
        assert sorted(int(letter.value or b"") for letter in slow) == timed_out
        assert all("carries on" in letter.reason for letter in slow), slow

        # The timed-out workflows carried on: signalled, they finish.
        handle = stage_app.workflow_handle("flow-score")

        async def finish_slow() -> list[Any]:
            for n in timed_out:
                await handle.signal(f"score-{n}", "go", 1, timeout=60)
            return [await handle.result(f"score-{n}", 60) for n in timed_out]

        assert asyncio.run(finish_slow()) == [Finished(n * n) for n in timed_out]
        sink.close()
        letters.close()
    finally:
        workers.kill_all()


def test_a_worker_killed_mid_stream_and_restarted_gives_every_element_an_outcome_and_runs_each_once(
    stage_app: App, kafka_bootstrap: str, app_id: str, tmp_path: Path, calls_dir: Path
) -> None:
    workers = stage_workers(kafka_bootstrap, app_id, tmp_path, calls_dir, 60)
    try:
        worker = workers.start()
        numbers = [n for n in range(48) if not waits(n)]
        produce(kafka_bootstrap, source_topic(app_id), [(json.dumps(n).encode(), None) for n in numbers])
        sink = Reader(kafka_bootstrap, sink_topic(app_id))
        # Kill once a few outcomes are out: most elements are then unstarted or in flight.
        sink.until(lambda records: len(records) >= 6, 90, "first outcomes", workers.log_tail)
        worker.kill()
        assert len(outcomes_by_id(sink.records)) < len(numbers), "the stage finished before the kill"
        workers.start()
        sink.until(lambda records: set(outcomes_by_id(records)) >= {f"score-{n}" for n in numbers},
                   120, "an outcome of every element after the restart", workers.log_tail)
        got = outcomes_by_id(sink.records)
        # An element whose outcome was written but whose offset was not committed yet gets
        # the same outcome again after the restart: repeats are allowed, differences not.
        assert set(got) == {f"score-{n}" for n in numbers}
        for n in numbers:
            assert all(matches(n, body) for body in got[f"score-{n}"]), got[f"score-{n}"]
        sink.close()

        ends = Counter(int(line.split()[2]) for line in (calls_dir / "score.log").read_text().splitlines()
                       if line.startswith("end"))
        # An activity runs at least once: a kill between its end and its journal record runs
        # it again (the journal keeps one result). Replaying elements into the instances they
        # started must not add runs beyond that: at most one extra run per element for the
        # one kill.
        assert set(ends) == set(numbers), "every element's activity completed"
        assert max(ends.values()) <= 2, f"activities ran again beyond the kill: {ends}"
        handle = stage_app.workflow_handle("flow-score")

        async def starts() -> dict[int, int]:
            journals = await asyncio.gather(*(handle.journal(f"score-{n}") for n in numbers))
            return {n: sum(isinstance(r, Started) for r in journal) for n, journal in zip(numbers, journals)}

        assert set(asyncio.run(starts()).values()) == {1}, "one Started per workflow id"
    finally:
        workers.kill_all()
