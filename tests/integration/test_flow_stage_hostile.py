"""No source record stops the topic-to-topic flow stage (issue 10 item 7, SPEC §7 and §11).

A worker runs ``tests.integration.flow_hostile_apps``: a flow that reads JSON and Avro
elements (single-object and Confluent wire format, with its declared ``source_schema``).
A plain confluent-kafka producer, as a service in any language could, writes each hostile
record of ``CASES`` to the flow's source topic, each followed on the same partition by a
good element (JSON, single-object Avro or Confluent Avro in turn), so a partition stuck
behind a record shows. Then:

- the worker never exited and never logged that it is stopping;
- every hostile record is in ``{app}.deadletter`` exactly once, with a reason naming its
  problem (the substring of its case), and started no workflow;
- every good element, also one with garbage headers, has its outcome in the sink (the
  doubled ``n``) and was not dead-lettered;
- nothing else was dead-lettered.

Last, two good elements are written again once their outcomes are out (as a producer's retry
or a replay would): their instances ended before the stage began to watch, so only asking
the worker finds the outcome, and each gets the same outcome once more.
"""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message
from confluent_kafka.admin import NewTopic
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from tidings import App, RecordError
from tidings.codec import avro
from tidings.core.records import DeadLetter
from tidings.shell.runtime.topics import apply_topics, deadletter_topic
from tidings.testing import WorkerProcess, assert_eventually, read_topic
from tests.integration.flow_hostile_apps import PARTITIONS, SCHEMA, build, sink_topic, source_topic
from tests.integration.hostile_records import BAD_UTF8, DEEP_JSON, NEAR_LIMIT
from tests.workers import Workers
from tests.kafka_clients import kafka

SETTLE_S = 90.0
CRASHED = "failed; stopping the worker"
#: Another schema's fingerprint: a producer that moved on to a new version.
OTHER_SCHEMA: dict[str, Any] = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "extra", "type": "long"}]}
GARBAGE_HEADERS: list[tuple[str, bytes | None]] = [
    ("content-type", b"application/avro"),  # lies: the value decides, not the header
    ("\u00e9\u0301-name", BAD_UTF8),
    ("no-value", None),
    ("big", b"\xfe" * 200_000),
    *[(f"h{n}", b"x" * 10) for n in range(200)],
]


def _fingerprint(schema: dict[str, Any]) -> bytes:
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


def avro_body(fields: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> bytes:
    out = BytesIO()
    schemaless_writer(out, parse_schema(schema, named_schemas={}), fields)
    return out.getvalue()


def single_object(fields: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> bytes:
    return b"\xc3\x01" + _fingerprint(schema) + avro_body(fields, schema)


def confluent(fields: dict[str, Any], schema_id: int = 101) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + avro_body(fields)


def as_json(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields).encode()


def element(name: str, n: int = 1, **more: Any) -> dict[str, Any]:
    return {"id": name, "n": n, "mode": "ok", "note": "", **more}


@dataclass(frozen=True)
class Case:
    """One hostile record and the words its dead letter's reason must hold."""

    name: str
    value: bytes | None
    reason: str
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


CASES: list[Case] = [
    Case("empty value", b"", "not a JSON flow element"),
    Case("tombstone", None, "tombstone"),
    Case("non-UTF-8 bytes", BAD_UTF8, "not a JSON flow element"),
    Case("truncated JSON", b'{"id": "cut", "n": ', "not a JSON flow element"),
    Case("JSON 10,000 deep", DEEP_JSON, "not a JSON flow element"),
    Case("JSON array, not an object", b"[1, 2, 3]", "not an input of workflow 'double'"),
    Case("JSON string, not an object", b'"an order"', "not an input of workflow 'double'"),
    Case("JSON number, not an object", b"42", "not an input of workflow 'double'"),
    Case("near the topic's max size", as_json(element("huge", note="x" * NEAR_LIMIT)),
         "bytes of JSON is larger than"),
    Case("Avro of another schema's fingerprint", single_object({**element("other"), "extra": 1}, OTHER_SCHEMA),
         f"has fingerprint {_fingerprint(SCHEMA).hex()} (expected)"),
    Case("truncated Avro single-object body", single_object(element("cut-avro", note="abcdef"))[:-4],
         "single-object record does not decode"),
    Case("truncated Avro single-object header", b"\xc3\x01\x01\x02\x03", "cut short"),
    Case("Confluent framing, body that does not decode", b"\x00\x00\x00\x00\x07" + b"\xff" * 40,
         "Confluent wire-format Avro record (schema id 7"),
    Case("Confluent framing, header cut short", b"\x00\x00\x01", "Confluent wire-format Avro record cut short"),
    Case("id_of raises", as_json(element("boom", mode="raise")), "id_of raised RuntimeError"),
    Case("id_of raises an exception whose message raises", as_json(element("mute", mode="unprintable")),
         "id_of raised Unprintable: (its message could not be rendered)"),
    Case("id_of returns an int", as_json(element("int", n=5, mode="int")), "must be a string, not int"),
    Case("id_of returns an empty id", confluent(element("empty", mode="empty")), "must not be empty"),
    Case("id_of returns a 400-byte id", single_object(element("long", mode="long")),
         "bytes of UTF-8; the limit is 255"),
    Case("JSON the input type rejects", as_json(element("negative", n=-1)), "greater than or equal to 0"),
    Case("Avro the input type rejects", single_object(element("negative-avro", n=-3)), "greater than or equal to 0"),
    Case("garbage headers on a bad value", b"{not json", "not a JSON flow element", GARBAGE_HEADERS),
]


@dataclass
class Sent:
    """One produced record: a hostile case (``case``) or a good element (``n``)."""

    partition: int
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    case: Case | None = None
    n: int = -1
    offset: int = -1

    @property
    def label(self) -> str:
        return f"{self.case.name if self.case else f'good {self.n}'} [{self.partition}@{self.offset}]"


def good(n: int, partition: int, headers: list[tuple[str, bytes | None]] | None = None) -> Sent:
    fields = element(f"good-{n}", n=n)
    value = (as_json, single_object, confluent)[n % 3](fields)
    return Sent(partition, value, headers or [], n=n)


def plan() -> list[Sent]:
    """Each case, then a good element on its partition; a good one with garbage headers too."""
    records: list[Sent] = []
    n = 0
    for i, case in enumerate(CASES):
        partition = i % PARTITIONS
        records.append(Sent(partition, case.value, case.headers, case=case))
        records.append(good(n, partition))
        n += 1
    records.append(good(n, 0, GARBAGE_HEADERS))
    return records


def produce(bootstrap: str, topic: str, records: list[Sent]) -> None:
    producer = kafka(bootstrap).producer(**{"enable.idempotence": True, "linger.ms": 2,
                         "message.max.bytes": 1_048_576})
    failures: list[str] = []
    for record in records:
        def delivered(error: KafkaError | None, message: Message, record: Sent = record) -> None:
            if error is not None:
                failures.append(f"{record.label}: {error}")
            else:
                offset = message.offset()
                record.offset = -1 if offset is None else offset

        headers: list[tuple[str, str | bytes | None]] = list(record.headers)
        producer.produce(topic, record.value, partition=record.partition, headers=headers,
                         on_delivery=delivered)
    assert producer.flush(30) == 0
    assert failures == [], failures


def _letter(value: bytes | None) -> DeadLetter | None:
    try:
        letter = avro.decode_as(value or b"", DeadLetter)
    except RecordError:
        return None
    return letter if isinstance(letter, DeadLetter) else None


def observe(bootstrap: str, app_id: str) -> tuple[dict[tuple[int, int], list[DeadLetter]], dict[str, list[Any]]]:
    """Dead letters of the source by (partition, offset), and the sink's outcomes by id."""
    dead: dict[tuple[int, int], list[DeadLetter]] = defaultdict(list)
    for stored in read_topic(bootstrap, deadletter_topic(app_id)):
        letter = _letter(stored.value)
        assert letter is not None, "a dead letter that does not decode"
        if letter.source_topic == source_topic(app_id):
            dead[(letter.partition, letter.offset)].append(letter)
    outcomes: dict[str, list[Any]] = defaultdict(list)
    for stored in read_topic(bootstrap, sink_topic(app_id)):
        body = json.loads(stored.value or b"null")
        outcomes[body["id"]].append(body)
    return dead, outcomes


@pytest.fixture
def flow_app(kafka_bootstrap: str, app_id: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    admin = kafka(kafka_bootstrap).admin()
    # The source belongs to its producers: made as they would, with the broker's default
    # max.message.bytes (1,048,588), which the near-limit case is just short of.
    for future in admin.create_topics([NewTopic(source_topic(app_id), num_partitions=PARTITIONS,
                                                replication_factor=1)]).values():
        future.result(30)
    app = build(app_id)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    yield app
    for handle in app.workflows:
        handle.close()


@pytest.fixture
def worker(kafka_bootstrap: str, flow_app: App, tmp_path: Path) -> Iterator[WorkerProcess]:
    workers = Workers(kafka_bootstrap, flow_app.name, tmp_path,
                      app_spec="tests.integration.flow_hostile_apps:app")
    yield workers.start()
    workers.kill_all()


def test_no_source_record_stops_the_flow_and_each_bad_one_is_dead_lettered_once(
    kafka_bootstrap: str, flow_app: App, worker: WorkerProcess
) -> None:
    app_id = flow_app.name
    records = plan()
    produce(kafka_bootstrap, source_topic(app_id), records)
    goods = [record for record in records if record.case is None]

    def settled() -> bool:
        assert worker.running, "the worker exited:\n" + worker.log_tail(40)
        dead, outcomes = observe(kafka_bootstrap, app_id)
        return (all(f"h-good-{record.n}" in outcomes for record in goods)
                and all((record.partition, record.offset) in dead for record in records if record.case))

    try:
        assert_eventually(settled, timeout=SETTLE_S, interval=1.0, message="every record handled")
    except AssertionError:
        pass  # what is missing or wrong is listed below, record by record

    dead, outcomes = observe(kafka_bootstrap, app_id)
    problems: list[str] = []
    for record in records:
        letters = dead.pop((record.partition, record.offset), [])
        if record.case is None:
            got = outcomes.get(f"h-good-{record.n}", [])
            if not got:
                problems.append(f"{record.label}: no outcome in the sink")
            elif any(body != {"id": f"h-good-{record.n}", "workflow": "double", "outcome": "finished",
                              "value": record.n * 2} for body in got):
                problems.append(f"{record.label}: outcomes {got}")
            if letters:
                problems.append(f"{record.label}: dead-lettered, but it is good: {letters[0].reason[:200]}")
            continue
        if len(letters) != 1:
            problems.append(f"{record.label}: dead-lettered {len(letters)} times")
        elif record.case.reason not in letters[0].reason:
            problems.append(f"{record.label}: reason {letters[0].reason[:300]!r} does not say "
                            f"{record.case.reason!r}")
    for position, letters in dead.items():
        problems.append(f"a record the test did not send was dead-lettered: {position}: {letters[0].reason[:200]}")
    # Only the good elements started workflows: no id of a hostile record reached the sink.
    strays = set(outcomes) - {f"h-good-{record.n}" for record in goods}
    if strays:
        problems.append(f"outcomes of ids no good element has: {sorted(strays)}")
    log = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""
    if not worker.running:
        problems.insert(0, "the worker exited")
    if CRASHED in log:
        problems.insert(0, f"the worker logged {CRASHED!r}")
    assert problems == [], "\n".join(problems) + "\n--- worker log (tail)\n" + worker.log_tail(60)

    again = [Sent(record.partition, record.value, [], n=record.n) for record in goods[:2]]
    produce(kafka_bootstrap, source_topic(app_id), again)

    def repeated() -> bool:
        _, outcomes = observe(kafka_bootstrap, app_id)
        return all(len(outcomes[f"h-good-{record.n}"]) >= 2 for record in again)

    assert_eventually(repeated, timeout=30, interval=0.5, message="the outcome again of each element written again")
    dead, outcomes = observe(kafka_bootstrap, app_id)
    for record in again:
        assert (record.partition, record.offset) not in dead
        assert outcomes[f"h-good-{record.n}"] == [{"id": f"h-good-{record.n}", "workflow": "double",
                                                   "outcome": "finished", "value": record.n * 2}] * 2
