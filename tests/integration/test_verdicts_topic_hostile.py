"""Hostile records on an aggregate's verdicts topic are skipped by the catch-up; the worker
keeps working and honours only well-formed verdicts on their home partition.

The verdicts topic (``{app}.aggregate.{name}.verdicts``) is written by the worker and read
back only when a store catches up (docs/aggregates.md). Until ACLs close it, any producer
can write there: garbage, a verdict for an aggregate on another partition, a truncated
Avro record. The test writes those beside one well-formed verdict before any worker ever
ran, then starts a worker (its store is empty, so it reads the whole topic): a command with
the well-formed verdict's id gets that verdict and is not decided; a command whose forged
verdict sat on the wrong partition is decided; the worker never stops.
"""

from __future__ import annotations

import asyncio
import time


from examples.bank.account import Deposit, Open
from tidings import App
from tidings.codec import avro
from tidings.core.partitioning import partition_for
from tidings.core.records import ReplyEnvelope
from tidings.testing.topics import read_topic
from tests.integration.apps import PARTITIONS
from tests.workers import Workers, test_app, workers  # noqa: F401 - fixtures
from tests.kafka_clients import kafka


def verdict(aggregate_id: str, command_id: str, reason: str) -> bytes:
    return avro.encode(ReplyEnvelope(command_id=command_id, correlation_id=command_id,
                                     aggregate_id=aggregate_id, status="rejected", version=0,
                                     timestamp_ms=int(time.time() * 1000), reason=reason))


def test_garbage_and_misplaced_verdicts_are_skipped_and_a_good_one_is_honoured(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    topic = f"{test_app.name}.aggregate.account.verdicts"
    home = partition_for("alice", partitions=PARTITIONS)
    assert partition_for("bob", partitions=PARTITIONS) != home
    good = verdict("alice", "forged-first", "a verdict the store must find")
    producer = kafka(kafka_bootstrap).producer()
    hostile = [
        (b"\x00\xff garbage", home),
        (b"", home),
        (good[: len(good) // 2], home),  # the magic and fingerprint, then cut short
        # Bob's verdict on alice's partition: the worker's one store holds every partition's
        # verdicts, so without the home check bob's command below would find it.
        (verdict("bob", "misplaced", "not on bob's partition"), home),
        (good, home),
        (b"\xc3\x01" + b"\x00" * 8, home),  # single-object magic, unknown fingerprint
    ]
    for value, partition in hostile:
        producer.produce(topic, value, b"alice/x", partition=partition)
    assert producer.flush(10) == 0
    worker = workers.start()
    client = test_app.client(kafka_bootstrap)

    async def scenario() -> dict[str, ReplyEnvelope]:
        opened = await client.send_envelope("account", "alice", Open(owner="Alice"), 60, command_id="open")
        return {
            "open": opened,
            "forged-first": await client.send_envelope("account", "alice", Deposit(amount=1), 60,
                                                       command_id="forged-first"),
            "after": await client.send_envelope("account", "alice", Deposit(amount=3), 60,
                                                command_id="after"),
            "misplaced": await client.send_envelope("account", "bob", Deposit(amount=2), 60,
                                                    command_id="misplaced"),
        }

    replies = asyncio.run(scenario())
    assert replies["open"].status == "accepted" and replies["open"].version == 1
    # The well-formed verdict on alice's partition is the command's first verdict.
    assert (replies["forged-first"].status, replies["forged-first"].reason) == (
        "rejected", "a verdict the store must find")
    assert replies["after"].status == "accepted" and replies["after"].version == 2
    # The one off its home partition was skipped: bob's command was decided (bob is not open).
    misplaced = replies["misplaced"]
    assert misplaced.status == "accepted" and misplaced.events[0].deferred, misplaced
    assert b"not open" in misplaced.events[0].payload
    assert worker.running, workers.log_tail()
    log = worker.log_path.read_text(errors="replace")
    assert log.count("skipping verdict record") == 5, workers.log_tail()
    events = read_topic(kafka_bootstrap, f"{test_app.name}.aggregate.account.events")
    assert len(events) == 2
