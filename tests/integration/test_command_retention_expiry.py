"""What happens to a command id older than the retention: it is decided afresh.

docs/aggregates.md promises a first verdict for at least ``command_retention`` and says a
resend after it is a new command. This runs the aggregate agent in-process on the real
broker with a clock the test moves (the agent's ``Runtime.clock``), so ten minutes of
retention pass in no time: a resend within the retention stores nothing, a resend after it
(once the agent's once-a-minute pass removed the verdict) is decided and stored again, and
a verdict that is still young survives that pass.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from examples.bank import account
from examples.bank.account import Deposit, Open
from tidings import App
from tidings.codec import avro
from tidings.codec.payloads import payload_of
from tidings.core.partitioning import partition_for
from tidings.core.records import CommandEnvelope, EventEnvelope
from tidings.shell.runtime.hosting import Runtime
from tidings.shell.runtime.io import Incoming
from tidings.shell.runtime.kafka import ConfluentPublisher
from tidings.shell.runtime.topics import apply_topics, deadletter_topic
from tidings.testing.topics import read_topic
from tests.kafka_clients import kafka

PARTITIONS = 2
RETENTION = timedelta(minutes=10)


def test_an_id_older_than_the_retention_is_decided_again_and_a_young_one_is_kept(
    kafka_bootstrap: str, app_id: str, tmp_path: Path
) -> None:
    app = App(app_id, partitions=PARTITIONS)
    accounts = app.aggregate("account", account.initial, account.decide, account.fold,
                             command=account.AccountCommand, event=account.AccountEvent,
                             command_retention=RETENTION)
    apply_topics(kafka(kafka_bootstrap), app.topic_specs(), out=lambda line: None)
    partition = partition_for("alice", partitions=PARTITIONS)
    offsets = iter(range(1_000_000))
    now = [time.time()]

    def record(command_id: str, command: object) -> Incoming:
        type_name, payload = payload_of(command)
        envelope = CommandEnvelope(command_id=command_id, correlation_id=command_id, aggregate_id="alice",
                                   type=type_name, payload=payload, timestamp_ms=int(now[0] * 1000))
        return Incoming(accounts.topics.commands, partition, next(offsets), b"alice", avro.encode(envelope))

    async def scenario() -> None:
        publisher = ConfluentPublisher(kafka(kafka_bootstrap))
        runtime = Runtime(connection=kafka(kafka_bootstrap), data_dir=tmp_path, partitions=PARTITIONS,
                          publisher=publisher, deadletter_topic=deadletter_topic(app.name),
                          clock=lambda: now[0])
        agent = accounts.open(runtime)
        try:
            async def decide(*records: Incoming) -> None:
                finish = await agent.start(list(records))
                await finish()

            await decide(record("open", Open(owner="Alice")), record("old", Deposit(amount=Decimal(5))))
            now[0] += 5 * 60
            await decide(record("young", Deposit(amount=Decimal(7))), record("old", Deposit(amount=Decimal(5))))
            assert agent._store.reply("alice", "old") is not None
            # Eleven minutes after "old" (six after "young"): the next batch's pass forgets it.
            now[0] += 6 * 60
            await decide(record("later", Deposit(amount=Decimal(1))))
            assert agent._store.reply("alice", "old") is None
            assert agent._store.reply("alice", "young") is not None
            await decide(record("old", Deposit(amount=Decimal(5))), record("young", Deposit(amount=Decimal(7))))
        finally:
            agent.close()
            runtime.close()
            publisher.close()

    asyncio.run(scenario())
    events = [avro.decode_as(r.value, EventEnvelope) for r in read_topic(kafka_bootstrap, accounts.topics.events)]
    # open v1, old v2, young v3, later v4, then old again v5 (past the retention); young once.
    assert [(e.command_id, e.version) for e in events] == [
        ("open", 1), ("old", 2), ("young", 3), ("later", 4), ("old", 5)]
