"""A command sent again after 10,000 other commands to the same aggregate stores nothing.

The aggregate once remembered its last 256 command ids only: a resend after more than that
(a saga's expectation on a busy account, a caller retrying late) was decided again and its
event stored twice (issue 16). First verdicts are now kept by time (``command_retention``).

One worker, one busy account. The test gives it verdicts of each kind first: one that
stored an event, one deferred (a withdrawal refused for funds), one version conflict. The
``nudge`` saga (``tests/integration/dedup_apps.py``) sends a deposit to the same account and
resends it every second. Then 10,000 other deposits reach the account, and the first three
commands are sent again with their ids; each is answered with its first verdict although
deciding it afresh would now accept the withdrawal (the balance is 10,010) and the
conflicted deposit (its expected version is the account's version by then). The saga's
resends after the 10,000 store nothing either. Then the worker is SIGKILLed, its stores are
deleted and it starts again: rebuilt from the events and the verdicts topic, it answers
the same resends the same way, and the saga's next resends store nothing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from examples.bank.account import Deposit, Open, Withdraw
from tidings import App
from tidings.codec import avro
from tidings.codec.payloads import payload_of
from tidings.core.partitioning import partition_for
from tidings.core.records import CommandEnvelope, EventEnvelope, ReplyEnvelope
from tidings.testing.eventually import assert_eventually
from tidings.testing.topics import read_topic
from tests.integration.dedup_apps import BUSY, NUDGE_AMOUNT, PARTITIONS, build
from tests.workers import Workers, applied, both_guarantees
from tests.kafka_clients import kafka

OTHERS = 10_000


@pytest.fixture
def dedup_app(kafka_bootstrap: str, app_id: str) -> Iterator[App]:
    yield from applied(kafka_bootstrap, build(app_id))


@pytest.fixture
def dedup_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path, guarantee: str) -> Iterator[Workers]:
    started = Workers(kafka_bootstrap, app_id, tmp_path, guarantee=guarantee,
                      app_spec="tests.integration.dedup_apps:app")
    yield started
    started.kill_all()


def produce_deposits(bootstrap: str, app: App, count: int) -> None:
    """``count`` deposits of 1 to the busy account with fresh ids, no reply asked, as fast
    as a raw producer writes them."""
    topic = f"{app.name}.aggregate.account.commands"
    partition = partition_for(BUSY, partitions=PARTITIONS)
    type_name, payload = payload_of(Deposit(amount=Decimal(1)))
    producer = kafka(bootstrap).producer(**{"linger.ms": 5})
    now = int(time.time() * 1000)
    for n in range(count):
        command = CommandEnvelope(command_id=f"other-{n}-{uuid.uuid4().hex[:8]}", correlation_id="others",
                                  aggregate_id=BUSY, type=type_name, payload=payload, timestamp_ms=now)
        producer.produce(topic, avro.encode(command), BUSY.encode(), partition=partition)
        if n % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0, "the broker did not take every deposit"


def busy_journal(bootstrap: str, app: App) -> list[EventEnvelope]:
    events = [avro.decode_as(r.value, EventEnvelope)
              for r in read_topic(bootstrap, f"{app.name}.aggregate.account.events")]
    return [e for e in events if e.aggregate_id == BUSY]


def saga_sends(bootstrap: str, app: App) -> list[tuple[int, str]]:
    """(offset, command id) of each saga command on the busy account's commands partition."""
    sends = []
    for record in read_topic(bootstrap, f"{app.name}.aggregate.account.commands"):
        command = avro.decode_as(record.value, CommandEnvelope)
        if command.aggregate_id == BUSY and command.command_id.startswith("nudge:"):
            sends.append((record.offset, command.command_id))
    return sends


def nudge_deposits(journal: list[EventEnvelope]) -> list[EventEnvelope]:
    return [e for e in journal if e.command_id.startswith("nudge:")]


@both_guarantees
def test_a_resend_after_ten_thousand_other_commands_stores_nothing_also_after_a_rebuild(
    kafka_bootstrap: str, dedup_app: App, dedup_workers: Workers, guarantee: str
) -> None:
    worker = dedup_workers.start()
    client = dedup_app.client(kafka_bootstrap)

    async def send(command: object, command_id: str, **kwargs: object) -> ReplyEnvelope:
        return await client.send_envelope("account", BUSY, command, 60, command_id=command_id, **kwargs)

    async def first_verdicts() -> dict[str, ReplyEnvelope]:
        await send(Open(owner="Busy"), "open")
        return {
            "deposit": await send(Deposit(amount=Decimal(10)), "first-deposit"),  # stores v2
            "withdraw": await send(Withdraw(amount=Decimal(5_000)), "first-withdraw"),  # deferred
            # Conflicts now; deciding it again after the 10,000 would store it.
            "conflict": await send(Deposit(amount=Decimal(3)), "first-conflict",
                                   expected_version=OTHERS + 2),
        }

    async def resent() -> dict[str, ReplyEnvelope]:
        return {
            "deposit": await send(Deposit(amount=Decimal(10)), "first-deposit"),
            "withdraw": await send(Withdraw(amount=Decimal(5_000)), "first-withdraw"),
            "conflict": await send(Deposit(amount=Decimal(3)), "first-conflict", expected_version=OTHERS + 2),
        }

    first = asyncio.run(first_verdicts())
    assert first["deposit"].status == "accepted" and first["deposit"].version == 2
    assert first["withdraw"].status == "accepted" and first["withdraw"].events[0].deferred
    assert first["conflict"].status == "conflict"

    # The saga starts and its first deposit is stored.
    asyncio.run(client.send_envelope("account", "nudger", Open(owner="nudge"), 60,
                                     command_id="open-nudger", correlation_id="n-1"))
    assert_eventually(lambda: len(nudge_deposits(busy_journal(kafka_bootstrap, dedup_app))) == 1,
                      timeout=30, message="the saga's deposit was never stored")

    began = time.monotonic()
    produce_deposits(kafka_bootstrap, dedup_app, OTHERS)

    def others_decided() -> bool:
        journal = busy_journal(kafka_bootstrap, dedup_app)
        assert len(journal) >= OTHERS + 3, f"{len(journal)} events so far"
        return True

    assert_eventually(others_decided, timeout=120, message="the 10,000 deposits were not all stored")
    print(f"\n10,000 deposits stored in {time.monotonic() - began:.1f} s")
    last_other = max(r.offset for r in read_topic(kafka_bootstrap, f"{dedup_app.name}.aggregate.account.commands")
                     if avro.decode_as(r.value, CommandEnvelope).command_id.startswith("other-"))

    def check(label: str, after_offset: int) -> None:
        again = asyncio.run(resent())
        for name, reply in again.items():
            original = first[name]
            assert (reply.status, reply.version, reply.events, reply.reason) == (
                original.status, original.version, original.events, original.reason
            ), f"{label}: the resent {name} was not answered with its first verdict"
        # The saga resent at least twice after that point (every second), and the reply to
        # one more command, decided after those resends, says they were decided too.
        assert_eventually(lambda: len([o for o, _ in saga_sends(kafka_bootstrap, dedup_app) if o > after_offset]) >= 2,
                          timeout=30, message=f"{label}: the saga did not resend")
        asyncio.run(send(Deposit(amount=Decimal(1)), f"marker-{label}"))
        journal = busy_journal(kafka_bootstrap, dedup_app)
        by_command = [e.command_id for e in journal]
        assert by_command.count("first-deposit") == 1, f"{label}: the first deposit was stored again"
        assert "first-withdraw" not in by_command and "first-conflict" not in by_command, label
        nudges = nudge_deposits(journal)
        assert len(nudges) == 1 and nudges[0].payload, (
            f"{label}: the saga's resent deposit was stored {len(nudges)} times, at versions "
            f"{[e.version for e in nudges]}")
        assert [e.version for e in journal] == list(range(1, len(journal) + 1)), label

    check("after 10,000 others", last_other)
    # Every send of the saga carries one command id: its first send, and the (at least two)
    # resends the check above waited for. Whether a resend also fell inside the 10,000 depends
    # on how fast they were stored, so it is not counted on.
    sends = saga_sends(kafka_bootstrap, dedup_app)
    assert len({command_id for _, command_id in sends}) == 1 and len(sends) >= 3, sends

    # Drop every store: the worker rebuilds them from the events and the verdicts topic.
    worker.kill()
    shutil.rmtree(worker.data_dir / "stores")
    before_restart = max(o for o, _ in saga_sends(kafka_bootstrap, dedup_app))
    dedup_workers.start("w1-rebuilt", data_dir=worker.data_dir)
    check("after the store was rebuilt", before_restart)
    balance = sum(Decimal(json.loads(e.payload)["amount"]) for e in busy_journal(kafka_bootstrap, dedup_app)
                  if e.type == "Deposited")
    assert balance == 10 + NUDGE_AMOUNT + OTHERS + 2  # first deposit, the saga's, 10,000, two markers
