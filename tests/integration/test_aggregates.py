"""Aggregates end to end on the real broker: a worker process, the client, the journal."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from decimal import Decimal

import pytest

from examples.bank.account import Deposit, Deposited, Open, Opened, Rejected, Withdraw
from tidings import AggregateVersionConflict, App
from tidings.codec import avro
from tidings.codec.answers import decode_reply
from tidings.core.partitioning import partition_for
from tidings.core.records import DeadLetter, EventEnvelope
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.apps import Add, Added, Bump, Read, Total
from tests.workers import Workers, only_at_least_once, test_app, workers  # noqa: F401 - fixtures
from tests.kafka_clients import kafka


def journal(bootstrap: str, app: App, aggregate: str) -> list[EventEnvelope]:
    handle = next(h for h in app.aggregates if h.name == aggregate)
    return [avro.decode_as(r.value, EventEnvelope) for r in read_topic(bootstrap, handle.topics.events)]


def test_thirty_concurrent_commands_get_versions_one_to_thirty(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    workers.start()
    client = test_app.client(kafka_bootstrap)

    async def send_all() -> list:
        return await asyncio.gather(
            *(client.send_envelope("tally", "t-1", Add(amount=n)) for n in range(30))
        )

    replies = asyncio.run(send_all())
    assert sorted(r.version for r in replies) == list(range(1, 31))
    keys = [r.key for r in read_topic(kafka_bootstrap, f"{test_app.name}.aggregate.tally.events")]
    assert sorted(keys, key=lambda k: int(k.split(b"/")[1])) == [b"t-1/%d" % v for v in range(1, 31)]


def test_the_bank_rules_reply_and_store_as_the_seed_says(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    workers.start()
    client = test_app.client(kafka_bootstrap)

    async def scenario() -> list:
        return [
            await client.send("account", "alice", Deposit(amount=Decimal(5))),
            await client.send("account", "alice", Open(owner="Alice")),
            await client.send("account", "alice", Open(owner="Alice")),
            await client.send("account", "alice", Deposit(amount=Decimal(30))),
            await client.send("account", "alice", Withdraw(amount=Decimal(50))),
            await client.send("account", "alice", Withdraw(amount=Decimal(-1))),
            await client.send("account", "alice", Withdraw(amount=Decimal(10))),
        ]

    replies = asyncio.run(scenario())
    assert replies[0] == Rejected(reason="The account is not open")
    assert replies[1] == Opened(owner="Alice")
    assert replies[2] == Rejected(reason="The account is already open")
    assert replies[3] == Deposited(amount=Decimal(30))
    assert replies[4] == Rejected(reason="Insufficient funds: 30 available")
    assert replies[5] == Rejected(reason="The amount must be positive")
    assert replies[6].amount == Decimal(10)
    stored = journal(kafka_bootstrap, test_app, "account")
    # Rejections are replies only: the journal holds Opened, Deposited, Withdrawn.
    assert [(e.version, e.type) for e in stored] == [(1, "Opened"), (2, "Deposited"), (3, "Withdrawn")]


def test_repeated_command_id_returns_the_same_reply_and_stores_nothing(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    workers.start()
    client = test_app.client(kafka_bootstrap)

    async def twice() -> tuple:
        first = await client.send_envelope("tally", "t-2", Add(amount=1), command_id="cmd-1")
        again = await client.send_envelope("tally", "t-2", Add(amount=99), command_id="cmd-1")
        return first, again

    first, again = asyncio.run(twice())
    assert again == first
    assert [e.version for e in journal(kafka_bootstrap, test_app, "tally")] == [1]


def test_expected_version_mismatch_raises_a_conflict(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    workers.start()
    client = test_app.client(kafka_bootstrap)

    async def scenario() -> None:
        await client.send("tally", "t-3", Add(amount=1))
        await client.send("tally", "t-3", Add(amount=1), expected_version=1)
        with pytest.raises(AggregateVersionConflict) as caught:
            await client.send("tally", "t-3", Add(amount=1), expected_version=1)
        assert (caught.value.aggregate_id, caught.value.expected, caught.value.actual) == ("t-3", 1, 2)

    asyncio.run(scenario())
    assert [e.version for e in journal(kafka_bootstrap, test_app, "tally")] == [1, 2]


def test_a_deferred_event_is_never_stored_and_its_fold_is_gone_after_a_restart(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    worker = workers.start()
    client = test_app.client(kafka_bootstrap)

    async def before() -> tuple:
        await client.send("tally", "t-4", Add(amount=5))
        bumped = await client.send_envelope("tally", "t-4", Bump(amount=3))
        return bumped, await client.send("tally", "t-4", Read())

    bumped, live = asyncio.run(before())
    assert bumped.version == 1 and bumped.events[0].deferred
    assert live == Total(value=8)
    assert [e.version for e in journal(kafka_bootstrap, test_app, "tally")] == [1]

    worker.kill()
    workers.start("w1-again", data_dir=worker.data_dir)
    after = asyncio.run(client.send("tally", "t-4", Read()))
    assert after == Total(value=5)
    assert [e.type for e in journal(kafka_bootstrap, test_app, "tally")] == ["Added"]


def test_malformed_records_are_dead_lettered_and_the_next_command_is_processed(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:

    workers.start()
    commands = f"{test_app.name}.aggregate.tally.commands"
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    producer.produce(commands, b"\x00not avro at all", b"t-5")
    unknown = (
        b'{"command_id": "u-1", "correlation_id": "u-1", "aggregate_id": "t-5",'
        b' "type": "Explode", "payload": {}}'
    )
    producer.produce(commands, unknown, b"t-5", headers=[("content-type", b"application/json")])
    producer.flush(10)
    client = test_app.client(kafka_bootstrap)
    assert asyncio.run(client.send("tally", "t-5", Add(amount=2))) == Added(amount=2)

    letters = [
        avro.decode_as(r.value, DeadLetter)
        for r in read_topic(kafka_bootstrap, f"{test_app.name}.deadletter")
    ]
    assert sorted(letter.error_type for letter in letters) == ["DecodeError", "SchemaError"]
    assert any("Explode" in letter.reason for letter in letters)
    assert {letter.value for letter in letters} == {b"\x00not avro at all", unknown}


def test_a_json_envelope_from_any_producer_is_decided_and_answered(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:

    from tidings.core.records import ReplyEnvelope

    workers.start()
    producer = kafka(kafka_bootstrap).producer(**{"partitioner": "murmur2_random"})
    envelope = (
        b'{"command_id": "json-1", "aggregate_id": "t-6", "type": "Add",'
        b' "payload": {"amount": 4}, "reply_to": "%s"}' % test_app.replies_topic.encode()
    )
    producer.produce(f"{test_app.name}.aggregate.tally.commands", envelope, b"t-6",
                     headers=[("content-type", b"application/json")])
    producer.flush(10)

    def replied() -> ReplyEnvelope:
        # A JSON command is answered in JSON (codec/answers.py), with the header.
        records = list(read_topic(kafka_bootstrap, test_app.replies_topic))
        assert all((r.value or b"").startswith(b"{") for r in records), records
        replies = [reply for r in records if isinstance(reply := decode_reply(r.value or b""), ReplyEnvelope)]
        matching = [r for r in replies if r.command_id == "json-1"]
        assert len(matching) == 1, replies
        return matching[0]

    reply = assert_eventually(replied, timeout=60, interval=0.5)
    assert reply.status == "accepted" and reply.version == 1
    assert reply.events[0].payload == b'{"amount":4}'
    assert [e.command_id for e in journal(kafka_bootstrap, test_app, "tally")] == ["json-1"]


def test_a_command_on_the_wrong_partition_is_forwarded_to_its_owner(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:

    from tidings.core.partitioning import partition_for

    workers.start()
    home = partition_for("t-7", test_app.partitions)
    wrong = (home + 1) % test_app.partitions
    envelope = (
        b'{"command_id": "wrong-1", "aggregate_id": "t-7", "type": "Add", "payload": {"amount": 1}}'
    )
    producer = kafka(kafka_bootstrap).producer()
    producer.produce(f"{test_app.name}.aggregate.tally.commands", envelope, b"t-7", partition=wrong,
                     headers=[("content-type", b"application/json")])
    producer.flush(10)
    client = test_app.client(kafka_bootstrap)

    def forwarded_and_stored() -> list:
        stored = [
            (r.partition, avro.decode_as(r.value, EventEnvelope).command_id)
            for r in read_topic(kafka_bootstrap, f"{test_app.name}.aggregate.tally.events")
        ]
        assert stored == [(home, "wrong-1")], stored
        return stored

    assert_eventually(forwarded_and_stored, timeout=60, interval=0.5)
    # The next command to t-7 is decided after the forwarded one: version 2.
    reply = asyncio.run(client.send_envelope("tally", "t-7", Add(amount=1)))
    assert reply.version == 2


@only_at_least_once
def test_an_event_another_worker_wrote_to_the_journal_is_read_before_the_next_decision(
    kafka_bootstrap: str, test_app: App, workers: Workers
) -> None:
    """A zombie's event (a worker that lost the partition and still wrote) is noticed.

    Only the owner writes a partition of the events topic, its events back to back. The
    test plays the zombie by producing an event straight to the partition; the owner's
    next write there shows the gap, and it re-reads the partition before deciding more.
    """
    worker = workers.start()
    client = test_app.client(kafka_bootstrap)
    partition = partition_for("t-zombie", test_app.partitions)
    other = next(f"t-other{n}" for n in range(10_000) if partition_for(f"t-other{n}", test_app.partitions) == partition)

    async def two_adds() -> None:
        await client.send_envelope("tally", "t-zombie", Add(amount=1))
        await client.send_envelope("tally", "t-zombie", Add(amount=1))

    asyncio.run(two_adds())
    handle = next(h for h in test_app.aggregates if h.name == "tally")
    stored = [e for e in journal(kafka_bootstrap, test_app, "tally") if e.aggregate_id == "t-zombie"]
    assert [e.version for e in stored] == [1, 2]
    foreign = replace(stored[-1], event_id="zombie-event", command_id="zombie-command", version=3,
                      payload=Added(amount=100).model_dump_json().encode())
    producer = kafka(kafka_bootstrap).producer()
    producer.produce(handle.topics.events, avro.encode(foreign), b"t-zombie/3", partition=partition)
    assert producer.flush(30) == 0

    async def write_there_then_read() -> tuple:
        await client.send_envelope("tally", other, Add(amount=5))  # the owner's next write there
        total = await client.send("tally", "t-zombie", Read())
        after = await client.send_envelope("tally", "t-zombie", Add(amount=1))
        return total, after.version

    assert asyncio.run(write_there_then_read()) == (Total(value=102), 4)
    assert "moved under us" in worker.log_tail(400)
